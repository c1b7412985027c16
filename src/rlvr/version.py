"""The package version (its own module, so any layer can read it without importing the root package)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

__version__ = "0.1.0"


@functools.lru_cache(maxsize=1)
def code_version() -> str | None:
    """The code rlvr runs from: ``git describe --always --dirty --tags`` of its checkout (``-dirty``: tracked files
    differ from the commit), or None when rlvr is not imported from a git checkout's ``src/rlvr``.

    An installed copy inside some other repository (a venv in a checkout) is not mistaken for that checkout:
    the repository's top level must be the directory that holds ``src/rlvr``.
    """
    root = Path(__file__).resolve().parents[2]  # <checkout>/src/rlvr/version.py -> <checkout>
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
            return None
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None
