"""The environment interface: an episode is a conversation between the policy and an environment.

An :class:`Environment` gives the first messages of an episode (:meth:`Environment.reset`),
answers every assistant turn (:meth:`Environment.step`) with a :class:`Reply` (an
observation to show the policy: a tool result or feedback, or the end of the
episode with a reward and a :class:`~rlvr.types.Verdict`), and declares its limits
(:class:`Limits`: turns, total tokens, seconds per tool call).  The rollout layer
(:mod:`rlvr.rollout.episodes`) runs episodes token in, token out; an environment
only ever sees and returns text.

A single-turn environment ends every episode at its first step: today's tasks
plus verifiers are exactly that (:class:`rlvr.envs.single_turn.SingleTurnEnvironment`).

Writing one is a class with ``reset`` and ``step`` registered in
:data:`ENVIRONMENTS`; see ``docs/environments.md`` for a complete example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from rlvr.registry import Registry
from rlvr.types import ComponentError, Problem, Verdict

__all__ = ["Environment", "EpisodeState", "Reply", "Limits", "ENVIRONMENTS", "build_environment", "multi_turn",
           "EnvTraits", "environment_traits", "set_concurrency"]


@dataclass(frozen=True)
class Limits:
    """What keeps an episode from running forever; the runner enforces all three."""

    max_turns: int = 1
    """Assistant turns at most; an episode still open after the last one ends with reward 0."""
    max_total_tokens: int = 0
    """Tokens after the prompt (the policy's and the environment's) at most; 0: no cap beyond
    ``max_turns x max_new_tokens`` policy tokens plus the environment's observations."""
    tool_timeout: float = 10.0
    """Wall-clock seconds one tool call may take before its observation is a timeout error."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_total_tokens < 0:
            raise ValueError(f"max_total_tokens must be >= 0, got {self.max_total_tokens}")
        if not self.tool_timeout > 0:
            raise ValueError(f"tool_timeout must be > 0, got {self.tool_timeout}")


@dataclass
class EpisodeState:
    """One episode's state, created by :meth:`Environment.reset` and passed back to every ``step``."""

    problem: Problem
    """The task instance (its ``answer`` is the reference the environment scores against)."""
    messages: list[dict[str, str]]
    """The first messages of the episode (rendered by the engine with the chat template)."""
    tools: list[dict] | None = None
    """JSON schemas of the tools offered through the chat template (None: none, or a text protocol)."""
    turn: int = 0
    """Assistant turns answered so far."""
    data: dict[str, Any] = field(default_factory=dict)
    """Free-form per-episode memory of the environment (attempts, tool calls, ...)."""


@dataclass
class Reply:
    """The environment's answer to one assistant turn."""

    observation: str | None = None
    """Text shown to the policy before its next turn (None when the episode ends)."""
    role: Literal["inline", "user", "tool"] = "user"
    """How the observation is appended: ``inline`` inside the same assistant message (raw text right
    after the policy's tokens, e.g. ``<result>42</result>``), or as a new ``user`` / ``tool`` message
    rendered with the tokenizer's chat template (the assistant turn is closed first)."""
    done: bool = False
    """True ends the episode; ``reward`` and ``verdict`` are its outcome."""
    reward: float = 0.0
    """This turn's reward; an episode's return is the sum over its turns (in [0, 1] for binary tasks)."""
    verdict: Verdict | None = None
    """The final verdict (correctness, extracted answer, reason) when ``done``."""
    info: dict[str, Any] = field(default_factory=dict)
    """Counters the runner aggregates into metrics (e.g. ``{"tool_calls": 1, "tool_errors": 0}``)."""


