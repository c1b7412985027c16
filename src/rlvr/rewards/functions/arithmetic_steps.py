"""The ``arithmetic_steps`` reward function: the share of a completion's written calculations that are right."""

from __future__ import annotations

import ast
import re
from typing import Callable

from rlvr.rewards.rubric import reward_function

__all__ = ["arithmetic_steps_reward", "calculations", "evaluate", "calculation_step_labels"]

_RESULT = re.compile(r"=\s*(-?\d+(?:\.\d+)?)(?![\d.]*\d)")
"""A stated result: ``= <number>``, not followed by more of a number."""
_TAIL = re.compile(r"[0-9 +\-*/×÷().]*$")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[+\-*/×÷()]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b}
MAX_DIGITS = 30
"""Numbers longer than this are not read (a calculation with one is not counted)."""


def evaluate(expression: str) -> float | None:
    """The value of an expression of numbers, ``+ - * /`` (``×``, ``÷``) and parentheses, or None when it is not
    one (anything else, a number over :data:`MAX_DIGITS` digits, division by zero).  Parsed by Python's ``ast``
    into number and operator nodes only: nothing is executed."""
    text = expression.replace("×", "*").replace("÷", "/")
    if re.search(r"\d{%d,}" % (MAX_DIGITS + 1), text):
        return None
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        return None

    def walk(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = walk(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError("not arithmetic")

    try:
        return float(walk(tree))
    except (ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def calculations(text: str) -> list[tuple[str, str, bool]]:
    """Every written calculation ``<expression with an operator> = <number>`` of ``text``: (expression, stated
    result, whether the expression's value equals it).

    The expression is the longest well-formed arithmetic run just before the ``=`` (within the text since the
    previous stated result; a run that starts with an operator continues from that result, so the chain
    ``3 + 4 = 7 + 2 = 9`` is two calculations, ``3 + 4`` and ``7 + 2``).  A number glued to a word (``x2``) does
    not start one; ``x = 5`` or ``12 = 12`` (no operator) is not a calculation; thousands separators are read."""
    t = _THOUSANDS.sub("", text or "")
    out, prev_end, prev_result = [], 0, None
    for m in _RESULT.finditer(t):
        left = t[prev_end:m.start()]
        tail = _TAIL.search(left).group(0)
        before = left[:len(left) - len(tail)]
        glued = bool(before) and (before[-1].isalnum() or before[-1] == "_")
        if prev_result is not None and not before and re.match(r"\s*[+\-*/×÷]", tail):
            tail, glued = prev_result + tail, False  # the chain goes on from the last result
        for k, tok in enumerate(_TOKEN.finditer(tail)):
            if k == 0 and glued and tok.start() == 0:
                continue
            expr = tail[tok.start():].strip()
            if expr[0] in "+*/×÷)" or not re.search(r"[\d)]\s*[+\-*/×÷]\s*[-\d(]", expr):
                continue
            value = evaluate(expr)
            if value is None:
                continue
            want = float(m.group(1))
            out.append((expr, m.group(1), abs(value - want) <= 1e-9 * max(1.0, abs(want))))
            break
        prev_end, prev_result = m.end(), m.group(1)
    return out


def calculation_step_labels(steps: list[str]) -> list[float]:
    """Process labels of ``steps`` from checking their calculations (FoVer's idea, step labels from a formal checker
    rather than sampled continuations): 1 for each step before the first step that writes a wrong calculation, 0
    for that step and every later one (an error is not undone by later steps: the first-error labelling of
    PRM800K and ProcessBench).  Steps without a calculation take their place in that order."""
    out, wrong = [], False
    for step in steps:
        wrong = wrong or any(not ok for *_, ok in calculations(step))
        out.append(0.0 if wrong else 1.0)
    return out


@reward_function("arithmetic_steps", tags={"bounded"})
def arithmetic_steps_reward(empty: float = 0.0, max_chars: int = 100_000) -> Callable[..., float]:
    """A rule-verifiable step reward: the share of the completion's calculations whose stated result is right.

    Each ``a op b ... = c`` the completion writes is a step a rule can check (no model, no sampling): this
    function returns ``#right / #calculations`` (``empty`` when there is none, so writing no work is not paid
    unless asked).  It is the rule-checked form of the literature map's stepwise rewards (VSRM rewards a step by
    the accuracy gain of answering from its prefix, which needs sampling; here the step itself is verified).  As a
    rubric term beside the verifier, it penalises wrong intermediate arithmetic even when the final answer
    happens to be right; a completion stuffed with trivial true equations is bounded by the weight and is not
    paid for the answer, which only the verifier pays.
    """
    if not -1.0 <= empty <= 1.0:
        raise ValueError(f"empty must be in [-1, 1], got {empty!r}")

    def score(completion: str) -> float:
        if not isinstance(completion, str) or len(completion) > max_chars:
            return empty
        found = calculations(completion)
        return sum(ok for *_, ok in found) / len(found) if found else empty

    return score
