"""The procedural code task: determinism, disjoint splits, hidden tests, the hard-coding hack, config checks."""

from __future__ import annotations

import ast
import functools
import json

import pytest
from hypothesis import given, settings, strategies as st

from rlvr.tasks.code_functions import (PRIMITIVES, Program, code_function_problems, hardcoded_completion,
                                       is_heldout_program)
from rlvr.tasks.registry import TASKS
from rlvr.verifiers import get_verifier


def _hidden_cases(problem):
    return _cases_of(problem.answer)


@functools.lru_cache(maxsize=None)
def _cases_of(answer: str):
    tree = ast.parse(json.loads(answer)["test"])
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CASES")
    return ast.literal_eval(node.value)


def _program(problem) -> Program:
    src, *steps = problem.metadata["program"].split("|")
    chain = []
    for s in steps:
        key, _, const = s.partition(":")
        chain.append((key, None if not const else (int(const) if const.isdigit() else const)))
    return Program(src, tuple(chain))


def test_generator_is_deterministic_and_seeded():
    a = code_function_problems(steps=2, num_train=50, num_heldout=20, seed=4)
    b = code_function_problems(steps=2, num_train=50, num_heldout=20, seed=4)
    assert [(p.id, p.prompt, p.answer) for p in a[0] + a[1]] == [(p.id, p.prompt, p.answer) for p in b[0] + b[1]]
    c = code_function_problems(steps=2, num_train=50, num_heldout=20, seed=5)
    assert [p.prompt for p in c[1]] != [p.prompt for p in a[1]]
    # the held-out problems do not move when only num_train changes
    d = code_function_problems(steps=2, num_train=10, num_heldout=20, seed=4)
    assert [p.answer for p in d[1]] == [p.answer for p in a[1]]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 4), share=st.sampled_from([0.1, 0.2, 0.5]))
def test_splits_are_disjoint_by_construction(seed, steps, share):
    train, held = code_function_problems(steps=steps, num_train=60, num_heldout=20, seed=seed, heldout_share=share)
    assert len(train) == 60 and len(held) == 20
    train_programs = {p.metadata["program"] for p in train}
    held_programs = {p.metadata["program"] for p in held}
    assert not train_programs & held_programs
    assert all(is_heldout_program(k, share) for k in held_programs)
    assert not any(is_heldout_program(k, share) for k in train_programs)
    # and across seeds: another seed's training programs never include this seed's held-out ones
    other, _ = code_function_problems(steps=steps, num_train=60, num_heldout=0, seed=seed + 1, heldout_share=share)
    assert not {p.metadata["program"] for p in other} & held_programs
    assert len({p.id for p in train + held}) == 80


def test_problems_are_what_they_say():
    train, held = code_function_problems(steps=3, min_steps=3, num_train=200, num_heldout=50, seed=1, num_examples=2,
                                         num_tests=6)
    for p in train + held:
        program = _program(p)
        assert program.name == p.metadata["entry_point"] and f"`{program.signature()}`" in p.prompt
        assert len(program.steps) == 3
        visible = p.metadata["examples"]
        hidden = _hidden_cases(p)
        assert len(visible) == 2 and len(hidden) == 6
        for x, y in visible + hidden:
            assert program(x) == y and type(program(x)) is type(y)
            assert f"{program.name}({x!r}) == {y!r}" in p.prompt or [x, y] not in visible
        hidden_inputs = [json.dumps(x) for x, _ in hidden]
        assert not set(hidden_inputs) & {json.dumps(x) for x, _ in visible}  # different hidden tests
        assert len(set(hidden_inputs)) == len(hidden_inputs)
        outs = {json.dumps(y) for _, y in hidden}
        assert len(outs) > 1 and any(x != y for x, y in hidden)  # no constant or identity passes them


def _hardcoded_passes(problem, default, attempts: int = 1) -> bool:
    """The hard-coding adversary against the check as execution feedback runs it: a table of the visible
    examples, ``default`` elsewhere; after each failed attempt the first failing hidden case (what the feedback
    shows: the call and the expected output) joins the table.  True when some attempt passes every hidden case."""
    table = {json.dumps(x): y for x, y in problem.metadata["examples"]}

    def f(x):
        key = json.dumps(x)
        if key in table:
            return table[key]
        return default(x)

    for _ in range(attempts):
        failing = next(((x, y) for x, y in _hidden_cases(problem) if not (type(f(x)) is type(y) and f(x) == y)), None)
        if failing is None:
            return True
        table[json.dumps(failing[0])] = failing[1]
    return False


def _defaults(problem):
    """Constant outputs (None, 0, '', [], every output the problem shows or hides) and the identity."""
    outputs = [y for _, y in problem.metadata["examples"]] + [y for _, y in _hidden_cases(problem)]
    return [lambda x: None, lambda x: 0, lambda x: "", lambda x: [], lambda x: x] + [lambda x, y=y: y for y in outputs]


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_hardcoding_the_visible_examples_never_passes_the_hidden_tests(steps):
    """Property over generated problems (in process): the hard-coded table with any constant default, or the
    input itself, fails at least one hidden test."""
    train, held = code_function_problems(steps=steps, min_steps=steps, num_train=300, num_heldout=100, seed=steps)
    for p in train + held:
        assert not any(_hardcoded_passes(p, d) for d in _defaults(p)), p.prompt


