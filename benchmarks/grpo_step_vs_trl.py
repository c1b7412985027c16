"""Seconds per GRPO step: rlvr vs TRL's ``GRPOTrainer`` on the same configuration, in one run.

Both train the same model on the same prompt with the same group size, the same
number of generated tokens, the same reward, the same loss settings and the same
number of optimizer updates:

* one prompt x ``--group`` completions x ``--new-tokens`` tokens per step,
  generation forced to the full length in both (EOS ignored / ``min_new_tokens``);
* token-mean PPO-clip loss (TRL's default ``loss_type="dapo"``), no KL term
  (TRL's default ``beta=0``), one update per batch, AdamW, and the same
  precision (``--precision fp32``: both in float32; ``bf16``: both with bf16
  autocast around float32 master weights);
* a dense reward (fraction of digit characters) so every group has non-zero
  advantages: rlvr cannot skip the learner pass, and TRL does the same work
  (before 2026-11-24 rlvr's environments rounded it to 1/0, so rlvr skipped most
  learner passes; the printed "N of 8 sequences" now shows what it trained on);
* TRL with gradient checkpointing off (its default is on, which only slows it).

The first step of each is a warm-up and is excluded.  Prints the median seconds
per step of each and the ratio rlvr / TRL; ``--precision both`` runs fp32 and
then bf16 in one invocation (each with its own TRL anchor).

It also prints the step's **floor** on this machine, from rates measured in the same
run: the least time any GRPO implementation of this configuration could take, with
  learner  >= 6 x M x (P + G x N) FLOP at the best GEMM rate measured in the learner's precision
           (M: parameters in matmuls, LM head included; every prompt token and sampled token
           through forward and backward once, each group's prompt once; attention ignored),
  sampling >= N decode steps x (M x 2 bytes of bf16 weights read from memory at the measured
           copy bandwidth), or the bf16 GEMM time of 2 x M x G FLOP if larger (the smallest
           faithful sampler precision; the weights do not fit in cache),
  optimizer >= 28 bytes per parameter (AdamW reads weight, grad, m, v and writes weight, m, v in
           float32) at the measured bandwidth.
Everything omitted (attention, the prefill, softmax, sampling, the weight sync, Python) only
raises the true floor, so a target below this floor cannot be met on this machine at this
precision, and rlvr / floor says how far from the machine's limits each framework runs.  ``--rlvr-set`` adds
rlvr config overrides (e.g. ``train.logprob_chunk_size=256 train.micro_batch_tokens=1024``).
Usage::

    python benchmarks/grpo_step_vs_trl.py [--steps 4] [--group 8] [--new-tokens 64] [--precision fp32|bf16|both]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rates import gemm_rate, matmul_params  # noqa: E402

PROMPT = "What is 23 + 19? Put the final answer in \\boxed{}."


def digit_fraction(text: str) -> float:
    return sum(c.isdigit() for c in text) / max(1, len(text))


def copy_bandwidth(mbytes: int = 512, reps: int = 5, tries: int = 3) -> float:
    """Best bytes/s of ``dst.copy_(src)`` on float32 tensors of ``mbytes`` MB (bytes read + written)."""
    src = torch.randn(mbytes * (1 << 20) // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = 0.0
    for _ in range(tries):
        t0 = time.perf_counter()
        for _ in range(reps):
            dst.copy_(src)
        best = max(best, 2 * src.numel() * 4 * reps / (time.perf_counter() - t0))
    return best


def floor_seconds(matmul: int, params: int, prompt_tokens: int, group: int, new_tokens: int, learner_flops: float,
                  bf16_flops: float, bandwidth: float) -> dict[str, float]:
    """The floor of one step in seconds per part (see the module docstring); rates in FLOP/s and bytes/s."""
    tokens = prompt_tokens + group * new_tokens
    per_decode = max(2 * matmul / bandwidth, 2 * matmul * group / bf16_flops)
    floor = {"learner": 6 * matmul * tokens / learner_flops, "sampling": new_tokens * per_decode,
             "optimizer": 28 * params / bandwidth, "matmul_params": matmul, "tokens": tokens}
    floor["total"] = floor["learner"] + floor["sampling"] + floor["optimizer"]
    return floor


def step_floor(model_path: str, prompt_tokens: int, args, rates: dict[str, float]) -> dict[str, float]:
    """:func:`floor_seconds` for ``model_path``'s parameter counts and the measured ``rates``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    matmul = matmul_params(model)
    params = sum(p.numel() for p in model.parameters())
    del model
    learner = rates["gemm_bf16"] if args.precision == "bf16" else rates["gemm_fp32"]
    return floor_seconds(matmul, params, prompt_tokens, args.group, args.new_tokens, learner, rates["gemm_bf16"],
                         rates["bandwidth"])


