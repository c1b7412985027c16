"""Cost of the reward stage with a rubric: reward.functions vs the verifier's scaled reward (the anchor).

    python benchmarks/rubric_overhead.py [--groups 2000] [--group-size 8] [--repeats 5]

Scores the same groups of demo-like completions ("... \\boxed{N}", some with a stated
``<confidence>``) with :meth:`rlvr.rewards.pipeline.RewardPipeline.score_group`, in this process, under
three ``reward`` sections:

* anchor: no rubric (``wrong + (correct - wrong) * return``, what every run did before rubrics);
* ``[{kind: verifier}]`` (the same rewards, through the rubric);
* ``[verifier, format 0.2, length 0, calibration 0]`` (a composite reward with two logged-only metrics).

The verdicts are set beforehand (verification itself is the environment's cost, not the reward stage's).
Prints the median seconds per 1,000 groups of each and its ratio to the anchor, and checks that the
one-verifier rubric's rewards equal the anchor's bit for bit.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time


def groups(n: int, g: int, seed: int = 0):
    from rlvr.types import Problem, Sample, Verdict

    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        prob = Problem(f"p{i}", prompt=f"What is {a} + {b}?", answer=str(a + b))
        samples = []
        for j in range(g):
            ans = a + b if rng.random() < 0.6 else a + b + rng.randint(1, 9)
            conf = f" <confidence>{rng.random():.2f}</confidence>" if rng.random() < 0.5 else ""
            text = f"{a} + {b} = {ans}. The answer is \\boxed{{{ans}}}.{conf}"
            n_tok = rng.randint(12, 48)
            v = Verdict(float(ans == a + b), str(ans), "match" if ans == a + b else "mismatch")
            samples.append(Sample(prob.id, [1] * 20, [2] * n_tok, [0.0] * n_tok, text, "stop", j, verdict=v,
                                  env_return=v.score))
        out.append((prob, samples))
    return out


def time_pipeline(pipe, data, repeats: int):
    import torch

    times, rewards = [], None
    for _ in range(repeats):
        noise = torch.Generator().manual_seed(0)
        t0 = time.perf_counter()
        got = [pipe.score_group(p, s, noise=noise).reward for p, s in data]
        times.append(time.perf_counter() - t0)
        rewards = torch.cat(got)
    return statistics.median(times), rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import torch

    from rlvr.rewards.pipeline import RewardPipeline
    from rlvr.rewards.settings import RewardConfig, RewardFunctionSpec as F

    torch.set_num_threads(1)
    data = groups(args.groups, args.group_size)
    arms = {
        "anchor: no rubric": RewardConfig(),
        "rubric [verifier]": RewardConfig(functions=[F(kind="verifier")]),
        "rubric [verifier, format 0.2, length 0, calibration 0]": RewardConfig(functions=[
            F(kind="verifier"), F(kind="format", weight=0.2), F(kind="length", weight=0.0),
            F(kind="calibration", weight=0.0)]),
    }
    per_k, results = 1000 / args.groups, {}
    for name, rc in arms.items():
        results[name] = time_pipeline(RewardPipeline(rc, max_new_tokens=48), data, args.repeats)
    anchor_s, anchor_r = results["anchor: no rubric"]
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread; "
          f"{args.groups} groups of {args.group_size}, median of {args.repeats}")
    print(f"{'reward section':58s} {'s / 1000 groups':>16s} {'ratio':>7s}")
    for name, (s, r) in results.items():
        print(f"{name:58s} {s * per_k:16.4f} {s / anchor_s:7.2f}")
    same = torch.equal(results["rubric [verifier]"][1], anchor_r)
    print(f"one-verifier rubric rewards equal the anchor's bit for bit: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
