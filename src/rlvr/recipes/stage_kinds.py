"""What a stage of a pipeline (``rlvr pipeline``) can be: one registered kind per recipe.

A kind names its config class (loaded from the stage's YAML and overrides like its own command's), the function
that runs it, the config keys through which a pipeline hands it its starting model, its directory and its resume
or overwrite flags, and where its final model lies once it has finished.  ``rl`` (``rlvr train``) registers
itself in :mod:`rlvr.recipes.run`; ``sft`` and ``rft`` in their recipes.  A plugin adds a kind with one call::

    from rlvr.recipes.stage_kinds import STAGE_KINDS, StageKind

    STAGE_KINDS.add("my_stage", StageKind(MyConfig, run_my_stage), doc="what it does")

Each stage's directory holds what its recipe writes: ``summary.json`` once it has finished, ``eval_before.json``
and ``eval_after.json`` (held-out accuracy by evaluation tag, as ``rlvr train`` writes them) and its
checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.registry import NoParams, Registry
from rlvr.utils.files import read_json_or_none

__all__ = ["STAGE_KINDS", "StageKind", "final_model_of_run"]


def final_model_of_run(stage_dir: Path) -> str | None:
    """The final model of a finished run, from its ``summary.json``: ``final_model`` (``rlvr sft``, ``rlvr rft``)
    or ``<final_checkpoint>/model`` (``rlvr train``); None while the run has not finished."""
    summary = read_json_or_none(Path(stage_dir) / "summary.json") or {}
    if summary.get("final_model"):
        return str(summary["final_model"]) if Path(summary["final_model"]).is_dir() else None
    ckpt = summary.get("final_checkpoint")
    if not ckpt:
        return None
    model = Path(ckpt) / "model"
    return str(model) if model.is_dir() else None


@dataclass(frozen=True)
class StageKind:
    """One kind of stage."""

    config_class: type
    """The stage's typed config (a :class:`rlvr.config.ConfigModel`), loaded with ``load_config``."""
    run: Callable[..., dict[str, Any]]
    """``run(cfg, **kwargs) -> summary``: runs the stage in its directory (it claims it, as its command does)."""
    final_model: Callable[[Path], str | None] = final_model_of_run
    """The model the stage leaves behind (an HF directory the next stage starts from), or None if unfinished."""
    model_key: str = "model.name"
    output_key: str = "train.output_dir"
    resume_key: str = "train.resume"
    overwrite_key: str = "train.overwrite"
    seed_key: str = "train.seed"
    check: Callable[[Any], None] | None = None
    """Optional ``check(cfg)`` raising ValueError when a config of this class is not one of this kind (e.g. a
    ``distill`` stage without a teacher)."""
    passes: frozenset[str] = field(default_factory=frozenset)
    """Keyword arguments of :attr:`run` the pipeline may pass through (``on_step``)."""


STAGE_KINDS: Registry[StageKind] = Registry("stage kind")
"""Stage kinds by name; entries hold a :class:`StageKind` (no options: a stage is configured by its own config)."""


def register_stage_kind(name: str, kind: StageKind, doc: str) -> None:
    """Register ``kind`` as ``name`` (once: a module imported twice does not register twice)."""
    if name not in STAGE_KINDS:
        STAGE_KINDS.add(name, kind, params=NoParams, doc=doc)
