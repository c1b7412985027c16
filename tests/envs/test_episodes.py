"""Episodes token in, token out: the learner sees exactly the sampled ids, the mask covers only them."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import make_model, make_tokenizer
from rlvr.engines import SamplingParams
from rlvr.engines.hf import HFEngine
from rlvr.envs import Environment, EpisodeState, Limits, Reply, SingleTurnEnvironment
from rlvr.learner.batching import collate, completion_start, packed_logprobs, policy_logprobs
from rlvr.rollout.episodes import episode_metrics, run_episodes
from rlvr.types import Problem, Verdict


class Scripted(Environment):
    """Answers every turn with an observation until ``turns`` turns, then ends with reward 1."""

    def __init__(self, turns: int, role: str, limits: Limits | None = None):
        self.turns, self.role = turns, role
        self.limits = limits or Limits(max_turns=turns)

    def step(self, state: EpisodeState, text: str) -> Reply:
        state.data.setdefault("texts", []).append(text)
        if state.turn + 1 >= self.turns:
            return Reply(done=True, reward=1.0, verdict=Verdict(1.0, text, "end"))
        return Reply(observation=f"obs {state.turn}: 12+3=15\n", role=self.role, info={"tool_calls": 1})


class Recording:
    """An engine proxy that records every sampled turn's ids and log-probs (``cache=False`` hides the KV prefix
    cache, so every turn re-feeds the whole trajectory)."""

    def __init__(self, engine, cache: bool = True):
        self.engine, self.calls, self.use_cache = engine, [], cache

    def __getattr__(self, name):
        if name == "prefix_cache" and not self.use_cache:
            return lambda: None  # the contract's "no prefix cache"
        return getattr(self.engine, name)

    def generate(self, problems, params, prefixes=None, **kw):
        groups = self.engine.generate(problems, params, prefixes=prefixes, **kw)
        self.calls.append((copy.deepcopy(prefixes), copy.deepcopy(groups)))
        return groups


def _engine(tok, seed=0):
    model = make_model(tok, seed=seed)
    eng = HFEngine(model, tok, batch_size=16)
    eng.generator.manual_seed(3)
    return model, eng


def _problems(k=3):
    return [Problem(f"p{i}", prompt=f"What is {i}+{i}?", answer=str(2 * i)) for i in range(k)]


@pytest.mark.parametrize("role,cache", [("inline", True), ("user", True), ("tool", True), ("user", False)])
def test_learner_ids_equal_sampled_ids_across_turns(role, cache):
    tok = make_tokenizer()
    model, eng = _engine(tok)
    rec = Recording(eng, cache=cache)
    params = SamplingParams(n=2, max_new_tokens=6, temperature=1.0)
    groups = run_episodes(rec, Scripted(3, role), _problems(), params)
    samples = [s for g in groups for s in g]
    assert all(s.info["turns"] == 3 and s.info["end"] == "done" for s in samples)
    # rebuild every trajectory from what the engine sampled: turn ids + env ids in between, nothing re-encoded
    first = [s for g in rec.calls[0][1] for s in g]
    for i, s in enumerate(samples):
        ends = s.info["turn_ends"]
        assert s.completion_ids[:ends[0]] == first[i].completion_ids
        assert s.logprobs[:ends[0]] == first[i].logprobs
        assert s.mask[:ends[0]] == [1] * ends[0]
    # later turns: each continuation's prefix is exactly the trajectory so far, and its ids are appended as sampled
    for prefixes, outs in rec.calls[1:]:
        for prefix, (cont,) in zip(prefixes, outs):
            owner = next(s for s in samples if s.completion_ids[:len(prefix)] == prefix
                         and s.completion_ids[len(prefix):len(prefix) + cont.num_tokens] == cont.completion_ids)
            k = len(prefix)
            assert owner.mask[k:k + cont.num_tokens] == [1] * cont.num_tokens
            assert owner.logprobs[k:k + cont.num_tokens] == cont.logprobs
    # environment tokens: masked out, zero log-prob, and they decode to the observation
    for s in samples:
        env_ids = [t for t, m in zip(s.completion_ids, s.mask) if not m]
        assert "obs 0: 12+3=15" in tok.decode(env_ids)
        assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.mask) if not m)
    # the learner's batch holds the same ids, and its mask is the episode's mask
    batch = collate(samples, torch.zeros(len(samples)), eng.pad_id)
    P = completion_start(batch)
    for i, s in enumerate(samples):
        c = len(s.completion_ids)
        assert batch.input_ids[i, P - len(s.prompt_ids):P].tolist() == s.prompt_ids
        assert batch.input_ids[i, P:P + c].tolist() == s.completion_ids
        assert batch.completion_mask[i, P:P + c].tolist() == [float(m) for m in s.mask]
    # sampler and learner log-probs agree on every policy token
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, P)
    m = batch.completion_mask[:, P:].bool()
    assert m.sum() > 0
    torch.testing.assert_close(logp[m], batch.sampler_logprobs[:, P:][m], atol=2e-4, rtol=0)
    # the same through the chunked LM head, packed rows and packed rows sharing each group's prompt (the demo's
    # memory options train.logprob_chunk_size, micro_batch_tokens, share_prompts)
    with torch.no_grad():
        chunked, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, P, chunk_size=5)
        packed, _ = packed_logprobs(model, batch.input_ids, batch.attention_mask, P, chunk_size=5)
        shared, _ = packed_logprobs(model, batch.input_ids, batch.attention_mask, P, chunk_size=5, share_prompts=True)
    torch.testing.assert_close(chunked[m], batch.sampler_logprobs[:, P:][m], atol=2e-4, rtol=0)
    torch.testing.assert_close(packed[m], batch.sampler_logprobs[:, P:][m], atol=2e-4, rtol=0)
    torch.testing.assert_close(shared[m], batch.sampler_logprobs[:, P:][m], atol=2e-4, rtol=0)


def test_message_observation_is_rendered_by_the_chat_template():
    tok = make_tokenizer()
    _, eng = _engine(tok)
    rec = Recording(eng)
    groups = run_episodes(rec, Scripted(2, "user"), _problems(1), SamplingParams(n=1, max_new_tokens=5))
    s = groups[0][0]
    ends = s.info["turn_ends"]
    prefix = rec.calls[1][0][0]  # the trajectory handed to the engine for turn 2
    env_ids = prefix[ends[0]:]
    assert s.completion_ids[:len(prefix)] == prefix
    text = tok.decode(env_ids)
    closed = "" if s.completion_ids[ends[0] - 1] == tok.eos_token_id else "<|im_end|>"
    assert text == closed + "\n<|im_start|>user\nobs 0: 12+3=15\n<|im_end|>\n<|im_start|>assistant\n"


def test_single_turn_environment_is_the_plain_sampling_path():
    tok = make_tokenizer()
    probs = _problems(4)
    params = SamplingParams(n=3, max_new_tokens=8)
    _, eng_a = _engine(tok)
    plain = eng_a.generate(probs, params)
    _, eng_b = _engine(tok)
    verifier = lambda text, ref: Verdict(1.0 if ref in text else 0.0, None, "")  # noqa: E731
    episodes = run_episodes(eng_b, SingleTurnEnvironment(verifier), probs, params)
    for ga, gb in zip(plain, episodes):
        for a, b in zip(ga, gb):
            assert (a.completion_ids, a.logprobs, a.text, b.mask) == (b.completion_ids, b.logprobs, b.text, None)
            assert b.info["turns"] == 1 and b.env_return == float(b.verdict.correct)


@pytest.mark.parametrize("env", ["single_turn", "tools", "retry"])
def test_partial_credit_reaches_the_reward(env):
    """A verifier's fractional score (``partial=True`` code/instruction verifiers, reasoning-gym) is the reward,
    not rounded to correct/wrong: the environments once paid 1.0 for any score above 0."""
    from rlvr.envs import ENVIRONMENTS

    tok = make_tokenizer()
    verifier = lambda text, ref: Verdict(0.25, None, "1/4 constraints met")  # noqa: E731
    params = {"tools": {"tools": ["calculator"], "max_turns": 2}, "retry": {"attempts": 2}}.get(env, {})
    environment = ENVIRONMENTS.build(env, verifier, tok, **params)
    state = environment.reset(_problems(1)[0])
    reply = environment.step(state, "the answer is 12")
    assert reply.done and reply.reward == 0.25


def test_limits_end_episodes_max_turns_and_tokens():
    tok = make_tokenizer()
    _, eng = _engine(tok)
    groups = run_episodes(eng, Scripted(10, "inline", Limits(max_turns=3)), _problems(2),
                          SamplingParams(n=2, max_new_tokens=4))
    for s in (s for g in groups for s in g):
        assert s.info["turns"] == 3 and s.info["end"] == "max_turns" and s.env_return == 0.0
        assert not s.verdict.correct
    groups = run_episodes(eng, Scripted(10, "inline", Limits(max_turns=10, max_total_tokens=30)), _problems(2),
                          SamplingParams(n=2, max_new_tokens=4))
    for s in (s for g in groups for s in g):
        assert len(s.completion_ids) <= 30 and s.info["end"] == "max_total_tokens"


class Raises(Environment):
    limits = Limits(max_turns=3)

    def step(self, state, text):
        if state.problem.id == "p1":
            raise RuntimeError("boom")
        return Reply(done=True, reward=1.0, verdict=Verdict(1.0, None, "ok"))


def test_an_environment_that_raises_ends_only_its_episode(caplog):
    tok = make_tokenizer()
    _, eng = _engine(tok)
    groups = run_episodes(eng, Raises(), _problems(3), SamplingParams(n=2, max_new_tokens=4))
    bad = [s for s in groups[1]]
    assert all(s.env_return == 0.0 and "environment error: RuntimeError: boom" in s.verdict.reason
               for s in bad)
    assert all(s.env_return == 1.0 for g in (groups[0], groups[2]) for s in g)
    assert "boom" in caplog.text
    m = episode_metrics([s for g in groups for s in g])
    assert m["env/env_errors"] == pytest.approx(2 / 6)
