"""Files that are whole or absent: atomic, fsync'd writes and checksums.

A run's files are read back by later runs (resume, ``rlvr compare``, ``rlvr seeds``), so a write killed halfway
(a kill, a full disk, a power cut) must leave the previous content or nothing, never a torn or empty file:
:func:`atomic_write_text` writes a temporary file beside the target, fsyncs it, renames it over the target
(``os.replace``, atomic on POSIX) and fsyncs the directory so that the rename itself is durable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_text", "atomic_write_json", "fsync_dir", "fsync_file", "sha256_file", "append_line",
           "read_json_or_none"]


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the entries of directory ``path`` (created, renamed, removed files) durable; a no-op where a
    directory cannot be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a written file's data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` so that ``path`` holds either its old content or all of ``text``.

    On an error (a full disk: ``OSError(ENOSPC)``) the temporary file is removed, the target is untouched and
    the error propagates.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike, obj: Any, **kwargs: Any) -> None:
    """:func:`atomic_write_text` of ``json.dumps(obj, **kwargs)``."""
    atomic_write_text(path, json.dumps(obj, **kwargs))


def read_json_or_none(path: str | os.PathLike) -> Any | None:
    """The JSON in ``path``, or None when it is missing, empty or not valid JSON (a file torn by an older writer)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line (``line`` + newline) and fsync it: a row reported as written survives a crash."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
