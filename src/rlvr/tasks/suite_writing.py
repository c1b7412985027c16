"""Test-writing problems: the policy writes unit tests for a specified function, rewarded by the tests' quality.

SAGA (Ma et al. 2025, "Rethinking Verification for LLM Code Generation: From Generation to Testing", arXiv
2507.06920) measures a generated test suite by its *detection rate*: how many wrong implementations it rejects
while the correct one passes.  Here each ``code_functions`` program becomes a problem: its signature and
specification (no reference code), and the task "write asserts that test it".  The reference carries the
correct implementation and a few *mutants*: the program with one step replaced by another of the same types
(another filter, another constant, another reduction), each checked to behave differently on the program's
hidden inputs, so a suite can tell it apart.  The ``test_suite`` verifier (rlvr.verifiers.test_suite) scores the
suite 0 unless every assert passes on the correct implementation, and otherwise by the share of mutants it
fails (the detection rate).
"""

from __future__ import annotations

import json
import random
from typing import Any

from rlvr.tasks.code_functions import _BY_KEY, PRIMITIVES, Program, code_function_problems
from rlvr.types import Problem

__all__ = ["parse_program", "mutants", "suite_writing_problems", "PROMPT"]

PROMPT = ("Write unit tests for the Python function `{signature}`.\n{spec}\n\nWrite them as lines `assert {name}(...) "
          "== ...` in one ```python block (the function is already defined). The tests must pass on a correct "
          "implementation; they are worth as many of a set of subtly wrong implementations as they fail.")
"""The problem: ``{signature}``, ``{spec}``, ``{name}``."""


def parse_program(key: str) -> Program:
    """The :class:`Program` of its canonical text ``src|step|step:const|...``."""
    src, *steps = key.split("|")
    out = []
    for s in steps:
        k, _, c = s.partition(":")
        out.append((k, (int(c) if c.lstrip("-").isdigit() else c) if c else None))
    return Program(src, tuple(out))


def mutants(program: Program, rng: random.Random, n: int, inputs: list[Any]) -> list[Program]:
    """Up to ``n`` distinct programs that differ from ``program`` in one step (a primitive of the same input and
    output types, its constant drawn anew) and behave differently on at least one of ``inputs``."""
    out: list[Program] = []
    seen = {program.key}
    for _ in range(40 * n):
        if len(out) >= n:
            break
        i = rng.randrange(len(program.steps))
        p = _BY_KEY[program.steps[i][0]]
        options = [q for q in PRIMITIVES if q.src == p.src and q.dst == p.dst and (p.needs_nonempty or
                                                                                   not q.needs_nonempty)]
        q = rng.choice(options)
        steps = list(program.steps)
        steps[i] = (q.key, rng.choice(q.consts) if q.consts else None)
        m = Program(program.src, tuple(steps))
        if m.key in seen:
            continue
        seen.add(m.key)
        if any(_outcome(m, x) != _outcome(program, x) for x in inputs):
            out.append(m)
    return out


def _outcome(program: Program, x: Any) -> str:
    try:
        return json.dumps(program(list(x) if isinstance(x, list) else x))
    except Exception as e:  # noqa: BLE001 - a mutant may raise where the program does not
        return f"raises {type(e).__name__}"


def _source(program: Program, name: str) -> str:
    """The program's reference implementation under the function name ``name``."""
    return program.solution().replace(f"def {program.name}(", f"def {name}(", 1)


def suite_writing_problems(num_mutants: int = 4, seed: int = 0, **options: Any) -> tuple[list[Problem], list[Problem]]:
    """``(train, held_out)``: one test-writing problem per ``code_functions`` problem of ``options`` (its programs,
    splits and hidden inputs), with ``num_mutants`` mutants each (problems without one are left out)."""
    train, held = code_function_problems(seed=seed, **options)
    rng = random.Random(f"suite_writing:{seed}")
    split = []
    for probs in (train, held):
        out = []
        for p in probs:
            program = parse_program(p.metadata["program"])
            name = p.metadata["entry_point"]
            hidden = [x for x, _ in p.metadata["examples"]] + _hidden_inputs(p)
            ms = mutants(program, rng, num_mutants, hidden)
            if not ms:
                continue
            ref = {"entry_point": name, "solution": _source(program, name),
                   "mutants": [_source(m, name) for m in ms]}
            out.append(Problem(p.id.replace("code-", "tests-", 1),
                               prompt=PROMPT.format(signature=p.metadata["signature"], spec=program.spec(), name=name),
                               answer=json.dumps(ref),
                               metadata={"program": program.key, "mutants": [m.key for m in ms],
                                         "entry_point": name}))
        split.append(out)
    return split[0], split[1]


def _hidden_inputs(p: Problem) -> list[Any]:
    """The inputs of a code_functions problem's hidden tests (from its reference's CASES)."""
    import ast

    test = json.loads(p.answer)["test"]
    cases = test.split("CASES = ", 1)[1].split("\n\n\n", 1)[0]
    return [x for x, _ in ast.literal_eval(cases)]