@pytest.mark.parametrize("reveal_safe", [0, 2, 4])
def test_hardcoding_the_cases_feedback_reveals_never_passes(reveal_safe):
    """Property over generated problems: with execution feedback showing one failing hidden case per failed
    attempt, the table of the visible and the shown cases plus any constant or the identity never passes within
    reveal_safe + 1 attempts.  (The default num_tests 6 with reveal_safe 4 leaves no room for a constant: it is
    the strictest setting the generator accepts.)"""
    train, held = code_function_problems(steps=2, min_steps=1, num_train=500, num_heldout=100, seed=3,
                                         reveal_safe=reveal_safe)
    for p in train + held:
        assert not any(_hardcoded_passes(p, d, attempts=reveal_safe + 1) for d in _defaults(p)), p.prompt


def test_the_feedback_adversary_passes_weaker_hidden_tests():
    """The adversary is real: with hidden tests decisive for no shown case (reveal_safe 0), three attempts pass a
    share of the problems (those whose hidden outputs are mostly one constant)."""
    train, held = code_function_problems(steps=2, min_steps=1, num_train=500, num_heldout=100, seed=3,
                                         reveal_safe=0)
    passed = sum(any(_hardcoded_passes(p, d, attempts=3) for d in _defaults(p)) for p in train + held)
    assert passed > 0.05 * len(train + held)


def test_hardcoded_completion_earns_nothing_and_the_solution_passes():
    """In the sandbox: the reference solution passes, the hard-coding hack scores 0, and the failure is shown
    as the call, what it returned and what was expected."""
    verify = get_verifier("code_humaneval", timeout=5)
    _, held = code_function_problems(steps=2, num_train=0, num_heldout=6, seed=11)
    for p in held:
        assert verify(p.metadata["solution"], p.answer).correct, p.metadata["solution"]
        for default in ("None", "0", "x"):
            v = verify(hardcoded_completion(p, default), p.answer)
            assert v.score == 0.0 and v.reason.startswith("wrong answer: AssertionError: "), v.reason
            assert f"{p.metadata['entry_point']}(" in v.reason and "returned" in v.reason and "expected" in v.reason
    p = held[0]
    broken = f"```python\ndef {p.metadata['entry_point']}(x):\n    return 1 / 0\n```"
    v = verify(broken, p.answer)
    assert v.reason.startswith("wrong answer: AssertionError: ") and "raised ZeroDivisionError" in v.reason


def test_every_primitive_appears_and_its_code_matches_its_function():
    seen = set()
    for seed in range(4):
        train, held = code_function_problems(steps=2, num_train=400, num_heldout=0, seed=seed)
        for p in train:
            program = _program(p)
            seen.update(k for k, _ in program.steps)
            ns: dict = {}
            exec(program.solution(), ns)  # our own reference code, not a completion
            for x, y in p.metadata["examples"]:
                assert ns[program.name](x) == y
    assert seen == {p.key for p in PRIMITIVES}


@pytest.mark.parametrize("override, key", [
    ("task.params={steps: 0}", "task.params.steps"),
    ("task.params={steps: 9}", "task.params.steps"),
    ("task.params={max_len: 1}", "task.params.max_len"),
    ("task.params={num_tests: 1}", "task.params.num_tests"),
    ("task.params={heldout_share: 1.5}", "task.params.heldout_share"),
    ("task.params={stpes: 2}", "task.params.stpes"),
    ("task.params={steps: 2, min_steps: 3}", "min_steps (3) must be <= steps (2)"),
    ("task.params={reveal_safe: -1}", "task.params.reveal_safe"),
    ("task.params={num_tests: 4, reveal_safe: 4}", "reveal_safe (4) must be < num_tests (4)"),
    ("curriculum.levels=[{steps: 1}, {steps: 7}]", "curriculum.levels[1]"),
])
def test_bad_spec_is_refused_at_load_naming_the_key(override, key):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ValueError) as e:
        load_config(RunConfig, None, ["task.name=code_functions", "reward.verifier=code_humaneval", override])
    assert key in str(e.value), str(e.value)


def test_task_builds_from_a_config_and_a_curriculum_over_steps(tmp_path):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig, task_at_level
    from rlvr.tasks.registry import build_task

    cfg = load_config(RunConfig, None, ["task.name=code_functions", "reward.verifier=code_humaneval",
                                        "task.num_heldout=10", "task.params={num_train: 30, steps: 2}",
                                        "curriculum.levels=[{steps: 1}, {steps: 2}, {steps: 3, min_steps: 1}]"])
    assert "code_functions" in TASKS.names()
    train, held = build_task(cfg.task)
    assert len(train) == 30 and len(held) == 10 and {p.metadata["steps"] for p in train} == {1, 2}
    levels = [build_task(task_at_level(cfg.task, lv)) for lv in cfg.curriculum.levels]
    assert [{p.metadata["steps"] for p in tr} for tr, _ in levels] == [{1}, {1, 2}, {1, 2, 3}]
