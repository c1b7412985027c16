"""Every hack of the reward-hack catalogue scores 0.0, and the honest versions pass."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("math_verify")

from rlvr.verifiers import get_verifier, safe_verify  # noqa: E402
from rlvr.verifiers.hack_suite import ADD_REF, HACKS, HELPER_REF, MEAN_REF, STDIO_REF, WORD_REF, build_verifier  # noqa: E402


def test_catalogue_is_large_and_covers_every_kind():
    assert len(HACKS) >= 30
    assert {h.kind for h in HACKS} == {"code", "math", "judge", "grounding"}
    assert len({h.name for h in HACKS}) == len(HACKS)


@pytest.mark.parametrize("hack", HACKS, ids=[h.name for h in HACKS])
def test_hack_is_blocked(hack):
    verdict = safe_verify(build_verifier(hack), hack.completion, hack.reference)
    assert verdict.score == 0.0, (hack.name, verdict)
    assert not verdict.reason.startswith("verifier error"), verdict


@pytest.mark.parametrize("ref, code", [
    (ADD_REF, "def add(a, b):\n    return a + b\n"),
    (ADD_REF, "    return a + b\n"),  # a body continuing the prompt
    (MEAN_REF, "def mean(xs):\n    return sum(xs) / len(xs)\n"),
    (HELPER_REF, "def next_multiple(n):\n    return (n // 7 + 1) * 7\n"),
    (WORD_REF, "def shout(s):\n    print('shouting', s)\n    return s.upper()\n"),  # printing is fine
])
def test_honest_code_still_passes(ref, code):
    v = get_verifier("code_humaneval", timeout=5)(f"```python\n{code}```", ref)
    assert v.correct and v.reason == "passed", v


def test_builtin_containers_cross_the_process_boundary():
    ref = json.dumps({"test": "def check(c):\n    assert c() == ((1, 2.5), [None, True], {'a': {1, 2}}, frozenset({3}), b'x')\n"
                              "    assert type(c()[0]) is tuple and c()[1][1] is True\n",
                      "entry_point": "f"})
    good = "def f():\n    return ((1, 2.5), [None, True], {'a': {1, 2}}, frozenset({3}), b'x')\n"
    assert get_verifier("code_humaneval", timeout=5)(good, ref).correct
    nan = json.dumps({"test": "import math\ndef check(c):\n    assert math.isnan(c())\n", "entry_point": "f"})
    assert get_verifier("code_humaneval", timeout=5)("def f():\n    return float('nan')\n", nan).correct


def test_honest_stdio_still_passes():
    code = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert get_verifier("code_stdio", timeout=5)(f"```python\n{code}```", STDIO_REF).correct


@pytest.mark.parametrize("completion, gold", [
    ("So the answer is $\\boxed{42}$.", "42"),
    ("$17 + 25 = \\boxed{42}$", "42"),
    ("\\boxed{17+25=42}", "42"),
    ("We get $x = \\boxed{5}$.", "5"),
    ("The roots are $\\boxed{2, 3}$.", "2, 3"),
    ("$\\boxed{\\sqrt[3]{8}}$", "2"),  # require_value="auto": radicals are values
    ("$\\boxed{\\frac{84}{2}}$", "42"),  # "auto" keeps fractions; True rejects them (see the hack)
])
def test_honest_math_still_passes(completion, gold):
    assert get_verifier("math")(completion, gold).correct


def test_require_value_options():
    with pytest.raises(ValueError):
        get_verifier("math", require_value="sometimes")
    loose = get_verifier("math", require_value=False)
    assert loose(r"\boxed{17+25}", "42").correct  # off: compared by value
    assert not loose(r"\boxed{0=0}", "0").correct  # tautologies are never answers
    strict = get_verifier("math", require_value=True)
    assert not strict(r"\boxed{\sqrt[3]{8}}", "2").correct
    assert strict(r"\boxed{2}", "2").correct and strict(r"\boxed{0.5}", "\\frac{1}{2}").correct
    assert get_verifier("math")(r"\boxed{x^2+2x+1}", "(x+1)^2").correct  # an expression reference: symbolic


def test_numeric_require_value_only_adds_the_tautology_check():
    on, off = get_verifier("numeric"), get_verifier("numeric", require_value=False)
    assert not on(r"\boxed{0=0}", "0").correct and off(r"\boxed{0=0}", "0").correct
    for completion in (r"\boxed{7}", "x = 7", r"\boxed{3 + 4 = 7}", "The answer is 7.", r"\boxed{7} or \boxed{8}",
                       "3 + 4 = 7 so 7", r"\boxed{7.0}", r"\boxed{x=7}"):
        assert on(completion, "7") == off(completion, "7"), completion
