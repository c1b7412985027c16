"""Speed of re-scoring stored samples: verdicts + every metric + bootstrap intervals.

    python benchmarks/eval_scoring_speed.py [--problems 500] [--n 16] [--workers 2] [--anchor-samples 1000]

Builds a synthetic samples set from the MATH-500 answers (shipped with rlvr in
``src/rlvr/data``, or ``$RLVR_DATA_DIR``): for each problem, ``n`` completions that end in
``\\boxed{}`` holding the reference (sometimes rewritten in an equivalent form:
a decimal for a fraction, ``\\dfrac``, ``\\left( \\right)``), another problem's
answer, or a perturbed number, with a per-problem difficulty, so that the math
verifier does the work it does on real samples (fast exact rules and sandboxed
symbolic checks).  Then times, in this process:

* rlvr: ``score_samples`` (math verifier) + ``build_results`` (pass@k, maj@k,
  avg@k for every k in 1..n, each with a 2000-resample bootstrap interval, the
  level and subject breakdowns, per-problem rows);
* anchor 1, verification: math-verify's ``verify(parse(gold), parse(completion))``
  per sample on a random subset (``--anchor-samples``), scaled to the full set;
* anchor 2, metrics: a naive Python loop (pass@k with ``math.comb`` per problem
  and k, majority vote with ``collections.Counter`` over the first k samples,
  a per-resample Python bootstrap of each metric), timed on the same data.

and prints seconds and ratios.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def load_answers(limit: int) -> list[dict]:
    from rlvr.tasks import read_jsonl
    from rlvr.tasks.benchmarks import data_file

    rows = [rec for _, rec in read_jsonl(data_file("math500_test.jsonl"))]
    out = [{"id": r.get("unique_id", str(i)), "answer": str(r["answer"]), "subject": r.get("subject"),
            "level": r.get("level")} for i, r in enumerate(rows)]
    while len(out) < limit:  # more than the 500 problems asked for: cycle them with new ids
        out += [dict(r, id=f"{r['id']}#{len(out) + i}") for i, r in enumerate(out[: limit - len(out)])]
    return out[:limit]


def equivalent_form(ans: str, rng: random.Random) -> str:
    """An equivalent way of writing ``ans`` (decimal for a fraction, \\dfrac, spacing), or ``ans``."""
    try:
        from rlvr.verifiers.math.normalize import clean, to_number

        num = to_number(clean(ans))
    except Exception:  # noqa: BLE001
        num = None
    if num is not None and rng.random() < 0.5:
        value = num[0]
        if value.denominator in (1, 2, 4, 5, 8, 10, 20, 25):
            return str(float(value)) if value.denominator != 1 else f"{value.numerator}.0"
        return f"\\dfrac{{{value.numerator}}}{{{value.denominator}}}"
    return ans.replace("\\frac", "\\dfrac").replace(",", ", ") if rng.random() < 0.5 else ans


def wrong_answer(ans: str, others: list[str], rng: random.Random) -> str:
    try:
        from rlvr.verifiers.math.normalize import clean, to_number

        num = to_number(clean(ans))
    except Exception:  # noqa: BLE001
        num = None
    if num is not None and rng.random() < 0.6:
        v = num[0] + rng.choice([-2, -1, 1, 2, 10])
        return str(v.numerator) if v.denominator == 1 else f"\\frac{{{v.numerator}}}{{{v.denominator}}}"
    return rng.choice(others)


def make_records(problems: list[dict], n: int, seed: int = 0):
    from rlvr.evaluate.samples import SampleRecord

    rng = random.Random(seed)
    answers = [p["answer"] for p in problems]
    recs = []
    for p in problems:
        p_correct = rng.betavariate(0.7, 0.9)
        wrongs = [wrong_answer(p["answer"], answers, rng) for _ in range(3)]  # a few recurring wrong answers
        samples = []
        for j in range(n):
            r = rng.random()
            if r < p_correct:
                final = equivalent_form(p["answer"], rng)
            elif r < 0.95:
                final = rng.choice(wrongs)
            else:
                final = None
            body = f"Let me work through this step by step.\nNext we compute the quantity carefully.\n"
            text = body + (f"So the final answer is $\\boxed{{{final}}}$." if final is not None else "I am not sure.")
            samples.append({"text": text, "num_tokens": 40 + rng.randrange(400), "finish_reason":
                            "stop" if rng.random() < 0.9 else "length", "logprob_sum": -rng.random() * 100})
        recs.append(SampleRecord(id=p["id"], answer=p["answer"], metadata={"subject": p["subject"], "level": p["level"]},
                                 prompt="(synthetic)", samples=samples))
    return recs


def naive_metrics(correct: list[list[bool]], votes: list[list[str | None]], n_resamples: int, seed: int = 0) -> dict:
    """The obvious Python: math.comb pass@k, Counter majority over the first k, a Python-loop bootstrap."""
    P, n = len(correct), len(correct[0])
    per = {}
    for k in range(1, n + 1):
        pk, mk, ak = [], [], []
        for i in range(P):
            c = sum(correct[i])
            pk.append(1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k))
            cnt = Counter(v for v in votes[i][:k] if v is not None)
            if cnt:
                top = max(cnt.values())
                win = [a for a, m in cnt.items() if m == top]
                right = {votes[i][j] for j in range(n) if correct[i][j]}
                mk.append(sum(a in right for a in win) / len(win))
            else:
                mk.append(0.0)
            ak.append(c / n)
        per[k] = (pk, mk, ak)
    rng = random.Random(seed)
    out = {}
    for k, cols in per.items():
        for name, vals in zip(("pass", "maj", "avg"), cols):
            means = []
            for _ in range(n_resamples):
                means.append(sum(vals[rng.randrange(P)] for _ in range(P)) / P)
            means.sort()
            ci = (means[int(0.025 * n_resamples)], means[int(0.975 * n_resamples) - 1]) if means else None
            out[(name, k)] = (sum(vals) / P, ci)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2, help="also time scoring with this many verifier processes")
    ap.add_argument("--anchor-samples", type=int, default=1000, help="samples timed for the math-verify anchor")
    ap.add_argument("--naive-resamples", type=int, default=200,
                    help="bootstrap resamples in the naive-Python anchor (scaled to 2000)")
    args = ap.parse_args()

    from rlvr.evaluate.report import build_results
    from rlvr.evaluate.samples import SampleHeader, score_samples

    problems = load_answers(args.problems)
    records = make_records(problems, args.n)
    total = len(records) * args.n
    header = SampleHeader(task="math500-synthetic", task_fingerprint="0" * 16, model="synthetic",
                          model_fingerprint="0" * 16, sampling={"n": args.n, "temperature": 1.0, "top_p": 1.0,
                                                                "max_new_tokens": 512, "seed": 0})
    print(f"{len(records)} problems x {args.n} samples = {total} stored samples "
          "(MATH-500 answers)")

    t0 = time.perf_counter()
    scored = score_samples(records, "math")
    t_score = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = build_results(header, records, scored)
    t_metrics = time.perf_counter() - t0
    m = res["metrics"]
    print(f"rlvr score_samples (math verifier, 1 process): {t_score:.2f} s   "
          f"accuracy {scored.correct.mean():.3f}, no answer {res['tokens']['no_answer_fraction']:.3f}")
    print(f"rlvr build_results (pass@k, maj@k, avg@k for k=1..{args.n}, 2000-resample bootstrap each, "
          f"level+subject breakdowns): {t_metrics:.2f} s")
    print(f"  pass@1 {m['pass@k']['1']['value']:.3f}  pass@{args.n} {m['pass@k'][str(args.n)]['value']:.3f}  "
          f"maj@{args.n} {m['maj@k'][str(args.n)]['value']:.3f}")
    t_rlvr = t_score + t_metrics
    print(f"rlvr total: {t_rlvr:.2f} s")
    if args.workers > 1:
        t0 = time.perf_counter()
        scored_w = score_samples(records, "math", workers=args.workers)
        t_w = time.perf_counter() - t0
        same = bool(np.array_equal(scored_w.correct, scored.correct))
        print(f"rlvr score_samples with {args.workers} processes: {t_w:.2f} s (verdicts identical: {same}); "
              f"total {t_w + t_metrics:.2f} s")

    # anchor 1: math-verify parse + verify per sample, on a random subset, scaled to every sample
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    rng = random.Random(1)
    pairs = [(i, j) for i in range(len(records)) for j in range(args.n)]
    subset = rng.sample(pairs, min(args.anchor_samples, len(pairs)))
    agree = 0
    t0 = time.perf_counter()
    for i, j in subset:
        rec = records[i]
        try:
            ok = bool(verify(parse(f"${rec.answer}$"), parse(rec.samples[j]["text"])))
        except Exception:  # noqa: BLE001
            ok = False
        agree += ok == bool(scored.correct[i, j])
    t_mv = (time.perf_counter() - t0) * len(pairs) / len(subset)
    print(f"anchor math-verify parse+verify per sample: {t_mv:.1f} s for {total} samples "
          f"(timed on {len(subset)}, scaled; agrees with rlvr on {agree / len(subset):.1%})")

    # anchor 2: naive Python metrics on the same verdicts
    correct = scored.correct.tolist()
    t0 = time.perf_counter()
    naive_metrics(correct, scored.extracted, 0)
    t_point = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive_metrics(correct, scored.extracted, args.naive_resamples)
    t_boot = (time.perf_counter() - t0 - t_point) * 2000 / args.naive_resamples
    t_naive = t_point + t_boot
    print(f"anchor naive Python metrics: {t_naive:.1f} s (point estimates {t_point:.2f} s + bootstrap "
          f"{t_boot:.1f} s scaled from {args.naive_resamples} to 2000 resamples)")

    print()
    print("| step | rlvr | anchor | ratio (anchor / rlvr) |")
    print("|---|---|---|---|")
    print(f"| verdicts, {total} samples | {t_score:.2f} s | math-verify {t_mv:.1f} s | {t_mv / t_score:.1f}x |")
    print(f"| all metrics + bootstrap CIs | {t_metrics:.2f} s | naive Python {t_naive:.1f} s | "
          f"{t_naive / t_metrics:.0f}x |")
    print(f"| total | {t_rlvr:.2f} s | {t_mv + t_naive:.1f} s | {(t_mv + t_naive) / t_rlvr:.1f}x |")


if __name__ == "__main__":
    main()
