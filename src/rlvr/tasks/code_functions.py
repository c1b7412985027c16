"""Generated function-writing problems with hidden unit tests (the procedural code task).

A problem is a small program: a chain of ``steps`` primitives over integers, strings
and lists of integers (keep the even numbers, add 3 to each, sort, sum, reverse a
string, count a letter, ...), each step's output type being the next one's input
type.  The policy sees the function's signature, a one-sentence specification
composed from the primitives' phrases and ``num_examples`` visible examples, and
writes the function; the reference is a ``code_humaneval`` test program whose
``check`` runs ``num_tests`` *hidden* cases (inputs disjoint from the visible ones)
and fails with ``f(...) returned X, expected Y`` (or ``f(...) raised E``) at the
first wrong one::

    Write a Python function `nums_evens_add3_sum(xs: list[int]) -> int`.
    nums_evens_add3_sum takes a list of integers `xs`; it should keep only the even numbers,
    then add 3 to each number, then compute the sum of the numbers, and return the result.

    Examples:
    nums_evens_add3_sum([4, 7, 2]) == 12
    nums_evens_add3_sum([1, 6]) == 9

    Answer with the complete function in a ```python code block.

Difficulty: ``steps`` (primitives composed: each program draws its count from
``min_steps..steps``), ``max_len`` (list and string lengths), ``max_int`` (integer
sizes).  A live curriculum moves over any of them, e.g.
``curriculum.levels: [{steps: 1}, {steps: 2}, {steps: 3}]``.

What makes it a fair task:

* **Disjoint splits by construction**: a program (input type, primitives and their
  constants) is held out iff the hash of its canonical text falls in the held-out
  share (:func:`is_heldout_program`), whatever the seed, counts or difficulty, so no
  held-out program is ever trained on, only new inputs of training programs;
* **hidden tests**: the hidden inputs never include a visible one, and for any
  constant output and for the input itself at least ``reveal_safe + 1`` hidden
  cases disagree, so a function that returns the visible examples' outputs for the
  visible inputs and any constant or the input itself otherwise fails
  (:func:`hardcoded_completion` is that hack) -- even after execution feedback
  (``env.name=code_feedback``) has shown it ``reveal_safe`` failing hidden cases to
  add to its table, one per failed attempt;
* **determinism**: the problems are a function of the options alone (string-seeded
  :class:`random.Random` streams, one per split), the held-out problems do not move
  when ``num_train`` changes.

Each problem's ``metadata["solution"]`` is a reference solution in a ```python block
(used by guidance; it passes its own tests).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from rlvr.types import Problem

__all__ = ["CodeFunctionsParams", "PRIMITIVES", "Primitive", "Program", "code_function_problems",
           "is_heldout_program", "hardcoded_completion", "check_params", "INSTRUCTION"]

INSTRUCTION = "Answer with the complete function in a ```python code block."
"""The last line of every prompt."""

_ARG = {"list": "xs", "int": "n", "str": "s"}
_ANNOT = {"list": "list[int]", "int": "int", "str": "str"}
_DESC = {"list": "a list of integers", "int": "an integer", "str": "a string"}
_NAME_HEAD = {"list": "nums", "int": "num", "str": "word"}
_LETTERS = "abcdeilmnorstu"
_VOWELS = "aeiou"
_MAX_OUTPUT = 200
"""Longest list or string (and largest number of digits) an output may have."""


@dataclass(frozen=True)
class Primitive:
    """One step: ``fn(value, k)`` from ``src`` to ``dst`` ("int", "str", "list"), written as ``expr``
    (``{v}`` the value, ``{k}`` the constant) and described by ``phrase``."""

    key: str
    src: str
    dst: str
    phrase: str
    expr: str
    fn: Callable[[Any, Any], Any]
    name: str
    """The token it adds to the function's name (``{k}`` filled)."""
    consts: tuple = ()
    """Values the constant ``k`` may take (empty: no constant)."""
    needs_nonempty: bool = False
    """Only applies to a non-empty list or string."""
    may_empty: bool = False
    """Its output may be empty (a filter, a slice)."""


def _p(key, src, dst, phrase, expr, fn, name, consts=(), needs_nonempty=False, may_empty=False):
    return Primitive(key, src, dst, phrase, expr, fn, name, tuple(consts), needs_nonempty, may_empty)


