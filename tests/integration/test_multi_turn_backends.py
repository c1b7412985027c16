"""Multi-turn environments with asynchronous rollouts (the generator process) and Ray rollout workers.

The generator process builds the environment from ``env.name`` / ``env.params`` and runs the same episode runner
as the in-process recipe, so a batch it sends equals the one collected in process from the same state; Ray
workers sample the turns of episodes the learner runs.  Either way a trajectory's mask marks the policy's tokens
only, and its log-probs are the policy's own on those tokens (0 on the environment's).
"""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from conftest import make_model, tiny_run_config
from rlvr.engines import HFEngine, SamplingParams
from rlvr.engines.base import missing_members
from rlvr.engines.hf import format_prompt
from rlvr.envs import build_environment
from rlvr.recipes.rl import train
from rlvr.rollout.async_rollouts import AsyncRollouts
from rlvr.rollout.collect import collect_rollouts
from rlvr.rollout.episodes import run_episodes
from rlvr.tasks.sampler import PromptSampler
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict

RETRY = ("env.name=retry", "env.params={attempts: 3}", "env.max_concurrency=2", "rollout.max_new_tokens=7")


def parity_verifier(completion: str, reference: str) -> Verdict:
    """Module level, so the rollout process can unpickle it; about half the turns are 'wrong' and go on."""
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _problems(n: int, prefix: str = "t") -> list[Problem]:
    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


def _check_trajectories(samples, model, tok, feedback: str) -> int:
    """Every multi-turn sample: mask 1 exactly on the sampled turns, whose log-probs are the model's own
    (teacher-forced over the whole trajectory), and 0 with log-prob 0 on the environment's feedback turns.
    Returns how many samples took more than one turn."""
    multi = 0
    for s in samples:
        if s.mask is None:  # ended at its first turn: the plain sampling path
            assert s.info["turns"] == 1
            continue
        multi += 1
        assert s.info["turns"] >= 2 and len(s.mask) == len(s.completion_ids) == len(s.logprobs)
        ends = s.info["turn_ends"]
        assert len(ends) == s.info["turns"]
        env_pos = [i for i, m in enumerate(s.mask) if m == 0]
        assert env_pos and all(s.logprobs[i] == 0.0 for i in env_pos)
        env_text = tok.decode([s.completion_ids[i] for i in env_pos])
        assert env_text.count(feedback) == s.info["turns"] - 1, env_text  # the feedback, once per later turn
        ids = torch.tensor([list(s.prompt_ids) + list(s.completion_ids)])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        P = len(s.prompt_ids)
        for i, (t, m, lp) in enumerate(zip(s.completion_ids, s.mask, s.logprobs)):
            if m:
                assert abs(float(logp[P + i - 1, t]) - lp) < 1e-3, (s.problem_id, i)
    return multi


FEEDBACK = "That is not correct. Try again, and put the final answer in \\boxed{}."


# ------------------------------------------------------------------ asynchronous rollouts
def test_the_generator_process_runs_the_episodes_the_recipe_runs(tmp_path, tiny_tokenizer):
    cfg = tiny_run_config(tmp_path, *RETRY, "train.rollout_worker=true")
    model = make_model(tiny_tokenizer)
    params = SamplingParams(n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens, temperature=1.0)
    state = torch.Generator().manual_seed(11).get_state()
    with AsyncRollouts(model, tiny_tokenizer, _problems(6), params, cfg.generator_settings(),
                       verifier=parity_verifier, dfilter=None, start=0, end=1, max_ahead=0, data_position=0,
                       generator_state=state) as w:
        got = w.get(0).rollouts
    # the same collection in this process, from the same state
    engine = HFEngine(model, tiny_tokenizer, batch_size=cfg.rollout.batch_size)
    engine.generator.set_state(state)
    env = build_environment("retry", parity_verifier, tiny_tokenizer, attempts=3)
    want = collect_rollouts(engine, PromptSampler(_problems(6), seed=cfg.train.seed), env, params,
                            cfg.collect_settings(), 0)
    assert [(s.problem_id, s.completion_ids, s.mask) for s in got.samples] == \
        [(s.problem_id, s.completion_ids, s.mask) for s in want.samples]
    assert [s.info["turns"] for s in got.samples] == [s.info["turns"] for s in want.samples]
    assert torch.equal(got.rewards, want.rewards)
    assert _check_trajectories(got.samples, model, tiny_tokenizer, FEEDBACK) > 0


