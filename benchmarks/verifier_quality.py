"""Quality and speed of the ``math`` verifier against plain math-verify.

    python benchmarks/verifier_quality.py [--outside benchmarks/data/outside_cases.jsonl]
                                          [--cases benchmarks/data/verifier_cases.jsonl]
                                          [--families benchmarks/data/family_cases.jsonl]
                                          [--workers 2] [--repeat 2] [--no-refs] [--no-speed] [--no-sweep]

Three labelled sets of ``{"category", "gold", "completion", "label"}`` cases:

* the **outside set** (``outside_cases.jsonl``, built by ``data/build_outside_cases.py``):
  cases nobody on rlvr wrote -- math-verify's and lm-eval's own test suites,
  hand-labelled responses of the bundled model, published AIME 2024 and MATH-500
  reference solutions (see ``data/README.md``);
* the **self-written set** (``verifier_cases.jsonl``), written alongside the verifier;
* the **family set** (``family_cases.jsonl``, built by ``data/build_family_cases.py``):
  universal answers (infinities, huge and tiny magnitudes, indeterminate forms, sets,
  bare variables, words) against shipped golds, golds that are intervals or infinities
  against their true equals, reasoning output (``<think>`` blocks), self-corrections,
  hedged lists of guesses and decimal precision.

Then the **universal-answer sweep**: how many of the distinct golds the package ships
(MATH-500, AIME 2024, AMC 2023, GSM8K test) each core universal answer
(``\\infty``, ``10^{1000}``, ``\\frac{0}{0}``, ``\\mathbb{R}``, ``x``...) earns reward on,
for rlvr and for math-verify (``--no-sweep`` skips it: math-verify needs ~3 minutes).

For each set it prints, for rlvr's ``math`` verifier (defaults), for plain
``math_verify.verify(parse(gold), parse(completion))`` and for math-verify with the
gold wrapped in ``$...$`` (its documented usage), the false-negative rate (correct
completions rejected) and the false-positive rate (wrong ones accepted), with a
breakdown by source (outside set) or category.  Then verifications/s single-process
and with ``--workers`` processes (rlvr's ``verify_batch``) on the self-written set,
and, unless ``--no-refs``, every MATH-500 reference solution and GSM8K solution in
the benchmark data shipped with rlvr (``src/rlvr/data``, or ``$RLVR_DATA_DIR``) against its own answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_cases(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_math_verify(cases: list[dict], wrap_gold: bool = False) -> tuple[list[bool], float]:
    """``verify(parse(gold), parse(completion))``; ``wrap_gold`` parses ``$gold$`` instead."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    out, t0 = [], time.perf_counter()
    for c in cases:
        gold = f"${c['gold']}$" if wrap_gold else c["gold"]
        try:
            out.append(bool(verify(parse(gold), parse(c["completion"]))))
        except Exception:  # noqa: BLE001 - count a crash as a rejection
            out.append(False)
    return out, time.perf_counter() - t0


def run_rlvr(cases: list[dict], workers: int) -> tuple[list[bool], float]:
    from rlvr.verifiers.batch import verify_batch

    t0 = time.perf_counter()
    verdicts = verify_batch("math", [c["completion"] for c in cases], [c["gold"] for c in cases], workers=workers)
    return [v.correct for v in verdicts], time.perf_counter() - t0


def rates(pred: list[bool], cases: list[dict]) -> tuple[float, float, Counter, Counter]:
    pos = [p for p, c in zip(pred, cases) if c["label"]]
    neg = [p for p, c in zip(pred, cases) if not c["label"]]
    fn = Counter(c["category"] for p, c in zip(pred, cases) if c["label"] and not p)
    fp = Counter(c["category"] for p, c in zip(pred, cases) if not c["label"] and p)
    return pos.count(False) / len(pos), neg.count(True) / len(neg), fn, fp


def reference_checks() -> None:
    from rlvr.tasks import read_jsonl
    from rlvr.tasks.benchmarks import data_file
    from rlvr.verifiers import get_verifier

    def rows(name: str) -> list[dict]:
        return [rec for _, rec in read_jsonl(data_file(name))]

    verify = get_verifier("math")
    math500 = rows("math500_test.jsonl")
    bad = [r["unique_id"] for r in math500 if not verify(r["solution"], r["answer"]).correct]
    print(f"MATH-500 reference solutions verified: {len(math500) - len(bad)}/{len(math500)}  {bad[:5]}")
    gsm = rows("gsm8k_test.jsonl")
    badg = [i for i, r in enumerate(gsm) if not verify(r["answer"], r["answer"].split("####")[-1].strip()).correct]
    print(f"GSM8K test solutions verified against their #### number: {len(gsm) - len(badg)}/{len(gsm)}  {badg[:5]}")


SOURCES = {"mv": "math-verify 0.9.0 tests", "lm-eval": "lm-eval 0.4.13 tests", "bundled": "bundled model (hand-labelled)",
           "ref": "AIME24 / MATH-500 ref. solutions"}


