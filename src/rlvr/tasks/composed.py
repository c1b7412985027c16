"""Long-horizon composed problems (R-Horizon): a chain of arithmetic problems, each using the previous answer.

Lu et al. 2025 ("R-Horizon: How Far Can Your Large Reasoning Model Really Go in Breadth and Depth?", arXiv
2510.08189) compose ``n`` problems into one query whose problem ``j`` depends on the answer of problem ``j - 1``
(a key number of problem ``j`` is replaced by an expression of that answer), so a response is right only when
every link is; training RL on such composed queries improves long-horizon reasoning.  Here the links are
generated, not rewritten: problem 1 is an arithmetic expression of ``num_operands`` integers; problem ``j``'s
first operand is ``A_{j-1}`` (the previous answer), followed by ``num_operands - 1`` fresh operands and
operators.  The reference answer is the last problem's value, which depends on every earlier one; the worked
solution (for guidance) evaluates the chain link by link.  Train and held-out queries never share a chain.
"""

from __future__ import annotations

import random

from rlvr.tasks.arithmetic import OPERATORS, evaluate_expression, format_expression
from rlvr.types import Problem

__all__ = ["composed_problem", "composed_split", "check_composed", "PROMPT"]

PROMPT = ("Solve the problems in order; each uses the answer of the one before.\n{problems}\n"
          "Put the answer of Problem {last} in \\boxed{{}}.")
"""The query: ``{problems}`` is one line per problem, ``{last}`` the last problem's number."""


def composed_problem(chain: list[tuple[list[int], list[str]]], tag: str) -> Problem:
    """The query of ``chain`` (per link: its fresh operands and its operators; link 1 has one operand more).

    Link ``j > 1`` reads ``A_{j-1} op x op y ...`` with ``A_{j-1}`` the answer of problem ``j - 1``."""
    lines, steps, value, key = [], [], None, []
    for j, (operands, ops) in enumerate(chain, start=1):
        if j == 1:
            full, shown = list(operands), format_expression(operands, ops)
        else:
            full = [value, *operands]
            shown = format_expression([0, *operands], ops).replace("0", f"A{j - 1}", 1)
        value = evaluate_expression(full, ops)
        lines.append(f"Problem {j}: A{j} = {shown}.")
        steps.append(f"A{j} = {format_expression(full, ops)} = {value}.")
        key.append(f"{shown}")
    n = len(chain)
    return Problem(f"chain-{tag}-" + "|".join(key).replace(" ", ""), prompt=PROMPT.format(problems="\n".join(lines),
                                                                                           last=n),
                   answer=str(value), metadata={"horizon": n, "solution": " ".join(steps)
                                                + f" The answer is \\boxed{{{value}}}."})


def check_composed(horizon: int, num_operands: int, min_value: int, max_value: int, operators: list[str],
                   num_train: int, num_heldout: int) -> None:
    """ValueError naming the option when the chains cannot be built (checked when the config loads)."""
    if not 2 <= horizon <= 16:
        raise ValueError(f"horizon must be in [2, 16], got {horizon}")
    if num_operands < 2:
        raise ValueError(f"num_operands must be >= 2, got {num_operands}")
    if min_value > max_value:
        raise ValueError(f"min_value ({min_value}) must be <= max_value ({max_value})")
    bad = [op for op in operators if op not in OPERATORS]
    if not operators or bad:
        raise ValueError(f"operators must be a non-empty subset of {' '.join(OPERATORS)}, got {operators}")
    space = (max_value - min_value + 1) ** (num_operands + (horizon - 1) * (num_operands - 1)) \
        * len(operators) ** (horizon * (num_operands - 1))
    if num_train + num_heldout > space // 2:
        raise ValueError(f"{num_train + num_heldout} chains asked of a space of {space}; widen the values or "
                         f"add operands")


def composed_split(horizon: int, num_operands: int, min_value: int, max_value: int, operators: list[str],
                   num_train: int, num_heldout: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """Seeded ``(train, held_out)`` lists of distinct chains (held-out drawn first)."""
    check_composed(horizon, num_operands, min_value, max_value, operators, num_train, num_heldout)
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Problem] = []
    while len(out) < num_heldout + num_train:
        chain = []
        for j in range(horizon):
            k = num_operands if j == 0 else num_operands - 1
            chain.append(([rng.randint(min_value, max_value) for _ in range(k)],
                          [rng.choice(operators) for _ in range(num_operands - 1)]))
        p = composed_problem(chain, "heldout" if len(out) < num_heldout else "train")
        key = p.prompt
        if key in seen:
            continue
        seen.add(key)
        out.append(p)
    return out[num_heldout:], out[:num_heldout]
