"""AdaptThink's NoThinking bonus: delta for a response whose thinking is empty."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import close
from rlvr.rewards.functions.no_think import thinks
from rlvr.rewards.pipeline import GroupScores
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardFunctionSpec
from rlvr.types import Problem, Sample, Verdict


def _score(texts, correct, params=None, delta=0.5):
    r = Rubric.from_specs([RewardFunctionSpec(kind="verifier"),
                           RewardFunctionSpec(kind="no_think", weight=delta, params=params or {})])
    samples = [Sample("p", [1], [5], [-1.0], t, "stop", i, verdict=Verdict(float(c), None, ""), env_return=float(c))
               for i, (t, c) in enumerate(zip(texts, correct))]
    return r.score(GroupScores.of(Problem("p", prompt="q", answer="4"), samples, max_new_tokens=8)).reward


def test_the_bonus_by_hand():
    texts = ["</think>\\boxed{4}", "<think>2+2 is 4</think>\\boxed{4}", "<think> </think>\\boxed{5}",
             "\\boxed{4}", "2+2 is 4</think>\\boxed{4}", "<think>unfinished"]
    # R + delta * 1[no thinking]: delta 0.5
    close(_score(texts, [1, 1, 0, 1, 1, 0]), [1.5, 1.0, 0.5, 1.5, 1.0, 0.0])
    # require_tag: only a response that starts with </think> is NoThinking
    close(_score(texts, [1, 1, 0, 1, 1, 0], {"require_tag": True}), [1.5, 1.0, 0.0, 1.0, 1.0, 0.0])


@settings(max_examples=80, deadline=None)
@given(thought=st.text(alphabet="ab <>/", max_size=20), answer=st.text(alphabet="0123", max_size=4))
def test_non_blank_thinking_never_earns_the_bonus(thought, answer):
    """Property: a response with a closed think block holding non-blank text earns no bonus."""
    text = f"<think>{thought}</think>\\boxed{{{answer}}}"
    if thought.strip() and "<think>" not in thought and "</think>" not in thought:
        assert thinks(text)
        close(_score([text], [0]), [0.0])
