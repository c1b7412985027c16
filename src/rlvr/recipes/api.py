"""``rlvr.train(...)``: the one-call Python form of ``rlvr train`` (for notebooks and scripts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.config import load_config
from rlvr.recipes.config import RunConfig
from rlvr.recipes.run import train as _train

__all__ = ["train", "train_seeds"]


def _config(config: RunConfig | Mapping[str, Any] | str | Path | None, overrides: Sequence[str]) -> RunConfig:
    if isinstance(config, RunConfig):
        config = config.model_dump()
    if isinstance(config, Mapping):
        return load_config(RunConfig, None, overrides, data=config)
    return load_config(RunConfig, config, overrides)


def train(config: RunConfig | Mapping[str, Any] | str | Path | None = None, *overrides: str,
          seeds: Sequence[int] | str | None = None, **injected: Any) -> dict[str, Any]:
    """Train as ``rlvr train`` does and return the summary (final metrics, evaluations, checkpoint path).

    ``config`` is a :class:`RunConfig`, a nested dict of config keys, a YAML file, or
    None (the defaults); ``overrides`` are ``"key=value"`` strings applied on top and
    validated like the CLI's.  Keyword arguments (``model``, ``tokenizer``,
    ``problems``, ``verifier``, ``on_step``) go to the recipe: a model already in
    memory, or a callback that receives every metrics row.

    ``seeds`` (a list of integers, or ``"0-4"`` as ``--seeds`` takes it): one run per seed in
    ``<train.output_dir>/seed-<s>/``, as :func:`train_seeds`; the seeds summary is returned instead.
    """
    if seeds is not None:
        return train_seeds(config, *overrides, seeds=seeds, **injected)
    return _train(_config(config, overrides), **injected)


def train_seeds(config: RunConfig | Mapping[str, Any] | str | Path | None = None, *overrides: str,
                seeds: Sequence[int] | str, **injected: Any) -> dict[str, Any]:
    """``rlvr train CONFIG --seeds ...``: one training per seed (``train.seed=s``) in ``<train.output_dir>/seed-<s>/``,
    resumable per seed, then ``seeds.json`` / ``seeds.md`` / ``seeds.png`` in ``train.output_dir``; returns the seeds
    summary (per-seed before/after accuracy, median, IQR, range, bootstrap intervals; ``paths``).  See
    :mod:`rlvr.recipes.seeds`.  The seed list is checked before the config loads (SeedsError)."""
    from rlvr.recipes.seeds import check_seeds, train_seeds as _train_seeds

    seeds = check_seeds(seeds)
    return _train_seeds(_config(config, overrides), seeds, **injected)
