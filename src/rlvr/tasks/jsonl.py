"""Reading and writing JSON-lines files, and turning them into :class:`Problem` lists.

Every error raised here is a :class:`DatasetError` (a ``ValueError``) whose message
names the file and, where it applies, the 1-based line number, so that a broken
dataset can be fixed without guessing::

    DatasetError: data/train.jsonl:17: malformed JSON (Expecting ',' delimiter: ...)

Blank (whitespace-only) lines are skipped everywhere; they still count for line
numbers.  A file with no records at all is an error.  A file whose name ends in
``.gz`` is read through gzip (line numbers are those of the decompressed text).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import zlib
import os
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from rlvr.types import Problem

__all__ = ["DatasetError", "read_jsonl", "write_jsonl", "load_jsonl_problems"]


class DatasetError(ValueError):
    """A dataset file is missing, unreadable or does not have the expected shape."""


def _where(path: Path, line_no: int | None = None) -> str:
    return f"{path}:{line_no}" if line_no is not None else str(path)


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Iterate over ``(line_number, record)`` pairs of a JSON-lines file.

    Line numbers are 1-based and count blank lines, which are skipped.  Raises
    :class:`DatasetError` (naming the file and line) for a missing file, a line
    that is not valid UTF-8 or JSON, a line whose JSON is not an object, and, once
    the end is reached, a file that held no records.  The missing-file check is
    done at call time; the others while iterating.  ``*.gz`` files are decompressed
    on the fly (a damaged gzip stream is a DatasetError naming the file).
    """
    p = Path(path)
    if not p.exists():
        raise DatasetError(f"{p}: file not found")
    if not p.is_file():
        raise DatasetError(f"{p}: not a regular file")
    return _iter_records(p)


def _iter_records(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    n_records = 0
    try:
        fh = gzip.open(p, "rb") if p.name.endswith(".gz") else p.open("rb")
    except OSError as e:
        raise DatasetError(f"{p}: cannot open ({e.strerror or e})") from e
    with fh:
        for line_no, raw in _numbered_lines(fh, p):
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DatasetError(f"{_where(p, line_no)}: not valid UTF-8 ({e.reason} at byte {e.start})") from e
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{_where(p, line_no)}: malformed JSON ({e.msg} at column {e.colno})") from e
            if not isinstance(record, dict):
                raise DatasetError(
                    f"{_where(p, line_no)}: expected a JSON object, got {type(record).__name__}")
            n_records += 1
            yield line_no, record
    if n_records == 0:
        raise DatasetError(f"{p}: empty file (no JSON records)")


def _numbered_lines(fh, p: Path) -> Iterator[tuple[int, bytes]]:
    """``enumerate(fh, 1)``, with a damaged gzip stream turned into a DatasetError naming the file."""
    line_no = 0
    while True:
        try:
            raw = fh.readline()
        except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            raise DatasetError(f"{p}: cannot read after line {line_no} (damaged gzip file? {e})") from e
        if not raw:
            return
        line_no += 1
        yield line_no, raw


def _to_jsonable(row: Any) -> Any:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return dataclasses.asdict(row)
    return row


def _file_mode(path: Path) -> int:
    """Permissions for a (re)written file: the old file's, else 0666 minus the umask."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Write ``rows`` (dicts, or dataclasses such as :class:`Problem`) as JSON lines.

    The file is written to a temporary file in the same directory and then moved
    into place with :func:`os.replace`, so readers never see a half-written file
    and an error leaves any previous file untouched.  Parent directories are
    created.  Returns the number of rows written.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(_to_jsonable(row), ensure_ascii=False))
                fh.write("\n")
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode(p))  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return n


def _require(record: dict[str, Any], field: str, path: Path, line_no: int, what: str = "field") -> Any:
    """``record[field]``, or a DatasetError listing the fields the line does have."""
    if field not in record:
        have = ", ".join(repr(k) for k in record) or "none"
        raise DatasetError(f"{_where(path, line_no)}: missing {what} {field!r} (the line has: {have})")
    return record[field]


def _answer_to_str(value: Any) -> str:
    """Default conversion of a raw answer value to the reference string."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _check_messages(value: Any, path: Path, line_no: int, field: str) -> list[dict[str, str]]:
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value)
    if not ok:
        raise DatasetError(f"{_where(path, line_no)}: field {field!r} must be a non-empty list of "
                           "{'role': str, 'content': str} objects")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def load_jsonl_problems(
    path: str | os.PathLike,
    *,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    id_field: str | None = None,
    messages_field: str | None = None,
    metadata_fields: Sequence[str] | None = None,
    answer_transform: Callable[[Any], str] | None = None,
    limit: int | None = None,
    image_field: str | None = None,
    bad_images: str = "skip",
) -> list[Problem]:
    """Load one :class:`Problem` per JSON object of a JSON-lines file.

    Args:
        path: the ``.jsonl`` file.
        prompt_field: field holding the user prompt (a string).
        answer_field: field holding the reference answer.  Strings are kept as
            they are, numbers are converted with ``str``, anything else is
            JSON-encoded, unless ``answer_transform`` is given.
        id_field: field holding the problem id (converted to ``str``); when None
            ids are ``f"{file stem}-{line number}"``.  Ids must be unique.
        messages_field: optional field holding a full chat (list of
            ``{"role", "content"}``).  When set, a line needs the messages field
            or the prompt field (or both).
        metadata_fields: fields copied into ``Problem.metadata``; None copies every
            field not used for prompt, answer, id or messages.  Listed fields that a
            line lacks are left out of its metadata.
        answer_transform: called with the raw answer value; returns the reference
            string.  An exception from it becomes a DatasetError naming the line.
        limit: stop after this many problems (None: all).
        image_field: optional field holding the row's image(s) (``Problem.images``): a path or a list of
            paths, relative ones taken from the file's directory; every image is decoded once here.
        bad_images: ``"skip"`` (a row whose image is missing or unreadable is left out with a warning
            naming the image and ``file:line``; the other rows load) or ``"error"`` (DatasetError).

    Raises:
        DatasetError: missing/empty file, malformed JSON, a line that is not an
            object, a missing or mistyped prompt/answer/id field, a duplicate id.
    """
    p = Path(path)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    used = {prompt_field, answer_field}
    if id_field is not None:
        used.add(id_field)
    if messages_field is not None:
        used.add(messages_field)
    if image_field is not None:
        used.add(image_field)
    from rlvr.tasks.images import ImageColumn

    column = ImageColumn(image_field, str(p), p.parent, bad_images)

    problems: list[Problem] = []
    seen_ids: dict[str, int] = {}
    if limit == 0:
        return problems
    rows = 0
    with closing(read_jsonl(p)) as records:
        for line_no, rec in records:
            rows += 1
            keep, images = column.read(rec, _where(p, line_no))
            if not keep:
                continue
            problems.append(record_problem(rec, p, line_no, prompt_field=prompt_field, answer_field=answer_field,
                                           answer_transform=answer_transform, id_field=id_field,
                                           messages_field=messages_field, metadata_fields=metadata_fields,
                                           used=used, default_id=f"{p.stem}-{line_no}", seen_ids=seen_ids,
                                           seen_as="on line", position=line_no))
            problems[-1].images = images
            if limit is not None and len(problems) >= limit:
                break
    column.finish(rows)
    if rows and not problems:
        raise DatasetError(f"{p}: every row was left out for a bad image (first: {column.skipped[0]})")
    return problems


