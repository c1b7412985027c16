"""Whether a directory can be written, checked before a run spends minutes loading a model."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["unwritable_reason"]


def unwritable_reason(path: str | os.PathLike) -> str | None:
    """Why the directory ``path`` cannot be created or written, or None when it can.

    An existing ``path`` must be a directory; otherwise its nearest existing ancestor must be a directory
    (not a file: a misplaced path) in which a file can be created.  The check creates and removes one
    temporary file there (so it also holds for root and for read-only file systems); it creates no directory.
    """
    p = Path(path).expanduser().absolute()
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            return f"{p}: no existing parent directory"
        probe = probe.parent
    if not probe.is_dir():
        return (f"{p}: is a file, not a directory" if probe == p
                else f"{p}: cannot be created, {probe} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        where = "" if probe == p else f" (it would be created in {probe})"
        return f"{p}: not writable{where}: {e.strerror or e}"
    return None