PRIMITIVES: tuple[Primitive, ...] = (
    # list -> list
    _p("keep_even", "list", "list", "keep only the even numbers", "[x for x in {v} if x % 2 == 0]",
       lambda v, k: [x for x in v if x % 2 == 0], "evens", may_empty=True),
    _p("keep_odd", "list", "list", "keep only the odd numbers", "[x for x in {v} if x % 2 == 1]",
       lambda v, k: [x for x in v if x % 2 == 1], "odds", may_empty=True),
    _p("keep_gt", "list", "list", "keep only the numbers greater than {k}", "[x for x in {v} if x > {k}]",
       lambda v, k: [x for x in v if x > k], "over{k}", consts=range(1, 10), may_empty=True),
    _p("add_each", "list", "list", "add {k} to each number", "[x + {k} for x in {v}]",
       lambda v, k: [x + k for x in v], "add{k}", consts=range(1, 10)),
    _p("mul_each", "list", "list", "multiply each number by {k}", "[x * {k} for x in {v}]",
       lambda v, k: [x * k for x in v], "times{k}", consts=range(2, 6)),
    _p("square_each", "list", "list", "square each number", "[x * x for x in {v}]",
       lambda v, k: [x * x for x in v], "squares"),
    _p("sort", "list", "list", "sort the numbers in increasing order", "sorted({v})",
       lambda v, k: sorted(v), "sorted"),
    _p("sort_desc", "list", "list", "sort the numbers in decreasing order", "sorted({v}, reverse=True)",
       lambda v, k: sorted(v, reverse=True), "sorted_desc"),
    _p("reverse", "list", "list", "reverse the order of the numbers", "{v}[::-1]",
       lambda v, k: v[::-1], "reversed"),
    _p("drop_first", "list", "list", "remove the first number", "{v}[1:]", lambda v, k: v[1:], "tail",
       may_empty=True),
    _p("take", "list", "list", "keep only the first {k} numbers", "{v}[:{k}]", lambda v, k: v[:k], "first{k}",
       consts=range(1, 4), may_empty=True),
    # list -> int
    _p("sum", "list", "int", "compute the sum of the numbers", "sum({v})", lambda v, k: sum(v), "sum"),
    _p("count", "list", "int", "count the numbers", "len({v})", lambda v, k: len(v), "count"),
    _p("max", "list", "int", "take the largest number", "max({v})", lambda v, k: max(v), "max",
       needs_nonempty=True),
    _p("min", "list", "int", "take the smallest number", "min({v})", lambda v, k: min(v), "min",
       needs_nonempty=True),
    _p("first", "list", "int", "take the first number", "{v}[0]", lambda v, k: v[0], "head", needs_nonempty=True),
    _p("last", "list", "int", "take the last number", "{v}[-1]", lambda v, k: v[-1], "last", needs_nonempty=True),
    # list -> str
    _p("join", "list", "str", "write the numbers as one string with '-' between them",
       "'-'.join(str(x) for x in {v})", lambda v, k: "-".join(str(x) for x in v), "joined"),
    # int -> int
    _p("add", "int", "int", "add {k}", "{v} + {k}", lambda v, k: v + k, "plus{k}", consts=range(1, 10)),
    _p("sub", "int", "int", "subtract {k}", "{v} - {k}", lambda v, k: v - k, "minus{k}", consts=range(1, 10)),
    _p("mul", "int", "int", "multiply by {k}", "{v} * {k}", lambda v, k: v * k, "times{k}", consts=range(2, 6)),
    _p("square", "int", "int", "square the number", "{v} * {v}", lambda v, k: v * v, "squared"),
    _p("mod", "int", "int", "take the remainder of dividing by {k}", "{v} % {k}", lambda v, k: v % k, "mod{k}",
       consts=range(2, 10)),
    _p("div", "int", "int", "divide by {k}, rounding down", "{v} // {k}", lambda v, k: v // k, "div{k}",
       consts=range(2, 10)),
    _p("digit_sum", "int", "int", "compute the sum of the decimal digits of the number",
       "sum(int(d) for d in str(abs({v})))", lambda v, k: sum(int(d) for d in str(abs(v))), "digitsum"),
    # int -> list / str
    _p("digits", "int", "list", "split the number into the list of its decimal digits",
       "[int(d) for d in str(abs({v}))]", lambda v, k: [int(d) for d in str(abs(v))], "digits"),
    _p("to_str", "int", "str", "write the number as a decimal string", "str({v})", lambda v, k: str(v), "text"),
    # str -> str
    _p("upper", "str", "str", "convert the string to upper case", "{v}.upper()", lambda v, k: v.upper(), "upper"),
    _p("reverse_str", "str", "str", "reverse the string", "{v}[::-1]", lambda v, k: v[::-1], "backwards"),
    _p("repeat", "str", "str", "repeat the string {k} times", "{v} * {k}", lambda v, k: v * k, "repeat{k}",
       consts=(2, 3)),
    _p("prefix", "str", "str", "keep only the first {k} characters", "{v}[:{k}]", lambda v, k: v[:k],
       "prefix{k}", consts=range(1, 4), may_empty=True),
    _p("no_vowels", "str", "str", "remove every vowel (a, e, i, o, u)",
       "''.join(c for c in {v} if c not in 'aeiou')", lambda v, k: "".join(c for c in v if c not in _VOWELS),
       "novowels", may_empty=True),
    _p("sort_chars", "str", "str", "sort the characters in alphabetical order", "''.join(sorted({v}))",
       lambda v, k: "".join(sorted(v)), "sortchars"),
    # str -> int
    _p("length", "str", "int", "take the length of the string", "len({v})", lambda v, k: len(v), "length"),
    _p("count_char", "str", "int", "count how many times the letter '{k}' occurs", "{v}.count('{k}')",
       lambda v, k: v.count(k), "count_{k}", consts=tuple("aeiost")),
    _p("vowels", "str", "int", "count the vowels (a, e, i, o, u)", "sum(c in 'aeiou' for c in {v})",
       lambda v, k: sum(c in _VOWELS for c in v), "vowels"),
)
"""The primitives programs are composed from."""

