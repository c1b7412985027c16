"""Formal answers by logical equivalence: the completion's formula against the reference's, decided by Z3.

Natural-language to first-order-logic translation is scored by *logical equivalence* with the gold formula
(LogicLLaMA, Yang et al. 2023, "Harnessing the Power of Large Language Models for Natural Language to
First-Order Logic Translation", arXiv 2305.15541: the LE metric), not by string match; rewarding RL with a
formal checker is the row's point (Re:Form's Dafny, LogicLLaMA's FOL).  Here the checker is the Z3 SMT solver:
the answer ``F`` earns 1 when ``not (F <=> G)`` is unsatisfiable under the reference's declarations, i.e. ``F``
and the gold ``G`` agree under every interpretation (quantifiers, uninterpreted functions and arithmetic
included, as far as Z3 decides them in ``timeout_ms``; ``unknown`` scores 0).

Extraction -> checks -> comparison, as the other verifiers:

* **extraction**: the last fenced ```smt block (or ```smt2 / ```lisp), else the last ``\\boxed{}``: one SMT-LIB
  term such as ``(forall ((x Int)) (=> (P x) (Q x)))``;
* **checks**: the term is parsed by Z3 inside ``(assert ...)`` after the reference's declarations only, so it
  can name only the declared symbols; anything that is not exactly one Boolean term (unbalanced parentheses,
  which would let text after the term be read as further commands, a command, an undeclared name, a parse
  error) scores 0 with its reason;
* **comparison**: equivalence, by one solver call with a time limit.

The reference is JSON ``{"declarations": "(declare-fun P (Int) Bool) ...", "formula": "<SMT-LIB term>"}``.
"""

from __future__ import annotations

import json
import re

from rlvr.types import Verdict
from rlvr.utils.extras import require_extra
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.numeric import _last_boxed

__all__ = ["smt_verifier", "extract_formula", "MISSING"]

MISSING = "the smt verifier needs Z3: pip install 'rlvr[formal]'"

_FENCE = re.compile(r"```[ \t]*(?:smt2?|lisp)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_COMMANDS = re.compile(r"\(\s*(?:assert|declare-|define-|set-|get-|push|pop|check-sat|reset|exit|echo|eval|"
                       r"simplify|include)", re.IGNORECASE)


def extract_formula(completion: str) -> str | None:
    """The last fenced smt block's text, else the last box's, stripped; None when neither."""
    blocks = _FENCE.findall(completion or "")
    text = blocks[-1] if blocks else _last_boxed(completion or "")
    text = (text or "").strip()
    return text or None


def _balanced(term: str) -> bool:
    """Parentheses that close in order and all close (outside ``|quoted symbols|`` and ``"strings"``): one term,
    never a term followed by more input that Z3 would read as further commands."""
    depth, quote = 0, None
    for ch in term:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "|\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and quote is None


def _parse(z3, declarations: str, term: str):
    """The one Boolean term ``term`` under ``declarations`` (ValueError with the reason otherwise)."""
    try:
        parsed = z3.parse_smt2_string(f"{declarations}\n(assert {term})")
    except z3.Z3Exception as e:
        msg = e.value.decode() if isinstance(e.value, bytes) else str(e.value)
        raise ValueError(f"not a formula of the declared symbols: {msg.strip()[:200]}") from None
    if len(parsed) != 1:
        raise ValueError(f"{len(parsed)} assertions where one formula was expected")
    return parsed[0]


@register_verifier("smt")
def smt_verifier(timeout_ms: int = 5000, max_chars: int = 20_000) -> Verifier:
    """1 when the completion's SMT-LIB formula is logically equivalent to the reference's (Z3); see the module doc."""
    if not (isinstance(timeout_ms, int) and timeout_ms >= 1):
        raise ValueError(f"smt verifier: timeout_ms must be an integer >= 1, got {timeout_ms!r}")
    if not (isinstance(max_chars, int) and max_chars >= 1):
        raise ValueError(f"smt verifier: max_chars must be an integer >= 1, got {max_chars!r}")

    def verify(completion: str, reference: str) -> Verdict:
        try:
            ref = json.loads(reference)
        except (TypeError, ValueError):
            ref = None
        if not (isinstance(ref, dict) and isinstance(ref.get("formula"), str)
                and isinstance(ref.get("declarations", ""), str)):
            raise ValueError('the smt verifier\'s reference is JSON {"declarations": ..., "formula": ...}')
        z3 = require_extra("z3", MISSING)
        term = extract_formula(completion)
        if term is None:
            return Verdict(0.0, None, reason="no ```smt block or box")
        if len(term) > max_chars:
            return Verdict(0.0, term[:80], reason=f"formula longer than {max_chars} characters")
        if _COMMANDS.search(term):
            return Verdict(0.0, term, reason="an SMT-LIB command inside the formula")
        if not _balanced(term):
            return Verdict(0.0, term, reason="not a formula: unbalanced parentheses")
        decls = ref.get("declarations", "")
        gold = _parse(z3, decls, ref["formula"])
        try:
            got = _parse(z3, decls, term)
        except ValueError as e:
            return Verdict(0.0, term, reason=str(e))
        if not z3.is_bool(got):
            return Verdict(0.0, term, reason="not a Boolean formula")
        solver = z3.Solver()
        solver.set("timeout", timeout_ms)
        solver.add(z3.Not(got == gold))
        result = solver.check()
        if result == z3.unsat:
            return Verdict(1.0, term, reason="equivalent")
        if result == z3.sat:
            return Verdict(0.0, term, reason="not equivalent")
        return Verdict(0.0, term, reason=f"undecided within {timeout_ms} ms")

    return verify
