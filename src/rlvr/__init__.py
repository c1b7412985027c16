"""rlvr: reinforcement learning with verifiable rewards for LM reasoning.

    import rlvr
    summary = rlvr.train("configs/arithmetic_grpo.yaml", "train.steps=10")   # or a dict / RunConfig
    sweep = rlvr.train("configs/arithmetic_grpo.yaml", seeds=[0, 1, 2])     # one run per seed + seeds.json
    results = rlvr.evaluate("smollm2-135m-instruct", task="gsm8k", limit=8)

See docs/architecture.md for the data flow; the CLI is ``rlvr --help``.
Importing ``rlvr`` is cheap: torch and the models load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from rlvr.version import __version__
__all__ = ["train", "train_seeds", "evaluate", "__version__"]


def train(config: Any = None, *overrides: str, seeds: Any = None, **injected: Any) -> dict:
    """Train as ``rlvr train`` does (with ``seeds``: once per seed); see :func:`rlvr.recipes.api.train`."""
    from rlvr.recipes.api import train as _train

    return _train(config, *overrides, seeds=seeds, **injected)


def train_seeds(config: Any = None, *overrides: str, seeds: Any, **injected: Any) -> dict:
    """``rlvr train --seeds``: one run per seed and their summary; see :func:`rlvr.recipes.api.train_seeds`."""
    from rlvr.recipes.api import train_seeds as _train_seeds

    return _train_seeds(config, *overrides, seeds=seeds, **injected)


def __getattr__(name: str):
    # ``rlvr.evaluate`` is both the evaluation package and, called, rlvr.evaluate.api.evaluate
    if name == "evaluate":
        return importlib.import_module("rlvr.evaluate")
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
