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
    assert s.probabilities == pytest.approx([0.75, 0.25]) and s.position == 4000


@settings(max_examples=30, deadline=None)
@given(first=st.integers(0, 60), then=st.integers(1, 30), seed=st.integers(0, 5), adapt=st.sampled_from(["none",
                                                                                                          "learnable"]))
def test_a_sampler_restored_from_its_state_draws_what_the_uninterrupted_one_draws(first, then, seed, adapt):
    probs = {"a": _problems("a", 4), "b": _problems("b", 9)}
    w = {"a": 1.0, "b": 2.0}
    whole = MixtureSampler(probs, w, seed=seed, adapt=adapt)
    whole.next(first)
    whole.observe({"a": [True, False, True], "b": [False]})
    resumed = MixtureSampler(probs, w, seed=seed, adapt=adapt)
    resumed.load_state_dict(whole.state_dict())
    assert [p.id for p in whole.next(then)] == [p.id for p in resumed.next(then)]


def test_learnable_weights_move_toward_the_tasks_with_learnable_groups_by_hand():
    s = MixtureSampler({"a": _problems("a", 3), "b": _problems("b", 3)}, {"a": 1.0, "b": 3.0}, adapt="learnable",
                       alpha=0.5, floor=0.1)
    assert s.probabilities == pytest.approx([0.25, 0.75])  # u starts at 1: the weights as given
    s.observe({"a": [True, True], "b": [False, True, False, False]})
    # u_a = 1 + 0.5 (1 - 1) = 1; u_b = 1 + 0.5 (0.25 - 1) = 0.625; p ∝ w (0.1 + u): 1.1 and 3 * 0.725 = 2.175
    assert s.useful == pytest.approx([1.0, 0.625])
    assert s.probabilities == pytest.approx([1.1 / 3.275, 2.175 / 3.275])
    s.observe({"b": [True]})  # a task without groups this step keeps its average
    assert s.useful == pytest.approx([1.0, 0.8125])
    fixed = MixtureSampler({"a": _problems("a", 3), "b": _problems("b", 3)}, {"a": 1.0, "b": 3.0})
    fixed.observe({"a": [False]})
    assert fixed.probabilities == pytest.approx([0.25, 0.75])  # adapt=none: the weights, whatever is observed


# --------------------------------------------------------------------------- through the real loop
MIXTURE = ("mixture.tasks=[{task: arithmetic, label: sums, weight: 1, num_heldout: 4, params: {num_train: 24, max_value: 9}},"
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
    ("mixture.tasks=[{task: arithmtic}]", r"mixture.tasks\[0\].task: unknown task 'arithmtic'"),
    ("mixture.tasks=[{task: arithmetic, weight: 0}, {task: arithmetic, label: b, weight: 0}]", "weights add up to 0"),
    ("mixture.tasks=[{task: arithmetic, weight: -1}]", r"mixture.tasks\[0\].weight: must be >= 0"),
    ("mixture.tasks=[arithmetic, arithmetic]", r"mixture.tasks\[1\].label: 'arithmetic' is already"),
    ("mixture.tasks=[{task: arithmetic, verifier: nope}]", r"mixture.tasks\[0\].verifier: unknown verifier 'nope'"),
    ("mixture.tasks=[{task: arithmetic, params: {max_valu: 3}}]", r"mixture.tasks\[0\].params.max_valu: not an option"),
    ("mixture.tasks=[{task: arithmetic, functions: [{kind: nope}]}]", r"mixture.tasks\[0\].functions\[0\].kind: unknown"),
    ("mixture.adapt=greedy", r"mixture.adapt"),
])
def test_bad_mixtures_are_refused_when_the_config_loads(tmp_path, override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", override])


def test_a_mixture_beside_a_curriculum_or_a_label_free_source_is_refused(tmp_path):
    base = [f"train.output_dir={tmp_path}", "mixture.tasks=[arithmetic]"]
    with pytest.raises(ConfigError, match="use one of them"):
        load_config(RunConfig, None, base + ["curriculum.levels=[{max_value: 60}, {max_value: 99}]"])
    with pytest.raises(ConfigError, match="use reward.source=verifier"):
        load_config(RunConfig, None, base + ["reward.source=majority_vote"])


def test_an_adaptive_mixture_resumes_exactly_and_logs_its_probabilities(tmp_path):
    """4 steps in one run, and 2 steps then a resume to 4: the same rows (the adaptive weights, the tasks'
    positions and the draws are all checkpointed)."""
    tok = make_tokenizer()
    extra = ("rollout.max_new_tokens=6", MIXTURE, "mixture.adapt=learnable", "mixture.adapt_alpha=0.5",
             "train.save_every=1")

    def run(out, steps, resume=False):
        cfg = tiny_run_config(out, f"train.steps={steps}", *extra, *(["train.resume=true"] if resume else []))
        Recorder(cfg, model=make_model(tok), tokenizer=tok).train()
        return read_metrics(Path(out) / "metrics.jsonl")

    whole = run(tmp_path / "whole", 4)
    run(tmp_path / "split", 2)
    split = run(tmp_path / "split", 4, resume=True)
    timing = ("time", "_s", "tokens_per_s", "rss", "share")
    untimed = lambda r: {k: v for k, v in r.items() if not any(t in k for t in timing) or k.startswith("task/")}
    assert [untimed(r) for r in split] == [untimed(r) for r in whole]
    probs = [r["task/sums/probability"] for r in whole]
    assert all(0 < p < 1 for p in probs) and len(set(probs)) > 1  # the weights moved
    assert all("task/tags/learnable" in r for r in whole)


@settings(max_examples=60, deadline=None)
@given(labels=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6),
       correct=st.lists(st.integers(0, 1), min_size=4, max_size=4), lengths=st.lists(st.integers(1, 8), min_size=4,
                                                                                      max_size=4))
def test_the_reward_stage_scores_every_problem_by_its_own_tasks_rubric(labels, correct, lengths):
    """Tasks a and b have rubrics of their own, c none (the run's plain verifier reward): whatever the order of
    the groups, each group's rewards are its own task's rubric on it."""
    from rlvr.rewards.pipeline import RewardPipeline
    from rlvr.rewards.settings import RewardConfig, RewardFunctionSpec as F
    from rlvr.types import Sample, Verdict

    rubrics = {"a": [F(kind="verifier", params={"correct": 2.0})], "b": [F(kind="length"), F(kind="verifier")]}
    pipe = RewardPipeline(RewardConfig(), max_new_tokens=8, task_functions=rubrics)
    noise = torch.Generator().manual_seed(0)
    for i, label in enumerate(labels):
        problem = Problem(f"{label}/{i}", prompt="q", answer="1", metadata={"task": label})
        group = [Sample(problem.id, [1], [2] * n, [0.0] * n, "t", "stop", j, verdict=Verdict(float(c)),
                        env_return=float(c)) for j, (c, n) in enumerate(zip(correct, lengths))]
        got = pipe.score_group(problem, group, noise=noise).reward.tolist()
        want = {"a": [2.0 * c for c in correct], "b": [c - n / 8 for c, n in zip(correct, lengths)],
                "c": [float(c) for c in correct]}[label]
        assert got == pytest.approx(want, abs=1e-6)