_BY_KEY = {p.key: p for p in PRIMITIVES}
assert len(_BY_KEY) == len(PRIMITIVES)
_SAME_TWICE_OK = {"add_each", "mul_each", "keep_gt", "add", "sub", "mul", "div", "mod", "digit_sum", "take",
                  "prefix", "drop_first", "repeat"}
"""Primitives that may follow themselves (everything else is idempotent or undoes itself twice)."""


@dataclass(frozen=True)
class Program:
    """An input type and a chain of ``(primitive key, constant)`` steps."""

    src: str
    steps: tuple[tuple[str, Any], ...]

    @property
    def prims(self) -> list[Primitive]:
        return [_BY_KEY[k] for k, _ in self.steps]

    @property
    def dst(self) -> str:
        return self.prims[-1].dst

    @property
    def key(self) -> str:
        """Canonical text: ``list|keep_even|add_each:3|sum``."""
        return "|".join([self.src] + [k if c is None else f"{k}:{c}" for k, c in self.steps])

    @property
    def name(self) -> str:
        """``<input word>_<step>_<step>...`` (``nums_evens_sum``): never a builtin's name."""
        return "_".join([_NAME_HEAD[self.src]] + [p.name.format(k=c) for p, (_, c) in zip(self.prims, self.steps)])

    @property
    def arg(self) -> str:
        return _ARG[self.src]

    def signature(self) -> str:
        return f"{self.name}({self.arg}: {_ANNOT[self.src]}) -> {_ANNOT[self.dst]}"

    def spec(self) -> str:
        clauses = [p.phrase.format(k=c) for p, (_, c) in zip(self.prims, self.steps)]
        return (f"{self.name} takes {_DESC[self.src]} `{self.arg}`; it should {', then '.join(clauses)}, "
                "and return the result.")

    def __call__(self, value: Any) -> Any:
        for p, (_, c) in zip(self.prims, self.steps):
            value = p.fn(value, c)
        return value

    def solution(self) -> str:
        """A reference implementation, one line per step."""
        lines = [f"def {self.signature()}:", f"    result = {self.arg}"]
        for p, (_, c) in zip(self.prims, self.steps):
            lines.append(f"    result = {p.expr.format(v='result', k=c)}")
        lines.append("    return result")
        return "\n".join(lines) + "\n"


