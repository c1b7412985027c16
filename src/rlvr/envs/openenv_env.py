"""``env.name=openenv``: episodes against an `OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ environment server.

The server (an OpenEnv ``Environment`` behind ``openenv.core.env_server.create_app``, local or remote)
is reached at ``base_url`` with OpenEnv's own client, ``openenv.core.GenericEnvClient`` (one websocket
session per open episode, so the server's ``max_concurrent_envs`` must allow ``train.prompts_per_step x
rollout.group_size`` of them, and its Environment must set ``SUPPORTS_CONCURRENT_SESSIONS``).  The
problems are reset seeds (``task.name=openenv``):

* ``reset``: ``client.reset(seed=..., **reset_args)``; the first observation becomes the first user
  message (after ``system_prompt``, if set);
* each assistant turn is sent as the action ``{action_field: text, **action_args}`` (so the server's
  Action class needs a string field of that name); the step's observation becomes the next user
  message, its ``reward`` (None: 0) the turn's reward, its ``done`` the end of the episode.

An observation is shown as its ``observation_field`` (None: its one text field when it has exactly one
besides ``done`` / ``reward`` / ``metadata``, else the whole observation as JSON).  The episode's verdict
scores its return (the sum of the turns' rewards).  A server error (a rejected action, a lost session)
ends the episode with reward 0 and the error as its reason; a session ended by rlvr (``max_turns``,
``max_total_tokens``) is closed the same way.  The ``n`` episodes of a problem share one ``reset``
call's observation: each opens its own session at its first step and resets it with the same seed,
so the server must make the same episode from the same seed.  Install with ``pip install 'rlvr[openenv]'``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

from rlvr.envs import async_loop
from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply
from rlvr.types import Problem, Verdict
from rlvr.utils.extras import require_extra

__all__ = ["OpenEnvEnvironment", "INSTALL_HINT", "observation_text"]

INSTALL_HINT = "env.name=openenv needs the openenv-core package: pip install 'rlvr[openenv]'"
SEED_KEY = "openenv"  # Problem.metadata key of task.name=openenv (rlvr.tasks.openenv_seeds.SEED_KEY)
_RESERVED = ("done", "reward", "metadata")


def _client_class():
    return require_extra("openenv.core", INSTALL_HINT, cause=True).GenericEnvClient


def observation_text(observation: Any, field: str | None) -> str:
    """What the policy is shown of ``observation`` (a dict): its ``field``, or its one text field, or JSON."""
    if not isinstance(observation, dict):
        return str(observation)
    if field is not None:
        if field not in observation:
            raise KeyError(f"the observation has no field {field!r} (it has {sorted(observation)}): set "
                           "env.params.observation_field")
        value = observation[field]
        return value if isinstance(value, str) else json.dumps(value)
    rest = {k: v for k, v in observation.items() if k not in _RESERVED}
    texts = [v for v in rest.values() if isinstance(v, str)]
    if len(rest) == 1 and len(texts) == 1:
        return texts[0]
    return json.dumps(rest, sort_keys=True, default=str)


class OpenEnvEnvironment(Environment):
    """Turns of an OpenEnv server's episodes (see the module doc)."""

    def __init__(self, *, base_url: str, action_field: str, action_args: dict, observation_field: str | None,
                 system_prompt: str | None, reset_args: dict, limits: Limits, workers: int,
                 connect_timeout_s: float, message_timeout_s: float):
        self.base_url, self.action_field, self.action_args = base_url, action_field, dict(action_args)
        self.observation_field, self.system_prompt, self.reset_args = observation_field, system_prompt, \
            dict(reset_args)
        self.limits, self.step_workers = limits, workers
        self.timeouts = {"connect_timeout_s": connect_timeout_s, "message_timeout_s": message_timeout_s}

    def _client(self):
        return _client_class()(base_url=self.base_url, **self.timeouts)

    def _reset_kwargs(self, problem: Problem) -> dict:
        seed = ((problem.metadata or {}).get(SEED_KEY) or {}).get("seed")
        return {**({"seed": seed} if seed is not None else {}), **self.reset_args}

    async def _open(self, problem: Problem):
        client = self._client()
        try:
            await client.connect()
            result = await client.reset(**self._reset_kwargs(problem))
        except BaseException:
            await client.close()
            raise
        if result.done:
            await client.close()
            raise RuntimeError("the server's episode is over at reset (done=True)")
        return client, result

    async def _probe(self, problem: Problem) -> str:
        client, result = await self._open(problem)
        await client.close()
        return observation_text(result.observation, self.observation_field)

    async def _step(self, state: EpisodeState, text: str):
        client = state.data.get("client")
        if client is None:  # this episode's own session, reset with the problem's seed
            client, _ = await self._open(state.problem)
            state.data["client"] = client
        try:
            result = await client.step({**self.action_args, self.action_field: text})
        except BaseException:
            state.data.pop("client", None)
            await client.close()
            raise
        if result.done:
            state.data.pop("client", None)
            await client.close()
        return result

    def reset(self, problem: Problem) -> EpisodeState:
        first = async_loop.run(self._probe(problem))
        msgs = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + \
            [{"role": "user", "content": first}]
        return EpisodeState(problem, msgs, data={"return": 0.0})

    def step(self, state: EpisodeState, text: str) -> Reply:
        result = async_loop.run(self._step(state, text))
        reward = float(result.reward or 0.0)
        state.data["return"] = state.data.get("return", 0.0) + reward
        if result.done:
            ret = state.data["return"]
            return Reply(done=True, reward=reward, verdict=Verdict(ret, None, reason=f"openenv: return {ret:g}"),
                         info={"openenv_steps": 1})
        return Reply(observation=observation_text(result.observation, self.observation_field), role="user",
                     reward=reward, info={"openenv_steps": 1})

    def close(self, state: EpisodeState, reason: str) -> Reply:
        client = state.data.pop("client", None)
        if client is not None:
            async_loop.run(client.close(), timeout=self.timeouts["message_timeout_s"])
        ret = float(state.data.get("return", 0.0))
        return Reply(done=True, reward=0.0, verdict=Verdict(ret, None, reason=f"incomplete: {reason}"))


