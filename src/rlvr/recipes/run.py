"""Which recipe a config runs: :class:`~rlvr.recipes.rl.RLRecipe`, or its FSDP subclass for a sharded learner.

``rlvr train`` and :func:`rlvr.train` call :func:`train`; the recipes themselves do not know
each other's modules (``fsdp`` subclasses ``rl``; this module imports both).
"""

from __future__ import annotations

from typing import Any

from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import RLRecipe, run_recipe
from rlvr.recipes.stage_kinds import StageKind, register_stage_kind

__all__ = ["recipe_class", "train"]


def recipe_class(cfg: RunConfig) -> type[RLRecipe]:
    """:class:`~rlvr.recipes.fsdp.FSDPRecipe` with ``distributed.fsdp`` (one rank of a learner torchrun started),
    else :class:`~rlvr.recipes.rl.RLRecipe`."""
    if cfg.distributed.fsdp:
        from rlvr.recipes.fsdp import FSDPRecipe

        return FSDPRecipe
    return RLRecipe


def train(cfg: RunConfig, **kwargs: Any) -> dict[str, Any]:
    """Run the configured recipe; returns a summary (final metrics, eval results, paths).

    Keyword arguments (``model``, ``tokenizer``, ``problems``, ``verifier``, ``on_step``) are passed to the
    recipe.  With ``distributed.learner=actor`` the recipe class is passed, as a value, to a Ray learner actor.
    """
    return run_recipe(recipe_class(cfg), cfg, **kwargs)


def _has_teacher(cfg: RunConfig) -> None:
    if cfg.distill.teacher is None:
        raise ValueError("a distill stage needs distill.teacher (a model directory, a checkpoint, or an earlier "
                         "stage's final model: distill.teacher={stage:NAME})")


register_stage_kind("rl", StageKind(RunConfig, train, passes=frozenset({"on_step"})),
                    doc="rlvr train: RL on verifiable rewards (a stage's config is rlvr train's)")
register_stage_kind("distill", StageKind(RunConfig, train, check=_has_teacher, passes=frozenset({"on_step"})),
                    doc="rlvr train with distill.teacher: on-policy distillation (a stage's config is rlvr train's)")
