"""Running episodes, token in and token out.

A trajectory is the sampler's own token ids with the environment's ids appended:
the policy's tokens are never decoded and re-encoded, and the environment's turns
are rendered once per turn boundary (:func:`rlvr.envs.rendering.observation_ids`).
The result of an episode is one :class:`~rlvr.types.Sample` whose
``completion_ids`` hold every token after the prompt, whose ``mask`` marks the
policy's tokens (the learner's loss mask) and whose ``logprobs`` are the sampler's
log-probs on those tokens (0 on the environment's).

All episodes of a call advance together: the first turn samples ``n`` episodes per
problem with one ``engine.generate`` call (for a single-turn environment this *is*
the plain sampling path, bit for bit); every later turn continues all open
episodes with one more call, passing each trajectory as token-id ``prefixes``.
An engine with a ``prefix_cache()`` (the HF engine) keeps each row's keys and
values between turns, so a later turn feeds the model only the environment's
tokens, not the whole trajectory again.
Limits (turns, total tokens) end an episode with :meth:`Environment.close` (a
turn cut off at ``max_new_tokens`` is still the environment's to answer).  An
environment that raises in ``reset``, ``step`` or ``close`` ends that episode with
reward 0 and the error as the verdict's reason (a failed ``reset`` samples its first
turn from the problem's own prompt and is never stepped); one warning per call counts
them and shows the first.  An environment that returns the wrong type is a
programming error: :class:`~rlvr.types.ComponentError` at its first call.

An environment whose ``step_workers`` is above 1 (a run's ``env.max_concurrency``, else the
environment's own) has a call's resets and each turn's steps run on that many threads at once
(code checks, tool calls, remote services: the work waits on child processes or I/O, so threads
overlap it); the results (and errors) are then applied in episode order, as in the sequential
case, so what is sampled and scored does not depend on the concurrency.

Every call of the environment (``reset``, ``step``, ``close``; for a single-turn
environment the step is the verifier's check) has ``timeout`` seconds (``env.timeout_s``
in a run, :data:`DEFAULT_TIMEOUT_S` unless given; 0: no limit).  A call past it ends its
episode with reward 0: a ``verifier error: TimeoutError ...`` verdict for a single-turn
step (counted with the verifier's errors), an ``environment error`` otherwise (counted
in ``env/env_errors``); both count in ``timeouts`` and in the call's warning, and the
other episodes go on.  The calls run on daemon threads and are waited for in short
slices (:func:`rlvr.utils.deadline.call_all`), so Ctrl-C stops a call within a fraction
of a second whatever it waits on; a call given up on keeps its thread until it returns
(the next calls do not wait for it).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from numbers import Real

from rlvr.engines import SamplingParams
from rlvr.envs.base import Environment, EpisodeState, Reply
from rlvr.envs.rendering import observation_ids
from rlvr.envs.settings import DEFAULT_TIMEOUT_S
from rlvr.types import ComponentError, Problem, Sample, Verdict, component_name
from rlvr.utils.deadline import TIMED_OUT, call_all

__all__ = ["Episode", "run_episodes", "episode_metrics", "safe_step", "safe_reset", "safe_close",
           "DEFAULT_TIMEOUT_S"]

log = logging.getLogger(__name__)


@dataclass
class Episode:
    """One episode while it runs; ``sample`` holds the trajectory so far."""

    state: EpisodeState
    start: Problem
    sample: Sample
    reward: float = 0.0
    verdict: Verdict | None = None
    counts: Counter = field(default_factory=Counter)


def _start_problem(state: EpisodeState) -> Problem:
    p = state.problem
    return Problem(p.id, messages=state.messages, answer=p.answer, metadata=p.metadata, tools=state.tools,
                   images=p.images)


def _error_reply(where: str, e: Exception, errors: list | None, problem_id: str) -> Reply:
    reason = f"environment error: {type(e).__name__}: {e}"[:480] + f" (in {where})"
    if errors is not None:
        errors.append((where, problem_id, reason))
    else:
        log.debug("episode on %s ended: %s", problem_id, reason)
    return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=reason), info={"env_errors": 1})


def _checked_reply(env: Environment, where: str, reply) -> Reply:
    """``reply`` if it is a :class:`Reply` with a numeric reward and a Verdict (or None); else ComponentError."""
    if not isinstance(reply, Reply):
        raise ComponentError(f"environment {component_name(env)}: {where} returned {type(reply).__name__} "
                             f"{reply!r}"[:300] + ", not an rlvr.envs.Reply")
    if not isinstance(reply.reward, Real) or (reply.verdict is not None and not isinstance(reply.verdict, Verdict)):
        raise ComponentError(f"environment {component_name(env)}: {where} returned a Reply with reward "
                             f"{reply.reward!r} and verdict {reply.verdict!r}"[:300] + " (a number and an "
                             "rlvr.types.Verdict or None)")
    return reply


def _limit(timeout: float | None) -> float:
    return DEFAULT_TIMEOUT_S if timeout is None else float(timeout)


def _timeout_reply(env: Environment, where: str, timeout: float, errors: list | None, problem_id: str) -> Reply:
    """The reply that ends an episode whose ``where`` call gave no result within ``timeout`` seconds: a verifier
    error for a single-turn step (the step is the verifier's check), an environment error otherwise."""
    what = f"TimeoutError: no result after {timeout:g} s (env.timeout_s)"
    if where == "step" and env.single_turn:
        reason, info = f"verifier error: {what}", {"timeouts": 1}
    else:
        reason, info = f"environment error: {what} (in {where})", {"env_errors": 1, "timeouts": 1}
    if errors is not None:
        errors.append((where, problem_id, reason))
    else:
        log.debug("episode on %s ended: %s", problem_id, reason)
    return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=reason), info=info)


