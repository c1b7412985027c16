"""Reward sources in the training loop: every source trains, TTRL logs its pseudo-label accuracy, random is seeded
and resumable, refusals come when the config loads, and the default source is today's reward bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from conftest import make_model, make_tokenizer, tiny_run_config
from rl_harness import Recorder
from rlvr.recipes.config import RunConfig
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict


def _cfg(out: Path, *extra: str) -> RunConfig:
    return tiny_run_config(out, "train.steps=2", "rollout.max_new_tokens=6", *extra)


def _last_digit(completion: str, reference: str) -> Verdict:
    """The answer is the completion's length mod 3 (a few distinct answers, so groups vote); right if it is the
    reference."""
    a = str(len(completion) % 3)
    return Verdict(1.0 if a == reference else 0.0, a, "len mod 3")


PROBS = ([Problem(f"t{i}", prompt=f"{i}*3", answer=str(i % 3)) for i in range(8)],
         [Problem(f"h{i}", prompt=f"{i}*7", answer=str(i % 3)) for i in range(3)])


def _run(out, *extra, recipe=Recorder, seed=0):
    tok = make_tokenizer()
    r = recipe(_cfg(out, *extra), model=make_model(tok, seed=seed), tokenizer=tok, problems=PROBS,
               verifier=_last_digit)
    r.train()
    return r, read_metrics(Path(out) / "metrics.jsonl")


@pytest.mark.parametrize("source", ["verifier", "majority_vote", "random", "format_only", "self_certainty",
                                    "reference_likelihood"])
def test_every_source_trains_two_steps(tmp_path, source):
    r, rows = _run(tmp_path, f"reward.source={source}")
    assert [row["step"] for row in rows] == [1, 2]
    for ro, scored in r.seen:
        assert scored.rewards.shape == (8,) and torch.isfinite(scored.rewards).all()
        assert torch.isfinite(scored.advantages).all()
    if source == "self_certainty":
        assert all(row["reward/self_certainty_mean"] > 0 for row in rows)
    if source == "reference_likelihood":
        assert all(0.0 <= row["rlpr/prob_mean"] <= 1.0 and "rlpr/prob_no_reasoning" in row for row in rows)
        assert all(0.0 <= float(x) <= 1.0 for _, s in r.seen for x in s.rewards)  # clipped debiased reward


def test_the_reference_log_likelihood_trains_on_the_policys_mean_log_prob_of_the_reference(tmp_path):
    r, rows = _run(tmp_path, "reward.source=reference_likelihood",
                   "reward.source_params={aggregate: mean_logprob, debias: false, clip: false}")
    for (_, scored), row in zip(r.seen, rows):
        assert bool((scored.rewards < 0).all())  # log-probs of a reference the tiny policy does not know
        assert float(scored.rewards.mean()) == pytest.approx(row["rlpr/prob_mean"], rel=1e-5)


def test_majority_vote_rewards_are_the_hand_computed_majority_and_label_accuracy_is_logged(tmp_path):
    r, rows = _run(tmp_path, "reward.source=majority_vote")
    assert all("reward/pseudo_label_accuracy" in row and "ttrl/label_accuracy" in row for row in rows)
    G = 4
    for (ro, scored), row in zip(r.seen, rows):
        answers = [v.extracted for v in ro.verdicts]
        expected, label_acc = [], []
        for g in range(0, len(answers), G):
            grp = answers[g:g + G]
            counts = {a: grp.count(a) for a in grp}
            best = max(counts.values())
            label = next(a for a in grp if counts[a] == best)  # ties: first seen
            expected += [1.0 if a == label else 0.0 for a in grp]
            truth = PROBS[0][int(ro.samples[g].problem_id[1:])].answer
            label_acc.append(float(label == truth))
        assert scored.rewards.tolist() == expected
        assert row["reward/pseudo_label_accuracy"] == pytest.approx(sum(label_acc) / len(label_acc))
        assert row["reward_mean"] == pytest.approx(sum(expected) / len(expected))
        # the true accuracy is still the verifier's
        assert row["accuracy"] == pytest.approx(sum(v.correct for v in ro.verdicts) / len(ro.verdicts))


def test_random_source_is_seeded_and_resumes_exactly(tmp_path):
    a, rows_a = _run(tmp_path / "a", "reward.source=random", "train.steps=3", "train.save_every=1")
    b, rows_b = _run(tmp_path / "b", "reward.source=random", "train.steps=3")
    ra = [s.rewards.tolist() for _, s in a.seen]
    assert ra == [s.rewards.tolist() for _, s in b.seen]  # same seed, same draws
    c, _ = _run(tmp_path / "c", "reward.source=random", "reward.source_params={seed: 7}", "train.steps=3")
    assert ra != [s.rewards.tolist() for _, s in c.seen]
    # resume: 2 steps, then 1 more from the checkpoint, gives the 3-step run's rewards
    _run(tmp_path / "d", "reward.source=random", "train.steps=2", "train.save_every=1")
    d, rows_d = _run(tmp_path / "d", "reward.source=random", "train.steps=3", "train.resume=true")
    assert [s.rewards.tolist() for _, s in d.seen] == ra[2:]
    assert [row["reward_mean"] for row in rows_d] == [row["reward_mean"] for row in rows_a]


def test_default_source_is_bit_identical_to_an_unset_source(tmp_path):
    base, rows0 = _run(tmp_path / "unset")
    same, rows1 = _run(tmp_path / "set", "reward.source=verifier", "reward.source_params={}")
    for (ro, s0), (_, s1) in zip(base.seen, same.seen):
        assert torch.equal(s0.rewards, s1.rewards) and torch.equal(s0.advantages, s1.advantages)
        # today's reward: wrong_reward + (correct_reward - wrong_reward) * verdict (1 / 0 here)
        assert s0.rewards.tolist() == [float(v.correct) for v in ro.verdicts]
    clean = lambda rs: [{k: v for k, v in r.items() if not any(t in k for t in ("time", "per_s", "rss", "verify_share"))}  # noqa
                        for r in rs]
    assert clean(rows0) == clean(rows1)
    assert not any(k.startswith(("ttrl/", "reward/", "process/", "rlpr/")) for k in rows0[0])


def test_unsuitable_sources_are_refused_when_the_config_loads(tmp_path):
    with pytest.raises(ValueError, match="code_stdio.*extracts none"):
        _cfg(tmp_path, "reward.source=majority_vote", "reward.verifier=code_stdio")
    with pytest.raises(ValueError, match="format_only"):
        _cfg(tmp_path, "reward.source=format_only", "reward.verifier=instruction")
    with pytest.raises(ValueError, match="reward.source"):
        _cfg(tmp_path, "reward.source=majority_votes")
    with pytest.raises(ValueError, match="min_share"):
        _cfg(tmp_path, "reward.source=majority_vote", "reward.source_params={min_share: 2}")
    with pytest.raises(ValueError, match="aggregate"):
        _cfg(tmp_path, "reward.source=reference_likelihood", "reward.source_params={aggregate: median}")
    with pytest.raises(ValueError, match="dynamic_sampling"):
        _cfg(tmp_path, "reward.source=self_certainty", "algorithm.dynamic_sampling=true")
    with pytest.raises(ValueError, match="reward.shaping.laser shapes the verifier's verdict"):
        _cfg(tmp_path, "reward.source=random", "reward.shaping={laser: {target_length: 10}}")
    with pytest.raises(ValueError, match="flip_false_positive"):
        _cfg(tmp_path, "reward.source=random", "reward.flip_false_positive=0.1")
    with pytest.raises(ValueError, match="in-process recipe only"):
        _cfg(tmp_path, "reward.source=majority_vote", "train.rollout_worker=true")
    with pytest.raises(ValueError, match="single_turn"):
        _cfg(tmp_path, "reward.source=self_certainty", "env.name=retry")
    _cfg(tmp_path, "reward.source=majority_vote")  # numeric answers vote fine


def test_majority_vote_with_dynamic_sampling_sees_the_source_rewards(tmp_path):
    r, rows = _run(tmp_path, "reward.source=majority_vote", "algorithm.dynamic_sampling=true",
                   "algorithm.max_sampling_rounds=3", "train.steps=1")
    ro, scored = r.seen[0]
    G = 4
    groups = scored.rewards.reshape(-1, G)
    # a group the buffer kept is one whose *source* rewards vary, unless it was a top-up after the last round
    assert rows[0]["sampling_rounds"] >= 1
    if rows[0]["sampling_rounds"] < 3:
        assert all(float(g.std()) > 0 for g in groups)
    assert not math.isnan(rows[0]["reward/pseudo_label_accuracy"])


@pytest.mark.parametrize("source,extra", [
    ("majority_vote", ("algorithm.advantage=gae",)),
    ("self_certainty", ("algorithm.advantage=rloo", "algorithm.kl_coef=0.1", "algorithm.kl_in_reward=true")),
    ("reference_likelihood", ("algorithm.advantage=drgrpo", "reward.source_params={std_threshold: 0.5}")),
    ("format_only", ("algorithm.advantage=entropy_guided",)),
    ("random", ("algorithm.advantage=passk", "algorithm.advantage_params={k: 2}")),
])
def test_sources_compose_with_other_estimators(tmp_path, source, extra):
    r, rows = _run(tmp_path, f"reward.source={source}", "train.steps=1", *extra)
    ro, scored = r.seen[0]
    assert torch.isfinite(scored.advantages).all() and rows[0]["step"] == 1
    if source == "reference_likelihood":  # RLPR's std filter: a group whose rewards barely vary trains on nothing
        keep = rows[0]["rlpr/kept"]
        assert 0.0 <= keep <= 1.0
        groups = scored.advantages.reshape(-1, 4)
        stds = scored.rewards.reshape(-1, 4).std(dim=1)
        for g, sd in zip(groups, stds):
            if float(sd) < 0.5:
                assert g.abs().sum() == 0


def test_reference_likelihood_needs_a_reference_answer(tiny_tokenizer):
    from rlvr.learner.passes import _reference_batch, reasoning_before_answer

    assert reasoning_before_answer("so 3+4 = \\boxed{6}, no \\boxed{7}") == "so 3+4 = \\boxed{6}, no "
    assert reasoning_before_answer("no box") == "no box"
    from rlvr.types import Sample

    s = Sample("q", [5, 6], [7], [0.0], "x \\boxed{1}", "stop")
    batch, lengths = _reference_batch([s, s], {"q": Problem("q", prompt="?", answer="12")}, tiny_tokenizer, 2, 0)
    assert lengths == [2] and batch.input_ids.shape[0] == 3  # 2 samples + the no-reasoning row
    assert batch.completion_mask.sum(1).tolist() == [2.0, 2.0, 2.0]  # only the reference's tokens are scored
    assert tiny_tokenizer.decode(batch.input_ids[0, -len("x \\boxed{12"):]) == "x \\boxed{12"
    assert tiny_tokenizer.decode(batch.input_ids[2][batch.attention_mask[2].bool()][2:]) == "\\boxed{12"
    with pytest.raises(ValueError, match="no reference answer"):
        _reference_batch([s, s], {"q": Problem("q", prompt="?", answer="")}, tiny_tokenizer, 2, 0)


def test_every_registered_source_loads_in_process_and_is_refused_where_it_cannot_run(tmp_path):
    from rlvr.rewards.sources import REWARD_SOURCES

    for name in REWARD_SOURCES.names():
        _cfg(tmp_path, f"reward.source={name}")
        if name == "verifier":
            continue
        for extra in (("train.async_steps=1", "algorithm.is_correction=tis"),
                      ("distributed.fsdp=true", "distributed.mixed_precision=none")):
            with pytest.raises(ValueError, match="in-process recipe only"):
                _cfg(tmp_path, f"reward.source={name}", *extra)
