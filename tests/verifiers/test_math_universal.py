"""No universal answers: no response earns reward from the ``math`` verifier against a
gold it is not equal to, over the golds the package ships (MATH-500, AIME 2024, AMC 2023,
GSM8K test) and generated families of infinities, magnitudes, indeterminate forms,
sets, bare variables and words; golds that are themselves intervals or infinities are
still matched by their true equals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("math_verify")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlvr.tasks.benchmarks import load_benchmark  # noqa: E402
from rlvr.verifiers import get_verifier  # noqa: E402
from rlvr.verifiers.math.normalize import clean, squash, to_number  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"
PROPERTY = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Families of answers that are equal to none of the shipped golds.  A candidate may only
# match a gold that is the same answer (identical after cleaning: none in the data).
FAMILIES = {
    "infinity": [r"\infty", r"-\infty", r"+\infty", r"\pm\infty", r"\mp\infty", r"\infty^\infty", r"\infty^{\infty}",
                 r"-\infty^\infty", "\u221e", "-\u221e", "oo", r"e^{\infty}", r"2^{\infty}", r"\infty^2", r"\sqrt{\infty}",
                 r"\frac{\infty}{2}", r"3\infty", r"\infty + 1", r"\infty \cdot \infty", r"\infty!", r"\infty\pi",
                 r"\lim_{x\to\infty} x", r"\text{infinity}", "infinity", r"\infty \text{ or } -\infty", r"\aleph_0",
                 r"\left(\infty\right)", r"x = \infty", r"\{\infty\}", r"(\infty, \infty)"],
    "magnitude": [r"10^{1000}", r"-10^{1000}", r"10^{-1000}", "1e308", "1e309", "-1e309", "1e-308", "1e-400", "1e1000",
                  r"10^{10^{3}}", r"9.9 \times 10^{999}", r"2^{4096}", r"\frac{1}{10^{1000}}", r"10^{308}",
                  r"-10^{-1000}", r"\sqrt{10^{1000}}", r"10^{1000}\pi", r"10^{1000}\sqrt{2}"],
    "indeterminate": ["0/0", r"\frac{0}{0}", r"\infty-\infty", r"\infty - \infty", r"\frac{\infty}{\infty}",
                      r"0\cdot\infty", r"\infty^0", r"1^\infty", "nan", "NaN", r"\text{NaN}", r"\text{undefined}",
                      r"\frac{1}{0}", r"\tan(\pi/2)", r"\tan\frac{\pi}{2}", r"\log 0", r"\ln(0)", r"0^{-1}",
                      r"\frac{0}{0}\pi", r"\sqrt{\frac{0}{0}}"],
    "sets": [r"\emptyset", r"\varnothing", r"\{\}", r"\mathbb{R}", r"\mathbb{C}", r"\mathbb{Z}", r"\mathbb{N}",
             r"\mathbb{Q}", r"(-\infty,\infty)", r"(-\infty, \infty)", r"\mathbb{R} \setminus \{0\}", r"[0,\infty)",
             r"(0,\infty)", r"x \in \mathbb{R}", r"\mathbb{R}^2", r"(-\infty, \infty) \cup \{\}", r"\{x \mid x > 0\}"],
    "variables": ["x", "n", "k", "a", "y", "t", "m", r"\theta", "N", "x+y", "xy", r"x_1", r"\alpha", "n^2", r"\sqrt{x}",
                  r"\frac{1}{x}", r"x = x", r"f(x)", "z", r"\lambda"],
    "words": ["all real numbers", r"\text{all real numbers}", "none", r"\text{none}", "any", "anything", "all of them",
              "every number", "no solution", r"\text{no solution}", "undefined", "does not exist", r"\text{DNE}",
              "I don't know", "all", "yes", "true", "It depends.", "any real number", "The answer is any real number.",
              r"\text{any value}", r"\text{all } x", "everything", "infinitely many"],
    "other": [r"\ldots", r"\cdots", "?", r"\square", r"\pm", r"\forall x", r"\exists", r"\lim", r"\sum", r"\int",
              r"\approx", r"\neq", r"\top", r"\bot", "0=0", r"\infty = \infty", r"x \ne x", r"\dots", r"\pm 1"],
}
CORE = [r"\infty", r"-\infty", r"\infty^\infty", r"e^{\infty}", r"10^{1000}", r"10^{-1000}", r"\frac{0}{0}",
        r"\infty - \infty", r"\emptyset", r"\mathbb{R}", "x", r"\text{all real numbers}"]
WRAPPERS = ["The answer is $\\boxed{{{}}}$.", "$\\boxed{{{}}}$", "The answer is ${}$.", "Final Answer: The final answer is ${}$.",
            "So we get \\[{}\\]", "<think>hmm</think>\nThe answer is $\\boxed{{{}}}$."]


@lru_cache(maxsize=1)
def shipped_golds() -> tuple[str, ...]:
    """Every distinct gold of every shipped benchmark, via the task loaders."""
    golds: list[str] = []
    for name in ("math500", "aime24", "amc23", "gsm8k"):
        golds += [p.answer for p in load_benchmark(name)]
    return tuple(dict.fromkeys(golds))


@lru_cache(maxsize=1)
def fast_golds() -> tuple[str, ...]:
    """A deterministic subset for the default suite: every plain-number gold and every
    fourth of the others (intervals, radicals, expressions, text, tuples...)."""
    golds = shipped_golds()
    numbers = [g for g in golds if to_number(clean(g)) is not None]
    others = [g for g in golds if to_number(clean(g)) is None]
    return tuple(numbers + others[::4])


@pytest.fixture(scope="module")
def verify():
    return get_verifier("math")


def _same_answer(candidate: str, gold: str) -> bool:
    return squash(clean(candidate)) == squash(clean(gold))


def _leaks(verify, candidates, golds, wrapper="The answer is $\\boxed{{{}}}$.") -> list:
    out = []
    for c in candidates:
        for g in golds:
            v = verify(wrapper.format(c), g)
            if v.correct and not _same_answer(c, g):
                out.append((c, g, v.reason))
    return out


def test_shipped_golds_are_loaded():
    golds = shipped_golds()
    assert len(golds) > 550  # MATH-500, AIME 2024, AMC 2023 and GSM8K test golds, deduplicated
    assert {r"\frac{14}{3}", "9", r"3\sqrt{13}", r"(-\infty, 0]", r"\pi", "52_8"} <= set(golds)
    assert not set(golds) & {c for fam in FAMILIES.values() for c in fam}  # no family member is itself a gold


def test_issue_examples_earn_nothing(verify):
    """The reported universal answers, against the reported golds."""
    for gold in (r"\frac{14}{3}", "9", "42", r"3\sqrt{13}", r"\sqrt{2}", r"\pi", "52_8", r"90^\circ"):
        for response in (r"The answer is $\boxed{\infty}$.", r"The answer is $\boxed{-\infty}$.",
                         r"The answer is $\infty$.", r"$\boxed{10^{1000}}$"):
            v = verify(response, gold)
            assert v.score == 0.0, (response, gold, v)


def test_no_core_universal_answer_on_the_fast_subset(verify):
    """The core family members against every plain-number gold and a quarter of the others."""
    assert _leaks(verify, CORE, fast_golds()) == []


@pytest.mark.slow
def test_no_universal_answer_on_every_shipped_gold(verify):
    """Every family member, in every wrapper, against every distinct shipped gold (minutes)."""
    golds = shipped_golds()
    leaks = []
    for fam, members in FAMILIES.items():
        leaks += [(fam, *x) for x in _leaks(verify, members, golds)]
    for wrapper in WRAPPERS[1:]:
        leaks += [("wrapped", *x) for x in _leaks(verify, CORE, golds, wrapper)]
    assert leaks == []


# ----------------------------------------------------------------------------- generated families

def _sign():
    return st.sampled_from(["", "-", "+", r"\pm", r"\mp"])


def _infinities():
    base = st.sampled_from([r"\infty", "\u221e", r"\infty^\infty", r"e^{\infty}", r"\infty^{2}", r"\sqrt{\infty}",
                            r"\frac{\infty}{{k}}", r"{k}\infty", r"\infty + {k}", r"\infty - {k}", r"\infty \cdot {k}",
                            r"{k}^{\infty}", r"\infty^{{k}}", r"\log \infty", r"\infty!"])
    return st.builds(lambda s, b, k: s + b.replace("{k}", str(k)), _sign(), base, st.integers(2, 99))


def _magnitudes():
    exp = st.integers(401, 5000)
    mant = st.sampled_from(["1", "9.99", "2.5", "7", "3.14159"])
    spelled = st.sampled_from(["{m} \\times 10^{{{e}}}", "{m}e{e}", "10^{{{e}}}", "{m} \\cdot 10^{{{e}}}", "\\frac{{1}}{{10^{{{e}}}}}",
                               "10^{{{e}}}\\sqrt{{2}}", "2^{{{e}}}"])
    return st.builds(lambda s, sp, m, e, neg: s + sp.format(m=m, e=("-" if neg else "") + str(e)),
                     st.sampled_from(["", "-"]), spelled, mant, exp, st.booleans())


def _indeterminate():
    a = st.sampled_from(["0", r"\infty", "-\\infty"])
    form = st.sampled_from([r"\frac{{{a}}}{{{b}}}", "{a}/{b}", "{a} - {b}", r"{a} \cdot {b}", "{a}^{{{b}}}"])

    def build(f, x, y):
        return f.format(a=x, b=y)

    forms = st.builds(build, form, a, a).filter(lambda s: ("infty" in s or "/0" in s or "{0}" in s)
                                               and s not in (r"\infty \cdot \infty", r"\infty^{\infty}"))
    return st.one_of(forms, st.sampled_from(FAMILIES["indeterminate"]))


def _words():
    subject = st.sampled_from(["all real numbers", "any real number", "every integer", "none", "no solution", "any",
                               "all values", "infinitely many", "undefined", "it does not exist", "all of the above"])
    frame = st.sampled_from(["{}", r"\text{{{}}}", "The answer is {}.", "It is {}", r"x \text{{ is }} \text{{{}}}"])
    return st.builds(lambda f, s: f.format(s), frame, subject)


def _variables():
    name = st.sampled_from(["x", "y", "n", "k", "a", "b", "t", "m", "p", "q", r"\theta", r"\alpha", "N", "X"])
    form = st.sampled_from(["{v}", "{v}^{{2}}", r"\sqrt{{{v}}}", r"\frac{{1}}{{{v}}}", "2{v}", "{v}+1", "{v}_{{1}}", "f({v})"])
    return st.builds(lambda f, v: f.format(v=v), form, name)


def _sets():
    return st.one_of(st.sampled_from(FAMILIES["sets"]),
                     st.builds(lambda a: f"(-\\infty, {a}) \\cup ({a}, \\infty)", st.integers(-9, 9)))


@pytest.mark.parametrize("family", [_infinities, _magnitudes, _indeterminate, _words, _variables, _sets],
                         ids=["infinities", "magnitudes", "indeterminate", "words", "variables", "sets"])
def test_generated_universal_answers_earn_nothing(verify, family):
    golds = fast_golds()

    @PROPERTY
    @given(answer=family(), gold=st.sampled_from(golds), wrapper=st.sampled_from(WRAPPERS))
    def prop(answer, gold, wrapper):
        v = verify(wrapper.format(answer), gold)
        assert not v.correct or _same_answer(answer, gold), (answer, gold, v)

    prop()


# ----------------------------------------------------------------------------- true equals still match

@pytest.mark.parametrize("gold, equal, different", [
    (r"(-\infty, 3]", [r"(-\infty,3]", r"x \le 3", r"\left(-\infty, 3\right]", "(-\u221e, 3]"],
     [r"(-\infty, 3)", r"[3,\infty)", r"\infty", r"\mathbb{R}", "3"]),
    (r"(-\infty, 0]", [r"(-\infty,0]", r"x \leq 0"], [r"(-\infty,0)", "0", r"-\infty"]),
    (r"(2,\infty)", [r"(2, \infty)", "x > 2"], [r"[2,\infty)", r"\infty", "2"]),
    (r"(-\infty, 2) \cup (3, \infty)", [r"(-\infty,2)\cup(3,\infty)", r"(3,\infty)\cup(-\infty,2)"],
     [r"(-\infty, \infty)", r"\mathbb{R}", r"(2,3)"]),
    (r"\infty", [r"\infty", r"+\infty", "\u221e", r"\infty^\infty", r"e^{\infty}"], [r"-\infty", "9", r"10^{1000}", r"\frac{0}{0}"]),
    (r"-\infty", [r"-\infty", "-\u221e"], [r"\infty", r"-10^{1000}"]),
    (r"\emptyset", [r"\varnothing", r"\{\}", r"\emptyset"], ["0", r"\mathbb{R}", r"\{0\}"]),
    (r"\mathbb{R}", [r"(-\infty,\infty)", r"\mathbb{R}"], [r"(-\infty, 0]", r"\emptyset", "x"]),
    (r"10^{1000}", [r"10^{1000}", "1e1000"], [r"\infty", r"10^{999}", r"10^{1000}+1"]),
    ("0", ["0", "0.0", r"\frac{0}{5}", "-0"], [r"10^{-1000}", "1e-308", r"0\cdot\infty", r"\frac{1}{\infty}", "0.0000001"]),
])
def test_golds_that_are_intervals_sets_or_infinities_match_their_true_equals(verify, gold, equal, different):
    for answer in equal:
        v = verify(f"The answer is $\\boxed{{{answer}}}$.", gold)
        assert v.correct, (answer, gold, v)
    for answer in different:
        v = verify(f"The answer is $\\boxed{{{answer}}}$.", gold)
        assert not v.correct, (answer, gold, v)


# ----------------------------------------------------------------------------- hash-seed independence

_SEED_SCRIPT = """
import json, sys
from rlvr.verifiers.math.compare import symbolic_compare
golds, answers = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps([[g, a] for g in golds for a in answers if symbolic_compare(g, a)[0]]))
"""


def test_symbolic_verdicts_on_infinity_do_not_depend_on_the_hash_seed():
    """sympy's simplify(14/3 - oo**oo) is 0 under some PYTHONHASHSEEDs: math-verify then
    called ``\\infty^\\infty`` equal to a tenth of all golds, a different tenth per process."""
    golds = [g for g in shipped_golds() if to_number(clean(g)) is not None][:40]
    answers = [r"\infty^\infty", r"\{\infty^\infty\}", r"\infty^{\infty}+1"]
    env = dict(os.environ, PYTHONPATH=str(SRC), OMP_NUM_THREADS="1")
    for seed in ("1", "4", "7"):
        out = subprocess.run([sys.executable, "-c", _SEED_SCRIPT, json.dumps([clean(g) for g in golds]),
                              json.dumps(answers)], env=dict(env, PYTHONHASHSEED=seed),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [], seed


# ----------------------------------------------------------------------------- found by the gold sweeps

@pytest.mark.parametrize("answer, gold, ok", [
    (r"\{x \mid x > 0\}", "0", False),  # math-verify's expression fallback read a number out of it
    (r"5x - 7y + 11z + 4 = 0", "0", False),  # a plane equation states no value
    (r"2x + 3 = 0", "0", False), ("x = 0", "0", True), ("f(2) = 0", "0", True), ("a + b = 7", "7", True),
    ("40_9", "40", False), ("44_9", "40", True), ("40", "40_9", True), ("36", "40_9", False),
    ("52_{8}", "52_8", True), ("42", "52_8", False), ("4210_5", r"4210_{5}", True),
    (r"24 \equiv 3 \pmod{7}", "3", True), (r"3 \pmod{7}", "3", True), (r"5 \pmod{7}", "3", False),
    (r"10^{1000}+1", r"10^{1000}", False), (r"2 \cdot 10^{-50}", r"10^{-50}", False),
    (r"\infty^0", "1", False), (r"1^\infty", "1", False), (r"\frac{1}{\infty}", "0", False),
])
def test_values_found_by_the_gold_sweeps(verify, answer, gold, ok):
    v = verify(f"The answer is $\\boxed{{{answer}}}$.", gold)
    assert v.correct == ok, (answer, gold, v)