def _step_once(env: Environment, state: EpisodeState, text: str, errors: list | None) -> Reply:
    try:
        reply = env.step(state, text)
    except ComponentError:  # a broken verifier inside the environment: a programming error, not an episode's
        raise
    except Exception as e:  # noqa: BLE001 - a faulty environment ends its episode, never the run
        return _error_reply("step", e, errors, state.problem.id)
    return _checked_reply(env, "step", reply)


def _close_once(env: Environment, state: EpisodeState, reason: str, errors: list | None) -> Reply:
    try:
        reply = env.close(state, reason)
    except ComponentError:
        raise
    except Exception as e:  # noqa: BLE001
        return _error_reply("close", e, errors, state.problem.id)
    return _checked_reply(env, "close", reply)


def _reset_once(env: Environment, problem: Problem, errors: list | None) -> tuple[EpisodeState, Reply | None]:
    try:
        state = env.reset(problem)
    except ComponentError:
        raise
    except Exception as e:  # noqa: BLE001
        return EpisodeState(problem, problem.to_messages()), _error_reply("reset", e, errors, problem.id)
    if not isinstance(state, EpisodeState):
        raise ComponentError(f"environment {component_name(env)}: reset returned {type(state).__name__}, not an "
                             "rlvr.envs.EpisodeState")
    return state, None


def _timed(call, timeout: float, errors: list | None):
    """``call(errors)`` within ``timeout`` seconds (0: no limit, called here), its errors added to ``errors`` only
    when it finished in time (a call given up on may still append later); TIMED_OUT else."""
    if not timeout:
        return call(errors)
    own: list = []
    out = call_all([lambda: call(own)], timeout, name="rlvr-env")[0]
    if out is not TIMED_OUT and errors is not None:
        errors.extend(own)
    return out


def safe_step(env: Environment, state: EpisodeState, text: str, errors: list | None = None,
              timeout: float | None = None) -> Reply:
    """``env.step`` whose exceptions end the episode with reward 0 and the error as reason (appended to
    ``errors`` as ``(where, problem id, reason)`` when given), as does a call past ``timeout`` seconds
    (:data:`DEFAULT_TIMEOUT_S` when None; 0: no limit); a result that is not a Reply raises
    :class:`~rlvr.types.ComponentError`."""
    limit = _limit(timeout)
    out = _timed(lambda errs: _step_once(env, state, text, errs), limit, errors)
    return _timeout_reply(env, "step", limit, errors, state.problem.id) if out is TIMED_OUT else out