def record_problem(rec: dict[str, Any], path: Any, line_no: Any, *, prompt_field: str, answer_field: str,
                   answer_transform: Callable[[Any], str] | None, id_field: str | None, messages_field: str | None,
                   metadata_fields: Sequence[str] | None, used: set[str], default_id: str,
                   seen_ids: dict[str, Any], seen_as: str, position: Any) -> Problem:
    """One record (a JSONL line, a dataset row) as a :class:`Problem`; errors name ``path:line_no``.

    ``seen_ids`` maps ids already loaded to their ``position`` (a repeat is an error
    saying ``first seen <seen_as> <position>``); without ``id_field`` the id is ``default_id``.
    """
    where = _where(path, line_no)
    prompt, messages = _prompt_and_messages(rec, path, line_no, prompt_field, messages_field)
    answer = _answer(rec, path, line_no, answer_field, answer_transform)
    if id_field is not None:
        raw_id = _require(rec, id_field, path, line_no, "id field")
        if raw_id is None or isinstance(raw_id, (dict, list, bool)):
            raise DatasetError(f"{where}: id field {id_field!r} must be a string or number, got {raw_id!r}")
        pid = str(raw_id)
    else:
        pid = default_id
    if pid in seen_ids:
        raise DatasetError(f"{where}: duplicate id {pid!r} (first seen {seen_as} {seen_ids[pid]})")
    seen_ids[pid] = position
    if metadata_fields is None:
        metadata = {k: v for k, v in rec.items() if k not in used}
    else:
        metadata = {k: rec[k] for k in metadata_fields if k in rec}
    return Problem(id=pid, prompt=prompt, answer=answer, messages=messages, metadata=metadata)


def _prompt_and_messages(rec: dict[str, Any], path: Path, line_no: int, prompt_field: str,
                         messages_field: str | None) -> tuple[str | None, list[dict[str, str]] | None]:
    messages = None
    if messages_field is not None and messages_field in rec:
        messages = _check_messages(rec[messages_field], path, line_no, messages_field)
        prompt = rec.get(prompt_field)
    else:
        prompt = _require(rec, prompt_field, path, line_no, "prompt field")
    if prompt is not None and not isinstance(prompt, str):
        raise DatasetError(f"{_where(path, line_no)}: prompt field {prompt_field!r} must be a string, "
                           f"got {type(prompt).__name__}")
    return prompt, messages


def _answer(rec: dict[str, Any], path: Path, line_no: int, answer_field: str,
            answer_transform: Callable[[Any], str] | None) -> str:
    raw = _require(rec, answer_field, path, line_no, "answer field")
    if answer_transform is None:
        if raw is None:
            raise DatasetError(f"{_where(path, line_no)}: answer field {answer_field!r} is null")
        if isinstance(raw, float) and not math.isfinite(raw):  # JSON's 1e400, NaN, Infinity: no answer equals it
            raise DatasetError(f"{_where(path, line_no)}: answer field {answer_field!r} is not a finite number "
                               f"({raw}); write a very large answer as a string")
        return _answer_to_str(raw)
    try:
        answer = answer_transform(raw)
    except Exception as e:  # noqa: BLE001 - re-raised with the location
        raise DatasetError(f"{_where(path, line_no)}: answer_transform failed on {raw!r}: {e}") from e
    return answer if isinstance(answer, str) else _answer_to_str(answer)