def test_a_multi_turn_environment_trains_with_async_rollouts(tmp_path, tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    # the generator process builds its engine from rollout.engine_params as the config gives them (the shipped
    # demo-tools config sets cache_mb; the process once received the engine's converted keyword and refused it)
    cfg = tiny_run_config(tmp_path, *RETRY, "train.steps=2", "train.async_steps=1", "algorithm.is_correction=tis",
                          "rollout.engine_params={cache_mb: 1}")
    train(cfg, model=model, tokenizer=tiny_tokenizer, problems=(_problems(8), _problems(2, "h")),
          verifier=parity_verifier)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["staleness"] for r in rows] == [0, 1]
    assert all(1.0 < r["env/turns"] <= 3.0 for r in rows)  # episodes went on past their first turn
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ------------------------------------------------------------------ Ray rollout workers
@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray not installed (optional extra: pip install 'rlvr[distributed]')")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for attempt in range(3):  # Ray gives its raylet a fixed 30 s to register: too short on a saturated machine
        try:
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
            break
        except Exception as e:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_workers_sample_the_turns_of_episodes(cluster, tiny_tokenizer, tmp_path):
    from rlvr.distributed.ray_backend import EngineSpec, RayRolloutEngine

    model = make_model(tiny_tokenizer, seed=4)
    spec = EngineSpec(engine="hf", tokenizer=tiny_tokenizer, model_config=model.config, batch_size=16)
    eng = RayRolloutEngine(spec, model, num_workers=2, cpus_per_worker=0.5, seed=0)
    try:
        assert missing_members(eng) == [] and eng.prefix_cache() is None
        assert eng.eos_ids == {tiny_tokenizer.eos_token_id} and eng.pad_id == tiny_tokenizer.pad_token_id
        # prefixes travel with their problems' shards: each continues its own ids, as the local engine does
        probs = _problems(3)
        prefixes = [tiny_tokenizer.encode(t, add_special_tokens=False) for t in ("The", "It is", "")]
        params = SamplingParams(n=2, max_new_tokens=4, seed=5)
        groups = eng.generate(probs, params, prefixes=prefixes)
        local = HFEngine(model, tiny_tokenizer, batch_size=16)
        want = local.generate(probs[:2], params, prefixes=prefixes[:2]) + \
            local.generate(probs[2:], SamplingParams(n=2, max_new_tokens=4, seed=6), prefixes=prefixes[2:])
        assert [[s.completion_ids for s in g] for g in groups] == [[s.completion_ids for s in g] for g in want]
        assert [g[0].prompt_ids for g in groups] == \
            [format_prompt(tiny_tokenizer, p) + x for p, x in zip(probs, prefixes)]
        seen = []
        eng.on_chunk = lambda done, total: seen.append((done, total))
        env = build_environment("retry", parity_verifier, tiny_tokenizer, attempts=3)
        samples = [s for g in run_episodes(eng, env, _problems(4), SamplingParams(n=2, max_new_tokens=6, seed=1))
                   for s in g]
        assert seen[:2] == [(2, 4), (2, 4)]  # the first turn: one report per shard of the call's 4 problems
        assert _check_trajectories(samples, model, tiny_tokenizer, FEEDBACK) > 0
        eng.batch_size = 3  # evaluation's eval.batch_size: every worker's engine, and any worker started later
        assert eng.batch_size == 3 and eng.spec.batch_size == 3
    finally:
        eng.close()
        gc.collect()


@pytest.mark.slow
def test_a_multi_turn_environment_trains_on_ray_rollout_workers(cluster, tiny_tokenizer, tmp_path):
    model = make_model(tiny_tokenizer)
    cfg = tiny_run_config(tmp_path, *RETRY, "train.steps=2", "distributed.backend=ray",
                          "distributed.num_rollout_workers=1", "distributed.cpus_per_rollout_worker=0.5")
    train(cfg, model=model, tokenizer=tiny_tokenizer, problems=(_problems(8), _problems(2, "h")),
          verifier=parity_verifier)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(1.0 < r["env/turns"] <= 3.0 for r in rows)
    # the worker held exactly the learner's weights: the learner recomputes the sampler's log-probs
    assert all(r["logprob_mismatch"] < 1e-4 for r in rows if r.get("learner_seqs"))
    gc.collect()