def safe_close(env: Environment, state: EpisodeState, reason: str, errors: list | None = None,
               timeout: float | None = None) -> Reply:
    """``env.close`` with the same guard as :func:`safe_step`."""
    limit = _limit(timeout)
    out = _timed(lambda errs: _close_once(env, state, reason, errs), limit, errors)
    return _timeout_reply(env, "close", limit, errors, state.problem.id) if out is TIMED_OUT else out


def safe_reset(env: Environment, problem: Problem, errors: list | None = None,
               timeout: float | None = None) -> tuple[EpisodeState, Reply | None]:
    """``(env.reset(problem), None)``; when it raises (or gives no result within ``timeout`` seconds, as for
    :func:`safe_step`), a state on the problem's own messages and the error reply that ends the episode.  A result
    that is not an EpisodeState raises :class:`~rlvr.types.ComponentError`."""
    limit = _limit(timeout)
    out = _timed(lambda errs: _reset_once(env, problem, errs), limit, errors)
    if out is TIMED_OUT:
        return EpisodeState(problem, problem.to_messages()), _timeout_reply(env, "reset", limit, errors, problem.id)
    return out


def _warn_errors(env: Environment, errors: list, episodes: list[list[Episode]]) -> None:
    """One line for a call's environment errors: episodes ended by one, counts by method, the first error."""
    if not errors:
        return
    n = sum(len(row) for row in episodes)
    failed = sum(1 for row in episodes for ep in row if ep.counts.get("env_errors") or ep.counts.get("timeouts"))
    by = Counter(where for where, _, _ in errors)
    where, pid, reason = errors[0]
    log.warning("environment %s: %d of %d episodes ended with an error, scored 0 (errors in %s); first, on "
                "problem %r: %s", component_name(env), failed, n, ", ".join(f"{k}: {v}" for k, v in
                                                                            sorted(by.items())), pid, reason)


def _workers(env: Environment, calls: int) -> int:
    return min(int(getattr(env, "step_workers", 1) or 1), calls)


def _reset_all(env: Environment, problems: list[Problem], errors: list,
               timeout: float) -> list[tuple[EpisodeState, Reply | None]]:
    """``safe_reset`` of every problem, on ``env.step_workers`` threads when that is above 1 (errors added in
    problem order, as in the sequential case); each reset has ``timeout`` seconds from its start (0: no limit)."""
    workers = _workers(env, len(problems))
    if workers <= 1:
        return [safe_reset(env, p, errors, timeout) for p in problems]

    def one(p: Problem):
        own: list = []
        return _reset_once(env, p, own), own

    done = call_all([lambda p=p: one(p) for p in problems], timeout, workers=workers, name="rlvr-env-reset")
    out = []
    for p, got in zip(problems, done):
        if got is TIMED_OUT:
            out.append((EpisodeState(p, p.to_messages()), _timeout_reply(env, "reset", timeout, errors, p.id)))
            continue
        result, own = got
        errors.extend(own)
        out.append(result)
    return out


def _step_all(env: Environment, eps: list["Episode"], texts: dict[int, str], errors: list,
              timeout: float) -> list[Reply]:
    """``safe_step`` of every open episode, on ``env.step_workers`` threads when that is above 1 (each step's
    errors are added to ``errors`` in episode order, as in the sequential case); each step has ``timeout``
    seconds from its start (0: no limit)."""
    workers = _workers(env, len(eps))
    if workers <= 1:
        return [safe_step(env, ep.state, texts[id(ep)], errors, timeout) for ep in eps]

    def one(ep: "Episode") -> tuple[Reply, list]:
        own: list = []
        return _step_once(env, ep.state, texts[id(ep)], own), own

    # daemon threads waited for in short slices: a hung step neither stalls the run nor blocks Ctrl-C
    done = call_all([lambda ep=ep: one(ep) for ep in eps], timeout, workers=workers, name="rlvr-env-step")
    replies = []
    for ep, out in zip(eps, done):
        if out is TIMED_OUT:
            replies.append(_timeout_reply(env, "step", timeout, errors, ep.state.problem.id))
            continue
        reply, own = out
        errors.extend(own)
        replies.append(reply)
    return replies


