"""Cross-match of the shipped gold answers: gold i as the response, gold j as the reference.

    python benchmarks/gold_crossmatch.py [--datasets math500,aime24,amc23,gsm8k] [--write]
                                         [--limit N] [--validate 300] [--exhaustive]
                                         [--reuse-math-verify]

For every benchmark the package ships (``rlvr.tasks.benchmarks``), every ordered pair of
its distinct gold answers is judged by rlvr's ``math`` verifier (response
``\\boxed{gold_i}``, reference ``gold_j``) and by math-verify
(``verify(parse("\\boxed{gold_j}"), parse("\\boxed{gold_i}"))``).  Two golds of different
problems are usually different values, so an "equal" says either that two problems
share a value written two ways (``\\frac{1}{2}`` and ``0.5``) or that a verifier is
too lenient; every pair on which the two verifiers disagree is listed in
``tests/verifiers/data/gold_crossmatch_disagreements.tsv`` with a judgement (who is
right and why), and every pair of different golds that both call equal in
``gold_crossmatch_agreed_equal.tsv`` (also judged: a value both get wrong is no
disagreement).  ``--write`` rewrites the two files, keeping the judgements of pairs
already listed (new pairs get ``TODO``).  Each gold is also checked against itself.

math-verify needs ~20 ms a pair (sympy ``simplify``), so pairs are first bucketed:
each gold is parsed once (math-verify's parser on the raw gold, and on rlvr's cleaned
form) and fingerprinted -- a finite number by its value, an expression in variables
by its variable names and its values at two fixed points, anything else (sets,
tuples, intervals, relations, matrices, text) not at all.  A pair whose fingerprints
say "different values" under both parsers (two numbers differing by more than
1e-6, a number and a non-constant expression, expressions in different variables or
with different values) is not compared: no sound verifier equates them.
``--validate N`` runs both verifiers on N such skipped pairs (a fixed random sample)
and reports any "equal" among them (there should be none); ``--exhaustive`` compares
every pair.  ``--limit N`` keeps the first N distinct golds of each dataset (the fast
test uses a prefix).

``--reuse-math-verify`` is for re-running after a change to rlvr's verifier: math-verify
(pinned at 0.9.0) gives the same verdicts as in the run that wrote the tables, so the
pairs it called equal are read from them (every row with ``math_verify`` 1) and it is
called only on those, on each gold against itself, on the pairs rlvr now calls equal
and on the ``--validate`` sample; rlvr still judges every compared pair.  The ``slow``
test ``test_full_crossmatch_matches_the_committed_files`` re-checks the tables with
both verifiers on every pair.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DISAGREEMENTS = ROOT / "tests" / "verifiers" / "data" / "gold_crossmatch_disagreements.tsv"
AGREED = ROOT / "tests" / "verifiers" / "data" / "gold_crossmatch_agreed_equal.tsv"
DATASETS = ("math500", "aime24", "amc23", "gsm8k")
COLUMNS = ("dataset", "response_gold", "reference_gold", "rlvr", "math_verify", "rlvr_reason", "right", "judgement")
_POINTS = ((0.7326, 1.3917, 2.1149, 0.4583), (1.6187, 0.5261, 1.2743, 2.3319))  # values for sorted free symbols
_INT_RE = None


def unique_golds(dataset: str, limit: int | None = None) -> list[str]:
    """The distinct gold answers of a shipped benchmark, in file order."""
    from rlvr.tasks.benchmarks import load_benchmark

    golds = list(dict.fromkeys(p.answer for p in load_benchmark(dataset)))
    return golds[:limit] if limit else golds


# ----------------------------------------------------------------------------- fingerprints

def _is_int(s: str) -> bool:
    global _INT_RE
    if _INT_RE is None:
        import re

        _INT_RE = re.compile(r"-?\d{1,30}")
    return bool(_INT_RE.fullmatch(s.strip()))


def mv_parse(text: str) -> list:
    """math-verify's parse of ``\\boxed{text}`` (its own 5 s parsing timeout)."""
    from math_verify import parse

    try:
        return parse("\\boxed{" + text + "}")
    except Exception:  # noqa: BLE001 - an unparseable gold compares as nothing
        return []


