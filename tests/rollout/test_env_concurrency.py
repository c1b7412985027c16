"""``env.max_concurrency``: a call's resets and each turn's steps run on that many threads at once, and what is
sampled and scored does not depend on it."""

from __future__ import annotations

import threading
import time

from rlvr.config import load_config
from rlvr.engines import SamplingParams
from rlvr.engines.base import EngineBase
from rlvr.envs import Environment, EpisodeState, Limits, Reply, set_concurrency
from rlvr.envs.mixture import MixtureEnvironment
from rlvr.recipes.config import RunConfig
from rlvr.rollout.episodes import run_episodes
from rlvr.types import Problem, Sample, Verdict


class Fixed(EngineBase):
    def __init__(self):
        super().__init__(None)

    def generate(self, problems, params, prefixes=None, cache=None):
        return [[Sample(p.id, [1], [2, 3], [-0.5, -0.5], p.id, "stop", g) for g in range(params.n)]
                for p in problems]


class Slow(Environment):
    """One turn whose reset and step each take 0.1 s; records how many ran at once."""

    limits = Limits(max_turns=1)

    def __init__(self):
        self.lock, self.active, self.peak = threading.Lock(), 0, {"reset": 0, "step": 0}

    def _enter(self, what):
        with self.lock:
            self.active += 1
            self.peak[what] = max(self.peak[what], self.active)
        time.sleep(0.1)
        with self.lock:
            self.active -= 1

    def reset(self, problem):
        self._enter("reset")
        return EpisodeState(problem, problem.to_messages())

    def step(self, state, text):
        self._enter("step")
        score = float(state.problem.id.endswith(("0", "2", "4")))
        return Reply(done=True, reward=score, verdict=Verdict(score, text, "scored"))


def _run(workers: int):
    env = set_concurrency(Slow(), workers)
    problems = [Problem(f"p{i}", f"q{i}", "a") for i in range(6)]
    groups = run_episodes(Fixed(), env, problems, SamplingParams(n=2))
    return env, [[(s.problem_id, s.env_return, s.verdict.reason) for s in g] for g in groups]


def test_resets_and_steps_run_on_max_concurrency_threads():
    seq, seq_out = _run(0)  # 0: the environment's own step_workers (1)
    par, par_out = _run(3)
    assert seq.step_workers == 1 and seq.peak == {"reset": 1, "step": 1}
    assert par.step_workers == 3 and par.peak == {"reset": 3, "step": 3}
    assert par_out == seq_out and [r for g in par_out for _, r, _ in g] == [1.0] * 2 + [0.0] * 2 + [1.0] * 2 + \
        [0.0] * 2 + [1.0] * 2 + [0.0] * 2


def test_the_config_key_sets_every_environment_of_a_mixture():
    cfg = load_config(RunConfig, None, ["env.max_concurrency=8"])
    assert cfg.env.max_concurrency == 8
    mix = MixtureEnvironment({"a": Slow(), "b": Slow()})
    set_concurrency(mix, cfg.env.max_concurrency)
    assert [mix.step_workers, mix.envs["a"].step_workers, mix.envs["b"].step_workers] == [8, 8, 8]
    assert set_concurrency(Slow(), 0).step_workers == 1
