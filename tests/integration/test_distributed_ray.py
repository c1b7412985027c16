"""Ray rollout workers (``distributed.backend: ray``): placement, sharding, weight broadcast, fault tolerance.

The Ray tests run a local 2-CPU cluster with tiny models: two rollout actors,
one per placement-group bundle.  The fault tests kill a worker in the middle of
a ``generate`` (the process exits inside the method, or ``ray.kill`` from
outside) and check that every prompt's group arrives exactly once and equals
what an undisturbed run produces with the same seed.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import close, make_model
from rlvr.config import load_config
from rlvr.distributed.ray_backend import (RAY_MISSING, EngineSpec, RolloutWorker, check_groups, import_ray,
                                          shard_bounds)
from rlvr.engines import HFEngine, SamplingParams
from rlvr.recipes.config import RunConfig
from rlvr.types import Problem, Sample


PROBLEMS = [Problem(f"q{i}", f"What is {i} + {i + 1}?", str(2 * i + 1)) for i in range(5)]
PARAMS = SamplingParams(n=3, max_new_tokens=6, temperature=1.0)


# ------------------------------------------------------------------ no cluster needed
def test_shard_bounds_cover_every_item_once():
    assert shard_bounds(5, 2) == [(0, 3), (3, 5)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2)]  # more workers than prompts: idle workers get nothing
    for items in range(0, 9):
        for shards in range(1, 5):
            covered = [i for lo, hi in shard_bounds(items, shards) for i in range(lo, hi)]
            assert covered == list(range(items))


def test_check_groups_rejects_lost_or_duplicated_samples():
    def s(pid, g):
        return Sample(pid, [1], [2], [-1.0], "x", "stop", g)

    probs = PROBLEMS[:2]
    check_groups(probs, [[s("q0", 0), s("q0", 1)], [s("q1", 1), s("q1", 0)]], 2)
    with pytest.raises(RuntimeError, match="2 groups for"):
        check_groups(PROBLEMS[:3], [[s("q0", 0), s("q0", 1)], [s("q1", 0), s("q1", 1)]], 2)
    with pytest.raises(RuntimeError, match="q1"):  # a duplicated sample in place of a lost one
        check_groups(probs, [[s("q0", 0), s("q0", 1)], [s("q1", 0), s("q1", 0)]], 2)


def test_missing_ray_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[distributed\]'") as e:
        import_ray()
    assert str(e.value) == RAY_MISSING


def test_default_path_imports_neither_ray_nor_vllm():
    code = ("import sys, rlvr.recipes.rl, rlvr.rollout, rlvr.cli; "
            "bad = [m for m in ('ray', 'vllm') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=900)  # generous: shared, loaded CI machines


def test_config_section():
    cfg = load_config(RunConfig, None, ["distributed.backend=ray", "distributed.num_rollout_workers=4",
                                        "distributed.placement_strategy=SPREAD", "rollout.engine=vllm",
                                        "rollout.engine_params={sleep: true}"])
    assert (cfg.distributed.backend, cfg.distributed.num_rollout_workers) == ("ray", 4)
    with pytest.raises(ValueError, match="num_rollout_workers"):
        load_config(RunConfig, None, ["distributed.backend=ray", "distributed.num_rollout_workers=0"])
    with pytest.raises(ValueError, match="async_steps"):
        load_config(RunConfig, None, ["distributed.backend=ray", "train.async_steps=1",
                                      "algorithm.is_correction=tis"])
    with pytest.raises(Exception, match="placement_strategy"):
        load_config(RunConfig, None, ["distributed.placement_strategy=ANYWHERE"])


# ------------------------------------------------------------------ a local 2-CPU Ray cluster
@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray not installed (optional extra: pip install 'rlvr[distributed]')")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # FlakyWorker below lives here
    for attempt in range(3):  # Ray gives its raylet a fixed 30 s to register: too short on a saturated machine
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception as e:  # "The current node timed out during startup"
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
    yield ray
    ray.shutdown()


class FlakyWorker(RolloutWorker):
    """A rollout worker that fails on demand, driven by files (its class is pickled once, files are live).

    ``crash``: the first worker to claim this file exits inside ``generate``, like a segfault or an OOM kill.
    ``slow``: the worker whose process id this file holds, in its first ``generate`` after the file appears,
    creates ``busy`` and waits (up to 60 s) to be ``ray.kill``-ed mid-call; the test kills it once ``busy`` exists,
    so the kill lands inside the call however loaded the machine is.
    """

    dir = ""

    def generate(self, problems, params):
        slow = os.path.join(self.dir, "slow")
        if os.path.exists(slow) and Path(slow).read_text() == str(os.getpid()):
            try:
                os.close(os.open(os.path.join(self.dir, "busy"), os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                end = time.monotonic() + 60
                while time.monotonic() < end:  # killed in here
                    time.sleep(0.05)
        try:
            os.close(os.open(os.path.join(self.dir, "crash"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return super().generate(problems, params)
        os._exit(1)


@pytest.fixture(scope="module")
def flaky(cluster, tiny_tokenizer, tmp_path_factory):
    """Two rollout workers (half a CPU each, leaving room for the end-to-end test) on a tiny model."""
    from rlvr.distributed.ray_backend import RayRolloutEngine

    FlakyWorker.dir = str(tmp_path_factory.mktemp("faults"))
    (Path(FlakyWorker.dir) / "crash").touch()  # no crash until a test removes it
    model = make_model(tiny_tokenizer, seed=4)
    spec = EngineSpec(engine="hf", tokenizer=tiny_tokenizer, model_config=model.config, batch_size=16)
    eng = RayRolloutEngine(spec, model, num_workers=2, cpus_per_worker=0.5, max_restarts=1, seed=0,
                           pad_id=tiny_tokenizer.pad_token_id, worker_cls=FlakyWorker)
    yield eng, model
    eng.close()
    gc.collect()


def _key(groups):
    return [[(s.problem_id, s.group_index, s.completion_ids, s.finish_reason) for s in g] for g in groups]


def _local(model, tok, seed):
    """What the two workers must return for PROBLEMS: shard k = problems[lo:hi], sampled with seed + k."""
    local = HFEngine(model, tok, batch_size=16)
    return (local.generate(PROBLEMS[:3], SamplingParams(**{**PARAMS.__dict__, "seed": seed})) +
            local.generate(PROBLEMS[3:], SamplingParams(**{**PARAMS.__dict__, "seed": seed + 1})))


def _params(seed):
    return SamplingParams(**{**PARAMS.__dict__, "seed": seed})


def test_workers_sample_like_the_local_engine_with_the_learner_weights(flaky, tiny_tokenizer):
    eng, model = flaky
    pids = eng.worker_pids()
    assert len(set(pids)) == 2 and os.getpid() not in pids
    groups = eng.generate(PROBLEMS, _params(123))
    want = _local(model, tiny_tokenizer, 123)
    assert _key(groups) == _key(want)
    close([lp for g in groups for s in g for lp in s.logprobs], [lp for g in want for s in g for lp in s.logprobs])

    with torch.no_grad():  # a learner update: after sync the workers sample from the new weights
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    eng.sync_weights(model)
    after = eng.generate(PROBLEMS, _params(123))
    assert _key(after) == _key(_local(model, tiny_tokenizer, 123)) != _key(groups)
    # without a seed the engine draws one per call from its generator: different samples each call
    assert _key(eng.generate(PROBLEMS, PARAMS)) != _key(eng.generate(PROBLEMS, PARAMS))
    # per-problem seeds travel with their problems: each shard draws what the local engine draws for it
    seeds = list(range(50, 50 + len(PROBLEMS)))
    per = SamplingParams(**{**PARAMS.__dict__, "seeds": seeds})
    local = HFEngine(model, tiny_tokenizer, batch_size=16)
    want = local.generate(PROBLEMS[:3], SamplingParams(**{**PARAMS.__dict__, "seeds": seeds[:3]})) + \
        local.generate(PROBLEMS[3:], SamplingParams(**{**PARAMS.__dict__, "seeds": seeds[3:]}))
    assert _key(eng.generate(PROBLEMS, per)) == _key(want)


def test_worker_deaths_lose_and_duplicate_nothing(cluster, flaky, tiny_tokenizer):
    ray, (eng, model) = cluster, flaky
    faults = Path(FlakyWorker.dir)
    recoveries, recreated = eng.recoveries, eng.recreated

    # 1. a worker's process exits inside generate: Ray restarts it, rlvr reloads the weights, re-issues its shard
    pids = eng.worker_pids()
    (faults / "crash").unlink()
    got = eng.generate(PROBLEMS, _params(7))
    assert (faults / "crash").exists()  # a worker really died
    assert (eng.recoveries, eng.recreated) == (recoveries + 1, recreated)
    assert sum(a != b for a, b in zip(pids, eng.worker_pids())) == 1
    check_groups(PROBLEMS, got, PARAMS.n)
    assert _key(got) == _key(_local(model, tiny_tokenizer, 7))  # each group once, as if nothing happened

    # 2. killed for good (restarts used up): rlvr creates a new actor in the same bundle
    ray.kill(eng.workers[0], no_restart=True)
    got = eng.generate(PROBLEMS, _params(8))
    assert (eng.recoveries, eng.recreated) == (recoveries + 2, recreated + 1)
    assert _key(got) == _key(_local(model, tiny_tokenizer, 8))

    # 3. ray.kill while the worker is busy in generate (Ray restarts it)
    victim = eng.workers[0]  # the re-created actor: one restart left
    (faults / "slow").write_text(str(eng.worker_pids()[0]))

    def kill_when_busy():
        end = time.monotonic() + 120
        while not (faults / "busy").exists() and time.monotonic() < end:
            time.sleep(0.02)
        ray.kill(victim, no_restart=False)

    try:
        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        got = eng.generate(PROBLEMS, _params(9))
        killer.join()
    finally:
        (faults / "slow").unlink()
        (faults / "busy").unlink(missing_ok=True)
    assert eng.recoveries == recoveries + 3
    assert _key(got) == _key(_local(model, tiny_tokenizer, 9))


def test_grpo_trains_end_to_end_on_two_ray_rollout_workers(cluster, tiny_tokenizer, tmp_path):
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics
    from test_train import _cfg, _problems, parity_verifier

    model = make_model(tiny_tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = _cfg(tmp_path, "train.steps=2", "distributed.backend=ray", "distributed.num_rollout_workers=2",
               "distributed.cpus_per_rollout_worker=0.5", "eval.before_training=false",
               "eval.after_training=false")
    train(cfg, model=model, tokenizer=tiny_tokenizer, problems=(_problems(10, "t"), _problems(4, "h")),
          verifier=parity_verifier)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # the remote samplers held exactly the learner's weights at every step (synced after step 1)
    assert any(r["learner_seqs"] for r in rows)
    assert all(r["logprob_mismatch"] < 1e-4 for r in rows if r["learner_seqs"])
    gc.collect()


def test_learner_actor_placed_with_its_rollout_workers(cluster, tiny_tokenizer, tmp_path):
    """distributed.learner=actor: the recipe runs in a Ray actor (bundle 0), rollout workers in bundles 1..2."""
    import test_train
    from rlvr.learner.checkpoint import latest_checkpoint
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    ray = cluster

    ray.cloudpickle.register_pickle_by_value(test_train)  # its verifier travels to the learner actor
    cfg = test_train._cfg(tmp_path, "train.steps=2", "distributed.backend=ray", "distributed.learner=actor",
                          "distributed.cpus_per_learner=0.5", "distributed.cpus_per_rollout_worker=0.25",
                          "eval.before_training=false", "eval.after_training=false")
    summary = train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer,
                    problems=(test_train._problems(10, "t"), test_train._problems(4, "h")),
                    verifier=test_train.parity_verifier)
    assert summary["learner_pid"] != os.getpid()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["logprob_mismatch"] < 1e-4 for r in rows if r["learner_seqs"])
    assert latest_checkpoint(tmp_path).name == "step-000002"  # written by the actor into output_dir
    with pytest.raises(ValueError, match="on_step"):
        train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, on_step=print)