def fingerprint(parsed: list) -> tuple:
    """``("num", value)``, ``("fn", names, values)`` or ``("other",)`` for a parse result."""
    from sympy import Expr, MatrixBase

    if not parsed:
        return ("other",)
    obj = parsed[0]
    try:
        if not isinstance(obj, Expr) or isinstance(obj, MatrixBase) or obj.is_Relational:
            return ("other",)
        symbols = sorted(obj.free_symbols, key=lambda s: s.name)
        if not symbols:
            value = complex(obj.evalf(30))
            return ("num", value) if math.isfinite(value.real) and math.isfinite(value.imag) else ("other",)
        if len(symbols) > len(_POINTS[0]):
            return ("other",)
        values = []
        for point in _POINTS:
            v = complex(obj.evalf(30, subs=dict(zip(symbols, point))))
            if not (math.isfinite(v.real) and math.isfinite(v.imag)):
                return ("other",)
            values.append(v)
        return ("fn", tuple(s.name for s in symbols), tuple(values))
    except Exception:  # noqa: BLE001 - odd objects are not bucketed
        return ("other",)


def _close(a: complex, b: complex) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)


def clearly_different(fa: tuple, fb: tuple) -> bool:
    """True when two fingerprints are different values (no sound verifier equates them)."""
    kinds = {fa[0], fb[0]}
    if "other" in kinds:
        return False
    if kinds == {"num"}:
        return not _close(fa[1], fb[1])
    if kinds == {"num", "fn"}:
        num, fn = (fa, fb) if fa[0] == "num" else (fb, fa)
        return not all(_close(v, num[1]) for v in fn[2])
    return fa[1] != fb[1] or not all(_close(a, b) for a, b in zip(fa[2], fb[2]))


@dataclass
class Gold:
    text: str
    mv: list = field(default_factory=list)
    fp_mv: tuple = ("other",)
    fp_rlvr: tuple = ("other",)


def prepare(golds: list[str]) -> list[Gold]:
    """Parse and fingerprint each gold once (plain integers without sympy)."""
    from rlvr.verifiers.math.compare import _parse
    from rlvr.verifiers.math.normalize import clean, to_number

    out = []
    for g in golds:
        if _is_int(g):
            from sympy import Integer

            value = Integer(int(g))
            out.append(Gold(g, [value, g], ("num", complex(int(g))), ("num", complex(int(g)))))
            continue
        parsed = mv_parse(g)
        c = clean(g)
        n = to_number(c)
        if n is not None and not n[1]:
            fp_r = ("num", complex(float(n[0])))
        else:
            try:
                fp_r = fingerprint(_parse(c))
            except Exception:  # noqa: BLE001
                fp_r = ("other",)
        out.append(Gold(g, parsed, fingerprint(parsed), fp_r))
    return out


# ----------------------------------------------------------------------------- verdicts

def mv_verdict(reference: Gold, response: Gold) -> bool:
    from math_verify import verify

    try:
        return bool(verify(reference.mv, response.mv))
    except Exception:  # noqa: BLE001 - a crash counts as "not equal"
        return False


@dataclass
class Result:
    dataset: str
    golds: int
    pairs: int
    compared: int = 0
    rlvr_equal: list = field(default_factory=list)
    mv_equal: list = field(default_factory=list)
    disagreements: list = field(default_factory=list)
    self_fail_rlvr: list = field(default_factory=list)
    self_fail_mv: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    validated: int = 0
    validation_equal: list = field(default_factory=list)
    seconds: float = 0.0


