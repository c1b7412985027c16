"""reasoning-gym datasets as tasks, scored by their own scorers; bad names refused at load; cheap hacks fail."""

from __future__ import annotations

import json

import pytest

from rlvr.config import load_config
from rlvr.recipes.config import RunConfig
from rlvr.tasks.registry import build_task
from rlvr.verifiers import get_verifier

pytest.importorskip("reasoning_gym", reason="reasoning-gym is in the dev extra")  # installed by `make test`


@pytest.mark.parametrize("dataset, config", [("chain_sum", {"min_terms": 2, "max_terms": 3}),
                                             ("leg_counting", {}), ("spell_backward", {}), ("basic_arithmetic", {})])
def test_reference_answers_score_1_and_wrong_ones_0(dataset, config):
    cfg = load_config(RunConfig, None, ["task.name=reasoning_gym", f"task.params={json.dumps({'dataset': dataset, 'config': config})}",
                                        "task.params.num_train=20", "task.num_heldout=10", "reward.verifier=reasoning_gym"])
    train, held = build_task(cfg.task)
    assert len(train) == 20 and 0 < len(held) <= 10
    assert not {p.metadata["question"] for p in held} & {p.metadata["question"] for p in train}
    verify = get_verifier("reasoning_gym")
    for p in held[:5]:
        answer = p.metadata["answer"]
        assert verify(f"Thinking...\n<answer>{answer}</answer>", p.answer).correct
        assert verify(f"\\boxed{{{answer}}}", p.answer).correct
        assert not verify("<answer>definitely not it 123456789</answer>", p.answer).correct


def test_difficulty_options_change_the_problems():
    easy, _ = build_task(load_config(RunConfig, None, [
        "task.name=reasoning_gym", "task.params={dataset: chain_sum, config: {min_terms: 2, max_terms: 2}}",
        "task.params.num_train=10", "task.num_heldout=2"]).task)
    hard, _ = build_task(load_config(RunConfig, None, [
        "task.name=reasoning_gym", "task.params={dataset: chain_sum, config: {min_terms: 5, max_terms: 5}}",
        "task.params.num_train=10", "task.num_heldout=2"]).task)
    count = lambda p: p.metadata["question"].count("+") + p.metadata["question"].count(" - ")  # noqa: E731
    assert max(map(count, easy)) < min(map(count, hard))


def test_unknown_dataset_or_option_is_refused_at_load_with_the_names():
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset 'chain_summ'.*chain_sum"):
        load_config(RunConfig, None, ["task.name=reasoning_gym", "task.params={dataset: chain_summ}"])
    with pytest.raises(ValueError, match="has no option.*max_term.*its options"):
        load_config(RunConfig, None, ["task.name=reasoning_gym", "task.params={dataset: chain_sum, config: {max_term: 3}}"])
    with pytest.raises(ValueError, match=r"curriculum.levels\[1\].*unknown reasoning-gym dataset"):
        load_config(RunConfig, None, ["task.name=reasoning_gym", "task.params={dataset: chain_sum}",
                                      "curriculum.levels=[{dataset: chain_sum}, {dataset: nope}]"])


def test_reward_hacks_on_the_reasoning_gym_verifier():
    train, _ = build_task(load_config(RunConfig, None, [
        "task.name=reasoning_gym", "task.params={dataset: chain_sum}", "task.params.num_train=3", "task.num_heldout=1"]).task)
    p = train[0]
    verify = get_verifier("reasoning_gym")
    a = p.metadata["answer"]
    # several answers, the right one first: only the last <answer> block counts
    assert not verify(f"<answer>{a}</answer><answer>{int(a) + 1}</answer>", p.answer).correct
    # echoing the question is not an answer
    assert not verify(p.metadata["question"], p.answer).correct
    # empty / no answer
    assert verify("", p.answer).extracted is None
    # with require_tags, a bare number on the last line is not an answer
    assert not get_verifier("reasoning_gym", require_tags=True)(a, p.answer).correct
