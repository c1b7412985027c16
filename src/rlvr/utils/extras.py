"""Optional dependencies: one way to import them, and to say in one line how to install what is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require_extra"]


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names the ``pip install 'rlvr[extra]'`` line to run."""


def require_extra(module: str, message: str, *, cause: bool = False) -> ModuleType:
    """Import and return ``module``, or raise :class:`MissingExtraError` with ``message`` (the pip line to run),
    followed by the import error's own text in brackets when ``cause`` (useful where a package is installed but
    one of its own dependencies is not)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(f"{message} ({e})" if cause else message) from e