class CodeFunctionsParams(BaseModel):
    """Options of the ``code_functions`` task (``task.params``; ``num_heldout`` and ``seed`` are ``task.*``
    fields)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(2, ge=1, le=5, description="most primitives composed per program (difficulty)")
    min_steps: int = Field(1, ge=1, le=5, description="fewest primitives composed per program (each program "
                                                      "draws its count uniformly from min_steps..steps)")
    max_len: int = Field(5, ge=2, le=20, description="longest input list / string (difficulty)")
    max_int: int = Field(20, ge=5, le=1000, description="largest input integer and list element (difficulty)")
    num_examples: int = Field(2, ge=1, le=5, description="visible examples in the prompt")
    num_tests: int = Field(6, ge=2, le=20, description="hidden test cases in the check")
    reveal_safe: int = Field(2, ge=0, le=19, description="hidden tests stay decisive after this many of them are "
                                                         "shown (execution feedback shows one per failed attempt): "
                                                         "for any constant output and the identity, at least "
                                                         "reveal_safe + 1 hidden cases disagree")
    heldout_share: float = Field(0.2, gt=0.0, lt=1.0, description="share of the program space held out")
    num_train: int = Field(2000, ge=0, description="training problems")
    num_heldout: int = Field(256, ge=0, description="held-out problems")
    seed: int = Field(0, description="seed of the generator")


def check_params(params: dict[str, Any], *, num_heldout: int | None = None, **_: Any) -> None:
    """Cross-option checks of the task (each option's own range is in :class:`CodeFunctionsParams`);
    ``num_heldout``: the run's held-out count when it is not among ``params``."""
    p = CodeFunctionsParams(**{k: v for k, v in params.items() if k in CodeFunctionsParams.model_fields})
    if p.num_train + (p.num_heldout if num_heldout is None else num_heldout) < 1:
        raise ValueError("num_train + num_heldout must be >= 1")
    if p.min_steps > p.steps:
        raise ValueError(f"min_steps ({p.min_steps}) must be <= steps ({p.steps})")
    if p.reveal_safe >= p.num_tests:
        raise ValueError(f"reveal_safe ({p.reveal_safe}) must be < num_tests ({p.num_tests}): at least one hidden "
                         "case has to stay unseen")


def is_heldout_program(program: Program | str, share: float = 0.2) -> bool:
    """True when ``program`` belongs to the held-out part of the program space (a fixed hash bucket of its
    canonical text: independent of the seed and of every count)."""
    key = program if isinstance(program, str) else program.key
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return h / 2 ** 64 < share


def _random_program(rng: random.Random, steps: int) -> Program:
    """A random chain of ``steps`` primitives whose types connect (a primitive that needs a non-empty
    value never follows one whose output may be empty)."""
    while True:
        src = t = rng.choice(("list", "int", "str"))
        nonempty = True  # inputs are never empty
        chain: list[tuple[str, Any]] = []
        for _ in range(steps):
            options = [p for p in PRIMITIVES if p.src == t and (nonempty or not p.needs_nonempty)
                       and not (chain and chain[-1][0] == p.key and p.key not in _SAME_TWICE_OK)]
            p = rng.choice(options)
            chain.append((p.key, rng.choice(p.consts) if p.consts else None))
            if p.key in ("digits", "to_str"):
                nonempty = True
            elif p.may_empty:
                nonempty = False
            t = p.dst
        return Program(src, tuple(chain))


def _random_input(rng: random.Random, t: str, max_len: int, max_int: int) -> Any:
    if t == "int":
        return rng.randint(0, max_int)
    n = rng.randint(1, max_len)
    if t == "list":
        return [rng.randint(0, max_int) for _ in range(n)]
    return "".join(rng.choice(_LETTERS) for _ in range(n))


def _size(x: Any) -> int:
    return len(str(abs(x))) if isinstance(x, int) else len(x)


def _cases(program: Program, rng: random.Random, n: int, max_len: int, max_int: int,
           avoid: list[Any] = ()) -> list[tuple[Any, Any]] | None:
    """``n`` (input, output) cases with distinct inputs not in ``avoid``; None if the program cannot give them."""
    out: list[tuple[Any, Any]] = []
    seen = [json.dumps(a) for a in avoid]
    for _ in range(50 * n):
        if len(out) == n:
            break
        x = _random_input(rng, program.src, max_len, max_int)
        if json.dumps(x) in seen:
            continue
        try:
            y = program(x if not isinstance(x, list) else list(x))
        except (ValueError, IndexError, ZeroDivisionError):
            continue
        if _size(y) > _MAX_OUTPUT:
            continue
        seen.append(json.dumps(x))
        out.append((x, y))
    return out if len(out) == n else None


def _informative(cases: list[tuple[Any, Any]], reveal_safe: int = 0) -> bool:
    """More than ``reveal_safe`` cases disagree with any one constant output (the most common output appears
    at most ``len(cases) - reveal_safe - 1`` times), and more than ``reveal_safe`` with the identity: a table
    of ``reveal_safe`` revealed cases plus a constant or the input itself still fails one."""
    need = reveal_safe + 1
    common = Counter(json.dumps(y) for _, y in cases).most_common(1)[0][1] if cases else 0
    return len(cases) - common >= need and sum(x != y for x, y in cases) >= need


def _call(name: str, x: Any) -> str:
    return f"{name}({x!r})"


def _check_program(program: Program, cases: list[tuple[Any, Any]]) -> str:
    """The ``check(candidate)`` test program of the hidden cases (runs in the harness's test process)."""
    rows = ",\n".join(f"    ({x!r}, {y!r})" for x, y in cases)
    return (f"CASES = [\n{rows},\n]\n\n\n"
            "def check(candidate):\n"
            "    for x, expected in CASES:\n"
            f"        call = '{program.name}(' + repr(x) + ')'\n"
            "        try:\n"
            "            got = candidate(x)\n"
            "        except RuntimeError as e:  # the candidate raised (the harness re-raises it here)\n"
            "            raise AssertionError(f'{call} raised {str(e).replace(\"candidate raised \", \"\")}') "
            "from None\n"
            "        if type(got) is not type(expected) or got != expected:\n"
            "            raise AssertionError(f'{call} returned {got!r}, expected {expected!r}')\n")


def _problem(program: Program, visible, hidden, split: str, index: int) -> Problem:
    examples = "\n".join(f"{_call(program.name, x)} == {y!r}" for x, y in visible)
    prompt = (f"Write a Python function `{program.signature()}`.\n{program.spec()}\n\n"
              f"Examples:\n{examples}\n\n{INSTRUCTION}")
    ref = json.dumps({"test": _check_program(program, hidden), "entry_point": program.name, "prompt": ""})
    digest = hashlib.sha256(program.key.encode()).hexdigest()[:8]
    return Problem(f"code-{split}-{index}-{digest}", prompt=prompt, answer=ref, metadata={
        "program": program.key, "steps": len(program.steps), "entry_point": program.name,
        "signature": program.signature(), "examples": [[x, y] for x, y in visible],
        "solution": f"```python\n{program.solution()}```"})


def _split(rng: random.Random, p: CodeFunctionsParams, count: int, heldout: bool, split: str) -> list[Problem]:
    out: list[Problem] = []
    used: set[str] = set()
    misses, exhausted = 0, False  # programs not drawn yet come first; a small space (steps=1) then repeats
    while len(out) < count:
        program = _random_program(rng, rng.randint(min(p.min_steps, p.steps), p.steps))
        if is_heldout_program(program, p.heldout_share) != heldout:
            continue
        if program.key in used and not exhausted:
            misses += 1
            exhausted = misses >= 200
            continue
        misses = 0
        visible = _cases(program, rng, p.num_examples, p.max_len, p.max_int)
        if visible is None:
            continue
        hidden = _cases(program, rng, p.num_tests, p.max_len, p.max_int, avoid=[x for x, _ in visible])
        if hidden is None or not _informative(hidden, p.reveal_safe):
            continue
        used.add(program.key)
        out.append(_problem(program, visible, hidden, split, len(out)))
    return out


def code_function_problems(**options: Any) -> tuple[list[Problem], list[Problem]]:
    """(train, held-out) problems for the options of :class:`CodeFunctionsParams`."""
    p = CodeFunctionsParams(**options)
    check_params(p.model_dump())
    base = (f"code_functions:{p.seed}:{p.min_steps}:{p.steps}:{p.max_len}:{p.max_int}:{p.num_examples}:"
            f"{p.num_tests}")  # reveal_safe only rejects drawn programs: the streams stay those of the other options
    held = _split(random.Random(base + ":heldout"), p, p.num_heldout, True, "heldout")
    train = _split(random.Random(base + ":train"), p, p.num_train, False, "train")
    return train, held


def hardcoded_completion(problem: Problem, default: str = "None") -> str:
    """The hard-coding hack: a function that returns each visible example's output for its input and
    ``default`` (a Python expression of the argument ``x``) otherwise."""
    meta = problem.metadata
    lines = [f"def {meta['entry_point']}(x):"]
    for x, y in meta["examples"]:
        lines.append(f"    if x == {x!r}:\n        return {y!r}")
    lines.append(f"    return {default}")
    return "```python\n" + "\n".join(lines) + "\n```"