class Environment:
    """Base class of environments: override :meth:`reset` and :meth:`step`.

    Class attributes an environment may set: ``limits`` (a :class:`Limits`),
    ``stop`` (extra stop strings that end an assistant turn early, e.g. the end tag
    of a tool call), ``single_turn`` (True when every episode ends at its first
    step; the runner then takes the plain sampling path, bit for bit the same as a
    task plus a verifier) and ``step_workers`` (above 1: the resets and steps of one
    turn's episodes may run on that many threads, for environments whose work waits on
    child processes, tools or services, such as code checks; ``reset`` and ``step`` must
    then be thread-safe; a run's ``env.max_concurrency`` sets it, :func:`set_concurrency`).
    """

    limits: Limits = Limits()
    stop: tuple[str, ...] = ()
    single_turn: bool = False
    step_workers: int = 1

    def reset(self, problem: Problem) -> EpisodeState:
        """The first messages of an episode on ``problem`` (default: the problem's own chat)."""
        return EpisodeState(problem, problem.to_messages())

    def step(self, state: EpisodeState, text: str) -> Reply:
        """Answer the policy's latest turn (``text``: that turn alone, decoded, cut after a stop string)."""
        raise NotImplementedError

    def close(self, state: EpisodeState, reason: str) -> Reply:
        """The outcome of an episode the runner ends (limits hit): reward 0 unless overridden."""
        return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=reason))


ENVIRONMENTS: Registry[Callable[..., Environment]] = Registry("environment", skip=2)
"""Environment builders by name: ``builder(verifier, tokenizer, **options) -> Environment``.

``verifier`` is the run's ``reward.verifier`` (what single-turn environments score
with); ``tokenizer`` is the policy's.  Whether an environment takes more than one turn
is read from the environment itself (:func:`multi_turn`: ``limits.max_turns > 1``); the
``multi_turn`` tag is not needed (an entry tagged so is treated as multi-turn)."""


def build_environment(name: str, verifier, tokenizer=None, **params: Any) -> Environment:
    """The environment registered as ``name`` with its options validated (``env.params``)."""
    params = ENVIRONMENTS.validate_params(name, params, key="env.params")
    env = ENVIRONMENTS.get(name)(verifier, tokenizer, **params)
    if not isinstance(env, Environment):
        raise ComponentError(f"environment {name!r}: its builder returned {type(env).__name__}, not an "
                             "rlvr.envs.Environment")
    try:  # messages about it name the registry entry (rlvr.types.component_name)
        env.rlvr_name = name
    except AttributeError:
        pass
    return env


def set_concurrency(env: Environment, max_concurrency: int) -> Environment:
    """``env`` with ``step_workers`` set to ``max_concurrency`` (``env.max_concurrency``; 0 keeps the
    environment's own), on a task mixture's own environments too: the one number the episode runner reads."""
    if max_concurrency > 0:
        for e in [env, *getattr(env, "envs", {}).values()]:
            e.step_workers = int(max_concurrency)
    return env


def multi_turn(env: Environment) -> bool:
    """Whether ``env``'s episodes may take more than one turn: ``env.limits.max_turns > 1``."""
    return not env.single_turn and env.limits.max_turns > 1


@dataclass(frozen=True)
class EnvTraits:
    """What the config checks need to know about an environment before any model loads."""

    name: str
    single_turn: bool
    """The plain sampling path: one completion scored by the verifier (what every backend runs)."""
    multi_turn: bool
    """Episodes may take more than one turn (``limits.max_turns > 1``; unknown counts as yes)."""
    max_turns: int | None
    """``limits.max_turns`` (None: unknown, the builder needs a verifier or tokenizer)."""

    def why(self) -> str:
        if self.max_turns is None:
            return f"env.name={self.name} runs its own episodes"
        if self.multi_turn:
            return f"env.name={self.name} runs multi-turn episodes (limits.max_turns={self.max_turns})"
        return f"env.name={self.name} runs its own reset/step"


def environment_traits(name: str, params: dict[str, Any] | None = None) -> EnvTraits:
    """The traits of the environment ``name`` with options ``params``, read from the environment itself.

    It is built with its options (``env.params``) and without a verifier or tokenizer (the built-in ones only
    store them); a builder that cannot be built that way gives unknown traits, which count as multi-turn.
    Raises ValueError (naming ``env.params``) when the builder refuses the options.
    """
    entry = ENVIRONMENTS.entry(name, key="env.name")
    try:
        env = build_environment(name, None, None, **(params or {}))
    except ValueError as e:
        raise ValueError(str(e) if str(e).startswith("env.") else f"env.params: {e}") from None
    except Exception:  # noqa: BLE001 - it needs a verifier or tokenizer to be built
        return EnvTraits(name, name == "single_turn", name != "single_turn", None)
    return EnvTraits(name, env.single_turn, "multi_turn" in entry.tags or multi_turn(env), env.limits.max_turns)
