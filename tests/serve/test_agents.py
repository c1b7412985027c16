"""env.name=agent: agents against the endpoint, their failures, their rewards, and a short training run."""

from __future__ import annotations

import sys
import time

import pytest

import serve_agents
from serve_helpers import SpyEngine, hf_engine
from rlvr.config import ConfigError
from rlvr.engines import SamplingParams
from rlvr.envs import build_environment
from rlvr.rollout.episodes import episode_metrics, run_episodes
from rlvr.types import Problem, Verdict

PROBLEMS = [Problem(f"q{i}", prompt=f"{i}+{i}", answer=str(2 * i)) for i in range(3)]


def _even(completion: str, reference: str) -> Verdict:
    return Verdict(float(len(completion) % 2 == 0), None, "even length")


def _text_hash(completion: str, reference: str) -> Verdict:
    """A reward in [0, 1) that differs between any two different answers with near certainty."""
    import zlib

    return Verdict(zlib.crc32(completion.encode()) % 1000 / 1000, None, "text hash")


def _env(**params):
    return build_environment("agent", _even, None, **params)


def _run(env, tokenizer, n=2, engine=None):
    engine = engine or hf_engine(tokenizer)
    try:
        return run_episodes(engine, env, PROBLEMS, SamplingParams(n=n, max_new_tokens=6))
    finally:
        env._rlvr_server.stop()


def test_agents_run_episodes_scored_by_the_verifier(tiny_tokenizer):
    spy = SpyEngine(hf_engine(tiny_tokenizer))
    serve_agents.CALLS.clear()
    groups = _run(_env(entry="serve_agents:two_turns", agent_timeout_s=60), tiny_tokenizer, engine=spy)
    assert [len(g) for g in groups] == [2, 2, 2]
    assert sorted(p for _, p in serve_agents.CALLS) == ["q0", "q0", "q1", "q1", "q2", "q2"]
    assert len({u for u, _ in serve_agents.CALLS}) == 6  # one episode URL per agent
    served = {tuple(s.completion_ids) for s in spy.samples}
    for problem, group in zip(PROBLEMS, groups):
        for g, s in enumerate(group):
            assert s.problem_id == problem.id and s.group_index == g
            assert s.info["turns"] == 2 and s.info["requests"] == 2 and s.info["end"] == "done"
            first, second = s.info["turn_ends"]
            assert tuple(s.completion_ids[:first]) in served  # the policy's own ids, as the engine gave them
            assert s.mask[:first] == [1] * first and s.logprobs[:first] == next(
                x.logprobs for x in spy.samples if tuple(x.completion_ids) == tuple(s.completion_ids[:first]))
            later = s.mask[first:second]  # the rendered user message (0), then the policy's second turn (1)
            assert later[0] == 0 and later[-1] == 1 and later == sorted(later)
            assert s.verdict.reason == "even length" and s.env_return == s.verdict.score
    m = episode_metrics([s for g in groups for s in g])
    assert m["env/turns"] == 2 and m["env/agent_errors"] == 0 and m["env/non_extending"] == 0


def test_episodes_share_engine_calls_in_lockstep(tiny_tokenizer):
    """The endpoint sends a call as soon as every open episode has a request waiting, and an agent that returned
    closes its episode at once (which sends the waiting requests if the rest were waiting for it): 6 episodes
    (2 of 3 turns, 4 of 1 that return 0.3 s after their answer) take 3 engine calls of 6, 2 and 2 requests,
    without waiting out a 20 s batch window."""
    spy = SpyEngine(hf_engine(tiny_tokenizer))
    t0 = time.monotonic()
    groups = _run(_env(entry="serve_agents:uneven_turns", batch_window_s=20.0), tiny_tokenizer, engine=spy)
    assert time.monotonic() - t0 < 20
    assert [len(call) for call in spy.calls] == [6, 2, 2]
    assert [s.info["requests"] for g in groups for s in g] == [3, 3, 1, 1, 1, 1]


def test_an_async_agent_returns_its_own_reward(tiny_tokenizer):
    groups = _run(_env(entry="serve_agents:async_reward"), tiny_tokenizer, n=1)
    for (s,) in groups:
        assert s.verdict.reason == "the agent's reward" and s.env_return in (0.0, 1.0)
        assert s.info["requests"] == 1 and s.mask == [1] * len(s.completion_ids)