def crossmatch(dataset: str, golds: list[str], exhaustive: bool = False, validate: int = 0,
               verifier: Any = None, pairs: list[tuple[int, int]] | None = None,
               mv_equal: set[tuple[str, str]] | None = None) -> Result:
    """Compare every ordered pair of ``golds`` (or just ``pairs``) with both verifiers.

    ``mv_equal`` (the pairs of different golds math-verify called equal in an earlier
    full run) skips math-verify where it cannot change the tables: it is then called
    only on the pairs rlvr calls equal, the pairs in ``mv_equal`` and each gold against
    itself; every other compared pair counts as math-verify's "not equal"."""
    from rlvr.verifiers import get_verifier

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    t0 = time.perf_counter()
    verify = verifier or get_verifier("math")
    gs = prepare(golds)
    todo = pairs if pairs is not None else [(i, j) for i in range(len(gs)) for j in range(len(gs))]
    res = Result(dataset, len(gs), len(todo))
    for i, j in todo:
        a, b = gs[i], gs[j]  # a: the response, b: the reference
        if i != j and not exhaustive and clearly_different(a.fp_mv, b.fp_mv) and clearly_different(a.fp_rlvr, b.fp_rlvr):
            res.skipped.append((i, j))
            continue
        res.compared += 1
        v = verify(f"\\boxed{{{a.text}}}", b.text)
        m = mv_verdict(b, a) if (mv_equal is None or i == j or v.correct or (a.text, b.text) in mv_equal) else False
        if i == j:
            if not v.correct:
                res.self_fail_rlvr.append((a.text, v.reason))
            if not m:
                res.self_fail_mv.append(a.text)
            continue
        if v.correct:
            res.rlvr_equal.append((a.text, b.text))
        if m:
            res.mv_equal.append((a.text, b.text))
        if v.correct != m:
            res.disagreements.append((dataset, a.text, b.text, v.correct, m, v.reason))
    if validate and res.skipped:
        sample = random.Random(0).sample(res.skipped, min(validate, len(res.skipped)))
        for i, j in sample:
            a, b = gs[i], gs[j]
            res.validated += 1
            v = verify(f"\\boxed{{{a.text}}}", b.text)
            m = mv_verdict(b, a)
            if v.correct or m:
                res.validation_equal.append((a.text, b.text, v.correct, m))
    res.seconds = time.perf_counter() - t0
    return res


# ----------------------------------------------------------------------------- the committed files

def _cell(x: Any) -> str:
    return str(x).replace("\t", " ").replace("\n", " ")


def read_disagreements(path: Path = DISAGREEMENTS) -> list[dict]:
    """The rows of a committed table (disagreements, or pairs both verifiers call equal)."""
    if not path.exists():
        return []
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return [dict(zip(COLUMNS, ln.split("\t"))) for ln in lines[1:]]


def key(row: dict | tuple) -> tuple[str, str, str]:
    if isinstance(row, dict):
        return row["dataset"], row["response_gold"], row["reference_gold"]
    return row[0], row[1], row[2]


_HEADERS = {
    DISAGREEMENTS: "# Gold cross-match: the pairs on which rlvr `math` and math-verify 0.9.0 disagree\n",
    AGREED: "# Gold cross-match: the pairs of different golds that rlvr `math` and math-verify 0.9.0 both call equal\n",
}


def write_table(found: list[tuple], datasets: list[str], path: Path = DISAGREEMENTS) -> int:
    """Write ``found`` for ``datasets`` (lines of other datasets are kept), keeping the
    judgements already in the file; returns the number of lines without a judgement."""
    rows = read_disagreements(path)
    old = {key(r): r for r in rows}
    found = list(found) + [(r["dataset"], r["response_gold"], r["reference_gold"], r["rlvr"] == "1",
                           r["math_verify"] == "1", r["rlvr_reason"]) for r in rows if r["dataset"] not in datasets]
    path.parent.mkdir(parents=True, exist_ok=True)
    todo = 0
    with path.open("w") as f:
        f.write(_HEADERS.get(path, "# Gold cross-match\n"))
        f.write("# (benchmarks/gold_crossmatch.py; gold i as the response \\boxed{response_gold}, gold j as the reference).\n"
                "# right: whose verdict is right (rlvr, math-verify, both, neither); judgement: why.\n")
        f.write("\t".join(COLUMNS) + "\n")
        for d in sorted(found, key=lambda d: (DATASETS.index(d[0]) if d[0] in DATASETS else 99, d[1], d[2])):
            prev = old.get(key(d), {})
            right, judgement = prev.get("right", "TODO"), prev.get("judgement", "TODO")
            todo += judgement == "TODO"
            f.write("\t".join([_cell(d[0]), _cell(d[1]), _cell(d[2]), str(int(d[3])), str(int(d[4])),
                                _cell(d[5][:80]), right, judgement]) + "\n")
    return todo


