"""GPU path check: rollout throughput and GRPO step time of a ~0.5B Llama-style model in bf16.

The GPU machine has no hub access, so the model is randomly initialised (a
Qwen2.5-0.5B-sized Llama: 32 layers, hidden 1024, GQA 16/4 heads, 49k vocabulary
of the bundled SmolLM2 tokenizer).  Random weights never emit EOS, so every
completion runs to ``--new-tokens`` (EOS ignored), which makes the token counts
exact.  Two measurements, each with an anchor from the same run:

1. rollout tokens/s of ``rlvr.engines.HFEngine`` (bf16, shared prefill, pre-allocated
   KV cache) vs ``model.generate`` on the same prompts, group size and length;
2. seconds per GRPO step of ``rlvr.recipes.rl.train`` (bf16 sampler copy, learner
   with bf16 autocast over fp32 master weights, AdamW), with its split into
   generate / verify / learn and the peak GPU memory.

    python benchmarks/gpu_check.py --tokenizer PATH_TO_HF_TOKENIZER [--prompts 64 --group 8 --new-tokens 256]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time

import torch


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


def rollout_throughput(model, tok, args) -> dict:
    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.engines.hf import format_prompt

    probs = problems(args.prompts)
    rows = args.prompts * args.group
    engine = HFEngine(model, tok, batch_size=rows)
    params = SamplingParams(n=args.group, max_new_tokens=args.new_tokens, temperature=1.0, ignore_eos=True, seed=0)
    engine.generate(probs[:2], SamplingParams(n=2, max_new_tokens=8, ignore_eos=True))  # warm-up
    res = {"rows": rows, "new_tokens": args.new_tokens}
    times = []
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        groups = engine.generate(probs, params)
        sync()
        times.append(time.perf_counter() - t0)
    ntok = sum(s.num_tokens for g in groups for s in g)
    res["rlvr_tokens_per_s"] = ntok / statistics.median(times)
    res["rlvr_seconds"] = statistics.median(times)

    # anchor: transformers' generate on the same left-padded prompts, group via num_return_sequences
    prompts = [format_prompt(tok, p, None) for p in probs]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), engine.pad_id, dtype=torch.long)
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
                                 num_return_sequences=args.group, pad_token_id=engine.pad_id)
        sync()
        gen_times.append(time.perf_counter() - t0)
    gtok = (out.shape[1] - width) * out.shape[0]
    res["generate_tokens_per_s"] = gtok / statistics.median(gen_times)
    res["ratio_rlvr_vs_generate"] = res["rlvr_tokens_per_s"] / res["generate_tokens_per_s"]
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
        "eval.before_training=false", "eval.after_training=false", f"model.device={args.device}"])
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    train(cfg, model=model, tokenizer=tok, problems=(problems(256), []), verifier=digit_fraction)
    rows = read_metrics(f"{out}/metrics.jsonl")[1:]  # first step is warm-up
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {"steps_timed": len(rows), "rollouts_per_step": args.step_prompts * args.group,
            "new_tokens": args.new_tokens, "step_s": med("step_time"), "gen_s": med("gen_time"),
            "learn_s": med("learn_time"), "verify_s": med("verify_time"), "rollout_tokens_per_s": med("tokens_per_s"),
            "learner_tokens_per_s": statistics.median(r.get("learner_tokens", 0) / r["learn_time"] for r in rows),
            "logprob_mismatch": statistics.median([r.get("logprob_mismatch", float("nan")) for r in rows]),
            "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None}


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
    args = ap.parse_args()
    from transformers import AutoTokenizer

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check.py needs a CUDA device (--device cpu only smoke-tests it)")
    torch.backends.cuda.matmul.allow_tf32 = True
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    res = {"device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(), "torch": torch.__version__, "host": platform.node(),
           "date": time.strftime("%Y-%m-%d")}
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
