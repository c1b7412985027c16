"""``task.name=openenv``: the episodes of an OpenEnv environment server, one problem per reset seed.

An OpenEnv environment has no dataset: its server makes every episode at ``reset``.  Each problem
here is one seed (``metadata["openenv"]["seed"]``) for ``env.name=openenv``
(:mod:`rlvr.envs.openenv_env`), which resets the server with it and shows the policy the first
observation; the problem's own prompt is a placeholder that the environment replaces.
"""

from __future__ import annotations

from rlvr.tasks.registry import TASKS
from rlvr.types import Problem

__all__ = ["openenv_task", "SEED_KEY"]

SEED_KEY = "openenv"


def _check(params: dict, **_) -> None:
    if params.get("num_train", 1) < 1:
        raise ValueError("num_train must be >= 1")


@TASKS.register("openenv", check=_check,
                doc="reset seeds of an OpenEnv environment server, one problem each, for env.name=openenv; "
                    "task.params num_train (held-out: task.num_heldout more seeds)")
def openenv_task(num_train: int = 256, num_heldout: int = 32, seed: int = 0):
    """Seeds ``seed * 1_000_003 + k``: training ones first, held-out ones after them (never shared)."""
    def problem(k: int) -> Problem:
        s = seed * 1_000_003 + k
        return Problem(f"openenv/{s}", prompt=f"(OpenEnv episode, reset seed {s})", metadata={SEED_KEY: {"seed": s}})

    return [problem(k) for k in range(num_train)], [problem(num_train + k) for k in range(num_heldout)]
