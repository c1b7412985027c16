"""Procedurally generated integer arithmetic problems with exact answers.

An expression is ``num_operands`` integers drawn uniformly from
``[min_value, max_value]`` joined by operators drawn from ``operators``, e.g.
``12 + 7 * 3``.  The answer is computed from the operand list with ordinary
precedence (``*`` before ``+``/``-``, left to right otherwise) using Python
integers; nothing is ever ``eval``-ed.

:func:`arithmetic_split` returns seeded, reproducible train and held-out lists that
never share an expression.  The held-out problems are drawn first, so they do not
change when only ``n_train`` changes, and a larger ``n_train`` extends a smaller
one.  Spaces of up to :data:`ENUMERATE_LIMIT` expressions are enumerated and
shuffled; larger ones are sampled with rejection of repeats.  Either way the
requested counts are checked against the number of distinct expressions.
"""

from __future__ import annotations

import itertools
import random
import string
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

from rlvr.types import Problem

__all__ = [
    "OPERATORS",
    "DEFAULT_TEMPLATE",
    "ArithmeticSpec",
    "check_template",
    "evaluate_expression",
    "format_expression",
    "worked_solution",
    "make_arithmetic_problem",
    "arithmetic_split",
]

OPERATORS = ("+", "-", "*")
"""Operators the generator knows."""

DEFAULT_TEMPLATE = "What is {expression}? Put the final answer in \\boxed{{}}."
"""Prompt template: a ``str.format`` string with one ``{expression}`` field."""

ENUMERATE_LIMIT = 100_000
"""Expression spaces up to this size are enumerated and shuffled instead of sampled."""

_MAX_CONSECUTIVE_REJECTIONS = 200_000


@dataclass(frozen=True)
class ArithmeticSpec:
    """What expressions to generate.

    ``operators`` is a subset of ``+ - *`` (duplicates are dropped); with
    ``allow_negative_results=False`` expressions whose value is negative are
    never produced.
    """

    num_operands: int = 2
    min_value: int = 1
    max_value: int = 50
    operators: tuple[str, ...] = ("+",)
    allow_negative_results: bool = True

    def __post_init__(self) -> None:
        for name in ("num_operands", "min_value", "max_value"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"ArithmeticSpec.{name} must be an int, got {value!r}")
        if self.num_operands < 2:
            raise ValueError(f"ArithmeticSpec.num_operands must be >= 2, got {self.num_operands}")
        if self.min_value > self.max_value:
            raise ValueError(f"ArithmeticSpec.min_value ({self.min_value}) must be <= max_value ({self.max_value})")
        ops = tuple(dict.fromkeys(self.operators))  # keeps order, drops duplicates
        if not ops:
            raise ValueError("ArithmeticSpec.operators must not be empty")
        unknown = [op for op in ops if op not in OPERATORS]
        if unknown:
            raise ValueError(f"ArithmeticSpec.operators may only contain {' '.join(OPERATORS)}; got {unknown}")
        object.__setattr__(self, "operators", ops)

    @property
    def num_values(self) -> int:
        """How many distinct operand values there are."""
        return self.max_value - self.min_value + 1

    @property
    def num_expressions(self) -> int:
        """How many distinct expressions the spec allows (before any sign filter)."""
        return self.num_values ** self.num_operands * len(self.operators) ** (self.num_operands - 1)


def evaluate_expression(operands: Sequence[int], operators: Sequence[str]) -> int:
    """Exact value of ``operands[0] op[0] operands[1] op[1] ...`` with ``*`` binding tighter.

    >>> evaluate_expression([2, 3, 4], ["+", "*"])
    14
    """
    if len(operators) != len(operands) - 1:
        raise ValueError(f"{len(operands)} operands need {len(operands) - 1} operators, got {len(operators)}")
    total = 0
    sign = 1
    term = operands[0]
    for op, x in zip(operators, operands[1:]):
        if op == "*":
            term *= x
        elif op in ("+", "-"):
            total += sign * term
            sign = 1 if op == "+" else -1
            term = x
        else:
            raise ValueError(f"unknown operator {op!r}")
    return total + sign * term


def format_expression(operands: Sequence[int], operators: Sequence[str]) -> str:
    """Canonical text of an expression, e.g. ``"12 + 7 * 3"``; negative operands in parentheses."""
    parts = [_fmt_operand(operands[0])]
    for op, x in zip(operators, operands[1:]):
        parts += [op, _fmt_operand(x)]
    return " ".join(parts)


def _fmt_operand(x: int) -> str:
    return str(x) if x >= 0 else f"({x})"


def worked_solution(operands: Sequence[int], operators: Sequence[str]) -> str:
    """A short templated solution: one operation at a time (``*`` first, then left to right), then the boxed value.

    >>> worked_solution([2, 3, 4], ["+", "*"])
    '2 + 3 * 4 = 2 + 12 = 14. The answer is \\\\boxed{14}.'

    Deterministic and draws no random numbers (it goes into ``Problem.metadata["solution"]``, the
    reference solution of guidance: :mod:`rlvr.rollout.guidance`).
    """
    nums, ops = list(operands), list(operators)
    chain = [format_expression(nums, ops)]
    while ops:
        i = ops.index("*") if "*" in ops else 0
        a, b, op = nums[i], nums[i + 1], ops[i]
        nums[i:i + 2] = [a * b if op == "*" else a + b if op == "+" else a - b]
        del ops[i]
        chain.append(format_expression(nums, ops))
    return f"{' = '.join(chain)}. The answer is \\boxed{{{nums[0]}}}."