def _count(pred: list[bool], cases: list[dict]) -> tuple[int, int, int, int]:
    fn = sum(1 for p, c in zip(pred, cases) if c["label"] and not p)
    fp = sum(1 for p, c in zip(pred, cases) if not c["label"] and p)
    return fn, sum(c["label"] for c in cases), fp, sum(not c["label"] for c in cases)


def _cell(fn: int, pos: int, fp: int, neg: int) -> str:
    f = f"{fn}/{pos}" if pos else "-"
    p = f"{fp}/{neg}" if neg else "-"
    return f"FN {f:>8} FP {p:>8}"


def outside_report(cases: list[dict]) -> None:
    """The outside-set table: totals, then per source, for the three verifiers."""
    preds = {"math-verify": run_math_verify(cases)[0], "math-verify $gold$": run_math_verify(cases, wrap_gold=True)[0],
             "rlvr math": run_rlvr(cases, workers=1)[0]}
    n_pos = sum(c["label"] for c in cases)
    print(f"OUTSIDE SET: {len(cases)} cases ({n_pos} correct, {len(cases) - n_pos} wrong)")
    print(f"{'verifier':<20}{'FN rate':>9}{'FP rate':>9}{'accuracy':>10}")
    counts = {}
    for name, pred in preds.items():
        fn, pos, fp, neg = counts[name] = _count(pred, cases)
        acc = sum(p == c["label"] for p, c in zip(pred, cases)) / len(cases)
        print(f"{name:<20}{fn / pos:>9.1%}{fp / neg:>9.1%}{acc:>10.1%}   ({fn} FN, {fp} FP)")
    groups = sorted({c["category"].split("/")[0] for c in cases})
    print(f"\nby source{'':<27}" + "".join(f"{name:>24}" for name in preds))
    for g in groups:
        idx = [i for i, c in enumerate(cases) if c["category"].split("/")[0] == g]
        sub = [cases[i] for i in idx]
        row = "".join(f"{_cell(*_count([preds[n][i] for i in idx], sub)):>24}" for n in preds)
        print(f"{SOURCES.get(g, g) + f' ({len(sub)})':<36}{row}")
    rl_fn, rl_fp = counts["rlvr math"][0], counts["rlvr math"][2]
    for base in ("math-verify", "math-verify $gold$"):
        fn, fp = counts[base][0], counts[base][2]
        print(f"target vs {base}: rlvr FN {rl_fn} <= {fn / 2:g} (half of {fn}): {'yes' if rl_fn <= fn / 2 else 'NO'}; "
              f"rlvr FP {rl_fp} <= {fp}: {'yes' if rl_fp <= fp else 'NO'}")
    wrong = [(c["category"], c["gold"][:40], c["completion"][-60:]) for p, c in zip(preds["rlvr math"], cases)
             if p != c["label"]]
    if wrong:
        print(f"rlvr's {len(wrong)} errors on the outside set:")
        for cat, gold, comp in wrong:
            print(f"  {cat:<40} gold {gold!r:<44} ...{comp!r}")
    print()


def print_rate_table(rows, cases) -> None:
    """One line per ``(name, predictions)``: FN and FP rates with their counts by category (a name in
    parentheses is a reference row, printed inline)."""
    print(f"{'verifier':<14}{'FN rate':>9}{'FP rate':>9}   false negatives / false positives by category")
    for name, pred in rows:
        fnr, fpr, fn, fp = rates(pred, cases)
        if name.startswith("("):
            print(f"{name}: FN {fnr:.1%}  FP {fpr:.1%}  FN {dict(fn.most_common())}  FP {dict(fp.most_common())}")
            continue
        print(f"{name:<14}{fnr:>9.1%}{fpr:>9.1%}   FN {dict(fn.most_common())}  FP {dict(fp.most_common())}")


def labelled_report(title: str, cases: list[dict]) -> None:
    """FN / FP rates by category for rlvr and math-verify on one labelled set."""
    print(title)
    n_pos = sum(c["label"] for c in cases)
    print(f"{len(cases)} cases ({n_pos} correct, {len(cases) - n_pos} wrong), "
          f"{len({c['category'] for c in cases})} categories\n")
    rows = (("math-verify", run_math_verify(cases)[0]), ("rlvr math", run_rlvr(cases, workers=1)[0]),
            ("(math-verify with $gold$, for reference)", run_math_verify(cases, wrap_gold=True)[0]))
    print_rate_table(rows, cases)
    wrong = [(c["category"], c["gold"][:30], c["completion"][-60:]) for p, c in zip(rows[1][1], cases) if p != c["label"]]
    for cat, gold, comp in wrong:
        print(f"  rlvr wrong: {cat:<16} gold {gold!r:<32} ...{comp!r}")
    print()