def _check(params: dict, *, task_options: dict | None = None, **_) -> None:
    try:
        _client_class()
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    url = params.get("base_url") or ""
    if urlparse(url).scheme not in ("http", "https", "ws", "wss") or not urlparse(url).netloc:
        raise ValueError(f"base_url: {url!r} is not the URL of an OpenEnv server (http://host:port)")
    if not params.get("action_field"):
        raise ValueError("action_field: name the Action's text field (e.g. message)")
    if params.get("max_turns", 8) < 1 or params.get("workers", 8) < 1 or params.get("max_total_tokens", 0) < 0:
        raise ValueError("max_turns and workers must be >= 1, max_total_tokens >= 0")
    if min(params.get("connect_timeout_s", 10.0), params.get("message_timeout_s", 60.0)) <= 0:
        raise ValueError("connect_timeout_s and message_timeout_s must be > 0")


@ENVIRONMENTS.register("openenv", check=_check,
                       doc="episodes against an OpenEnv environment server at base_url (pip install "
                           "'rlvr[openenv]'): each turn is an action {action_field: text}, each observation the "
                           "next user message, rewards and done from the server; with task.name=openenv")
def openenv_env(verifier, tokenizer, *, base_url: str = "", action_field: str = "message",
                action_args: dict[str, Any] | None = None, observation_field: str | None = None,
                system_prompt: str | None = None, reset_args: dict[str, Any] | None = None, max_turns: int = 8,
                max_total_tokens: int = 0, workers: int = 8, connect_timeout_s: float = 10.0,
                message_timeout_s: float = 60.0) -> Environment:
    """``base_url``: the server (http://host:port); ``action_field``: the Action's field the policy's text goes to,
    ``action_args``: its other fields (constant); ``observation_field``: the Observation's field shown to the
    policy (None: its one text field, else JSON); ``reset_args``: extra ``reset`` arguments; ``workers``:
    sessions stepped in parallel."""
    params = dict(base_url=base_url, action_field=action_field, max_turns=max_turns, workers=workers,
                  max_total_tokens=max_total_tokens, connect_timeout_s=connect_timeout_s,
                  message_timeout_s=message_timeout_s)
    _check(params)
    return OpenEnvEnvironment(base_url=base_url, action_field=action_field, action_args=action_args or {},
                              observation_field=observation_field, system_prompt=system_prompt,
                              reset_args=reset_args or {}, limits=Limits(max_turns, max_total_tokens),
                              workers=workers, connect_timeout_s=connect_timeout_s,
                              message_timeout_s=message_timeout_s)
