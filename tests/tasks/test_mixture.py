"""Task mixtures (rlvr.tasks.mixture, the ``mixture`` section): prompts drawn by weight and resumable from one
position; every problem scored by its own task's verifier and rubric through the real loop; per-task training and
held-out metrics; refusals when the config loads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import close, make_model, make_tokenizer, tiny_run_config
from rl_harness import Recorder
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.tasks.mixture import MixtureSampler, task_of
from rlvr.trackers import read_metrics
from rlvr.types import Problem
from rlvr.verifiers import get_verifier, safe_verify


def _problems(label: str, n: int) -> list[Problem]:
    return [Problem(f"{label}/{i}", prompt=f"{label} {i}", metadata={"task": label}) for i in range(n)]


# --------------------------------------------------------------------------- the sampler
def test_draws_follow_the_weights_and_each_task_walks_its_own_order():
    s = MixtureSampler({"a": _problems("a", 5), "b": _problems("b", 7), "z": _problems("z", 3)},
                       {"a": 3.0, "b": 1.0, "z": 0.0}, seed=1)
    drawn = s.next(4000)
    counts = Counter(task_of(p) for p in drawn)
    assert counts["z"] == 0  # weight 0: never drawn
    assert counts["a"] / 4000 == pytest.approx(0.75, abs=0.03)
    a = [p.id for p in drawn if task_of(p) == "a"][:10]
    assert sorted(a[:5]) == [f"a/{i}" for i in range(5)]  # a full pass over task a before any repeat
    assert s.shares()["a"] == pytest.approx(counts["a"] / 4000)


@settings(max_examples=30, deadline=None)
@given(first=st.integers(0, 60), then=st.integers(1, 30), seed=st.integers(0, 5))
def test_a_sampler_restored_at_a_position_draws_what_the_uninterrupted_one_draws(first, then, seed):
    probs = {"a": _problems("a", 4), "b": _problems("b", 9)}
    w = {"a": 1.0, "b": 2.0}
    whole = MixtureSampler(probs, w, seed=seed)
    whole.next(first)
    resumed = MixtureSampler(probs, w, seed=seed, position=first)
    assert [p.id for p in whole.next(then)] == [p.id for p in resumed.next(then)]


# --------------------------------------------------------------------------- through the real loop
MIXTURE = ("mixture=[{task: arithmetic, label: sums, weight: 1, num_heldout: 4, params: {num_train: 24, max_value: 9}},"
           " {task: arithmetic, label: tags, weight: 1, num_heldout: 4, params: {num_train: 24, max_value: 9},"
           " verifier: format, verifier_params: {think: false, answer: false, boxed: true},"
           " functions: [{kind: verifier}, {kind: length, weight: 0.5}]}]")


def test_each_problem_is_scored_by_its_own_tasks_verifier_and_rubric(tmp_path):
    tok = make_tokenizer()
    cfg = tiny_run_config(tmp_path, "train.steps=3", "rollout.max_new_tokens=6", "eval.every=3",
                          "eval.num_problems=8", MIXTURE)
    r = Recorder(cfg, model=make_model(tok), tokenizer=tok)
    r.train()
    numeric, fmt = get_verifier("numeric"), get_verifier("format", think=False, answer=False, boxed=True)
    by_task = Counter()
    for ro, scored in r.seen:
        for i, (s, v) in enumerate(zip(ro.samples, ro.verdicts)):
            label, problem = s.problem_id.split("/", 1)[0], r.problem_by_id[s.problem_id]
            by_task[label] += 1
            own = numeric if label == "sums" else fmt
            assert v.score == safe_verify(own, s.text, problem.answer).score  # its own task's checker
            want = v.score if label == "sums" else v.score + 0.5 * (-s.num_tokens / 6)  # its own task's rubric
            assert float(scored.rewards[i]) == pytest.approx(want, abs=1e-6)
            assert set(s.reward_parts) == (set() if label == "sums" else {"verifier", "length"})
    assert by_task["sums"] and by_task["tags"]  # both tasks were drawn
    rows = read_metrics(tmp_path / "metrics.jsonl")
    for (ro, scored), row in zip(r.seen, rows):  # each task's share, accuracy and reward of the step, by hand
        for label in ("sums", "tags"):
            idx = [i for i, s in enumerate(ro.samples) if s.problem_id.startswith(label + "/")]
            if not idx:
                assert f"task/{label}/share" not in row
                continue
            assert row[f"task/{label}/share"] == pytest.approx(len(idx) / len(ro.samples))
            assert row[f"task/{label}/accuracy"] == pytest.approx(sum(ro.verdicts[i].correct for i in idx) / len(idx))
            assert row[f"task/{label}/reward_mean"] == pytest.approx(float(scored.rewards[idx].mean()), abs=1e-6)
    heldout = read_metrics(tmp_path / "heldout.jsonl")
    assert {"heldout_accuracy/sums", "heldout_accuracy/tags"} <= set(heldout[0])


@pytest.mark.parametrize("override,match", [
    ("mixture=[{task: arithmtic}]", r"mixture\[0\].task: unknown task 'arithmtic'"),
    ("mixture=[{task: arithmetic, weight: 0}, {task: arithmetic, label: b, weight: 0}]", "weights add up to 0"),
    ("mixture=[{task: arithmetic, weight: -1}]", r"mixture\[0\].weight: must be >= 0"),
    ("mixture=[{task: arithmetic}, {task: arithmetic}]", r"mixture\[1\].label: 'arithmetic' is already"),
    ("mixture=[{task: arithmetic, verifier: nope}]", r"mixture\[0\].verifier: unknown verifier 'nope'"),
    ("mixture=[{task: arithmetic, params: {max_valu: 3}}]", r"mixture\[0\].params.max_valu: not an option"),
    ("mixture=[{task: arithmetic, functions: [{kind: nope}]}]", r"mixture\[0\].functions\[0\].kind: unknown"),
])
def test_bad_mixtures_are_refused_when_the_config_loads(tmp_path, override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", override])


def test_a_mixture_beside_a_curriculum_or_a_label_free_source_is_refused(tmp_path):
    base = [f"train.output_dir={tmp_path}", "mixture=[{task: arithmetic}]"]
    with pytest.raises(ConfigError, match="use one of them"):
        load_config(RunConfig, None, base + ["curriculum.levels=[{max_value: 60}, {max_value: 99}]"])
    with pytest.raises(ConfigError, match="use reward.source=verifier"):
        load_config(RunConfig, None, base + ["reward.source=majority_vote"])
