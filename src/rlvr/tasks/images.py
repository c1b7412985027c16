"""A dataset's image column: reading it row by row, checking every image, and what a bad one costs.

A row's images are one value or a list: a file path (relative paths are taken from the dataset's own
directory), a ``datasets`` image record (``{"bytes": ..., "path": ...}``), a decoded image (PIL) or an array.
Each image is decoded once when the dataset loads.  A missing or unreadable image is named with its
file (or record) and the row that holds it, and costs that row only: with ``bad_images="skip"`` (the
default) the row is left out with a warning and every other row loads; ``"error"`` raises a
:class:`~rlvr.tasks.jsonl.DatasetError` instead.  A row without the column (or with null / an empty
list) is a text problem.  A column that no row has is an error (a misspelt field name).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

from rlvr.models.vision import ImageLoadError, check_image

__all__ = ["row_images", "BadImageRow", "ImageColumn"]

log = logging.getLogger(__name__)

BadImages = Literal["skip", "error"]


class BadImageRow(ValueError):
    """A row whose image cannot be read (the message names the dataset, the row and the image)."""


def row_images(value: Any, where: str, base: str | os.PathLike | None) -> list[Any] | None:
    """The row's images (paths made absolute against ``base``), each checked; BadImageRow naming ``where``."""
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        return None
    out = []
    for k, item in enumerate(items):
        if isinstance(item, (str, os.PathLike)):
            if not str(item).strip():
                raise BadImageRow(f"{where}: image {k} is an empty path")
            p = os.path.expanduser(os.fspath(item))
            item = p if os.path.isabs(p) or base is None else os.path.join(os.fspath(base), p)
        try:
            check_image(item)
        except ImageLoadError as e:
            raise BadImageRow(f"{where}: {e}") from e
        out.append(item)
    return out


class ImageColumn:
    """Reads one image column over a dataset's rows and keeps the account of rows it dropped."""

    def __init__(self, field: str | None, source: str, base: str | os.PathLike | None, bad_images: BadImages = "skip"):
        if bad_images not in ("skip", "error"):
            raise ValueError(f"bad_images must be 'skip' or 'error', got {bad_images!r}")
        self.field, self.source, self.base, self.bad_images = field, source, base, bad_images
        self.seen = 0  # rows that had the column
        self.skipped: list[str] = []

    def read(self, rec: dict[str, Any], where: str) -> tuple[bool, list[Any] | None]:
        """``(keep, images)`` of one row: ``keep`` is False for a row dropped for a bad image."""
        if self.field is None or rec.get(self.field) is None:
            return True, None
        self.seen += 1
        try:
            return True, row_images(rec[self.field], where, self.base)
        except BadImageRow as e:
            if self.bad_images == "error":
                from rlvr.tasks.jsonl import DatasetError

                raise DatasetError(str(e)) from e
            log.warning("skipping a row with a bad image: %s", e)
            self.skipped.append(str(e))
            return False, None

    def finish(self, rows: int) -> None:
        """After the last row: a column no row had is an error; the dropped rows are summed up in one warning."""
        if self.field is None:
            return
        from rlvr.tasks.jsonl import DatasetError

        if self.seen == 0 and rows:
            raise DatasetError(f"{self.source}: no row has the image field {self.field!r}")
        if self.skipped:
            log.warning("%s: %d row(s) left out for bad images (first: %s)", self.source, len(self.skipped),
                        self.skipped[0])
