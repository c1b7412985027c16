"""Ablation of policy-optimisation methods on the arithmetic task with the bundled model.

Runs GRPO, Dr. GRPO, DAPO (clip-higher + dynamic sampling + token-mean), RLOO and
GSPO for several seeds under the same budget of generated completions
(``train.max_rollouts``: DAPO's extra dynamic-sampling rounds count against it),
evaluates greedy held-out accuracy every few steps (``eval.every``), and writes

* ``<out>/table.md``      final held-out accuracy per method, mean over seeds with a
                           two-level bootstrap 95% interval (seeds, then problems),
                           and the difference to GRPO with its interval;
* ``<out>/curves.png``    held-out accuracy against completions generated;
* ``<out>/summary.json``  every number behind them.

Each run lives in ``<out>/runs/<method>-s<seed>/`` (metrics.jsonl, heldout.jsonl);
finished runs are skipped, so a killed ablation resumes where it stopped.

    python benchmarks/algorithm_ablation.py                 # default size: < 1 h on 2 CPU cores
    python benchmarks/algorithm_ablation.py --seeds 0 1 --budget 256 --methods grpo rloo   # quick look

Every method shares the base config below (``configs/arithmetic_grpo.yaml`` with a
smaller step) and differs only in the overrides in ``METHODS``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# Only the method-defining knobs differ; everything else is BASE.
METHODS: dict[str, list[str]] = {
    # Shao et al. 2024: group mean/std advantage, per-sequence mean of token losses, symmetric clip
    "grpo": ["algorithm.advantage=grpo", "algorithm.loss_agg=seq_mean_token_mean"],
    # Liu et al. 2025: no std division, constant length normaliser
    "drgrpo": ["algorithm.advantage=drgrpo", "algorithm.loss_agg=seq_mean_token_sum_norm"],
    # Yu et al. 2025: clip-higher, dynamic sampling, token-level mean
    "dapo": ["algorithm.advantage=grpo", "algorithm.loss_agg=token_mean", "algorithm.clip_high=0.28",
             "algorithm.dynamic_sampling=true", "algorithm.max_sampling_rounds=3"],
    # Ahmadian et al. 2024: leave-one-out baseline
    "rloo": ["algorithm.advantage=rloo", "algorithm.loss_agg=seq_mean_token_mean"],
    # Zheng et al. 2025: sequence-level (length-normalised) importance ratio, tight clip
    "gspo": ["algorithm.advantage=grpo", "algorithm.policy_loss=gspo", "algorithm.loss_agg=seq_mean_token_mean"],
    # Schulman et al. 2017 / Ouyang et al. 2022: a learned critic (a copy of the policy's trunk + a value head),
    # GAE (gamma = lam = 1), whitened per-token advantages, clipped value loss; not in the default set
    "ppo": ["algorithm.advantage=gae", "algorithm.loss_agg=token_mean", "algorithm.value.critic=separate"],
    # the same with a value head on the policy's own last hidden state (no second trunk)
    "ppo_shared": ["algorithm.advantage=gae", "algorithm.loss_agg=token_mean", "algorithm.value.critic=shared"],
}
DEFAULT_METHODS = ["grpo", "drgrpo", "dapo", "rloo", "gspo"]

BASE = [
    "task.name=arithmetic", "task.params.num_train=2000", "task.num_heldout=128",
    "rollout.group_size=8", "rollout.max_new_tokens=40", "rollout.temperature=1.0", "rollout.dtype=bfloat16",
    "train.prompts_per_step=4", "train.micro_batch_size=16", "train.lr=5e-5", "train.warmup_steps=1",
    "train.autocast=bfloat16",
    "train.save_every=0", "train.keep_checkpoints=1", "train.progress=false",
    # two passes over each batch so that the clipping rules (the methods' differences) act
    "algorithm.ppo_epochs=2",
    "eval.num_problems=128", "eval.temperature=0.0", "eval.max_new_tokens=40",
    "eval.before_training=false", "eval.after_training=false",
]


def run_one(method: str, seed: int, budget: int, every: int, out: Path, overrides: list[str] | None = None) -> Path:
    """Train one (method, seed) to ``budget`` completions; returns its run directory.

    ``overrides`` replaces ``METHODS[method]`` (other experiments reuse this runner).
    """
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train

    run_dir = out / "runs" / f"{method}-s{seed}"
    if (run_dir / "DONE").is_file():
        return run_dir
    steps = 10_000  # the budget stops the run
    method_overrides = METHODS[method] if overrides is None else overrides
    cfg = load_config(RunConfig, None, [*BASE, *method_overrides, f"train.seed={seed}", f"train.steps={steps}",
                                        f"train.max_rollouts={budget}", f"eval.every={every}",
                                        f"train.output_dir={run_dir}"])
    t0 = time.perf_counter()
    train(cfg)
    (run_dir / "DONE").write_text(f"{time.perf_counter() - t0:.1f}\n")
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # 0.5 GB each; the curves are what we keep
    return run_dir


def _child(method: str, seed: int, budget: int, every: int, out: Path, threads: int) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)
    run_one(method, seed, budget, every, out)


def _run_in_child(method: str, seed: int, budget: int, every: int, out: Path, threads: int) -> None:
    """``run_one`` in a fresh process, so that each run's peak RSS (a process high-water mark) is its own."""
    import multiprocessing as mp

    proc = mp.get_context("spawn").Process(target=_child, args=(method, seed, budget, every, out, threads))
    proc.start()
    proc.join()
    if proc.exitcode:
        raise SystemExit(f"{method} seed {seed} failed (exit code {proc.exitcode})")


