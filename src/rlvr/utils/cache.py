"""rlvr's cache directory: converted bundled models and what was measured once about the machine."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """``override``, else ``$RLVR_CACHE``, else ``~/.cache/rlvr``."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("RLVR_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "rlvr"