def time_trl(model_path: str, args) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(model_path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": PROMPT}]}] * (args.steps + 1))

    def reward(completions, **_):
        return [digit_fraction(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, use_cpu=True, bf16=args.precision == "bf16", per_device_train_batch_size=args.group,
                         num_generations=args.group, max_completion_length=args.new_tokens,
                         generation_kwargs={"min_new_tokens": args.new_tokens}, max_steps=args.steps + 1,
                         learning_rate=1e-6, beta=0.0, loss_type="dapo", temperature=1.0,
                         gradient_checkpointing=False, logging_steps=1, report_to=[], save_strategy="no",
                         disable_tqdm=True, seed=0)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok)
        trainer.add_callback(Timer())
        trainer.train()
    return times[1:]


def time_rlvr(model_path: str, args) -> tuple[list[float], dict[str, float]]:
    """Seconds of each timed rlvr step, and the medians of where they went (sampling, learner, rows learned)."""
    from rlvr.config import load_config
    from rlvr.models import load_policy
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train
    from rlvr.types import Problem, Verdict

    model, tok = load_policy(model_path)
    problems = [Problem(id="p", prompt=PROMPT, answer="42")]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(RunConfig, None, [
            f"train.output_dir={out}", f"train.steps={args.steps + 1}", "train.prompts_per_step=1",
            f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.new_tokens}",
            "rollout.ignore_eos=true", "rollout.temperature=1.0", f"train.micro_batch_size={args.group}",
            "train.lr=1e-6", "train.warmup_steps=0", "train.save_every=0", "train.progress=false",
            "eval.before_training=false", "eval.after_training=false", "algorithm.loss_agg=token_mean",
            f"train.autocast={'bfloat16' if args.precision == 'bf16' else 'none'}", *args.rlvr_set])
        train(cfg, model=model, tokenizer=tok, problems=(problems, []),
              verifier=lambda c, r: Verdict(digit_fraction(c), None, "digit fraction"),
              on_step=rows.append)
    rows = rows[1:]  # the first step is a warm-up
    split = {k: statistics.median(float(r.get(k, 0.0)) for r in rows)
             for k in ("gen_time", "learn_time", "learner_seqs")}
    return [r["step_time"] for r in rows], split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="bundled name or HF directory")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per framework (after one warm-up step)")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=64, help="generated tokens per completion")
    ap.add_argument("--precision", choices=["fp32", "bf16", "both"], default="fp32",
                    help="learner precision of both frameworks (both: fp32, then bf16)")
    ap.add_argument("--rlvr-set", nargs="*", default=[], help="extra rlvr config overrides (key=value)")
    args = ap.parse_args()

    from rlvr.models import resolve_model_path

    path = resolve_model_path(args.model)
    import trl
    from transformers import AutoTokenizer

    from rlvr.engines.hf import format_prompt
    from rlvr.types import Problem

    prompt_tokens = len(format_prompt(AutoTokenizer.from_pretrained(path), Problem(id="p", prompt=PROMPT, answer="")))
    # each GEMM probe bounded in time: on a CPU without native bf16 the bf16 one is measured at a smaller size
    (fp32_rate, fp32_n), (bf16_rate, bf16_n) = gemm_rate(torch.float32), gemm_rate(torch.bfloat16)
    rates = {"gemm_fp32": fp32_rate, "gemm_bf16": bf16_rate, "bandwidth": copy_bandwidth()}

    rows = []
    for precision in (["fp32", "bf16"] if args.precision == "both" else [args.precision]):
        args.precision = precision
        torch.manual_seed(0)
        rlvr_times, split = time_rlvr(path, args)
        trl_times = time_trl(path, args)
        rows.append((precision, statistics.median(trl_times), statistics.median(rlvr_times), trl_times, rlvr_times,
                     split, step_floor(path, prompt_tokens, args, rates)))
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"trl {trl.__version__}; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"config: {args.model}, 1 prompt x {args.group} completions x {args.new_tokens} tokens, "
          f"{args.steps} timed steps; rlvr overrides: {' '.join(args.rlvr_set) or '(none)'}")
    print(f"machine rates, measured in this run: GEMM {rates['gemm_fp32'] / 1e9:.0f} GFLOP/s fp32 ({fp32_n}^3), "
          f"{rates['gemm_bf16'] / 1e9:.1f} GFLOP/s bf16 ({bf16_n}^3); copy bandwidth "
          f"{rates['bandwidth'] / 1e9:.1f} GB/s")
    for precision, t, r, trl_times, rlvr_times, split, floor in rows:
        print(f"[{precision}] TRL GRPOTrainer: {t:6.2f} s/step  (steps: {', '.join(f'{x:.2f}' for x in trl_times)})")
        print(f"[{precision}] rlvr:            {r:6.2f} s/step  (steps: {', '.join(f'{x:.2f}' for x in rlvr_times)}; "
              f"median generate {split['gen_time']:.2f} s, learner {split['learn_time']:.2f} s on "
              f"{split['learner_seqs']:.0f} of {args.group} sequences)")
        print(f"[{precision}] ratio rlvr / TRL: {r / t:.2f}x")
        print(f"[{precision}] floor: {floor['total']:.2f} s/step = learner {floor['learner']:.2f} "
              f"({floor['tokens']} tokens x {floor['matmul_params'] / 1e6:.1f}M matmul params) + sampling "
              f"{floor['sampling']:.2f} + optimizer {floor['optimizer']:.2f}; TRL {t / floor['total']:.1f}x the floor, "
              f"rlvr {r / floor['total']:.1f}x (its sampling {split['gen_time'] / floor['sampling']:.1f}x, learner "
              f"{split['learn_time'] / floor['learner']:.1f}x); the 0.25x target ({0.25 * t:.2f} s) is "
              f"{0.25 * t / floor['total']:.2f}x the floor")


if __name__ == "__main__":
    main()