def run_episodes(engine, env: Environment, problems: list[Problem], params: SamplingParams,
                 tokenizer=None, timing: dict[str, float] | None = None,
                 timeout: float | None = None) -> list[list[Sample]]:
    """``params.n`` episodes per problem; returns groups of finished samples in problem order.

    Each sample's ``env_return`` is the environment's return and its ``verdict`` the final
    :class:`Verdict`; its ``info`` holds ``turns``, ``turn_ends``, ``turn_rewards``,
    ``end`` ("done", "max_turns", "max_total_tokens") and the summed
    ``Reply.info`` counters.  ``tokenizer`` (default ``engine.tokenizer``) renders
    the environment's turns.  ``timing``, if given, gets the wall seconds spent in the
    environment's steps added to ``timing["env_s"]`` (verification, tool calls).  ``timeout``: seconds each
    call of the environment may take (:data:`DEFAULT_TIMEOUT_S` when None; 0: no limit).
    """
    if getattr(env, "serves_agents", False):  # env.name=agent: agents drive the episodes through rlvr.serve
        from rlvr.serve.agents import run_agent_episodes

        return run_agent_episodes(engine, env, problems, params, tokenizer, timing, timeout)
    timeout = _limit(timeout)
    tokenizer = tokenizer or engine.tokenizer  # only multi-turn episodes render turns
    eos_ids = set(engine.eos_ids)
    limits = env.limits
    budget = limits.max_total_tokens or 1 << 62  # 0: turns x max_new_tokens bound the policy's tokens anyway
    turn_params = dataclasses.replace(params, stop=tuple(params.stop) + tuple(env.stop),
                                      max_new_tokens=min(params.max_new_tokens, budget))
    errors: list = []
    resets = _reset_all(env, problems, errors, timeout)
    states = [state for state, _ in resets]
    starts = [_start_problem(s) if not env.single_turn and failed is None else p
              for (s, failed), p in zip(resets, problems)]
    # engines that can continue a sequence without recomputing it (HF: a KV prefix cache; None elsewhere) keep
    # every row's keys and values for the next turn; the cache lives for this call only (the weights change after it)
    cache = engine.prefix_cache() if not env.single_turn else None
    extra = {"cache": cache} if cache is not None else {}
    groups = engine.generate(starts, turn_params, **extra)
    episodes: list[list[Episode]] = []
    for i, group in enumerate(groups):
        row = []
        for s in group:
            state = states[i] if len(group) == 1 else dataclasses.replace(states[i], data=dict(states[i].data))
            s.info = {"turn_ends": [len(s.completion_ids)], "turn_rewards": []}
            row.append(Episode(state, starts[i], s))
            if resets[i][1] is not None:  # reset raised: the episode ends here, with the error
                _finish(row[-1], resets[i][1], "env_error")
        episodes.append(row)
    open_eps = [ep for row in episodes for ep in row if ep.verdict is None]
    last_texts = {id(ep): ep.sample.text for ep in open_eps}
    while open_eps:
        t0 = time.perf_counter()
        replies = _step_all(env, open_eps, last_texts, errors, timeout)
        if timing is not None:
            timing["env_s"] = timing.get("env_s", 0.0) + time.perf_counter() - t0
        cont = _advance(env, open_eps, replies, tokenizer, eos_ids, budget, errors, timeout)
        if not cont:
            break
        # one generate call for all open episodes: with max_total_tokens set, the tightest remaining budget caps
        # this turn for all of them (episodes are never cut below it, only sooner than their own budget)
        room = min(turn_params.max_new_tokens, min(budget - len(ep.sample.completion_ids) for ep in cont))
        step_params = dataclasses.replace(turn_params, n=1, max_new_tokens=max(1, room))
        outs = engine.generate([ep.start for ep in cont], step_params,
                               prefixes=[list(ep.sample.completion_ids) for ep in cont], **extra)
        open_eps = []
        for ep, (s,) in zip(cont, outs):
            _append(ep.sample, s.completion_ids, model=True, logprobs=s.logprobs)
            ep.sample.finish_reason = s.finish_reason
            ep.sample.info["turn_ends"].append(len(ep.sample.completion_ids))
            last_texts[id(ep)] = s.text
            open_eps.append(ep)
    if cache is not None:
        log.debug("prefix cache: %d tokens reused, %d fed, %d rows not stored", cache.reused_tokens,
                  cache.fed_tokens, cache.skipped)
        cache.clear()
    for row in episodes:
        for ep in row:
            _seal(ep, tokenizer)
    _warn_errors(env, errors, episodes)
    return [[ep.sample for ep in row] for row in episodes]