def check_template(template: str) -> None:
    """Raise ValueError unless ``template`` is a format string whose only field is ``{expression}``."""
    if not isinstance(template, str):
        raise ValueError(f"template must be a string, got {type(template).__name__}")
    hint = "literal braces are written {{ and }}, e.g. \\boxed{{}}"
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as e:
        raise ValueError(f"bad prompt template {template!r}: {e} ({hint})") from e
    if set(fields) != {"expression"}:
        raise ValueError(f"prompt template must use only the field {{expression}}; {template!r} has "
                         f"{sorted(set(fields)) or 'none'} ({hint})")
    try:
        template.format(expression="1 + 1")
    except (ValueError, KeyError, IndexError, AttributeError) as e:
        raise ValueError(f"bad prompt template {template!r}: {e} ({hint})") from e


def _decode(index: int, spec: ArithmeticSpec) -> tuple[list[int], list[str]]:
    """The expression number ``index`` (0 <= index < spec.num_expressions), in mixed radix."""
    n_vals, n_ops = spec.num_values, len(spec.operators)
    operands, operators = [], []
    for _ in range(spec.num_operands):
        index, v = divmod(index, n_vals)
        operands.append(spec.min_value + v)
    for _ in range(spec.num_operands - 1):
        index, o = divmod(index, n_ops)
        operators.append(spec.operators[o])
    return operands, operators


def _acceptable(index: int, spec: ArithmeticSpec) -> bool:
    if spec.allow_negative_results:
        return True
    return evaluate_expression(*_decode(index, spec)) >= 0


def _build_problem(operands: list[int], operators: list[str], spec: ArithmeticSpec, template: str) -> Problem:
    expression = format_expression(operands, operators)
    spec_fields = asdict(spec)
    spec_fields["operators"] = list(spec.operators)
    return Problem(
        id="arith-" + expression.replace(" ", ""),
        prompt=template.format(expression=expression),
        answer=str(evaluate_expression(operands, operators)),
        metadata={"expression": expression, "operands": list(operands), "operators": list(operators),
                  "spec": spec_fields, "solution": worked_solution(operands, operators)},
    )


def make_arithmetic_problem(rng: random.Random, spec: ArithmeticSpec = ArithmeticSpec(),
                            template: str = DEFAULT_TEMPLATE) -> Problem:
    """One random problem drawn uniformly from the spec's expressions, using ``rng``.

    With ``allow_negative_results=False`` draws repeat until the value is >= 0
    (ValueError if that keeps failing, e.g. when no such expression exists).
    """
    check_template(template)
    total = spec.num_expressions
    for _ in range(_MAX_CONSECUTIVE_REJECTIONS):
        index = rng.randrange(total)
        if _acceptable(index, spec):
            return _build_problem(*_decode(index, spec), spec, template)
    raise ValueError(f"no expression with a non-negative result found in {_MAX_CONSECUTIVE_REJECTIONS} draws "
                     f"for {spec}")


def _distinct_indices(rng: random.Random, spec: ArithmeticSpec) -> Iterator[int]:
    """Acceptable expression indices in seeded random order, without repeats.

    Stops when the space is exhausted (enumeration) or when repeats and rejected
    expressions make further progress hopeless (sampling).
    """
    total = spec.num_expressions
    if total <= ENUMERATE_LIMIT:
        order = list(range(total))
        rng.shuffle(order)
        yield from (i for i in order if _acceptable(i, spec))
        return
    seen: set[int] = set()
    misses = 0
    while misses < _MAX_CONSECUTIVE_REJECTIONS:
        i = rng.randrange(total)
        if i in seen or not _acceptable(i, spec):
            misses += 1
            continue
        seen.add(i)
        misses = 0
        yield i


def arithmetic_split(spec: ArithmeticSpec, n_train: int, n_heldout: int, seed: int = 0,
                     template: str = DEFAULT_TEMPLATE) -> tuple[list[Problem], list[Problem]]:
    """Seeded ``(train, held_out)`` problem lists with no expression in common.

    The same arguments always give the same lists.  Held-out problems are drawn
    first, so they depend only on ``spec``, ``n_heldout``, ``seed`` (and the
    template), not on ``n_train``.

    Raises:
        ValueError: bad counts or template, or fewer distinct (acceptable)
            expressions than ``n_train + n_heldout``.
    """
    for name, n in (("n_train", n_train), ("n_heldout", n_heldout)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    check_template(template)
    need = n_train + n_heldout
    total = spec.num_expressions
    if need > total:
        raise ValueError(
            f"the arithmetic spec allows only {total} distinct expressions but n_train + n_heldout = "
            f"{n_train} + {n_heldout} = {need}; widen [min_value, max_value], or add operands or operators "
            f"({spec})")

    indices = list(itertools.islice(_distinct_indices(random.Random(seed), spec), need))
    if len(indices) < need:
        if total <= ENUMERATE_LIMIT:
            detail = f"only {len(indices)} of the {total} expressions have a non-negative result"
        else:
            detail = (f"found only {len(indices)} distinct expressions with a non-negative result before "
                      f"{_MAX_CONSECUTIVE_REJECTIONS} draws in a row failed")
        raise ValueError(f"cannot draw n_train + n_heldout = {need} distinct problems: {detail}; "
                         f"widen the spec or ask for fewer ({spec})")

    problems = [_build_problem(*_decode(i, spec), spec, template) for i in indices]
    return problems[n_heldout:], problems[:n_heldout]