def initial_accuracy(out: Path) -> dict:
    """Greedy held-out accuracy of the untrained model (shared by every run: same problems, greedy)."""
    path = out / "initial.json"
    if path.is_file():
        return json.loads(path.read_text())
    from rlvr.config import load_config
    from rlvr.evaluate.accuracy import evaluate_accuracy
    from rlvr.models import load_policy
    from rlvr.engines import HFEngine
    from rlvr.engines.hf import sampler_dtype
    from rlvr.recipes.config import RunConfig
    from rlvr.tasks.registry import build_task
    from rlvr.verifiers import get_verifier

    cfg = load_config(RunConfig, None, BASE)
    model, tok = load_policy(cfg.model.name)
    _, heldout = build_task(cfg.task)
    engine = HFEngine(model, tok, batch_size=cfg.rollout.batch_size, dtype=sampler_dtype(cfg.rollout.dtype))
    r = evaluate_accuracy(engine, heldout[: cfg.eval.num_problems], get_verifier(cfg.reward.verifier),
                          temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens, seed=cfg.eval.seed)
    res = {"accuracy": r["accuracy"], "per_problem": r["per_problem"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res))
    return res


def _rows(run_dir: Path) -> list[dict]:
    from rlvr.trackers import read_metrics

    path = run_dir / "heldout.jsonl"
    return read_metrics(path) if path.is_file() else []  # a run not made (yet)


def _peak_rss_mb(run_dir: Path) -> float | None:
    """The run's peak resident memory (the last metrics row holds the process's high-water mark)."""
    from rlvr.trackers import read_metrics

    path = run_dir / "metrics.jsonl"
    rows = read_metrics(path) if path.is_file() else []
    return rows[-1].get("peak_rss_mb") if rows else None


