"""Asynchronous rollouts: versions and staleness, every prompt once, determinism, errors, the recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.config import ConfigError
from rlvr.engines import SamplingParams
from rlvr.rollout.async_rollouts import AsyncRollouts, pack_weights, required_version, trainable_names, unpack_weights
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import TrainingInterrupted, train
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict

from conftest import make_model, tiny_run_config


def parity_verifier(completion: str, reference: str) -> Verdict:
    """Module level, so the rollout process can unpickle it."""
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _problems(n: int, prefix: str = "t") -> list[Problem]:
    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


def _cfg(out: Path, *extra: str) -> RunConfig:
    return tiny_run_config(out, *extra)


def _run(tok, out, *extra, on_step=None):
    model = make_model(tok)
    train(_cfg(out, *extra), model=model, tokenizer=tok, problems=(_problems(10), _problems(2, "h")),
          verifier=parity_verifier, on_step=on_step)
    return model


def test_required_version_and_weight_packing(tiny_tokenizer):
    assert [required_version(b, 0, 0) for b in range(4)] == [0, 1, 2, 3]
    assert [required_version(b, 0, 2) for b in range(5)] == [0, 0, 0, 1, 2]
    assert [required_version(b, 3, 1) for b in range(3, 6)] == [3, 3, 4]
    a, b = make_model(tiny_tokenizer, seed=0), make_model(tiny_tokenizer, seed=1)
    names = trainable_names(a)
    unpack_weights(b, names, pack_weights(a, names))
    for (n, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), n
    with pytest.raises(ValueError, match="holds"):
        unpack_weights(b, names, torch.zeros(3))


def test_every_prompt_once_and_staleness_at_most_k(tmp_path, tiny_tokenizer, k=2):
    """A fake learner: consume batches in order, change the weights, publish each version."""
    cfg = _cfg(tmp_path)
    steps, P = 5, 2
    model = make_model(tiny_tokenizer)
    problems = _problems(steps * P)
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(n=2, max_new_tokens=4)
    seen, versions = [], []
    with AsyncRollouts(model, tiny_tokenizer, problems, params, cfg.generator_settings(), verifier=parity_verifier,
                       dfilter=None,
                       start=0, end=steps, max_ahead=k, data_position=0, generator_state=gen.get_state()) as w:
        for step in range(steps):
            rb = w.get(step)
            assert rb.index == step and 0 <= rb.staleness <= k
            assert rb.state["data_position"] == (step + 1) * P
            assert rb.rollouts.rewards.shape == (P * 2,) and rb.peak_rss_mb > 0 and rb.gen_time > 0
            seen += [s.problem_id for s in rb.rollouts.samples[::2]]
            versions.append(rb.version)
            with torch.no_grad():
                model.model.norm.weight.add_(1.0)  # "an update"
            w.send_weights(step + 1, model)
    assert sorted(seen) == sorted(p.id for p in problems)  # every prompt exactly once
    assert seen == [p.id for p in _order(problems, cfg.train.seed)]  # in the sampler's order
    assert versions == [max(0, b - k) for b in range(steps)]


def _order(problems, seed):
    from rlvr.tasks.sampler import PromptSampler

    return PromptSampler(problems, seed=seed).next(len(problems))


def test_worker_errors_reach_the_learner(tmp_path, tiny_tokenizer):
    with pytest.raises(ConfigError, match="reward.verifier: unknown verifier 'no_such_verifier'"):
        _cfg(tmp_path, "reward.verifier=no_such_verifier")  # refused at load in normal use
    cfg = _cfg(tmp_path)
    cfg.reward.verifier = "no_such_verifier"  # forced past validation: the worker process fails on it
    model = make_model(tiny_tokenizer)
    with AsyncRollouts(model, tiny_tokenizer, _problems(4), SamplingParams(n=2, max_new_tokens=2),
                       cfg.generator_settings(), verifier=None, dfilter=None, start=0, end=2, max_ahead=1, data_position=0,
                       generator_state=torch.Generator().get_state()) as w:
        with pytest.raises(RuntimeError, match="(?s)rollout process failed.*no_such_verifier"):
            w.get(0)
    with pytest.raises(ValueError, match="picklable"):
        AsyncRollouts(model, tiny_tokenizer, _problems(4), SamplingParams(), cfg.generator_settings(),
                      verifier=lambda c, r: None,
                      dfilter=None, start=0, end=1, max_ahead=0, data_position=0,
                      generator_state=torch.Generator().get_state())


def test_config_requires_an_importance_correction(tmp_path):
    with pytest.raises(ConfigError, match="is_correction"):
        _cfg(tmp_path, "train.async_steps=1")
    with pytest.raises(ConfigError, match="async_steps"):
        _cfg(tmp_path, "train.async_steps=-1")


def test_on_policy_worker_matches_the_in_process_loop(tmp_path, tiny_tokenizer):
    inproc = _run(tiny_tokenizer, tmp_path / "a")
    worker = _run(tiny_tokenizer, tmp_path / "b", "train.rollout_worker=true")
    for (n, x), y in zip(inproc.state_dict().items(), worker.state_dict().values()):
        assert torch.equal(x, y), n
    a, b = read_metrics(tmp_path / "a" / "metrics.jsonl"), read_metrics(tmp_path / "b" / "metrics.jsonl")
    assert [r["reward_mean"] for r in a] == [r["reward_mean"] for r in b]
    assert all(r["staleness"] == 0 for r in b)
    for r in a + b:  # the accounting fields land in every row
        assert {"gen_time", "verify_time", "learn_time", "sync_time", "step_time", "tokens_per_s",
                "step_tokens_per_s", "peak_rss_mb"} <= r.keys()
        assert r["learn_time"] > 0 and r["peak_rss_mb"] > 0
    for r in a:  # in process: the phases are disjoint parts of the step
        assert r["gen_time"] + r["verify_time"] + r["learn_time"] + r["sync_time"] <= r["step_time"] + 1e-6
        assert r["wait_time"] == 0
    for r in b:  # generation happens in the other process; the learner waits, learns, syncs
        assert r["wait_time"] + r["learn_time"] + r["sync_time"] <= r["step_time"] + 1e-6
    assert all(r["wait_time"] > 0 and r["rollout_peak_rss_mb"] > 0 for r in b)


def test_async_run_is_deterministic_k_stale_and_resumes_on_the_same_prompts(tmp_path, tiny_tokenizer):
    extra = ("train.async_steps=1", "algorithm.is_correction=tis", "train.steps=4")
    _run(tiny_tokenizer, tmp_path / "full", *extra)
    rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    assert [r["staleness"] for r in rows] == [0, 1, 1, 1]
    assert [r["policy_version"] for r in rows] == [0, 0, 1, 2]
    assert all(r["wait_time"] >= 0 and r["sync_time"] > 0 for r in rows)
    # sampled by a stale policy: the learner sees a log-prob gap (an on-policy fp32 run has < 1e-4)
    assert any(r["logprob_mismatch"] > 1e-4 for r in rows[1:] if r["learner_seqs"])

    def stop_after_two(row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        _run(tiny_tokenizer, tmp_path / "split", *extra, on_step=stop_after_two)
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    keys = ("reward_mean", "response_length", "loss", "policy_version", "logprob_mismatch")
    # deterministic: the same batches and updates as the uninterrupted run, whatever the timing
    assert [[r.get(k) for k in keys] for r in split] == [[r.get(k) for k in keys] for r in rows[:2]]
    ckpt = latest_checkpoint(tmp_path / "split")
    assert ckpt.name == "step-000002"
    state = torch.load(ckpt / "state.pt", weights_only=False)
    assert state["data_position"] == 2 * 2  # two consumed batches of 2 prompts; the k-ahead batch is not lost
    _run(tiny_tokenizer, tmp_path / "split", *extra, "train.resume=true")
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    assert [r["step"] for r in split] == [1, 2, 3, 4]
    assert [r["staleness"] for r in split] == [0, 1, 0, 1]  # the resumed run starts on-policy
    final = torch.load(latest_checkpoint(tmp_path / "split") / "state.pt", weights_only=False)
    assert final["data_position"] == 4 * 2