def _compare_with_file(found: list[tuple], path: Path, datasets: list[str], complete: bool, what: str) -> None:
    listed = {key(r): r for r in read_disagreements(path)}
    new = [d for d in found if key(d) not in listed]
    gone = [k for k in listed if k[0] in datasets and k not in {key(d) for d in found}] if complete else []
    changed = [d for d in found if key(d) in listed
               and (listed[key(d)]["rlvr"], listed[key(d)]["math_verify"]) != (str(int(d[3])), str(int(d[4])))]
    print(f"{len(found)} {what}: {len(new)} not in {path.name}, {len(changed)} with other verdicts there, "
          f"{len(gone)} listed there but no longer found")
    for d in new + changed:
        print(f"  {d[0]} {d[1]!r} as the answer to {d[2]!r}: rlvr {int(d[3])}, math-verify {int(d[4])} ({d[5][:60]})")
    for k in gone:
        print(f"  gone: {k}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--limit", type=int, default=None, help="first N distinct golds of each dataset")
    ap.add_argument("--validate", type=int, default=300, help="skipped pairs re-checked with both verifiers")
    ap.add_argument("--exhaustive", action="store_true", help="compare every pair (math-verify: ~20 ms a pair)")
    ap.add_argument("--reuse-math-verify", action="store_true",
                    help="take math-verify's 'equal' verdicts from the committed tables (after an rlvr change)")
    ap.add_argument("--write", action="store_true",
                    help=f"rewrite {DISAGREEMENTS.relative_to(ROOT)} and {AGREED.name} (judgements are kept)")
    args = ap.parse_args()
    datasets = args.datasets.split(",")

    found: list[tuple] = []
    agreed: list[tuple] = []
    print(f"{'dataset':<9}{'golds':>6}{'pairs':>8}{'compared':>9}{'skipped':>8}{'rlvr =':>8}{'mv =':>6}{'both =':>7}"
          f"{'disagree':>9}{'self rlvr/mv':>13}{'skip check':>12}{'s':>7}")
    known = read_disagreements(DISAGREEMENTS) + read_disagreements(AGREED)
    for name in datasets:
        mv_equal = {(r["response_gold"], r["reference_gold"]) for r in known
                    if r["dataset"] == name and r["math_verify"] == "1"} if args.reuse_math_verify else None
        r = crossmatch(name, unique_golds(name, args.limit), args.exhaustive, args.validate, mv_equal=mv_equal)
        found += r.disagreements
        both = [(name, a, b, True, True, "match") for a, b in r.rlvr_equal if (a, b) in set(r.mv_equal)]
        agreed += both
        print(f"{name:<9}{r.golds:>6}{r.pairs:>8}{r.compared:>9}{len(r.skipped):>8}{len(r.rlvr_equal):>8}"
              f"{len(r.mv_equal):>6}{len(both):>7}{len(r.disagreements):>9}{len(r.self_fail_rlvr):>7}/{len(r.self_fail_mv):<5}"
              f"{len(r.validation_equal):>5}/{r.validated:<6}{r.seconds:>7.0f}", flush=True)
        for text, why in r.self_fail_rlvr:
            print(f"  rlvr does not match gold {text!r} with itself: {why}")
        for text in r.self_fail_mv:
            print(f"  math-verify does not match gold {text!r} with itself")
        for a, b, v, m in r.validation_equal:
            print(f"  SKIPPED PAIR IS EQUAL: {a!r} vs {b!r} (rlvr {v}, math-verify {m})")
    print()
    _compare_with_file(found, DISAGREEMENTS, datasets, not args.limit, "disagreements")
    _compare_with_file(agreed, AGREED, datasets, not args.limit, "pairs both call equal")
    if args.write:
        if args.limit:
            sys.exit("--write needs the full golds (no --limit)")
        for table, path in ((found, DISAGREEMENTS), (agreed, AGREED)):
            todo = write_table(table, datasets, path)
            print(f"wrote {path.relative_to(ROOT)} ({len(table)} lines for {','.join(datasets)}, {todo} without a judgement)")


if __name__ == "__main__":
    main()