def test_an_agent_that_raises_or_hangs_ends_only_its_episode(tiny_tokenizer, caplog):
    groups = _run(_env(entry="serve_agents:raises"), tiny_tokenizer, n=1)
    assert [s.env_return for (s,) in groups] == [0.0, 1.0, 1.0]
    assert groups[0][0].info["agent_errors"] == 1 and groups[0][0].info["end"] == "agent_error"
    assert "RuntimeError: the agent broke" in groups[0][0].verdict.reason
    assert "1 of 3 episodes ended with an agent error" in caplog.text
    # the failed episode was still served once: it is recorded (and scored 0)
    assert groups[0][0].info["requests"] == 1
    t0 = time.monotonic()
    groups = _run(_env(entry="serve_agents:hangs", agent_timeout_s=1.5), tiny_tokenizer, n=2)
    assert time.monotonic() - t0 < 20
    assert [s.env_return for g in groups for s in g] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    s = groups[0][0]
    assert s.info["agent_timeouts"] == 1 and s.info["end"] == "agent_timeout" and "TimeoutError" in s.verdict.reason
    assert s.mask == [0] and s.info["requests"] == 0  # nothing served: nothing to train on
    (s,), *_ = _run(_env(entry="serve_agents:async_hangs", agent_timeout_s=0.5), tiny_tokenizer, n=1)
    assert s.info["agent_timeouts"] == 1
    (s,), *_ = _run(_env(entry="serve_agents:returns_text"), tiny_tokenizer, n=1)
    assert s.info["agent_errors"] == 1 and "not a finite number or None" in s.verdict.reason


AGENT_PROGRAM = """
import json, os, openai
problem = json.loads(os.environ["RLVR_PROBLEM"])
assert os.environ["OPENAI_BASE_URL"].endswith(os.environ["RLVR_EPISODE_ID"])
client = openai.OpenAI(max_retries=0)  # base URL and key from the environment
client.chat.completions.create(model="p", messages=[{"role": "user", "content": problem["prompt"]}])
print(json.dumps({"reward": 0.5 if problem["id"] != "q2" else None}))
"""


@pytest.mark.slow  # ~30 s: a Python process per episode, each importing openai
def test_a_program_agent_gets_the_endpoint_in_its_environment(tiny_tokenizer, tmp_path):
    prog = tmp_path / "agent.py"
    prog.write_text(AGENT_PROGRAM)
    groups = _run(_env(command=[sys.executable, str(prog)], agent_timeout_s=60), tiny_tokenizer, n=1)
    assert [s.info["requests"] for (s,) in groups] == [1, 1, 1]
    assert [s.env_return for (s,) in groups][:2] == [0.5, 0.5]
    assert groups[2][0].verdict.reason == "even length"  # null: the verifier scored it
    bad = _env(command=[sys.executable, "-c", "import sys; sys.exit('no luck')"])
    (s,), *_ = _run(bad, tiny_tokenizer, n=1)
    assert s.info["agent_errors"] == 1 and "exited with status 1: no luck" in s.verdict.reason


@pytest.mark.parametrize("params, message", [
    ({"entry": "no_such_module_xyz:agent"}, "env.params.entry: cannot import 'no_such_module_xyz': "
                                            "ModuleNotFoundError"),
    ({"entry": "serve_agents:nothing"}, "env.params.entry: module 'serve_agents' has no 'nothing'"),
    ({"entry": "serve_agents"}, "is not 'module:function'"),
    ({}, "exactly one"),
    ({"entry": "serve_agents:raises", "agent_timeout_s": 0}, "env.params.agent_timeout_s"),
    ({"entry": "serve_agents:raises", "port": "TAKEN"}, "env.params.port: cannot serve on 127.0.0.1:TAKEN: the "
                                                        "port is in use"),
])
def test_a_bad_agent_fails_at_config_load_in_one_line(tmp_path, params, message):
    from conftest import tiny_run_config

    from rlvr.serve.app import bind

    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    taken.listen()
    params = {k: port if v == "TAKEN" else v for k, v in params.items()}
    flow = "{" + ", ".join(f"{k}: {v!r}" for k, v in params.items()) + "}"
    try:
        with pytest.raises(ConfigError, match="env") as e:
            tiny_run_config(tmp_path, "env.name=agent", f"env.params={flow}")
    finally:
        taken.close()
    assert message.replace("TAKEN", str(port)) in str(e.value) and "\n" not in str(e.value)


