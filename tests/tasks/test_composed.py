"""R-Horizon's composed queries: a chain of arithmetic problems, each starting from the previous answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.tasks.registry import build_task
from rlvr.tasks.composed import composed_problem, composed_split
from rlvr.verifiers import get_verifier


def test_a_chain_by_hand():
    # A1 = 3 * 4 = 12; A2 = A1 + 5 * 2 = 12 + 10 = 22 (ordinary precedence); A3 = A2 - 7 = 15
    p = composed_problem([([3, 4], ["*"]), ([5, 2], ["+", "*"]), ([7], ["-"])], "t")
    assert p.answer == "15" and p.metadata["horizon"] == 3
    assert "Problem 1: A1 = 3 * 4." in p.prompt and "Problem 2: A2 = A1 + 5 * 2." in p.prompt
    assert "Problem 3: A3 = A2 - 7." in p.prompt and "Put the answer of Problem 3 in \\boxed{}." in p.prompt
    assert p.metadata["solution"] == ("A1 = 3 * 4 = 12. A2 = 12 + 5 * 2 = 22. A3 = 22 - 7 = 15. "
                                      "The answer is \\boxed{15}.")
    verify = get_verifier("numeric")
    assert verify(p.metadata["solution"], p.answer).correct  # the worked solution passes (guidance can use it)
    assert not verify("A1 = 12, A2 = 22. \\boxed{22}", p.answer).correct  # stopping one link early fails


@settings(max_examples=40, deadline=None)
@given(horizon=st.integers(2, 6), seed=st.integers(0, 10_000), ops=st.sampled_from([["+"], ["+", "-"], ["+", "*"]]))
def test_every_link_matters(horizon, seed, ops):
    """Property: over generated chains, the answer is the chain evaluated link by link from the prompt alone, and
    train and held-out never share a chain."""
    train, held = composed_split(horizon, 2, 1, 9, ops, 3, 2, seed)
    assert not {p.prompt for p in train} & {p.prompt for p in held}
    for p in train + held:
        lines = [ln for ln in p.prompt.splitlines() if ln.startswith("Problem ")]
        assert len(lines) == horizon
        value = None
        for j, ln in enumerate(lines, start=1):
            expr = ln.split(" = ", 1)[1].rstrip(".")
            expr = expr.replace(f"A{j - 1}", str(value)) if j > 1 else expr
            value = eval(expr, {"__builtins__": {}})  # our own generated integer expression, not model output
        assert str(value) == p.answer


def test_the_task_loads_from_a_config_and_bad_options_are_refused_at_load():
    cfg = load_config(RunConfig, None, ["task.name=composed_arithmetic",
                                        "task.params={horizon: 4, num_train: 10, num_heldout: 5}"])
    train, held = build_task(cfg.task)
    assert len(train) == 10 and len(held) == 5 and all(p.metadata["horizon"] == 4 for p in train)
    for bad, match in [("{horizon: 1}", "horizon must be in"), ("{operators: ['/']}", "operators must be"),
                       ("{max_value: 1, min_value: 1, num_operands: 2, horizon: 2, operators: ['+']}", "chains asked")]:
        with pytest.raises(ConfigError, match=match):
            load_config(RunConfig, None, ["task.name=composed_arithmetic", f"task.params={bad}"])
