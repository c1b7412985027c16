"""Agents: programs that talk to the policy through an OpenAI-compatible endpoint (``env.name=agent``).

An agent is given a base URL (``http://127.0.0.1:PORT/v1/episodes/<id>``, what the stock ``openai``
client takes as ``base_url``) and a problem; it calls ``/chat/completions`` as often as it likes (tools
included) and returns a reward, or None to have ``reward.verifier`` score the last answer the policy gave.
The endpoint and the recording of every episode token in / token out are :mod:`rlvr.serve`; the rollout
layer runs these episodes there (:func:`rlvr.serve.agents.run_agent_episodes`).  This module holds the
environment's settings, checked when the config loads.

Two kinds of agent:

* ``entry: "module:function"``: a Python callable (plain or ``async``) called as ``function(base_url,
  problem)`` with an :class:`rlvr.types.Problem`; it returns a number or None.
* ``command: [program, arg, ...]``: a separate program, started once per episode with ``RLVR_BASE_URL`` /
  ``OPENAI_BASE_URL`` (the episode's base URL), ``OPENAI_API_KEY``, ``RLVR_EPISODE_ID`` and ``RLVR_PROBLEM``
  (the problem as JSON: id, prompt, messages, answer, metadata) in its environment; the last line it prints
  is its reward (a number, ``{"reward": x}``, or nothing / ``null`` for the verifier).

An agent that raises, exits non-zero, returns something else or runs past ``agent_timeout_s`` ends only its
own episode, with reward 0 and a counted error (``env/agent_errors``, ``env/agent_timeouts``).
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import inspect
import socket
from typing import Any, Callable

from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply

__all__ = ["AgentEnvironment", "load_entry"]


def load_entry(spec: str) -> Callable[..., Any]:
    """The callable named ``"module:function"`` (a dotted attribute path after the colon), or ValueError in one
    line."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"env.params.entry: {spec!r} is not 'module:function'")
    try:
        obj: Any = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's entry point
        hint = " (is its directory on PYTHONPATH?)" if isinstance(e, ModuleNotFoundError) else ""
        raise ValueError(f"env.params.entry: cannot import {module!r}: {type(e).__name__}: {e}{hint}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"env.params.entry: module {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"env.params.entry: {spec!r} is not callable")
    return obj


def _check_port(host: str, port: int) -> None:
    """ValueError (one line) when ``host:port`` cannot be bound now (checked when the config loads)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError as e:
        why = "the port is in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise ValueError(f"env.params.port: cannot serve on {host}:{port}: {why} (0 picks a free port)") from None
    finally:
        sock.close()


class AgentEnvironment(Environment):
    """Episodes driven by an agent through the policy's endpoint (see the module doc).

    From Python, ``agent=`` takes the callable itself instead of an ``entry`` name.

    ``serves_agents`` tells the rollout layer to run these episodes with :mod:`rlvr.serve` instead of
    ``reset`` / ``step``; ``limits.max_turns`` is the number of requests one episode may make.
    """

    serves_agents = True

    def __init__(self, verifier, *, entry: str | None = None, command: list[str] | None = None,
                 agent: Callable[..., Any] | None = None, agent_timeout_s: float = 300.0, concurrency: int = 64,
                 max_requests: int = 32, host: str = "127.0.0.1", port: int = 0, batch_window_s: float = 0.05,
                 max_batch: int = 64, max_request_bytes: int = 1 << 20):
        if sum(x is not None for x in (entry, command, agent)) != 1:
            raise ValueError("env.params: give the agent as entry: 'module:function' or command: [program, ...] "
                             "(exactly one)")
        if command is not None and (not command or not all(isinstance(c, str) and c for c in command)):
            raise ValueError("env.params.command: a non-empty list of strings")
        self.verifier = verifier
        self.entry = entry or (None if agent is None else getattr(agent, "__qualname__", repr(agent)))
        self.agent = load_entry(entry) if entry is not None else agent
        self.is_async = self.agent is not None and inspect.iscoroutinefunction(self.agent)
        self.command = list(command) if command is not None else None
        self.agent_timeout_s = agent_timeout_s
        self.concurrency = concurrency
        self.limits = Limits(max_turns=max(2, max_requests))
        self.max_requests = max_requests
        self.serve = {"host": host, "port": port, "batch_window_s": batch_window_s, "max_batch": max_batch,
                      "max_request_bytes": max_request_bytes}

    @property
    def what(self) -> str:
        return f"agent {self.entry}" if self.entry else f"agent command {self.command[0]}"

    def reset(self, problem) -> EpisodeState:
        return EpisodeState(problem, problem.to_messages())

    def step(self, state: EpisodeState, text: str) -> Reply:
        raise NotImplementedError("env.name=agent runs its episodes through rlvr.serve (the rollout layer "
                                  "dispatches on AgentEnvironment.serves_agents), not reset/step")


@ENVIRONMENTS.register("agent", tags={"multi_turn"},
                       doc="an agent (a Python callable 'module:function' or a program) talking to the policy "
                           "through an OpenAI-compatible endpoint; its reward, or reward.verifier on its last "
                           "answer; params entry or command, agent_timeout_s, concurrency, max_requests")
def agent_env(verifier, tokenizer, *, entry: str | None = None, command: list[str] | None = None,
              agent_timeout_s: float = 300.0, concurrency: int = 64, max_requests: int = 32,
              host: str = "127.0.0.1", port: int = 0, batch_window_s: float = 0.05, max_batch: int = 64,
              max_request_bytes: int = 1 << 20) -> Environment:
    """``entry``: 'module:function' called as function(base_url, problem) (sync or async), returning a reward or
    None (reward.verifier scores the last answer); ``command``: a program run per episode (base URL and episode
    in its environment); ``agent_timeout_s``: seconds one agent may run; ``concurrency``: agents at once;
    ``max_requests``: requests per episode; ``host``/``port`` (0: a free one): where the endpoint listens;
    ``batch_window_s``/``max_batch``: requests gathered into one engine call; ``max_request_bytes``: body limit."""
    for name, value, low in (("agent_timeout_s", agent_timeout_s, 0.0), ("concurrency", concurrency, 1),
                             ("max_requests", max_requests, 1), ("max_batch", max_batch, 1),
                             ("max_request_bytes", max_request_bytes, 1), ("batch_window_s", batch_window_s, 0.0)):
        if value < low or (name == "agent_timeout_s" and value <= 0):
            raise ValueError(f"env.params.{name}: must be {'>' if name == 'agent_timeout_s' else '>='} {low:g}, "
                             f"got {value}")
    if not 0 <= port <= 65535:
        raise ValueError(f"env.params.port: must be in [0, 65535] (0: a free port), got {port}")
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"env.name=agent serves the policy with FastAPI and uvicorn ({', '.join(missing)} not "
                         "installed): pip install 'rlvr[serve]'")
    if port:
        _check_port(host, port)
    return AgentEnvironment(verifier, entry=entry, command=command, agent_timeout_s=agent_timeout_s,
                            concurrency=concurrency, max_requests=max_requests, host=host, port=port,
                            batch_window_s=batch_window_s, max_batch=max_batch, max_request_bytes=max_request_bytes)