def test_a_missing_extra_fails_at_config_load(tmp_path, monkeypatch):
    import importlib.util

    from conftest import tiny_run_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    with pytest.raises(ConfigError, match=r"uvicorn not installed\): pip install 'rlvr\[serve\]'"):
        tiny_run_config(tmp_path, "env.name=agent", "env.params={entry: 'serve_agents:raises'}")


def test_training_two_steps_with_agents(tmp_path, tiny_tokenizer):
    from conftest import make_model, tiny_run_config
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    model = make_model(tiny_tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    serve_agents.CALLS.clear()
    cfg = tiny_run_config(tmp_path, "env.name=agent", "env.params={entry: 'serve_agents:two_turns'}",
                          "train.steps=2", "train.threads=1", "eval.after_training=true", "eval.num_problems=1",
                          "eval.max_new_tokens=4")
    # the endpoint's samples depend on how requests were batched, so the reward is one every group spreads
    summary = train(cfg, model=model, tokenizer=tiny_tokenizer, problems=(PROBLEMS, PROBLEMS[:1]),
                    verifier=_text_hash)
    assert summary["eval_after"]["greedy"]["n"] == 1  # the held-out problem, through the agent too
    assert len(serve_agents.CALLS) == 2 * 2 * 4 + 1 and serve_agents.CALLS[-1][1] == PROBLEMS[0].id
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["env/turns"] == 2 and r["env/requests"] == 2 and r["env/agent_errors"] == 0 for r in rows)
    assert any(not (before[k] == v).all() for k, v in model.state_dict().items())


def test_the_documented_agent_runs(tmp_path, tiny_tokenizer, monkeypatch):
    """docs/agents.md's example agent, as written there (and copied into the README), runs episodes of two
    requests."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "agents.md").read_text()
    code = re.search(r"```python\n(# my_agent\.py\n.*?)```", doc, re.S).group(1)
    readme = re.search(r"```python\n(# my_agent\.py\n.*?)```", (root / "README.md").read_text(), re.S).group(1)
    assert readme == code
    (tmp_path / "my_agent_doc.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    groups = _run(_env(entry="my_agent_doc:solve"), tiny_tokenizer, n=1)
    assert [(s.info["requests"], s.info["turns"], s.info["end"]) for (s,) in groups] == [(2, 2, "done")] * 3
    assert all(s.verdict.reason == "even length" for (s,) in groups)


def test_agents_train_with_async_rollouts(tmp_path, tiny_tokenizer):
    """The generator process (train.async_steps) runs the agents against its own endpoint: training goes on, and
    every sample is a two-request episode."""
    from conftest import make_model, tiny_run_config
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    model = make_model(tiny_tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = tiny_run_config(tmp_path, "env.name=agent", "env.params={entry: 'serve_agents:two_turns'}",
                          "train.steps=2", "train.threads=1", "train.async_steps=1", "algorithm.is_correction=tis")
    # scored by a hash of the text, not its length's parity: a group whose answers all earn the same reward has no
    # advantage, and under "even length" that happened to every group of both steps in about one run in 30
    train(cfg, model=model, tokenizer=tiny_tokenizer, problems=(PROBLEMS, PROBLEMS[:1]), verifier=_text_hash)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["staleness"] for r in rows] == [0, 1]
    assert any(r["grad_norm"] > 0 for r in rows)
    assert all(r["env/requests"] == 2 and r["env/agent_errors"] == 0 for r in rows)
    assert any(not (before[k] == v).all() for k, v in model.state_dict().items())


def test_the_shipped_example_agent_runs(tiny_tokenizer, monkeypatch):
    """docs/examples/openai_agent.py (the documented agent with its system prompt) runs episodes of two requests."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "examples"))
    groups = _run(_env(entry="openai_agent:solve"), tiny_tokenizer, n=1)
    assert [(s.info["requests"], s.info["turns"], s.info["end"]) for (s,) in groups] == [(2, 2, "done")] * 3
