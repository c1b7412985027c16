"""``guidance.replay``: the policy's own earlier success replayed, off-policy, into a group that all fails."""

from __future__ import annotations

import zlib

import pytest
import torch

from conftest import make_model, make_tokenizer
from rl_harness import Recorder
from rlvr.config import ConfigError, load_config
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.config import RunConfig
from rlvr.rollout.guidance import ReplayBuffer
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Sample, Verdict
from test_guidance import G, SOLUTION, Scripted, Seen, _by_id, _cfg, _collect, _problems


def test_an_earlier_success_replaces_the_last_sample_of_a_failing_group():
    tok = make_tokenizer()
    eng = Scripted(tok, {"p0": 0})  # step 0: p0's sample 0 is right, p1 all wrong (and nothing to replay)
    buf = ReplayBuffer(10)
    cfg = _cfg("guidance.replay=true")
    first = _collect(eng, _problems(), cfg, Seen(), replay=buf)
    assert first.guidance_metrics["guidance/replay_groups"] == 0.0 and list(buf.items) == ["p0"]
    right = _by_id(first.samples)["p0"][0]
    eng.need = {}  # step 1: every sample wrong
    ro = _collect(eng, _problems(), cfg, Seen(), step=1, replay=buf)
    groups = _by_id(ro.samples)
    row = groups["p0"][-1]
    assert row.info["off_policy"] is True and row.info["guidance"] == "replay" and row.group_index == G - 1
    assert row.completion_ids == right.completion_ids and row.text == "RIGHT" and row.verdict.correct
    assert row.logprobs == [0.0] * len(row.completion_ids)  # trained as a demonstration: behaviour probability 1
    assert not any(s.info.get("off_policy") for s in groups["p0"][:-1] + groups["p1"])
    assert ro.guidance_metrics["guidance/replay_groups"] == 0.5
    assert float(ro.rewards[ro.samples.index(row)]) == 1.0


def test_replay_comes_before_a_demonstration_and_hinted_successes_are_not_kept():
    tok = make_tokenizer()
    buf = ReplayBuffer(10)
    cfg = _cfg("guidance.replay=true", "guidance.demonstrations=true", "guidance.hints=true")
    eng = Scripted(tok, {"p0": 0, "p1": 3})  # p1 succeeds only with a hint of 3 tokens
    _collect(eng, _problems(), cfg, Seen(), replay=buf)
    assert list(buf.items) == ["p0"]  # p1's hinted success is not the policy's own
    eng.need = {}
    ro = _collect(eng, _problems(), cfg, Seen(), step=1, replay=buf)
    groups = _by_id(ro.samples)
    assert groups["p0"][-1].info["guidance"] == "replay"
    assert groups["p1"][-1].info["guidance"] == "demo"  # nothing to replay: the reference solution
    assert groups["p1"][-1].text == SOLUTION


def test_a_replay_that_no_longer_passes_or_fits_is_not_inserted():
    tok = make_tokenizer()
    buf = ReplayBuffer(10)
    eng = Scripted(tok, {"p0": 0})
    _collect(eng, _problems(), _cfg("guidance.replay=true"), Seen(), replay=buf)
    eng.need = {}

    def strict(completion, reference):  # the checker changed: the old success no longer passes
        return Verdict(0.0, None, "strict")

    ro = _collect(eng, _problems(), _cfg("guidance.replay=true"), strict, step=1, replay=buf)
    assert not any(s.info.get("off_policy") for s in ro.samples)
    assert ro.guidance_metrics["guidance/replay_rejected"] == 1.0
    ro = _collect(eng, _problems(), _cfg("guidance.replay=true", "rollout.max_new_tokens=3"), Seen(), step=2,
                  replay=buf)  # "RIGHT" + EOS is 6 tokens
    assert not any(s.info.get("off_policy") for s in ro.samples)
    assert ro.guidance_metrics["guidance/replay_rejected"] == 1.0


def test_the_buffer_keeps_the_latest_success_evicts_the_oldest_and_round_trips():
    buf = ReplayBuffer(2)

    def group(pid, texts_ok):
        return [Sample(pid, [1], [ord(t[0])], [-1.0], t, "stop", i, verdict=Verdict(float(ok), None, ""))
                for i, (t, ok) in enumerate(texts_ok)]

    probs = [Problem(p, prompt="q", answer="a") for p in ("a", "b", "c")]
    buf.observe(probs[:1], [group("a", [("x", True), ("y", True)])])
    assert buf.get("a") == ([ord("y")], "y")  # the group's last correct sample
    buf.observe(probs[1:2], [group("b", [("z", True)])])
    buf.observe(probs[:1], [group("a", [("w", True)])])  # a is updated: now the most recent
    buf.observe(probs[2:], [group("c", [("v", True)])])  # capacity 2: b (least recently updated) goes
    assert list(buf.items) == ["a", "c"] and buf.get("a") == ([ord("w")], "w")
    buf.observe(probs[2:], [group("c", [("u", False)])])  # a failing group changes nothing
    other = ReplayBuffer(2)
    other.load_state_dict(buf.state_dict())
    assert other.items == buf.items


def test_through_the_recipe_replayed_rows_reach_the_batch_and_the_buffer_is_checkpointed(tmp_path):
    tok = make_tokenizer()
    probs = ([Problem(f"t{i}", prompt=f"{i}*5", answer="x") for i in range(2)], [Problem("h", prompt="1*1", answer="x")])

    def verify(completion, answer, **_):  # about one sample in five passes; deterministic in the text
        return Verdict(float(zlib.crc32(completion.encode()) % 5 == 0), None, "hash")

    cfg = load_config(RunConfig, None, [
        f"train.output_dir={tmp_path}", "train.steps=6", "train.prompts_per_step=2", f"rollout.group_size={G}",
        "rollout.max_new_tokens=8", "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=3", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", "guidance.replay=true"])
    r = Recorder(cfg, model=make_model(tok), tokenizer=tok, problems=probs, verifier=verify)
    r.train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert sum(row["guidance/replay_groups"] for row in rows) > 0
    latest: dict[str, list[int]] = {}
    for ro, scored in r.seen:
        flags = [bool(s.info.get("off_policy")) for s in ro.samples]
        for i, s in enumerate(ro.samples):
            if flags[i]:  # a replayed row is an earlier unaided success of its problem, trained off-policy
                assert s.completion_ids == latest[s.problem_id] and scored.advantages[i] > 0
        assert scored.batch.off_policy is None or scored.batch.off_policy.tolist() == flags
        for s in ro.samples:
            if s.verdict.correct and not s.info.get("off_policy"):
                latest[s.problem_id] = list(s.completion_ids)
    assert {k: ids for k, (ids, _) in r.replay.items.items()} == latest
    state = torch.load(latest_checkpoint(tmp_path) / "state.pt", weights_only=False)
    assert state["replay"] == r.replay.state_dict()


@pytest.mark.parametrize("extra, match", [
    (["env.name=retry"], "env.name=single_turn"),
    (["train.async_steps=1", "algorithm.is_correction=tis"], "train.async_steps"),
    (["distributed.fsdp=true"], "distributed.fsdp"),
    (["guidance.replay_capacity=0"], "guidance.replay_capacity"),
])
def test_config_refuses_what_replay_cannot_run(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, ["guidance.replay=true", *extra])
    with pytest.raises(ConfigError, match="replay is off"):
        load_config(RunConfig, None, ["guidance.replay_capacity=5"])
