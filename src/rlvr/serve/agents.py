"""Running ``env.name=agent`` episodes: agents against the endpoint, their recordings as training samples.

:func:`run_agent_episodes` is what :func:`rlvr.rollout.episodes.run_episodes` calls for an
:class:`~rlvr.envs.agent.AgentEnvironment`: it keeps one endpoint per environment (started at its first call,
on ``env.params.host``/``port``), opens ``params.n`` episodes per problem, runs their agents at most
``concurrency`` at a time (plain callables and programs on threads, ``async`` callables on one event loop),
each within ``agent_timeout_s``, then closes the episodes and builds one sample per episode from its
recording (:meth:`rlvr.serve.recording.EpisodeRecording.to_sample`).  The reward is the agent's, or
``reward.verifier``'s score of the last answer served when the agent returns None.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import subprocess
import time
import weakref
from numbers import Real
from typing import Any

from rlvr.engines import SamplingParams
from rlvr.serve.backend import Backend, ServeOptions
from rlvr.types import Problem, Sample, Verdict
from rlvr.utils.deadline import TIMED_OUT, call_all
from rlvr.verifiers import safe_verify

__all__ = ["run_agent_episodes", "endpoint_for", "agent_command_env"]

log = logging.getLogger(__name__)


def endpoint_for(env, engine, tokenizer, params: SamplingParams):
    """The endpoint of ``env`` (started at its first call, stopped when ``env`` is collected), serving ``engine``
    (the training engine, or an evaluation one) at ``params``."""
    from rlvr.serve.app import Server

    server = getattr(env, "_rlvr_server", None)
    if server is None:
        opts = ServeOptions(**env.serve)
        backend = Backend(engine, tokenizer, params, opts, episodes_only=True, max_requests=env.max_requests)
        server = Server(backend).start()
        env._rlvr_server = server
        weakref.finalize(env, server.stop, "the run has stopped")  # the port is freed with the environment
    server.backend.use(engine, tokenizer, params)
    return server


def agent_command_env(base_url: str, episode_id: str, problem: Problem) -> dict[str, str]:
    """The environment variables a ``command`` agent gets (beside the caller's own)."""
    info = {"id": problem.id, "prompt": problem.prompt, "messages": problem.messages, "answer": problem.answer,
            "metadata": problem.metadata}
    return {"RLVR_BASE_URL": base_url, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "rlvr",
            "RLVR_EPISODE_ID": episode_id, "RLVR_PROBLEM": json.dumps(info, default=str)}


def _command_reward(stdout: str) -> Any:
    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    last = json.loads(lines[-1])  # ValueError: not JSON -> an agent error
    return last.get("reward") if isinstance(last, dict) else last


def _run_command(env, base_url: str, eid: str, problem: Problem) -> Any:
    proc = subprocess.run(env.command, env={**os.environ, **agent_command_env(base_url, eid, problem)},
                          capture_output=True, text=True, timeout=env.agent_timeout_s, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{env.command[0]} exited with status {proc.returncode}: {tail[0][:300]}")
    try:
        return _command_reward(proc.stdout)
    except ValueError:
        raise ValueError(f"{env.command[0]}'s last line is not a reward (a number, {{\"reward\": x}} or null): "
                         f"{proc.stdout.strip().splitlines()[-1][:200]!r}") from None


def _guard(fn, *args) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except subprocess.TimeoutExpired:
        return "timeout", None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a failing agent ends its own episode only
        return "error", f"{type(e).__name__}: {e}"


async def _run_async(env, jobs: list[tuple[str, str, Problem]], done) -> list[tuple[str, Any]]:
    sem = asyncio.Semaphore(env.concurrency)

    async def one(url, eid, problem):
        async with sem:
            try:
                return "ok", await asyncio.wait_for(env.agent(url, problem), env.agent_timeout_s)
            except asyncio.TimeoutError:
                return "timeout", None
            except (Exception, SystemExit) as e:  # noqa: BLE001
                return "error", f"{type(e).__name__}: {e}"
            finally:
                done(eid)

    return await asyncio.gather(*(one(url, eid, p) for url, eid, p in jobs))


def _then(after, fn, *args) -> tuple[str, Any]:
    try:
        return _guard(fn, *args)
    finally:
        after()


def run_agents(env, jobs: list[tuple[str, str, Problem]], done=None) -> list[tuple[str, Any]]:
    """Each job's ``(base_url, episode_id, problem)`` agent run: ``("ok", result)``, ``("error", why)`` or
    ``("timeout", None)``, in order.  ``done(episode_id)`` is called as each agent returns (the runner closes
    its episode then, so that the endpoint stops waiting for its requests)."""
    done = done or (lambda eid: None)
    if env.is_async:
        return asyncio.run(_run_async(env, jobs, done))
    if env.command is not None:
        calls = [lambda u=u, e=e, p=p: _then(lambda: done(e), _run_command, env, u, e, p) for u, e, p in jobs]
        limit = env.agent_timeout_s + 10  # the child is killed at agent_timeout_s; this bounds the wait
    else:
        calls = [lambda u=u, e=e, p=p: _then(lambda: done(e), env.agent, u, p) for u, e, p in jobs]
        limit = env.agent_timeout_s
    outs = call_all(calls, limit, workers=env.concurrency, name="rlvr-agent")
    return [("timeout", None) if o is TIMED_OUT else o for o in outs]


def _reward_of(result: Any) -> float | None:
    if result is None:
        return None
    if isinstance(result, bool) or not isinstance(result, Real) or not math.isfinite(float(result)):
        raise TypeError(f"the agent returned {type(result).__name__} {result!r}"[:200] + ", not a finite number "
                        "or None")
    return float(result)


def run_agent_episodes(engine, env, problems: list[Problem], params: SamplingParams, tokenizer=None,
                       timing: dict[str, float] | None = None, timeout: float | None = None) -> list[list[Sample]]:
    """``params.n`` agent episodes per problem; groups of finished samples in problem order (see the module
    doc).  ``timing["env_s"]`` gets the verifier's seconds; ``timeout`` (``env.timeout_s``) is not used: each
    agent has ``env.agent_timeout_s``."""
    tokenizer = tokenizer or engine.tokenizer
    server = endpoint_for(env, engine, tokenizer, params)
    backend = server.backend
    jobs, where = [], []
    for i, p in enumerate(problems):
        for g in range(params.n):
            eid = backend.open_episode(p, g)
            jobs.append((server.episode_url(eid), eid, p))
            where.append(i)
    try:
        outs = run_agents(env, jobs, lambda eid: backend.close_episode(eid, "its agent returned"))
    finally:
        recs = [backend.close_episode(eid, "its agent returned") for _, eid, _ in jobs]
        backend.reset_cache()  # the weights change after this call
        backend.forget([eid for _, eid, _ in jobs])
    eos = next(iter(backend.eos_ids))
    groups: list[list[Sample]] = [[] for _ in problems]
    errors: list[str] = []
    t_verify = 0.0
    for k, ((url, eid, problem), rec, (status, result)) in enumerate(zip(jobs, recs, outs)):
        info: dict[str, Any] = {"agent_errors": 0, "agent_timeouts": 0}
        reward, verdict, end = 0.0, None, "done"
        if status == "ok":
            try:
                value = _reward_of(result)
            except TypeError as e:
                status, result = "error", str(e)
            else:
                if value is not None:
                    reward, verdict = value, Verdict(value, None, reason="the agent's reward")
                else:
                    t0 = time.perf_counter()
                    text = rec.final_text
                    verdict = safe_verify(env.verifier, text, problem.answer) if text is not None else \
                        Verdict(0.0, None, reason="the agent asked for no completion")
                    t_verify += time.perf_counter() - t0
                    reward = float(verdict.score)
        if status == "timeout":
            info["agent_timeouts"], end = 1, "agent_timeout"
            verdict = Verdict(0.0, None, reason=f"agent error: TimeoutError: no result after "
                                                f"{env.agent_timeout_s:g} s (env.params.agent_timeout_s)")
            errors.append(verdict.reason)
        elif status == "error":
            info["agent_errors"], end = 1, "agent_error"
            verdict = Verdict(0.0, None, reason=f"agent error: {result}"[:500])
            errors.append(verdict.reason)
        info["end"] = end
        fallback = _prompt_ids(tokenizer, problem) if not rec.segments else []
        groups[where[k]].append(rec.to_sample(tokenizer, verdict, reward, info, fallback, eos))
    if timing is not None:
        timing["env_s"] = timing.get("env_s", 0.0) + t_verify
    if errors:
        log.warning("%s: %d of %d episodes ended with an agent error, scored 0; first: %s", env.what, len(errors),
                    len(jobs), errors[0])
    return groups


def _prompt_ids(tokenizer, problem: Problem) -> list[int]:
    from rlvr.engines.hf import format_prompt

    return format_prompt(tokenizer, problem)
