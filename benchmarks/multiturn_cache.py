"""Multi-turn episodes with and without the HF engine's KV prefix cache (issue: environments).

Each later turn of an episode re-enters the sampler with the whole trajectory as
its prompt.  Without the cache the engine prefills that trajectory again at every
turn; with it (``HFEngine.prefix_cache``, used by ``run_episodes`` for multi-turn
environments) the model is fed only the environment's tokens and what follows.

Workload: the `make demo-tools` environment (calculator tool, up to ``--turns``
turns) on "a * b" problems with a 3-digit a and a 2-digit b, the bundled
SmolLM2-135M-Instruct, ``--problems`` x ``--n`` episodes per call.  Both arms run
the same calls in alternation (best of ``--repeats``); the anchor is the uncached
run in the same process.  Prints wall time, model positions fed in prefill, and
the ratio.  The two arms sample the same distribution; their episodes can differ
by a token where float rounding differs (the padding layout differs), so the
tokens generated per arm are printed too.

    python benchmarks/multiturn_cache.py [--problems 16] [--n 4] [--turns 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--n", type=int, default=4, help="episodes per problem")
    ap.add_argument("--turns", type=int, default=3, help="max_turns of the tools environment")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="per turn")
    ap.add_argument("--dtype", default="bfloat16", help="sampler precision (the demo's rollout.dtype)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.envs import build_environment
    from rlvr.models import load_policy
    from rlvr.rollout.episodes import run_episodes
    from rlvr.tasks.registry import multiply_task
    from rlvr.verifiers import get_verifier

    model, tok = load_policy(args.model)
    model.eval()
    engine = HFEngine(model, tok, batch_size=64, dtype=getattr(torch, args.dtype))
    env = build_environment("tools", get_verifier("numeric"), tok, tools=["calculator"], max_turns=args.turns)
    problems = multiply_task(num_train=args.problems, num_heldout=16, seed=0)[0][: args.problems]
    params = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)

    fed: list[int] = []
    real = engine.model.forward

    def counting(*a, **kw):
        fed.append(kw["input_ids"].numel() if kw["input_ids"].shape[1] > 1 else 0)  # prefill positions only
        return real(*a, **kw)

    engine.model.forward = counting

    class NoCache:  # the same engine without prefix_cache(): every turn prefills the whole trajectory
        def __init__(self, e):
            self.e = e

        def __getattr__(self, name):
            if name == "prefix_cache":
                raise AttributeError(name)
            return getattr(self.e, name)

    def run(eng) -> tuple[float, int, int, float]:
        fed.clear()
        t0 = time.perf_counter()
        groups = run_episodes(eng, env, problems, params)
        dt = time.perf_counter() - t0
        samples = [s for g in groups for s in g]
        turns = sum(s.info["turns"] for s in samples) / len(samples)
        return dt, sum(fed), sum(sum(s.mask) if s.mask else s.num_tokens for s in samples), turns

    best = {"uncached": None, "cached": None}
    for _ in range(args.repeats):
        for name, eng in (("uncached", NoCache(engine)), ("cached", engine)):
            r = run(eng)
            if best[name] is None or r[0] < best[name][0]:
                best[name] = r
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}; {args.model} sampler {args.dtype}")
    print(f"tools env (calculator, max_turns {args.turns}), {args.problems} problems x {args.n} episodes, "
          f"{args.max_new_tokens} new tokens per turn, best of {args.repeats}")
    print(f"{'arm':9} {'seconds':>8} {'prefill positions':>18} {'policy tokens':>14} {'turns/episode':>14}")
    for name, (dt, f, t, turns) in best.items():
        print(f"{name:9} {dt:8.2f} {f:18d} {t:14d} {turns:14.2f}")
    u, c = best["uncached"], best["cached"]
    print(f"cached / uncached: time {c[0] / u[0]:.2f}x, prefill positions {c[1] / u[1]:.2f}x "
          f"(speed-up {u[0] / c[0]:.2f}x)")


if __name__ == "__main__":
    main()
