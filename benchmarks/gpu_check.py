"""GPU path check: rollout throughput, GRPO step time with learner MFU, and chunked log-probs, ~0.5B model, bf16.

The GPU machine has no hub access, so the model is randomly initialised (a
Qwen2.5-0.5B-sized Llama: 32 layers, hidden 1024, GQA 16/4 heads, 49k vocabulary
of the bundled SmolLM2 tokenizer).  Random weights never emit EOS, so every
completion runs to ``--new-tokens`` (EOS ignored), which makes the token counts
exact.  Three measurements, each with an anchor from the same run:

1. rollout tokens/s of ``rlvr.engines.HFEngine`` for each ``--decodes`` mode
   (``dynamic``: shape-changing loop; ``compiled``: static KV cache, the step through
   ``torch.compile`` = CUDA graphs) vs ``model.generate`` on the same prompts, group
   size and length (target: compiled >= 1.5x generate);
2. seconds per GRPO step of ``rlvr.recipes.rl.train`` (bf16 sampler copy, learner
   with bf16 autocast over fp32 master weights, AdamW), its split into generate /
   verify / learn, peak GPU memory, and the learner's MFU: 6 x matmul parameters x
   learner tokens / learn time, against the bf16 GEMM rate measured in the same run
   (and against the device's nominal dense bf16 peak where known);
3. per-token log-probs through the LM head: the eager path (full [N, V] logits) vs
   rlvr's chunked path (values and gradients) and liger-kernel's fused kernel where
   installed (values), with time and peak memory of each.

    python benchmarks/gpu_check.py --tokenizer PATH_TO_HF_TOKENIZER [--prompts 64 --group 8 --new-tokens 256]

``--device cpu`` with ``--layers 1 --hidden 64`` and small counts smoke-tests the
script (the test suite does); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rates import gemm_rate, matmul_params  # noqa: E402


def build_model(vocab: int, device: str, dtype=torch.float32, layers: int = 32, hidden: int = 1024):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    return model


def problems(n: int):
    from rlvr.types import Problem

    return [Problem(id=f"p{i}", prompt=f"What is {i + 11} + {2 * i + 7}? Put the final answer in \\boxed{{}}.",
                    answer=str(3 * i + 18)) for i in range(n)]


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_engine(engine, probs, params, repeats: int) -> tuple[float, int]:
    """Median seconds of ``repeats`` identical calls (after one untimed call of the same shape: compiles and
    records any graph) and the tokens each produced."""
    engine.generate(probs, params)
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        groups = engine.generate(probs, params)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), sum(s.num_tokens for g in groups for s in g)


def rollout_throughput(model, tok, args) -> dict:
    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.engines.hf import format_prompt

    probs = problems(args.prompts)
    rows = args.prompts * args.group
    params = SamplingParams(n=args.group, max_new_tokens=args.new_tokens, temperature=1.0, ignore_eos=True, seed=0)
    res = {"rows": rows, "new_tokens": args.new_tokens}
    for mode in args.decodes:
        engine = HFEngine(model, tok, batch_size=rows, decode=mode)
        t0 = time.perf_counter()
        secs, ntok = _time_engine(engine, probs, params, args.repeats)
        res[f"rlvr_{mode}_warmup_s"] = time.perf_counter() - t0 - secs * args.repeats
        res[f"rlvr_{mode}_tokens_per_s"] = ntok / secs
        res[f"rlvr_{mode}_seconds"] = secs
        pad_id = engine.pad_id
        del engine

    # anchor: transformers' generate on the same left-padded prompts, group via num_return_sequences
    prompts = [format_prompt(tok, p, None) for p in probs]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    gen_times = []
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 num_return_sequences=args.group, pad_token_id=pad_id)
        sync()
        gen_times.append(time.perf_counter() - t0)
    gtok = (out.shape[1] - width) * out.shape[0]
    res["generate_tokens_per_s"] = gtok / statistics.median(gen_times)
    for mode in args.decodes:
        res[f"ratio_{mode}_vs_generate"] = res[f"rlvr_{mode}_tokens_per_s"] / res["generate_tokens_per_s"]
    return res


NOMINAL_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}  # dense, SXM, from NVIDIA's data sheets


def nominal_peak(device_name: str) -> float | None:
    """The device's nominal dense bf16 FLOP/s, or None for a device not in the table."""
    for key, tflops in NOMINAL_BF16_TFLOPS.items():
        if key in device_name:
            return tflops * 1e12
    return None


