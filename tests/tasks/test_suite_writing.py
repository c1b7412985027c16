"""Test-writing problems and the test_suite verifier: 0 unless the suite passes on the correct implementation,
else the share of mutants it fails (SAGA's detection rate)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.tasks.code_functions import _random_program
from rlvr.tasks.suite_writing import mutants, parse_program, suite_writing_problems
from rlvr.verifiers import get_verifier

REF = {"entry_point": "add3",
       "solution": "def add3(x):\n    return x + 3\n",
       "mutants": ["def add3(x):\n    return x + 4\n", "def add3(x):\n    return x * 3\n",
                   "def add3(x):\n    return 3\n"]}


def _suite(*lines):
    return "Tests:\n```python\n" + "\n".join(lines) + "\n```"


@pytest.mark.parametrize("completion, score, reason", [
    (_suite("assert add3(0) == 3", "assert add3(1) == 4"), 1.0, "3 of 3"),  # x*3 fails at 0, 3 fails at 1
    (_suite("assert add3(0) == 3"), 2 / 3, "2 of 3"),                        # x*3 at 0 is 0; const 3 passes
    (_suite("assert add3(1) == 5"), 0.0, "fails on the correct"),            # a wrong test
    (_suite("x = add3(2)"), 0.0, "no ```python block with an assert"),
    (_suite("assert add3(0) == 3", "import os", "os._exit(0)"), 0.0, "fails on the correct"),  # exits early
    (_suite("import inspect", "assert '+ 3' in inspect.getsource(add3)"), 0.0, "fails on the correct"),
    (_suite("assert add3(0) == 3", "print('rlvr-suite: ran 00')", "raise SystemExit"), 0.0, "fails on the correct"),
])
def test_detection_rate_by_hand(completion, score, reason):
    v = get_verifier("test_suite")(completion, json.dumps(REF))
    assert v.score == pytest.approx(score) and reason in v.reason


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 3))
def test_mutants_differ_in_one_step_and_in_behaviour(seed, steps):
    """Property: every mutant has the program's input type, differs in exactly one step, keeps its output type,
    and gives another outcome on at least one of the inputs."""
    rng = random.Random(seed)
    program = _random_program(rng, steps)
    assert parse_program(program.key) == program
    inputs = [[3, 1, 2], [5], [0, 7, 7, 4]] if program.src == "list" else ([7, 12, 0, 305] if program.src == "int"
                                                                           else ["abc", "aeiou", "zz"])
    for m in mutants(program, rng, 3, inputs):
        assert m.src == program.src and m.dst == program.dst
        assert sum(a != b for a, b in zip(m.steps, program.steps)) == 1
        outs = []
        for x in inputs:
            try:
                outs.append((repr(m(x)), repr(program(x))))
            except Exception as e:  # noqa: BLE001
                outs.append((type(e).__name__, "?"))
        assert any(a != b for a, b in outs)


def test_the_task_builds_and_the_reference_suite_of_hidden_cases_kills_every_mutant():
    train, held = suite_writing_problems(num_train=4, num_heldout=2, steps=2)
    assert train and held and not {p.id for p in train} & {p.id for p in held}
    verify = get_verifier("test_suite")
    p = train[0]
    ref = json.loads(p.answer)
    program = parse_program(p.metadata["program"])
    ns: dict = {}
    exec(ref["solution"], ns)  # our own reference code
    from rlvr.tasks.code_functions import code_function_problems

    src = next(q for q in code_function_problems(seed=0, num_train=4, num_heldout=2, steps=2)[0]
               if q.metadata["program"] == program.key)
    from rlvr.tasks.suite_writing import _hidden_inputs

    name = ref["entry_point"]
    lines = [f"assert {name}({x!r}) == {program(x)!r}" for x in _hidden_inputs(src)]
    v = verify(_suite(*lines), p.answer)
    assert v.score == 1.0  # the mutants differ on those inputs by construction


def test_bad_options_fail_at_load():
    with pytest.raises(ConfigError, match="num_mutants"):
        load_config(RunConfig, None, ["task.name=code_tests", "task.params={num_mutants: 0}",
                                      "reward.verifier=test_suite"]).task


def test_a_run_config_with_the_task_and_verifier_loads_and_builds():
    from rlvr.tasks.registry import build_task

    cfg = load_config(RunConfig, None, ["task.name=code_tests", "task.params={num_train: 3, num_mutants: 2}",
                                        "task.num_heldout=2", "reward.verifier=test_suite"])
    train, held = build_task(cfg.task)
    assert len(train) == 3 and len(held) == 2 and all(len(json.loads(p.answer)["mutants"]) <= 2 for p in train)
