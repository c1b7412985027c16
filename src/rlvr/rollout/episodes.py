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
turn cut off at ``max_new_tokens`` is still the environment's to answer); an
environment that raises ends that episode with reward 0 and the error as reason.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field

from rlvr.engines import SamplingParams
from rlvr.envs.base import Environment, EpisodeState, Reply
from rlvr.envs.rendering import observation_ids
from rlvr.types import Problem, Sample, Verdict

__all__ = ["Episode", "run_episodes", "episode_metrics", "safe_step"]

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


def safe_step(env: Environment, state: EpisodeState, text: str) -> Reply:
    """``env.step`` whose exceptions (or a non-``Reply`` result) end the episode with reward 0 and the reason."""
    try:
        reply = env.step(state, text)
        if not isinstance(reply, Reply):
            raise TypeError(f"step returned {type(reply).__name__}, not a Reply")
        return reply
    except Exception as e:  # noqa: BLE001 - a faulty environment ends its episode, never the run
        reason = f"environment error: {type(e).__name__}: {e}"[:500]
        log.warning("episode on %s ended: %s", state.problem.id, reason)
        return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=reason), info={"env_errors": 1})


def run_episodes(engine, env: Environment, problems: list[Problem], params: SamplingParams,
                 tokenizer=None) -> list[list[Sample]]:
    """``params.n`` episodes per problem; returns groups of finished samples in problem order.

    Each sample's ``info`` holds ``reward`` (the environment's return), ``verdict``
    (the final :class:`Verdict`), ``turns``, ``turn_ends``, ``turn_rewards``,
    ``end`` ("done", "max_turns", "max_total_tokens") and the summed
    ``Reply.info`` counters.  ``tokenizer`` (default ``engine.tokenizer``) renders
    the environment's turns.
    """
    tokenizer = tokenizer or getattr(engine, "tokenizer", None)  # only multi-turn episodes render turns
    eos_ids = set(getattr(engine, "eos_ids", None) or ({tokenizer.eos_token_id} if tokenizer is not None else ()))
    limits = env.limits
    budget = limits.max_total_tokens or 1 << 62  # 0: turns x max_new_tokens bound the policy's tokens anyway
    turn_params = dataclasses.replace(params, stop=tuple(params.stop) + tuple(env.stop),
                                      max_new_tokens=min(params.max_new_tokens, budget))
    states = [env.reset(p) for p in problems]
    starts = [_start_problem(s) if not env.single_turn else p for s, p in zip(states, problems)]
    # engines that can continue a sequence without recomputing it (HF: a KV prefix cache) keep every row's
    # keys and values for the next turn; the cache lives for this call only (the weights change after it)
    cache = engine.prefix_cache() if not env.single_turn and hasattr(engine, "prefix_cache") else None
    extra = {"cache": cache} if cache is not None else {}
    groups = engine.generate(starts, turn_params, **extra)
    episodes: list[list[Episode]] = []
    for i, group in enumerate(groups):
        row = []
        for s in group:
            state = states[i] if len(group) == 1 else dataclasses.replace(states[i], data=dict(states[i].data))
            s.info = {"turn_ends": [len(s.completion_ids)], "turn_rewards": []}
            row.append(Episode(state, starts[i], s))
        episodes.append(row)
    open_eps = [ep for row in episodes for ep in row]
    last_texts = {id(ep): ep.sample.text for ep in open_eps}
    while open_eps:
        cont: list[Episode] = []
        for ep in open_eps:
            reply = safe_step(env, ep.state, last_texts[id(ep)])
            ep.state.turn += 1
            _account(ep, reply)
            if reply.done:
                _finish(ep, reply, "done")
                continue
            if ep.state.turn >= limits.max_turns:
                _finish(ep, env.close(ep.state, f"max_turns={limits.max_turns} reached"), "max_turns")
                continue
            obs = observation_ids(tokenizer, reply.observation or "", reply.role, _last_turn_ids(ep), eos_ids)
            if len(ep.sample.completion_ids) + len(obs) >= budget:
                _finish(ep, env.close(ep.state, f"max_total_tokens={budget} reached"), "max_total_tokens")
                continue
            _append(ep.sample, obs, model=False)
            cont.append(ep)
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
    return [[ep.sample for ep in row] for row in episodes]


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
    s.info.update({"reward": ep.reward, "verdict": ep.verdict, "turns": ep.state.turn, **dict(ep.counts)})
    if s.mask is not None:  # more than one turn: the text is the whole trajectory as the policy saw it
        s.text = tokenizer.decode(s.completion_ids, skip_special_tokens=True)


def episode_metrics(samples: list[Sample]) -> dict[str, float]:
    """Means over a step's episodes: turns, tool calls and errors, environment errors, how episodes ended."""
    if not samples:
        return {}
    n = len(samples)
    out = {"env/turns": sum(s.info.get("turns", 1) for s in samples) / n}
    keys = sorted({k for s in samples for k, v in s.info.items() if isinstance(v, (int, float))
                   and k not in ("turns", "reward")})
    for k in keys:
        out[f"env/{k}"] = sum(float(s.info.get(k, 0)) for s in samples) / n
    if any("tool_calls" in s.info for s in samples):
        out["env/tool_call_rate"] = sum(s.info.get("tool_calls", 0) > 0 for s in samples) / n
    ends = Counter(s.info.get("end", "done") for s in samples)
    for k, v in ends.items():
        if k != "done":
            out[f"env/end_{k}"] = v / n
    return out