def mfu(matmul: int, tokens: float, seconds: float, peak: float) -> float:
    """Model FLOPs utilisation of a training pass: 6 x matmul params x tokens (forward 2, backward 4; attention
    left out) per second, as a fraction of ``peak`` FLOP/s."""
    return 6 * matmul * tokens / seconds / peak


def logprob_check(args, vocab: int) -> dict:
    """Per-token log-probs of ``--lp-tokens`` bf16 hidden states through a [vocab, hidden] LM head: eager (full
    logits), rlvr's chunked path (values and gradients against eager) and liger-kernel's (values) if installed."""
    from rlvr.algorithms.logprobs import chunked_linear_logprobs, fused_linear_logprobs, liger_available

    dev, dt = args.device, torch.bfloat16
    torch.manual_seed(0)
    h0 = torch.randn(args.lp_tokens, args.hidden, device=dev, dtype=dt)
    w0 = (torch.randn(vocab, args.hidden, device=dev) / args.hidden ** 0.5).to(dt)
    t = torch.randint(0, vocab, (args.lp_tokens,), device=dev)

    def eager(h, w):
        return torch.log_softmax((h @ w.T).float(), -1).gather(-1, t[:, None]).squeeze(-1)

    def chunked(h, w):
        return chunked_linear_logprobs(h, w, t, 1.0, args.lp_chunk)[0]

    res = {"tokens": args.lp_tokens, "vocab": vocab, "chunk": args.lp_chunk}
    grads = {}
    for name, fn in (("eager", eager), ("chunked", chunked)):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        if dev == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        sync()
        t0 = time.perf_counter()
        lp = fn(h, w)
        lp.sum().backward()
        sync()
        res[f"{name}_s"] = time.perf_counter() - t0
        if dev == "cuda":
            res[f"{name}_peak_extra_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        grads[name] = (lp.detach(), h.grad.float(), w.grad.float())
    (lp_e, gh_e, gw_e), (lp_c, gh_c, gw_c) = grads["eager"], grads["chunked"]
    res["chunked_max_abs_logprob_diff"] = (lp_c - lp_e).abs().max().item()
    res["chunked_grad_hidden_rel_err"] = ((gh_c - gh_e).norm() / gh_e.norm()).item()
    res["chunked_grad_weight_rel_err"] = ((gw_c - gw_e).norm() / gw_e.norm()).item()
    if liger_available(dev):
        with torch.no_grad():
            sync()
            t0 = time.perf_counter()
            lp_l, _ = fused_linear_logprobs(h0, w0, t, 1.0, args.lp_chunk, backend="liger")
            sync()
            res["liger_s"] = time.perf_counter() - t0
        res["liger_max_abs_logprob_diff"] = (lp_l.float() - lp_e).abs().max().item()
    else:
        res["liger"] = "not installed (or no CUDA): not checked"
    return res


def grpo_steps(model, tok, args) -> dict:
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics
    from rlvr.types import Verdict

    def digit_fraction(completion: str, reference: str) -> Verdict:  # dense: every group has variance
        return Verdict(sum(c.isdigit() for c in completion) / max(1, len(completion)), None, "digits")

    out = tempfile.mkdtemp(prefix="gpu_grpo_")
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={out}", f"train.steps={args.steps}", f"train.prompts_per_step={args.step_prompts}",
        f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.new_tokens}", "rollout.ignore_eos=true",
        f"rollout.batch_size={args.step_prompts * args.group}", "rollout.dtype=bfloat16",
        "train.autocast=bfloat16", f"train.micro_batch_size={args.micro_batch}", "train.lr=1e-6",
        "train.warmup_steps=0", "train.save_every=0", "train.progress=false", "algorithm.loss_agg=token_mean",
        "eval.before_training=false", "eval.after_training=false", f"model.device={args.device}",
        f"rollout.engine_params={{decode: {args.step_decode}}}"])
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    train(cfg, model=model, tokenizer=tok, problems=(problems(256), []), verifier=digit_fraction)
    rows = read_metrics(f"{out}/metrics.jsonl")[1:]  # first step is warm-up
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    tokens_per_s = statistics.median(r.get("learner_tokens", 0) / r["learn_time"] for r in rows)
    res = {"decode": args.step_decode, "steps_timed": len(rows), "rollouts_per_step": args.step_prompts * args.group,
           "new_tokens": args.new_tokens, "step_s": med("step_time"), "gen_s": med("gen_time"),
           "learn_s": med("learn_time"), "verify_s": med("verify_time"), "rollout_tokens_per_s": med("tokens_per_s"),
           "learner_tokens_per_s": tokens_per_s,
           "logprob_mismatch": statistics.median([r.get("logprob_mismatch", float("nan")) for r in rows]),
           "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None}
    # The learner runs every row's prompt and completion (learner_tokens counts the completion tokens it scores);
    # learn_time includes the optimizer step, so the MFU below is a lower bound on the passes' own.
    from rlvr.engines.hf import format_prompt

    mean_prompt = statistics.mean(len(format_prompt(tok, p, None)) for p in problems(256))
    processed_per_s = statistics.median(args.step_prompts * args.group * (mean_prompt + args.new_tokens)
                                        / r["learn_time"] for r in rows)
    matmul = matmul_params(model)
    res.update(matmul_params_m=matmul / 1e6, learner_processed_tokens_per_s=processed_per_s,
               learner_mfu_vs_measured_gemm=mfu(matmul, processed_per_s, 1.0, args.gemm_flops))
    if args.nominal_flops:
        res["learner_mfu_vs_nominal"] = mfu(matmul, processed_per_s, 1.0, args.nominal_flops)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="HF tokenizer directory (the bundled model's)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-prompts", type=int, default=32)
    ap.add_argument("--micro-batch", type=int, default=64)
    ap.add_argument("--out", default=None, help="write the results JSON here")
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only to smoke-test the script")
    ap.add_argument("--layers", type=int, default=32, help="decoder layers (32: ~0.5B parameters)")
    ap.add_argument("--hidden", type=int, default=1024, help="hidden size")
    ap.add_argument("--decodes", nargs="+", default=["dynamic", "compiled"], choices=["dynamic", "static", "compiled"],
                    help="HFEngine decode modes to time against model.generate")
    ap.add_argument("--step-decode", default="compiled", choices=["dynamic", "static", "compiled"],
                    help="the HF engine's decode mode inside the GRPO steps")
    ap.add_argument("--gemm-size", type=int, default=8192, help="n of the n^3 bf16 matmul that anchors MFU")
    ap.add_argument("--lp-tokens", type=int, default=16384, help="tokens in the log-prob check")
    ap.add_argument("--lp-chunk", type=int, default=1024, help="chunk of the chunked log-prob path")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check.py needs a CUDA device (--device cpu only smoke-tests it)")
    torch.backends.cuda.matmul.allow_tf32 = True
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    device = torch.cuda.get_device_name() if args.device == "cuda" else (platform.processor() or platform.machine())
    res = {"device": device, "torch": torch.__version__, "host": platform.node(),
           "date": time.strftime("%Y-%m-%d")}
    # bounded in time: where bf16 is emulated (a CPU smoke test) it is measured at a smaller size, saying so
    args.gemm_flops, gemm_n = gemm_rate(torch.bfloat16, args.gemm_size, reps=1, tries=5, device=args.device)
    args.nominal_flops = nominal_peak(res["device"]) if args.device == "cuda" else None
    res["bf16_gemm_tflops_measured"] = args.gemm_flops / 1e12
    res["bf16_tflops_nominal"] = args.nominal_flops / 1e12 if args.nominal_flops else None
    res["bf16_gemm_size"] = gemm_n
    print(f"bf16 GEMM ({gemm_n}^3): {res['bf16_gemm_tflops_measured']:.1f} TFLOP/s measured", flush=True)
    res["logprobs"] = logprob_check(args, len(tok))
    print(json.dumps(res["logprobs"], indent=1), flush=True)
    model = build_model(len(tok), args.device, torch.bfloat16, args.layers, args.hidden)
    res["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"model: {res['params_m']:.0f}M parameters on {res['device']}", flush=True)
    res["rollout"] = rollout_throughput(model, tok, args)
    print(json.dumps(res["rollout"], indent=1), flush=True)
    del model
    if args.device == "cuda":
        torch.cuda.empty_cache()
    model = build_model(len(tok), args.device, torch.float32, args.layers, args.hidden)  # fp32 master, bf16 autocast
    res["grpo"] = grpo_steps(model, tok, args)
    print(json.dumps(res["grpo"], indent=1), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
