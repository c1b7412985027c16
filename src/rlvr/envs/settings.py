"""The ``env`` section of a run: the environment episodes run in."""

from __future__ import annotations

from typing import Any

from rlvr.config import ConfigModel, option

__all__ = ["EnvConfig", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 300.0
"""Seconds one call of an environment (a verifier's check included) may take unless a caller says otherwise."""


class EnvConfig(ConfigModel):
    """The environment episodes run in (rlvr.envs): one turn scored by reward.verifier, or several."""

    name: str = option("single_turn", "environment, a name in rlvr.envs.ENVIRONMENTS: single_turn (the task "
                                      "scored by reward.verifier), tools (calculator / sandboxed python tool use), "
                                      "retry ('try again' feedback)")
    params: dict[str, Any] = option(None, "options of the environment, e.g. {tools: [calculator], max_turns: 4} "
                                          "or {attempts: 2} (validated against its registry entry)",
                                    default_factory=dict)
    timeout_s: float = option(DEFAULT_TIMEOUT_S, "seconds one call of the environment (reset, step, close; for "
                                                 "single_turn: one verifier check) may take; past it the episode "
                                                 "scores 0 with a timeout error and the run goes on (0: no limit)",
                              ge=0)
    max_concurrency: int = option(0, "most environment calls (reset, step) of a turn's episodes run at once, on "
                                     "threads; 0: the environment's own step_workers (single_turn and "
                                     "code_feedback: their workers option; others 1); above 1 needs a thread-safe "
                                     "environment", ge=0, le=1024)