SWEEP = [r"\infty", r"-\infty", r"\infty^\infty", r"e^{\infty}", r"10^{1000}", r"-10^{1000}", r"10^{-1000}", "1e309",
         r"\frac{0}{0}", r"\infty - \infty", r"\emptyset", r"\mathbb{R}", "x", r"\text{all real numbers}"]


def universal_sweep(math_verify: bool = True) -> None:
    """How many distinct shipped golds each core universal answer earns reward on."""
    from rlvr.tasks.benchmarks import load_benchmark

    golds: list[str] = []
    for name in ("math500", "aime24", "amc23", "gsm8k"):
        golds += [p.answer for p in load_benchmark(name)]
    golds = list(dict.fromkeys(golds))
    print(f"UNIVERSAL-ANSWER SWEEP: golds matched out of the {len(golds)} distinct shipped golds "
          f"(response: The answer is $\\boxed{{answer}}$.)")
    print(f"{'answer':<26}{'rlvr math':>10}{'math-verify':>13}{'math-verify $gold$':>20}")
    for answer in SWEEP:
        cases = [{"gold": g, "completion": f"The answer is $\\boxed{{{answer}}}$.", "label": False, "category": "u"}
                 for g in golds]
        rl = sum(run_rlvr(cases, workers=1)[0])
        mv = sum(run_math_verify(cases)[0]) if math_verify else "-"
        mvw = sum(run_math_verify(cases, wrap_gold=True)[0]) if math_verify else "-"
        print(f"{answer:<26}{rl:>10}{mv:>13}{mvw:>20}", flush=True)
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=Path, default=ROOT / "benchmarks" / "data" / "verifier_cases.jsonl")
    ap.add_argument("--workers", type=int, default=2, help="processes for the parallel rlvr run")
    ap.add_argument("--repeat", type=int, default=2, help="copies of the case list in the throughput runs")
    ap.add_argument("--no-refs", action="store_true", help="skip the MATH-500 / GSM8K reference checks")
    ap.add_argument("--outside", type=Path, default=ROOT / "benchmarks" / "data" / "outside_cases.jsonl")
    ap.add_argument("--no-speed", action="store_true", help="skip the throughput runs")
    ap.add_argument("--families", type=Path, default=ROOT / "benchmarks" / "data" / "family_cases.jsonl")
    ap.add_argument("--no-sweep", action="store_true", help="skip the universal-answer sweep over the shipped golds")
    args = ap.parse_args()

    if args.outside.exists():
        outside_report(load_cases(args.outside))
    if args.families.exists():
        labelled_report("FAMILY SET (universal answers, reasoning output, corrections, hedges, precision)",
                        load_cases(args.families))
    if not args.no_sweep:
        universal_sweep()
    cases = load_cases(args.cases)
    print("SELF-WRITTEN SET (written alongside the verifier)")
    n_pos = sum(c["label"] for c in cases)
    print(f"{len(cases)} cases ({n_pos} correct, {len(cases) - n_pos} wrong), "
          f"{len({c['category'] for c in cases})} categories\n")

    mv_pred, _ = run_math_verify(cases)
    mv_wrapped, _ = run_math_verify(cases, wrap_gold=True)
    rl_pred, _ = run_rlvr(cases, workers=1)  # also warms rlvr's sandbox worker
    rows = (("math-verify", mv_pred), ("rlvr math", rl_pred), ("(math-verify with $gold$, for reference)", mv_wrapped))
    print_rate_table(rows, cases)

    if args.no_speed:
        if not args.no_refs:
            print()
            reference_checks()
        return
    bench = cases * args.repeat
    _, t_mv = run_math_verify(bench)
    _, t_1 = run_rlvr(bench, workers=1)
    par_pred, t_n = run_rlvr(bench, workers=args.workers)
    assert par_pred == rl_pred * args.repeat, "parallel verdicts differ from sequential ones"
    print(f"\nthroughput on {len(bench)} verifications (same inputs):")
    print(f"  math-verify, 1 process : {len(bench) / t_mv:8.1f} verifications/s")
    print(f"  rlvr math,   1 process : {len(bench) / t_1:8.1f} verifications/s")
    print(f"  rlvr math, {args.workers} processes : {len(bench) / t_n:8.1f} verifications/s "
          f"(x{t_1 / t_n:.2f}, pool start-up included)")
    easy = [c for c in bench if c["category"] != "adversarial"]  # timeouts dominate the rates above
    _, t_mv = run_math_verify(easy)
    _, t_1 = run_rlvr(easy, workers=1)
    _, t_n = run_rlvr(easy, workers=args.workers)
    print(f"without the adversarial cases ({len(easy)} verifications): math-verify {len(easy) / t_mv:.1f}/s, "
          f"rlvr {len(easy) / t_1:.1f}/s, rlvr x{args.workers} {len(easy) / t_n:.1f}/s (x{t_1 / t_n:.2f})")
    if not args.no_refs:
        print()
        reference_checks()


if __name__ == "__main__":
    main()
