"""env.name=openenv with the real openenv-core package against a guess-the-number server written in OpenEnv's format
(tests/envs/openenv_guess.py), served with uvicorn on a free local port."""

from __future__ import annotations

import dataclasses
import sys

import pytest

pytest.importorskip("openenv.core")

import openenv_guess as guess  # noqa: E402
from conftest import make_model, tiny_run_config  # noqa: E402
from rlvr.envs import build_environment  # noqa: E402
from rlvr.envs.openenv_env import observation_text  # noqa: E402
from rlvr.recipes.rl import train  # noqa: E402
from rlvr.rollout.episodes import safe_step  # noqa: E402
from rlvr.tasks.registry import build_task  # noqa: E402
from rlvr.tasks.settings import TaskConfig  # noqa: E402
from rlvr.trackers import read_metrics  # noqa: E402
from rlvr.types import Problem  # noqa: E402


@pytest.fixture(scope="module")
def server():
    url, srv = guess.serve()
    yield url
    srv.should_exit = True


def _problem(seed: int) -> Problem:
    return Problem(f"s{seed}", prompt="placeholder", metadata={"openenv": {"seed": seed}})


def test_turns_rewards_and_done_come_from_the_server(server):
    env = build_environment("openenv", None, None, base_url=server, max_turns=3, system_prompt="Play.")
    secret = guess.secret_of(11)
    state = env.reset(_problem(11))
    assert state.messages == [{"role": "system", "content": "Play."},
                              {"role": "user", "content": "I picked a number from 1 to 10. Guess it."}]
    wrong = 1 if secret != 1 else 10
    first = env.step(state, f"is it {wrong}?")
    assert not first.done and first.reward == 0.0 and first.role == "user"
    assert first.observation == ("Higher." if wrong < secret else "Lower.")
    last = env.step(state, f"{secret}")
    assert last.done and last.reward == 1.0 and last.verdict.score == 1.0
    # three wrong guesses: the server ends the episode with 0
    state = env.reset(_problem(11))
    replies = [env.step(state, "no number") for _ in range(3)]
    assert [r.done for r in replies] == [False, False, True] and sum(r.reward for r in replies) == 0.0
    assert replies[0].observation == "Say a number."
    # the n episodes of one reset each get their own session, reset with the same seed
    a = env.reset(_problem(11))
    b = dataclasses.replace(a, data=dict(a.data))
    assert env.step(a, str(wrong)).done is False
    assert env.step(b, str(secret)).reward == 1.0 and env.step(a, str(secret)).reward == 1.0
    # rlvr ends an open episode: its session is closed, reward 0
    state = env.reset(_problem(11))
    env.step(state, str(wrong))
    assert env.close(state, "max_turns=1 reached").reward == 0.0 and "client" not in state.data


def test_observation_text():
    assert observation_text({"message": "hi", "done": False, "reward": None, "metadata": {}}, None) == "hi"
    assert observation_text({"a": 1, "b": "x", "done": False}, None) == '{"a": 1, "b": "x"}'
    assert observation_text({"a": 1, "b": "x"}, "a") == "1"
    with pytest.raises(KeyError, match="observation_field"):
        observation_text({"a": 1}, "message")


def test_bad_input(server, tmp_path, monkeypatch):
    # an action the server's Action class rejects ends the episode as an environment error
    env = build_environment("openenv", None, None, base_url=server, action_field="text")
    state = env.reset(_problem(1))
    reply = safe_step(env, state, "5")
    assert reply.done and reply.reward == 0.0 and "Server error" in reply.verdict.reason
    # no server there
    dead = build_environment("openenv", None, None, base_url="http://127.0.0.1:9", connect_timeout_s=2)
    with pytest.raises(ConnectionError):
        dead.reset(_problem(1))
    with pytest.raises(ValueError, match="base_url"):
        tiny_run_config(tmp_path, "task.name=openenv", "env.name=openenv", "env.params={base_url: localhost}")
    for name in [m for m in sys.modules if m == "openenv" or m.startswith("openenv.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "openenv", None)
    with pytest.raises(ValueError, match=r"pip install 'rlvr\[openenv\]'") as e:
        tiny_run_config(tmp_path, "task.name=openenv", "env.name=openenv", f"env.params={{base_url: '{server}'}}")
    assert "\n" not in str(e.value).strip()


def test_seed_problems():
    train_set, held = build_task(TaskConfig(name="openenv", params={"num_train": 5}, num_heldout=2, seed=1))
    seeds = [p.metadata["openenv"]["seed"] for p in train_set + held]
    assert len(train_set) == 5 and len(held) == 2 and len(set(seeds)) == 7


def test_two_step_train_run(server, tmp_path, tiny_tokenizer):
    cfg = tiny_run_config(tmp_path, "train.steps=2", "task.name=openenv", "task.params={num_train: 8}",
                          "task.num_heldout=1", "env.name=openenv",
                          f"env.params={{base_url: '{server}', max_turns: 3}}", "rollout.max_new_tokens=4",
                          "eval.after_training=true", "eval.num_problems=1", "eval.max_new_tokens=4")
    summary = train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(1 <= r["env/turns"] <= 3 and r["env/openenv_steps"] == r["env/turns"] for r in rows)
    assert all(r.get("env/env_errors", 0) == 0 for r in rows)
    assert 0 <= summary["eval_after"]["greedy"]["accuracy"] <= 1  # held-out episodes ran against the server


def test_async_rollouts_play_against_the_server(server, tmp_path, tiny_tokenizer):
    """The generator process (train.async_steps) opens its own sessions on the server."""
    cfg = tiny_run_config(tmp_path, "train.steps=2", "task.name=openenv", "task.params={num_train: 8}",
                          "task.num_heldout=1", "env.name=openenv",
                          f"env.params={{base_url: '{server}', max_turns: 3}}", "rollout.max_new_tokens=4",
                          "train.async_steps=1", "algorithm.is_correction=tis")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["staleness"] for r in rows] == [0, 1]
    assert all(r["env/openenv_steps"] == r["env/turns"] and r.get("env/env_errors", 0) == 0 for r in rows)
