"""Problems from any Hugging Face ``datasets`` dataset (optional extra: ``pip install rlvr[hf]``).

``dataset`` may be

- a hub id (``openai/gsm8k``, with ``name="main"``), read through ``datasets.load_dataset``;
- a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
  (read with ``datasets.load_from_disk``);
- any other local directory, or a data file (``.jsonl``/``.json``/``.csv``/``.parquet``/
  ``.arrow``/``.txt``, optionally compressed), read by ``load_dataset`` with the builder
  its extension implies; ``data_files`` picks files inside a directory or a hub repo.

Rows are mapped to :class:`~rlvr.types.Problem` exactly as the JSONL loader maps
lines (same field options, same checks, the same helpers).  An error names the
dataset, the split and the 0-based row index in the ``file:line`` style::

    DatasetError: data/train.parquet[train]:row 17: missing answer field 'answer' (the line has: ...)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.tasks.jsonl import DatasetError, record_problem
from rlvr.types import Problem
from rlvr.utils.extras import require_extra

__all__ = ["load_hf_dataset_problems"]

_BUILDER_BY_SUFFIX = {".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet",
                      ".arrow": "arrow", ".txt": "text"}
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")


def _require_datasets():
    return require_extra("datasets", "loading a Hugging Face dataset needs the optional dependency datasets: "
                                     "pip install 'rlvr[hf]' (or pip install datasets)")


def _builder_for(file: Path) -> str | None:
    name = file.name.lower()
    for comp in _COMPRESSION:
        if name.endswith(comp):
            name = name[: -len(comp)]
    return _BUILDER_BY_SUFFIX.get(Path(name).suffix)


def _is_saved_to_disk(d: Path) -> bool:
    return (d / "dataset_dict.json").is_file() or ((d / "state.json").is_file() and (d / "dataset_info.json").is_file())


def _open_split(dataset: str, split: str, name: str | None, data_files: Any, revision: str | None,
                cache_dir: str | None):
    """The requested split as a ``datasets.Dataset``; loading errors become DatasetError naming the source."""
    datasets = _require_datasets()
    source = Path(dataset).expanduser()
    try:
        if source.is_dir() and _is_saved_to_disk(source):
            loaded = datasets.load_from_disk(str(source))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DatasetError(f"{dataset}: no split {split!r} (the dataset has: {', '.join(loaded)})")
                return loaded[split]
            if split != "train":  # a bare Dataset has no splits; accept only the default
                raise DatasetError(f"{dataset}: a single saved Dataset has no split {split!r} (use split='train')")
            return loaded
        if source.is_file():
            builder = _builder_for(source)
            if builder is None:
                raise DatasetError(f"{dataset}: unknown data file type (expected one of "
                                   f"{', '.join(sorted(_BUILDER_BY_SUFFIX))}, optionally compressed)")
            # a single file is one split: the loader calls it "train"; expose it under the split asked for
            return datasets.load_dataset(builder, data_files={split: str(source)}, split=split,
                                         cache_dir=cache_dir)
        if not source.exists() and dataset.startswith((".", "/", "~")):
            raise DatasetError(f"{dataset}: no such file or directory")
        return datasets.load_dataset(str(source) if source.is_dir() else dataset, name, split=split,
                                     data_files=data_files, revision=revision, cache_dir=cache_dir)
    except (DatasetError, ImportError):
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds (and StopIteration for an empty file)
        raise DatasetError(f"{dataset}: cannot load split {split!r}"
                           f"{f' of config {name!r}' if name else ''}: {type(e).__name__}: {e}") from e


def load_hf_dataset_problems(
    dataset: str | os.PathLike,
    *,
    split: str = "train",
    name: str | None = None,
    data_files: str | Sequence[str] | dict[str, Any] | None = None,
    revision: str | None = None,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    id_field: str | None = None,
    messages_field: str | None = None,
    metadata_fields: Sequence[str] | None = None,
    answer_transform: Callable[[Any], str] | None = None,
    limit: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    image_field: str | None = None,
    bad_images: str = "skip",
) -> list[Problem]:
    """Load one :class:`Problem` per row of a ``datasets`` split.

    Args:
        dataset: hub id, ``save_to_disk`` directory, data directory or data file (see the module doc).
        split: the split to read (``train``, ``test``, ...; a single file is read under this name).
        name: the dataset configuration (e.g. ``"main"`` for ``openai/gsm8k``).
        data_files: passed to ``load_dataset`` (files inside a directory or hub repo).
        revision: hub revision (branch, tag or commit).
        prompt_field: as for :func:`rlvr.tasks.load_jsonl_problems`, like the five below.
        answer_field: the reference answer's column.
        id_field: the id's column.  Without it ids are ``f"{stem}-{split}-{row}"`` (``stem``: the
            last part of ``dataset`` without extension).
        messages_field: a column of chat messages, instead of ``prompt_field``.
        metadata_fields: columns copied into ``Problem.metadata``.
        answer_transform: applied to the answer column's value.
        limit: read only the first ``limit`` rows (None: all).
        cache_dir: the ``datasets`` cache (default: its own, ``$HF_DATASETS_CACHE``).
        image_field: optional column of the row's image(s) (``Problem.images``): a ``datasets.Image`` feature
            (or a list of them; read undecoded so that a damaged image names its row), paths (relative to a
            local dataset's directory) or arrays.  Every image is decoded once here.
        bad_images: ``"skip"`` (a row whose image is missing or unreadable is left out with a warning naming
            the image, the dataset, the split and the row) or ``"error"`` (DatasetError).

    Raises:
        ImportError: ``datasets`` is not installed (names ``pip install 'rlvr[hf]'``).
        DatasetError: the dataset or split cannot be loaded, is empty, or a row lacks
            a field / has a mistyped one / repeats an id (naming dataset, split and row).
    """
    label = str(dataset)
    ds = _first_rows(label, split, name, data_files, revision, cache_dir, limit)
    if ds is None:
        return []
    where = f"{label}[{split}]"  # with the row, "<dataset>[<split>]:row <i>" is the location in errors
    from rlvr.tasks.images import ImageColumn

    if image_field is not None:
        ds = _undecoded_images(ds, image_field, where)
    local = Path(label).expanduser()
    base = (local if local.is_dir() else local.parent) if local.exists() else None
    column = ImageColumn(image_field, where, base, bad_images)
    fields = dict(prompt_field=prompt_field, answer_field=answer_field, answer_transform=answer_transform,
                  id_field=id_field, messages_field=messages_field)
    stem = Path(label.rstrip("/")).name.split(".")[0] or "dataset"
    problems = _row_problems(ds, column, where, f"{stem}-{split}", fields, image_field, metadata_fields)
    column.finish(len(ds))
    if len(ds) and not problems:
        raise DatasetError(f"{where}: every row was left out for a bad image (first: {column.skipped[0]})")
    return problems


def _row_problems(ds, column, where: str, id_prefix: str, fields: dict[str, Any], image_field: str | None,
                  metadata_fields: Sequence[str] | None) -> list[Problem]:
    """One problem per row of ``ds`` whose images ``column`` reads (ids ``f"{id_prefix}-{row}"`` without an
    id field); ``fields``: the column names and answer transform of :func:`load_hf_dataset_problems`."""
    used = {fields["prompt_field"], fields["answer_field"]} | {
        f for f in (fields["id_field"], fields["messages_field"], image_field) if f is not None}
    problems: list[Problem] = []
    seen_ids: dict[str, int] = {}
    for i, rec in enumerate(ds):
        row = f"row {i}"
        keep, images = column.read(rec, f"{where}:{row}")
        if not keep:
            continue
        # a column that a row lacks reads as None (datasets fills the schema): treat it as missing
        present = {k: v for k, v in rec.items() if v is not None}
        problem = record_problem(present, where, row, **fields, metadata_fields=None, used=used,
                                 default_id=f"{id_prefix}-{i}", seen_ids=seen_ids, seen_as="at row", position=i)
        if metadata_fields is None:  # the raw row: its missing columns show as None, as the dataset has them
            problem.metadata = {k: v for k, v in rec.items() if k not in used}
        else:
            problem.metadata = {k: rec[k] for k in metadata_fields if k in rec}
        problem.images = images
        problems.append(problem)
    return problems


def _first_rows(label: str, split: str, name: str | None, data_files, revision: str | None,
                cache_dir: str | os.PathLike | None, limit: int | None):
    """The split's first ``limit`` rows (all with None; None for ``limit=0``); an empty split is a DatasetError."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    ds = _open_split(label, split, name, data_files, revision, None if cache_dir is None else str(cache_dir))
    if len(ds) == 0:
        raise DatasetError(f"{label}[{split}]: empty split (no rows)")
    if limit == 0:
        return None
    if limit is not None and limit < len(ds):
        ds = ds.select(range(limit))
    return ds


def _undecoded_images(ds, field: str, where: str):
    """``ds`` with an ``Image`` column (or a list of them) read as ``{"bytes", "path"}`` records: decoded by
    rlvr row by row, so a damaged image names its row instead of stopping the whole iteration."""
    datasets = _require_datasets()
    if field not in ds.column_names:
        raise DatasetError(f"{where}: no image column {field!r} (the dataset has: {', '.join(ds.column_names)})")
    feature = ds.features[field]
    if isinstance(feature, datasets.Image):
        return ds.cast_column(field, datasets.Image(decode=False))
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.Image):
        return ds.cast_column(field, type(feature)(datasets.Image(decode=False)))
    if isinstance(feature, list) and feature and isinstance(feature[0], datasets.Image):
        return ds.cast_column(field, [datasets.Image(decode=False)])
    return ds
