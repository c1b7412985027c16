"""The ``arithmetic_steps`` reward: the share of written calculations whose stated result is right."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import close
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.rewards.functions.arithmetic_steps import calculations, evaluate
from rlvr.rewards.pipeline import GroupScores
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardFunctionSpec
from rlvr.types import Problem, Sample, Verdict

TEXT = ("First 12 + 7 = 19. Then 19 * 3 = 56, so (12+7)*3 = 57 = 57. x = 5 and 2 = 2. So 3 + 4 = 7 + 2 = 9. "
        "10 / 4 = 2.5. 1,000 + 1 = 1001. -3 + 1 = -2. x2 + 3 = 5. Step 2: 4*5 = 20.")


def _score(texts, params=None):
    r = Rubric.from_specs([RewardFunctionSpec(kind="arithmetic_steps", params=params or {})])
    samples = [Sample("p", [1], [5], [-1.0], t, "stop", i, verdict=Verdict(0.0, None, ""), env_return=0.0)
               for i, t in enumerate(texts)]
    return r.score(GroupScores.of(Problem("p", prompt="q", answer="1"), samples, max_new_tokens=8)).reward


def test_the_calculations_of_a_text_by_hand():
    found = calculations(TEXT)
    assert [(e, r) for e, r, _ in found] == [("12 + 7", "19"), ("19 * 3", "56"), ("(12+7)*3", "57"), ("3 + 4", "7"),
                                             ("7 + 2", "9"), ("10 / 4", "2.5"), ("1000 + 1", "1001"),
                                             ("-3 + 1", "-2"), ("4*5", "20")]
    assert [ok for *_, ok in found] == [True, False, True, True, True, True, True, True, True]
    # not calculations: "57 = 57", "x = 5", "2 = 2" (no operator), "x2 + 3 = 5" (a number glued to a word)
    close(_score([TEXT, "The answer is 5.", "2 + 2 = 5"]), [8 / 9, 0.0, 0.0])
    close(_score(["no work"], {"empty": -0.5}), [-0.5])
    assert evaluate("__import__('os')") is None and evaluate("2 ** 10") is None and evaluate("1 / 0") is None
    assert evaluate("9" * 31 + " + 1") is None  # numbers past MAX_DIGITS are not read


@settings(max_examples=100, deadline=None)
@given(a=st.integers(-999, 999), b=st.integers(1, 999), op=st.sampled_from(["+", "-", "*"]),
       delta=st.integers(-3, 3), words=st.sampled_from(["", "So ", "Step 1: ", "We get "]))
def test_a_stated_result_counts_as_right_exactly_when_it_is(a, b, op, delta, words):
    """Property: over generated calculations, the reward is 1 when the stated result is the value and 0 when not."""
    true = {"+": a + b, "-": a - b, "*": a * b}[op]
    v = float(_score([f"{words}{a} {op} {b} = {true + delta}. Done."])[0])
    assert v == (1.0 if delta == 0 else 0.0)


def test_bad_options_are_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match="empty must be in"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}",
                                      "reward.functions=[verifier, {kind: arithmetic_steps, params: {empty: 2}}]"])
