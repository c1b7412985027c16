"""``rlvr.train(...)``: the one-call Python form of ``rlvr train`` (for notebooks and scripts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from rlvr.config import load_config
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import train as _train

__all__ = ["train"]


def train(config: RunConfig | Mapping[str, Any] | str | Path | None = None, *overrides: str,
          **injected: Any) -> dict[str, Any]:
    """Train as ``rlvr train`` does and return the summary (final metrics, evaluations, checkpoint path).

    ``config`` is a :class:`RunConfig`, a nested dict of config keys, a YAML file, or
    None (the defaults); ``overrides`` are ``"key=value"`` strings applied on top and
    validated like the CLI's.  Keyword arguments (``model``, ``tokenizer``,
    ``problems``, ``verifier``, ``on_step``) go to the recipe: a model already in
    memory, or a callback that receives every metrics row.
    """
    if isinstance(config, RunConfig):
        config = config.model_dump()
    if isinstance(config, Mapping):
        cfg = load_config(RunConfig, None, overrides, data=config)
    else:
        cfg = load_config(RunConfig, config, overrides)
    return _train(cfg, **injected)
