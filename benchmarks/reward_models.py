"""Do reward models trained on the bundled model's own samples beat its log-probability at best-of-N?

Steps (one process, one thread by default):

1. ``rlvr rm train kind=orm`` and ``kind=prm`` on fresh samples of the arithmetic task's *train* split
   (``--train-problems`` problems, ``--n`` samples each; the PRM labels ``--prm-samples`` samples per
   problem with ``--rollouts`` continuations per step prefix);
2. ``--eval-problems`` problems of the task's *held-out* split sampled ``--n`` times into a samples file
   (as ``rlvr eval`` writes it);
3. ``rlvr search`` best-of-N on that file with each scorer: ``logprob`` (the sampler's mean token
   probability, the baseline), ``orm:...``, ``prm:...`` and the oracle (pass@N, the ceiling); accuracy
   at every budget with a 95% Wilson interval over problems.

Writes ``--out/results.json`` and prints a table.  The defaults are a small budget (the target:
"under 30 minutes on this machine"); ``--quick`` is a smoke run of a few minutes whose numbers mean
nothing.  The default task is the README demo's (a + b, 1..50: ~25% greedy, ~5% at T = 1 before
training), which leaves room between first-sample accuracy and pass@N for a reranker to win; three
operands with ``*`` (``--operands 3 --operators +,-,*``) was ~0% for the bundled model in a smoke run.

    OMP_NUM_THREADS=1 python benchmarks/reward_models.py --out benchmarks/results/reward_models
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/reward_models")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--train-problems", type=int, default=96)
    ap.add_argument("--eval-problems", type=int, default=64)
    ap.add_argument("--n", type=int, default=8, help="samples per problem (training data and best-of-N)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--operands", type=int, default=2)
    ap.add_argument("--operators", default="+")
    ap.add_argument("--max-value", type=int, default=50)
    ap.add_argument("--prm-samples", type=int, default=2, help="PRM: labelled samples per training problem")
    ap.add_argument("--rollouts", type=int, default=4, help="PRM: continuations per step prefix")
    ap.add_argument("--objective", choices=["pointwise", "bradley_terry"], default="pointwise",
                    help="ORM objective: pointwise BCE on verified labels, or Bradley-Terry on correct/incorrect "
                         "pairs of the same problem")
    ap.add_argument("--lora", action="store_true", help="LoRA instead of full fine-tuning (lr 1e-4)")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip", default="", help="comma list of orm,prm to skip")
    ap.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, meaningless numbers")
    args = ap.parse_args(argv)
    if args.quick:
        args.train_problems, args.eval_problems, args.n, args.max_new_tokens = 8, 6, 4, 48  # ~3 min
        args.prm_samples, args.rollouts = 1, 2

    import torch

    torch.set_num_threads(args.threads)
    from rlvr.config import load_config
    from rlvr.engines.hf import HFEngine
    from rlvr.evaluate.samples import generate_samples, make_header, model_fingerprint
    from rlvr.models.loader import load_policy
    from rlvr.recipes.config import TaskConfig
    from rlvr.recipes.reward_model import RMConfig, format_report, train_reward_model
    from rlvr.search.run import search_samples
    from rlvr.tasks.registry import build_task

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = {"name": "arithmetic", "num_operands": args.operands, "operators": args.operators.split(","),
            "max_value": args.max_value, "num_heldout": max(args.eval_problems, 16)}
    lr = args.lr if args.lr is not None else (1e-4 if args.lora else 1e-5)
    common = [f"model={args.model}", f"num_problems={args.train_problems}", f"n={args.n}",
              f"max_new_tokens={args.max_new_tokens}", f"temperature={args.temperature}", f"lr={lr}",
              f"epochs={args.epochs}", f"threads={args.threads}", f"lora.enabled={str(args.lora).lower()}",
              "heldout_fraction=0.2"] + [f"task.{k}={json.dumps(v) if isinstance(v, list) else v}"
                                         for k, v in task.items()]
    results: dict = {"args": vars(args), "timing": {}}
    t0 = time.perf_counter()
    skip = set(filter(None, args.skip.split(",")))
    scorers = {"logprob": "logprob"}
    for kind in ("orm", "prm"):
        if kind in skip:
            continue
        t = time.perf_counter()
        extra = [f"samples_per_problem={args.prm_samples}", f"rollouts_per_step={args.rollouts}"] \
            if kind == "prm" else [f"objective={args.objective}"]
        # the PRM reuses the ORM's training samples when they exist (same problems, same seed)
        if kind == "prm" and (out / "orm" / "samples.jsonl").is_file():
            extra.append(f"samples={out / 'orm' / 'samples.jsonl'}")
        cfg = load_config(RMConfig, None, common + extra + [f"kind={kind}", f"output_dir={out / kind}"])
        report = train_reward_model(cfg)
        print(format_report(report), flush=True)
        results[kind] = {k: report[k] for k in ("held_out", "best_of_n_accuracy", "train", "problems")
                         if k in report}
        if "held_out_steps" in report:
            results[kind]["held_out_steps"] = report["held_out_steps"]
        results["timing"][f"train_{kind}_s"] = time.perf_counter() - t
        scorers[kind] = f"{kind}:{out / kind}"

    t = time.perf_counter()
    model, tok = load_policy(args.model)
    tcfg = TaskConfig.model_validate(task)
    _, held = build_task(tcfg)
    held = list(held[: args.eval_problems])
    header = make_header("arithmetic", held, args.model, model_fingerprint(model), n=args.n,
                         temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=1234)
    samples = out / "heldout.samples.jsonl"
    generate_samples(HFEngine(model, tok, batch_size=32), held, header, samples, progress=False)
    del model
    results["timing"]["sample_heldout_s"] = time.perf_counter() - t

    rows = {}
    for name, spec in scorers.items():
        t = time.perf_counter()
        rep = search_samples(samples, scorer=spec, strategies=["best_of_n"], verifier="numeric", allocator=False,
                             progress=False, scorer_options={"step_tag": "ки"} if name == "prm" else None)
        results["timing"][f"search_{name}_s"] = time.perf_counter() - t
        rows[name] = rep["curves"]["best_of_n"]
        rows["pass@n (oracle)"] = rep["curves"]["pass@n (oracle)"]
    P = len(held)
    table = {}
    for name, pts in rows.items():
        table[name] = [{"n": p["n"], "accuracy": p["accuracy"],
                        "ci95": wilson(p["accuracy"] * P, P)} for p in pts]
    results["best_of_n"] = table
    results["eval_problems"] = P
    results["timing"]["total_s"] = time.perf_counter() - t0
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    budgets = [p["n"] for p in next(iter(table.values()))]
    print(f"\nbest-of-N accuracy on {P} held-out problems (95% Wilson interval):")
    print("scorer".ljust(18) + "".join(f"N={b}".rjust(22) for b in budgets))
    for name, pts in table.items():
        print(name.ljust(18) + "".join(f"{p['accuracy']:.1%} [{p['ci95'][0]:.0%},{p['ci95'][1]:.0%}]".rjust(22)
                                       for p in pts))
    print(f"total {results['timing']['total_s']:.0f} s; results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
