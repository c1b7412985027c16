"""Nothing a run waits on holds it forever: a hung verifier or environment call ends its episode with an error
after ``env.timeout_s`` and the step goes on; Ctrl-C stops a run waiting on a hung call within seconds, with
``env.params.workers`` above 1 too."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import make_model, tiny_run_config
from rlvr.engines.base import EngineBase
from rlvr.envs import ENVIRONMENTS, Environment, Reply, SingleTurnEnvironment
from rlvr.engines import SamplingParams
from rlvr.recipes.rl import train
from rlvr.rollout.episodes import run_episodes
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Sample, Verdict
from rlvr.utils.deadline import TIMED_OUT, call_all

PROBS = ([Problem(f"t{i}", prompt=f"{i}+1", answer=str(i + 1)) for i in range(8)], [])


@pytest.fixture
def release():
    """What the hung calls wait on: set at the end of the test (and after 60 s, so that a call that is never given
    up on fails the test instead of hanging it)."""
    ev = threading.Event()
    safety = threading.Timer(60, ev.set)
    safety.daemon = True
    safety.start()
    yield ev
    ev.set()
    safety.cancel()


class FakeEngine(EngineBase):
    """One fixed completion per sample (the episode runner's single-turn path renders nothing)."""

    def __init__(self):
        super().__init__(None)

    def generate(self, problems, params, **_):
        return [[Sample(p.id, [1], [2], [0.0], "x", "stop", i) for i in range(params.n)] for p in problems]


def test_call_all_gives_up_on_a_hung_call_only(release):
    calls = [lambda: 1, lambda: release.wait() and 2, lambda: 3]
    assert call_all(calls, 0.3, workers=2) == [1, TIMED_OUT, 3]
    assert call_all(calls[:1] + calls[2:], 0) == [1, 3]  # 0: no limit
    with pytest.raises(ZeroDivisionError):
        call_all([lambda: 1 // 0], 1.0)


@pytest.mark.parametrize("workers", [1, 3])
def test_a_hung_verifier_call_scores_0_as_a_verifier_error(release, workers):
    def verify(completion, reference):
        if reference == "2":  # problem t1 hangs
            release.wait()
        return Verdict(1.0, completion, "ok")

    groups = run_episodes(FakeEngine(), SingleTurnEnvironment(verify, workers=workers), PROBS[0][:3],
                          SamplingParams(n=2, max_new_tokens=4), timeout=0.3)
    hung = groups[1]
    assert all(s.env_return == 0.0 and s.verdict.reason == "verifier error: TimeoutError: no result after 0.3 s "
               "(env.timeout_s)" and s.info["timeouts"] == 1 for s in hung)
    assert all(s.env_return == 1.0 and s.verdict.reason == "ok" for g in (groups[0], groups[2]) for s in g)


class HangsOn(Environment):
    """Multi-turn by its class (not single_turn): its step on problem ``hang`` waits until released."""

    def __init__(self, hang: str, release: threading.Event, workers: int = 1):
        self.hang, self.release, self.step_workers = hang, release, workers

    def step(self, state, text):
        if state.problem.id == self.hang:
            self.release.wait()
        return Reply(done=True, reward=1.0, verdict=Verdict(1.0, None, "ok"))


@pytest.fixture
def hanging_env(release):
    ENVIRONMENTS.add("test_hangs_on", lambda verifier, tokenizer, hang="t0", workers=1:
                     HangsOn(hang, release, workers), doc="hangs on one problem (tests)")
    yield "test_hangs_on"
    ENVIRONMENTS.unregister("test_hangs_on")


def _first_prompts(k: int) -> list[str]:
    """The ids of the first ``k`` training problems a seed-3 run draws (the hung one must be among them)."""
    from rlvr.tasks.sampler import PromptSampler

    return [p.id for p in PromptSampler(PROBS[0], seed=3).next(k)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_hung_environment_step_ends_its_episodes_and_the_step_trains(tmp_path, tiny_tokenizer, hanging_env,
                                                                       workers):
    hang = _first_prompts(2)[0]
    cfg = tiny_run_config(tmp_path, "train.steps=1", f"env.name={hanging_env}", "env.timeout_s=0.3",
                          f"env.params={{hang: {hang}, workers: {workers}}}")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=PROBS)
    (row,) = read_metrics(tmp_path / "metrics.jsonl")
    assert row["env/env_errors"] == row["env/timeouts"] == 0.5  # the hung problem's 4 episodes of 8
    assert row["reward_mean"] == 0.5 and "skipped_step" not in row


def test_a_hung_verifier_call_is_a_verifier_error_and_the_run_goes_on(tmp_path, tiny_tokenizer, release):
    calls = []

    def verify(completion, reference):
        calls.append(reference)
        if len(calls) == 2:  # the second check of the first step never returns
            release.wait()
        return Verdict(1.0, completion, "ok")

    cfg = tiny_run_config(tmp_path, "train.steps=2", "env.timeout_s=0.3")
    summary = train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=PROBS, verifier=verify)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert summary["steps"] == 2 and len(calls) == 16
    assert rows[0]["verdict/verifier_error"] == 1 / 8 and rows[0]["reward_mean"] == 7 / 8
    assert "verdict/verifier_error" not in rows[1] and rows[1]["reward_mean"] == 1.0


CHILD = """
import signal, sys, threading
# a terminal's Ctrl-C: the default handler, unblocked (a child inherits an ignored or blocked SIGINT from the
# test process, and something earlier in the full suite leaves it so)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {src!r})
from rlvr.engines import SamplingParams
from rlvr.engines.base import EngineBase
from rlvr.envs import SingleTurnEnvironment
from rlvr.rollout.episodes import run_episodes
from rlvr.types import Problem, Sample

class Engine(EngineBase):
    def __init__(self):
        super().__init__(None)
    def generate(self, problems, params, **_):
        return [[Sample(p.id, [1], [2], [0.0], "x", "stop", i) for i in range(params.n)] for p in problems]

def hang(completion, reference):
    sys.stdout.write("waiting\\n")  # one write: two workers' lines never interleave
    sys.stdout.flush()
    threading.Event().wait()

env = SingleTurnEnvironment(hang, workers={workers})
run_episodes(Engine(), env, [Problem("p", prompt="1+1", answer="2")], SamplingParams(n=2), timeout={timeout})
"""


@pytest.mark.parametrize("workers,timeout", [(2, 0), (2, 300), (1, 300)])
def test_ctrl_c_stops_a_run_waiting_on_a_hung_call(workers, timeout):
    """SIGINT while the episode runner waits on a verifier that never returns: KeyboardInterrupt and exit within
    seconds (a thread pool used to wait for its hung thread forever, at the interrupt and again at exit)."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    code = textwrap.dedent(CHILD.format(src=src, workers=workers, timeout=timeout))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.3)  # the runner is now waiting on the hung call
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)  # forever before the fix; 15 s was exceeded under 3x CPU load
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err


TOOL_CHILD = """
import signal, sys, threading
# a terminal's Ctrl-C: the default handler, unblocked (a child inherits an ignored or blocked SIGINT from the
# test process, and something earlier in the full suite leaves it so)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {src!r})
from rlvr.envs.tools import Tool, ToolBox, ToolCall

def hang(x: str) -> str:
    threading.Event().wait()

box = ToolBox([Tool(hang, schema={{"function": {{"name": "hang", "parameters": {{"properties": {{"x": {{}}}}}}}}}})],
              timeout=0.2)
print(box.call(ToolCall("hang", {{"x": "1"}})), flush=True)
"""


def test_a_hung_tool_call_neither_stalls_the_episode_nor_the_exit():
    """The tool's observation says it timed out, and the process then exits (a thread pool's hung thread used to
    be joined at exit, forever)."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(TOOL_CHILD.format(src=src))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert out.strip() == "('error: hang timed out after 0.2 s', False)"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_hung_check_in_evaluation_counts_as_wrong(release, monkeypatch, workers):
    import rlvr.evaluate.accuracy as accuracy

    def verify(completion, reference):
        if reference == "2":
            release.wait()
        return Verdict(1.0, completion, "ok")

    monkeypatch.setattr(accuracy, "DEFAULT_TIMEOUT_S", 0.3)
    env = SingleTurnEnvironment(verify, workers=workers)
    r = accuracy.evaluate_accuracy(FakeEngine(), PROBS[0][:4], verify, env=env)
    assert r["accuracy"] == 0.75 and r["per_problem"] == [1.0, 0.0, 1.0, 1.0]
