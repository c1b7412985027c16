"""The ``smt`` verifier: logical equivalence with the gold formula, decided by Z3."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.verifiers import get_verifier

pytest.importorskip("z3")  # the formal extra (installed with dev)

DECLS = "(declare-fun P (Int) Bool)(declare-fun Q (Int) Bool)(declare-fun p () Bool)(declare-fun q () Bool)"
ALL_P_Q = "(forall ((x Int)) (=> (P x) (Q x)))"


def _ref(formula: str) -> str:
    return json.dumps({"declarations": DECLS, "formula": formula})


@pytest.mark.parametrize("answer, score, reason", [
    ("\\boxed{(forall ((y Int)) (or (not (P y)) (Q y)))}", 1.0, "equivalent"),          # renamed, rewritten
    ("```smt\n(not (exists ((x Int)) (and (P x) (not (Q x)))))\n```", 1.0, "equivalent"),  # by duality
    ("\\boxed{(forall ((x Int)) (=> (Q x) (P x)))}", 0.0, "not equivalent"),             # the converse
    ("\\boxed{true}", 0.0, "not equivalent"),                                           # a tautology
    ("\\boxed{(and (forall ((x Int)) (=> (P x) (Q x))) false)}", 0.0, "not equivalent"),
    ("\\boxed{(P 1)) (assert true}", 0.0, "command"),                                   # a smuggled assertion
    ("\\boxed{(P 1)) (P 2}", 0.0, "not a formula"),
    ("\\boxed{(R 1)}", 0.0, "unknown constant"),                                        # undeclared
    ("\\boxed{(+ 1 2)}", 0.0, "not a formula"),                                         # not Boolean
    ("no formula", 0.0, "no ```smt block"),
])
def test_equivalence_by_hand(answer, score, reason):
    verdict = get_verifier("smt")(answer, _ref(ALL_P_Q))
    assert verdict.score == score and reason in verdict.reason


_ATOMS = st.sampled_from(["p", "q"])
_FORMULAS = st.recursive(_ATOMS, lambda f: st.one_of(
    st.tuples(st.just("not"), f).map(lambda t: f"(not {t[1]})"),
    st.tuples(st.sampled_from(["and", "or", "=>"]), f, f).map(lambda t: f"({t[0]} {t[1]} {t[2]})")), max_leaves=6)


def _truth(formula: str, p: bool, q: bool) -> bool:
    """Our own evaluator of the generated propositional formulas (the independent reference)."""
    import re

    tokens = re.findall(r"\(|\)|[^\s()]+", formula)

    def parse(i):
        if tokens[i] != "(":
            return {"p": p, "q": q}[tokens[i]], i + 1
        op, i = tokens[i + 1], i + 2
        args = []
        while tokens[i] != ")":
            v, i = parse(i)
            args.append(v)
        return {"not": lambda a: not a[0], "and": lambda a: a[0] and a[1], "or": lambda a: a[0] or a[1],
                "=>": lambda a: (not a[0]) or a[1]}[op](args), i + 1

    return parse(0)[0]


@settings(max_examples=60, deadline=None)
@given(gold=_FORMULAS, answer=_FORMULAS)
def test_a_formula_earns_exactly_when_its_truth_table_is_the_golds(gold, answer):
    """Property: over generated propositional formulas, the verdict is 1 exactly when both formulas have the same
    truth table (checked by our own evaluator over the four assignments)."""
    same = all(_truth(gold, p, q) == _truth(answer, p, q) for p in (False, True) for q in (False, True))
    assert get_verifier("smt")(f"\\boxed{{{answer}}}", _ref(gold)).score == float(same)


def test_a_bad_reference_or_option_is_an_error():
    with pytest.raises(ValueError, match="reference is JSON"):
        get_verifier("smt")("\\boxed{p}", "p")
    with pytest.raises(ValueError, match="timeout_ms must be"):
        get_verifier("smt", timeout_ms=0)
