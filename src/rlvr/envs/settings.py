"""The ``env`` section of a run: the environment episodes run in."""

from __future__ import annotations

from typing import Any

from rlvr.config import ConfigModel, option

__all__ = ["EnvConfig"]


class EnvConfig(ConfigModel):
    """The environment episodes run in (rlvr.envs): one turn scored by reward.verifier, or several."""

    name: str = option("single_turn", "environment, a name in rlvr.envs.ENVIRONMENTS: single_turn (the task "
                                      "scored by reward.verifier), tools (calculator / sandboxed python tool use), "
                                      "retry ('try again' feedback)")
    params: dict[str, Any] = option(None, "options of the environment, e.g. {tools: [calculator], max_turns: 4} "
                                          "or {attempts: 2} (validated against its registry entry)",
                                    default_factory=dict)