def _advance(env: Environment, open_eps: list[Episode], replies: list[Reply], tokenizer, eos_ids: set,
             budget: int, errors: list, timeout: float) -> list[Episode]:
    """Every open episode after its environment step's ``reply``; returns the episodes that continue (their
    observation appended), having finished the others (done, or a turn / token limit reached)."""
    limits = env.limits
    cont: list[Episode] = []
    for ep, reply in zip(open_eps, replies):
        ep.state.turn += 1
        _account(ep, reply)
        if reply.done:
            _finish(ep, reply, "done")
            continue
        if ep.state.turn >= limits.max_turns:
            _finish(ep, safe_close(env, ep.state, f"max_turns={limits.max_turns} reached", errors, timeout),
                    "max_turns")
            continue
        obs = observation_ids(tokenizer, reply.observation or "", reply.role, _last_turn_ids(ep), eos_ids)
        if len(ep.sample.completion_ids) + len(obs) >= budget:
            _finish(ep, safe_close(env, ep.state, f"max_total_tokens={budget} reached", errors, timeout),
                    "max_total_tokens")
            continue
        _append(ep.sample, obs, model=False)
        cont.append(ep)
    return cont


def _last_turn_ids(ep: Episode) -> list[int]:
    ends = ep.sample.info["turn_ends"]
    return ep.sample.completion_ids[(ends[-2] if len(ends) > 1 else 0):ends[-1]]


def _account(ep: Episode, reply: Reply) -> None:
    ep.sample.info["turn_rewards"].append(float(reply.reward))
    ep.reward += float(reply.reward)
    ep.counts.update({k: v for k, v in reply.info.items() if isinstance(v, (int, float))})


def _finish(ep: Episode, reply: Reply, end: str) -> None:
    if end != "done":  # the runner ended it: the environment's close() reply is one more (final) turn reward
        _account(ep, reply)
    ep.verdict = reply.verdict if reply.verdict is not None else Verdict(0.0, None, reason="episode ended")
    ep.sample.info["end"] = end


def _append(sample: Sample, ids: list[int], *, model: bool, logprobs: list[float] | None = None) -> None:
    if sample.mask is None:
        sample.mask = [1] * len(sample.completion_ids)
    sample.completion_ids = list(sample.completion_ids) + list(ids)
    sample.logprobs = list(sample.logprobs) + (list(logprobs) if model else [0.0] * len(ids))
    sample.mask = sample.mask + [1 if model else 0] * len(ids)


def _seal(ep: Episode, tokenizer) -> None:
    s = ep.sample
    s.verdict, s.env_return = ep.verdict, ep.reward
    s.info.update({"turns": ep.state.turn, **dict(ep.counts)})
    if s.mask is not None:  # more than one turn: the text is the whole trajectory as the policy saw it
        s.text = tokenizer.decode(s.completion_ids, skip_special_tokens=True)


def episode_metrics(samples: list[Sample]) -> dict[str, float]:
    """Means over a step's episodes: turns, tool calls and errors, environment errors, how episodes ended."""
    if not samples:
        return {}
    n = len(samples)
    out = {"env/turns": sum(s.info.get("turns", 1) for s in samples) / n}
    keys = sorted({k for s in samples for k, v in s.info.items() if isinstance(v, (int, float))
                   and k != "turns"})
    for k in keys:
        out[f"env/{k}"] = sum(float(s.info.get(k, 0)) for s in samples) / n
    if any("tool_calls" in s.info for s in samples):
        out["env/tool_call_rate"] = sum(s.info.get("tool_calls", 0) > 0 for s in samples) / n
    ends = Counter(s.info.get("end", "done") for s in samples)
    for k, v in ends.items():
        if k != "done":
            out[f"env/end_{k}"] = v / n
    return out
