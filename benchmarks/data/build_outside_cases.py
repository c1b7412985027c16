"""Build ``outside_cases.jsonl``: labelled (gold, response) cases nobody on rlvr wrote.

    python benchmarks/data/build_outside_cases.py --math-verify SDIST_DIR --lm-eval SDIST_DIR \
        [--bundled benchmarks/data/bundled_model_cases.jsonl] [--out benchmarks/data/outside_cases.jsonl]

SDIST_DIRs are the unpacked source distributions from PyPI (they ship their tests):

    pip download --no-deps --no-binary :all: math-verify==0.9.0 lm-eval==0.4.13 -d /tmp/sd
    tar xzf /tmp/sd/math_verify-0.9.0.tar.gz -C /tmp/sd; tar xzf /tmp/sd/lm_eval-0.4.13.tar.gz -C /tmp/sd

* math-verify: every parametrised ``(gold, pred, expected)`` case of its test suite
  is read by pytest's own collection (so f-strings and computed values come out as the
  tests see them); label = ``expected``; category = the test function.  Cases whose
  label depends on a non-default option (``strict``, ``allow_set_relation_comp``) are
  kept only when every setting gives the same label; the others are dropped and listed.
* lm-eval: the ``is_equiv`` cases of ``tests/test_minerva_math.py`` (parametrised
  lists read with ``ast``; the two direct ``assert is_equiv(...)`` lines as well).
* bundled: hand-labelled responses of the bundled model (see the README beside this file).
* ref: published reference solutions (AIME 2024, MATH-500 with the box removed), see
  :func:`reference_solution_cases`.

Labels are copied from the source, never changed.  Duplicate (gold, response) pairs
keep their first occurrence.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

_PLUGIN = '''
import json, os
def pytest_collection_modifyitems(session, config, items):
    with open(os.environ["RLVR_DUMP"], "w") as f:
        for it in items:
            cs = getattr(it, "callspec", None)
            f.write(json.dumps({"nodeid": it.nodeid, "params": dict(cs.params) if cs else {}}, default=repr) + "\\n")
'''


def math_verify_cases(sdist: Path) -> tuple[list[dict], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "rlvr_dump_plugin.py").write_text(_PLUGIN)
        dump = Path(tmp) / "items.jsonl"
        env = dict(os.environ, RLVR_DUMP=str(dump), PYTHONPATH=f"{tmp}{os.pathsep}{sdist}")
        subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "rlvr_dump_plugin",
                        "-p", "no:cacheprovider", "tests"], cwd=sdist, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        items = [json.loads(x) for x in dump.read_text().splitlines()]
    version = sdist.name.split("-")[-1]
    by_pair: dict[tuple[str, str], list[dict]] = {}
    for it in items:
        p = it["params"]
        if "gold" not in p or "pred" not in p:
            continue  # extraction-only tests (no gold) and tests without parameters
        label = p.get("expected", p.get("result"))
        test = it["nodeid"].split("[")[0]
        case = {"gold": p["gold"], "completion": p["pred"], "label": bool(int(label)),
                "category": "mv/" + test.split("::")[-1].removeprefix("test_"),
                "source": f"math-verify {version} {test}"}
        options = {k: p[k] for k in ("strict", "allow_set_relation_comp", "precision") if k in p}
        if options:
            case["options"] = options
        by_pair.setdefault((p["gold"], p["pred"]), []).append(case)
    kept, dropped = [], []
    for (gold, pred), cases in by_pair.items():
        if len({c["label"] for c in cases}) > 1:
            dropped.append(f"{gold!r} vs {pred!r}: label depends on {[c.get('options') for c in cases]}")
            continue
        kept.append(cases[0])
    return kept, dropped


def _literal(node: ast.AST):
    """A parametrize entry: literals, tuples, and pytest.param(...) (its positional args)."""
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "param":
        args = [_literal(a) for a in node.args]
        return args[0] if len(args) == 1 else tuple(args)
    return ast.literal_eval(node)


def lm_eval_cases(sdist: Path) -> list[dict]:
    path = sdist / "tests" / "test_minerva_math.py"
    tree = ast.parse(path.read_text())
    version = sdist.name.split("-")[-1]
    out = []
    for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
        src = f"lm-eval {version} tests/test_minerva_math.py::{fn.name}"
        body = ast.unparse(fn)
        for dec in fn.decorator_list:
            if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                continue
            names = [s.strip() for s in ast.literal_eval(dec.args[0]).split(",")]
            rows = [_literal(e) for e in dec.args[1].elts]
            for row in rows:
                row = row if isinstance(row, tuple) else (row,)
                if len(row) != len(names):
                    row = (row,)  # a tuple value for a single parameter
                p = dict(zip(names, row))
                if names == ["answer"] and "is_equiv(answer, answer)" in body:
                    out.append((p["answer"], p["answer"], True, src))
                elif names == ["x1", "x2"] and "assert not is_equiv(x1, x2)" in body:
                    out.append((p["x1"], p["x2"], False, src))
                elif names == ["pred", "gold"] and "assert is_equiv(" in body:
                    out.append((p["gold"], p["pred"], True, src))
        if not fn.decorator_list:  # direct asserts: assert is_equiv("a", "b") / is_equiv(normalize(a), normalize(b))
            for node in ast.walk(fn):
                if isinstance(node, ast.Assert) and isinstance(node.test, ast.Call) \
                        and getattr(node.test.func, "id", "") == "is_equiv":
                    args = node.test.args
                    vals = [_literal(a.args[0]) if isinstance(a, ast.Call) else _literal(a) for a in args]
                    if all(isinstance(v, str) and v for v in vals):
                        out.append((vals[1], vals[0], True, src))
    return [{"gold": g, "completion": p, "label": lab, "category": "lm-eval/minerva_is_equiv", "source": s}
            for g, p, lab, s in out]


def _unbox(solution: str) -> str | None:
    """The solution with its one ``\\boxed{X}`` replaced by ``X`` (None unless exactly one box)."""
    starts = [i for i in range(len(solution)) if solution.startswith("\\boxed{", i)]
    if len(starts) != 1:
        return None
    i = starts[0] + len("\\boxed{")
    depth = 1
    for j in range(i, len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[j], 0)
        if depth == 0:
            return solution[:starts[0]] + solution[i:j] + solution[j + 1:]
    return None


def reference_solution_cases(data_dir: Path, n_math: int = 80) -> list[dict]:
    """Published reference solutions as responses (their labels follow from the source):

    * AIME 2024 solutions (Qwen2.5-Math evaluation data, AoPS-style text, mostly
      boxed) with their own answer (correct) and with the next problem's different
      integer answer (wrong);
    * the first ``n_math`` MATH-500 solutions with a single ``\\boxed{}`` whose box is
      removed (``$x = \\boxed{46}.$`` -> ``$x = 46.$``, the unboxed final answers of the
      issue), with their own answer (correct) and, for integer answers, with the next
      such problem's different integer answer (wrong).
    """
    out = []
    aime = [json.loads(x) for x in (data_dir / "aime24_test.jsonl").read_text().splitlines() if x.strip()]
    for i, r in enumerate(aime):
        src = f"shared/data/aime24_test.jsonl id {r['id']}"
        out.append({"gold": str(r["answer"]), "completion": r["solution"], "label": True,
                    "category": "ref/aime24_solution", "source": src})
        other = aime[(i + 1) % len(aime)]
        if str(other["answer"]).strip() != str(r["answer"]).strip():
            out.append({"gold": str(other["answer"]), "completion": r["solution"], "label": False,
                        "category": "ref/aime24_solution_other_answer", "source": src})
    math500 = [json.loads(x) for x in (data_dir / "math500_test.jsonl").read_text().splitlines() if x.strip()]
    picked = [(r, _unbox(r["solution"])) for r in math500]
    picked = [(r, u) for r, u in picked if u is not None][:n_math]
    ints = [(r, u) for r, u in picked if r["answer"].strip().lstrip("-").isdigit()]
    for r, u in picked:
        out.append({"gold": r["answer"], "completion": u, "label": True, "category": "ref/math500_unboxed",
                    "source": f"shared/data/math500_test.jsonl {r['unique_id']} (box removed)"})
    for (r, u), (other, _) in zip(ints, ints[1:] + ints[:1]):
        if int(other["answer"]) != int(r["answer"]):
            out.append({"gold": other["answer"], "completion": u, "label": False,
                        "category": "ref/math500_unboxed_other_answer",
                        "source": f"shared/data/math500_test.jsonl {r['unique_id']} (box removed)"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--math-verify", type=Path, required=True, help="unpacked math_verify sdist")
    ap.add_argument("--lm-eval", type=Path, required=True, help="unpacked lm_eval sdist")
    ap.add_argument("--bundled", type=Path, default=HERE / "bundled_model_cases.jsonl")
    ap.add_argument("--out", type=Path, default=HERE / "outside_cases.jsonl")
    ap.add_argument("--data", type=Path, default=HERE.parents[2] / "shared" / "data",
                    help="the shared benchmark files (AIME 2024, MATH-500)")
    ap.add_argument("--n-math500", type=int, default=80)
    args = ap.parse_args()

    mv, dropped = math_verify_cases(args.math_verify)
    cases = mv + lm_eval_cases(args.lm_eval)
    if args.bundled.exists():
        cases += [json.loads(x) for x in args.bundled.read_text().splitlines() if x.strip()]
    cases += reference_solution_cases(args.data, args.n_math500)
    seen, out = set(), []
    for c in cases:
        key = (c["gold"], c["completion"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    args.out.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in out))
    by_src: dict[str, int] = {}
    for c in out:
        k = c["source"].split(" tests/")[0].split("::")[0].split(" ")[0] if not c["source"].startswith(("math-verify", "lm-eval")) \
            else c["source"].split(" tests/")[0]
        by_src[k] = by_src.get(k, 0) + 1
    print(f"wrote {len(out)} cases to {args.out}: {by_src}")
    for d in dropped:
        print("dropped (option-dependent label):", d)


if __name__ == "__main__":
    main()