def two_level_bootstrap(per_seed: np.ndarray, n_boot: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean of a [seeds, problems] 0/1 matrix, resampling seeds then problems.

    Both sources of noise matter: a second training seed is a different run, and a
    second held-out set is a different measurement.  Resampling only one of them
    understates the interval.
    """
    rng = np.random.default_rng(seed)
    S, P = per_seed.shape
    s_idx = rng.integers(0, S, size=(n_boot, S))
    p_idx = rng.integers(0, P, size=(n_boot, P))
    means = per_seed[s_idx[:, :, None], p_idx[:, None, :]].mean(axis=(1, 2))
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def paired_difference(a: np.ndarray, b: np.ndarray, n_boot: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of b - a with a 95% interval; seeds resampled independently per method, problems jointly (paired)."""
    rng = np.random.default_rng(seed)
    P = a.shape[1]
    diffs = np.empty(n_boot)
    for i in range(n_boot):
        p = rng.integers(0, P, size=P)
        sa, sb = rng.integers(0, a.shape[0], size=a.shape[0]), rng.integers(0, b.shape[0], size=b.shape[0])
        diffs[i] = b[sb][:, p].mean() - a[sa][:, p].mean()
    return float(b.mean() - a.mean()), float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


def summarise(out: Path, methods: list[str], seeds: list[int], budget: int, initial: dict,
              specs: dict[str, list[str]] | None = None, anchor: str = "grpo") -> dict:
    """Final accuracies, two-level bootstrap intervals, curves, and each method's difference to ``anchor``."""
    specs = METHODS if specs is None else specs
    summary: dict = {"budget": budget, "seeds": seeds, "initial_accuracy": initial["accuracy"], "methods": {}}
    finals: dict[str, np.ndarray] = {}
    for m in methods:
        curves, per_seed, secs, rss = [], [], [], []
        for s in seeds:
            run_dir = out / "runs" / f"{m}-s{s}"
            rows = _rows(run_dir)
            if not rows:
                continue
            curves.append([(0, initial["accuracy"])] + [(r["rollouts"], r["heldout_accuracy"]) for r in rows])
            per_seed.append(rows[-1]["heldout_per_problem"])
            secs.append(float((run_dir / "DONE").read_text()) if (run_dir / "DONE").is_file() else None)
            rss.append(_peak_rss_mb(run_dir))
        if not per_seed:
            continue
        mat = np.asarray(per_seed, dtype=float)
        finals[m] = mat
        lo, hi = two_level_bootstrap(mat)
        summary["methods"][m] = {"final_accuracy": float(mat.mean()), "ci_low": lo, "ci_high": hi,
                                 "per_seed": [float(x) for x in mat.mean(1)], "curves": curves,
                                 "seconds_per_run": secs, "peak_rss_mb": rss, "overrides": specs[m]}
    summary["anchor"] = anchor
    if anchor in finals:
        for m, mat in finals.items():
            if m != anchor:
                d, lo, hi = paired_difference(finals[anchor], mat)
                summary["methods"][m]["vs_anchor"] = {"diff": d, "ci_low": lo, "ci_high": hi}
    return summary


def write_outputs(out: Path, summary: dict, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(summary["methods"]) > 6
    fig, ax = plt.subplots(figsize=(10, 4.8) if many else (7, 4.5))
    for i, (m, r) in enumerate(summary["methods"].items()):
        color = f"C{i}"
        for c in r["curves"]:
            xs, ys = zip(*c)
            ax.plot(xs, ys, color=color, alpha=0.25, lw=1)
        # mean curve over seeds on the common eval points (same rollouts unless dynamic sampling shifts them)
        n = min(len(c) for c in r["curves"])
        xs = np.mean([[p[0] for p in c[:n]] for c in r["curves"]], axis=0)
        ys = np.mean([[p[1] for p in c[:n]] for c in r["curves"]], axis=0)
        ax.plot(xs, ys, color=color, lw=2.2, marker="o", ms=3,
                label=f"{m}: {r['final_accuracy']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}]")
    ax.axhline(summary["initial_accuracy"], color="grey", ls=":", lw=1, label="initial model")
    ax.set_xlabel("completions generated (rollouts consumed)")
    ax.set_ylabel("held-out greedy accuracy")
    ax.set_title(title or f"SmolLM2-135M-Instruct, arithmetic, {len(summary['seeds'])} seeds (thin: single seeds)",
                 fontsize=10)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.grid(alpha=0.3)
    if many:  # beside the plot, not over the curves
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=130)

    anchor = summary.get("anchor", "grpo")
    def mean_of(r: dict, key: str) -> float | None:
        xs = [x for x in r.get(key, []) if x]
        return float(np.mean(xs)) if xs else None

    lines = [f"| method | held-out accuracy at budget (95% CI) | per seed | vs {anchor} (95% CI) | minutes per run "
             f"| time vs {anchor} | peak RSS GB | RSS vs {anchor} |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = summary["methods"].get(anchor, {})
    for m, r in summary["methods"].items():
        vs = r.get("vs_anchor")
        vs_s = "—" if vs is None else f"{vs['diff']:+.1%} [{vs['ci_low']:+.1%}, {vs['ci_high']:+.1%}]"
        secs, rss = mean_of(r, "seconds_per_run"), mean_of(r, "peak_rss_mb")
        secs0, rss0 = mean_of(base, "seconds_per_run"), mean_of(base, "peak_rss_mb")
        ratio = (lambda a, b: f"{a / b:.2f}x" if a and b else "?")
        lines.append(f"| {m} | {r['final_accuracy']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}] | "
                     f"{', '.join(f'{x:.1%}' for x in r['per_seed'])} | {vs_s} | "
                     f"{f'{secs / 60:.1f}' if secs else '?'} | {ratio(secs, secs0)} | "
                     f"{f'{rss / 1024:.1f}' if rss else '?'} | {ratio(rss, rss0)} |")
    lines.append(f"\nInitial model: {summary['initial_accuracy']:.1%}. Budget: {summary['budget']} completions "
                 f"per run. Seeds: {summary['seeds']}.")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS),
                    help=f"methods to run (default: {' '.join(DEFAULT_METHODS)}; also: ppo, ppo_shared)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--budget", type=int, default=256, help="completions generated per run (default 256)")
    ap.add_argument("--every", type=int, default=4, help="held-out eval every N steps (default 4)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "algorithm_ablation")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--summarise-only", action="store_true", help="only rebuild table/plot from finished runs")
    ap.add_argument("--shard", default="0/1", help="i/n: run only every n-th run starting at i (one process per "
                                                   "core with --threads 1), then --summarise-only")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    initial = initial_accuracy(args.out)
    shard, n_shards = (int(x) for x in args.shard.split("/"))
    if not args.summarise_only:
        jobs = [(seed, m) for seed in args.seeds for m in args.methods]  # seed-major: a partial run covers all
        for seed, m in jobs[shard::n_shards]:
            t = time.perf_counter()
            _run_in_child(m, seed, args.budget, args.every, args.out, args.threads)
            print(f"[{time.perf_counter() - t0:7.0f}s] {m} seed {seed}: {time.perf_counter() - t:.0f}s", flush=True)
        if n_shards > 1:
            return  # summarise once every shard is done
    write_outputs(args.out, summarise(args.out, args.methods, args.seeds, args.budget, initial))
    print(f"total {time.perf_counter() - t0:.0f}s; outputs in {args.out}")


if __name__ == "__main__":
    main()
