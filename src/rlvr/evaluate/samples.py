"""Stored samples: generate ``n`` completions per problem once, keep them, re-score at will.

A samples file is JSONL (contract: ``notes/samples_schema.md``).  Line 1 is a
header naming the task, the model, the sampling settings and their fingerprints;
every further line is one problem with *all* its ``n`` samples::

    {"rlvr_samples": 1, "task": "math500", "task_fingerprint": "...", "model": "...",
     "model_fingerprint": "...", "sampling": {"n": 16, "temperature": 0.8, ...}, ...}
    {"id": "test/algebra/1.json", "answer": "\\\\frac{1}{2}", "metadata": {...}, "prompt": "...",
     "samples": [{"text": "...", "num_tokens": 213, "finish_reason": "stop", "logprob_sum": -41.2}, ...]}

Verdicts are not stored: :func:`score_samples` computes them (re-scoring with
another verifier or metric never regenerates).

Writing and resuming (:func:`open_for_append`, :func:`generate_samples`):

* a problem is appended (and flushed) only once all its samples exist, so a
  killed run leaves whole problems plus at most one torn last line;
* reopening the file keeps the whole lines, cuts the torn tail off, and refuses
  (:class:`SampleFileError`, naming both sides) when the stored header was made
  for another task, model, sampling setting or system prompt;
* each problem's samples are drawn from its own generator seeded with
  ``sampling.seed + index`` (its position in the task; ``SamplingParams.seeds``),
  and problems are decoded together in chunks aligned to task positions
  (``index // chunk``, ``chunk`` = the engine's ``batch_size // n`` problems), so a
  resumed run recomputes whole chunks and writes exactly the samples an
  uninterrupted run would have written.  A problem whose chunk-mates were stored
  before (an earlier ``--limit``, or a kill that tore a chunk's lines apart) is
  decoded in a smaller batch: the same random draws, but the float rounding of
  another batch layout can change a token.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

log = logging.getLogger(__name__)

from rlvr.types import Problem, Verdict

__all__ = [
    "FORMAT_VERSION",
    "SampleFileError",
    "SampleHeader",
    "SampleRecord",
    "SampleWriter",
    "ScoredSet",
    "task_fingerprint",
    "model_fingerprint",
    "make_header",
    "record_from_samples",
    "read_samples",
    "open_for_append",
    "generate_samples",
    "score_samples",
    "voting_key",
]

FORMAT_VERSION = 1
"""Value of the header's ``rlvr_samples`` field; files with another version are refused."""

SAMPLING_KEYS = ("n", "temperature", "top_p", "max_new_tokens", "seed")


class SampleFileError(ValueError):
    """A samples file that cannot be used: malformed (the message names file:line) or made for other settings."""


# --------------------------------------------------------------------------- records
@dataclass
class SampleHeader:
    """Line 1 of a samples file: what was sampled, from what, and how."""

    task: str
    """Task name (``math500``, ``gsm8k``, ``jsonl``...)."""
    task_fingerprint: str
    """16 hex: sha256 of the task's problem ids and answers (:func:`task_fingerprint`)."""
    model: str
    """Model name or path as given by the user."""
    model_fingerprint: str
    """16 hex: hash of the model config and weights (:func:`model_fingerprint`)."""
    sampling: dict[str, Any]
    """``n``, ``temperature``, ``top_p``, ``max_new_tokens``, ``seed``."""
    system_prompt: str | None = None
    """System message prepended to every problem (None: none)."""
    created: str = ""
    """UTC time the file was started, ISO 8601."""
    rlvr_version: str = ""
    """rlvr version that wrote the file."""
    rlvr_samples: int = FORMAT_VERSION
    """File format version."""

    @property
    def n(self) -> int:
        return int(self.sampling["n"])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"rlvr_samples": d.pop("rlvr_samples"), **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "header") -> "SampleHeader":
        if not isinstance(d, dict) or "rlvr_samples" not in d:
            raise SampleFileError(f"{where}: not an rlvr samples header (no 'rlvr_samples' field)")
        if d["rlvr_samples"] != FORMAT_VERSION:
            raise SampleFileError(f"{where}: samples format version {d['rlvr_samples']!r}, this rlvr reads "
                                  f"version {FORMAT_VERSION}")
        missing = [k for k in ("task", "task_fingerprint", "model", "model_fingerprint", "sampling") if k not in d]
        if missing:
            raise SampleFileError(f"{where}: header lacks {', '.join(missing)}")
        sampling = d["sampling"]
        if not isinstance(sampling, dict) or not isinstance(sampling.get("n"), int) or sampling["n"] < 1:
            raise SampleFileError(f"{where}: header 'sampling' must be an object with an integer n >= 1")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class SampleRecord:
    """One problem and all its stored samples."""

    id: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)
    """Each ``{"text", "num_tokens", "finish_reason", "logprob_sum"}``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> "SampleRecord":
        if not isinstance(d, dict):
            raise SampleFileError(f"{where}: a problem line must be a JSON object")
        for key, kind in (("id", str), ("answer", str), ("samples", list)):
            if not isinstance(d.get(key), kind):
                raise SampleFileError(f"{where}: field {key!r} missing or not a {kind.__name__}")
        for j, s in enumerate(d["samples"]):
            if not isinstance(s, dict) or not isinstance(s.get("text"), str):
                raise SampleFileError(f"{where}: sample {j} must be an object with a string 'text'")
        meta = d.get("metadata") or {}
        if not isinstance(meta, dict):
            raise SampleFileError(f"{where}: 'metadata' must be an object")
        return cls(id=d["id"], answer=d["answer"], metadata=meta, prompt=str(d.get("prompt") or ""),
                   samples=d["samples"])


# ----------------------------------------------------------------------- fingerprints
def _hex16(h: "hashlib._Hash") -> str:
    return h.hexdigest()[:16]


def task_fingerprint(problems: Sequence[Problem]) -> str:
    """16 hex digits of sha256 over the problems' ids and reference answers, in order."""
    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps([p.id, p.answer], ensure_ascii=False).encode())
        h.update(b"\n")
    return _hex16(h)


def model_fingerprint(model) -> str:
    """16 hex digits identifying a model's weights: its config, and every parameter's shape and float64 sum.

    Plus the raw bytes of the first 4096 values of the first, middle and last
    parameter.  Costs one pass over the weights (~0.1 s for 135M parameters);
    any fine-tuning step changes it.
    """
    import torch

    h = hashlib.sha256()
    cfg = getattr(model, "config", None)
    if cfg is not None:
        d = cfg.to_dict()
        for volatile in ("transformers_version", "_name_or_path", "torch_dtype", "dtype", "architectures"):
            d.pop(volatile, None)
        h.update(json.dumps(d, sort_keys=True, default=str).encode())
    params = list(model.state_dict().items())
    with torch.no_grad():
        for name, p in params:
            h.update(f"{name}:{tuple(p.shape)}:{float(p.double().sum()):.10e}\n".encode())
        for i in sorted({0, len(params) // 2, len(params) - 1}) if params else ():
            h.update(params[i][1].detach().reshape(-1)[:4096].float().cpu().numpy().tobytes())
    return _hex16(h)


def make_header(task: str, problems: Sequence[Problem], model: str, model_fp: str, *, n: int,
                temperature: float, top_p: float = 1.0, max_new_tokens: int, seed: int,
                system_prompt: str | None = None) -> SampleHeader:
    """A header for sampling ``problems`` (the whole task: fingerprinted) with these settings."""
    from rlvr.version import __version__

    sampling = {"n": int(n), "temperature": float(temperature), "top_p": float(top_p),
                "max_new_tokens": int(max_new_tokens), "seed": int(seed)}
    return SampleHeader(task=task, task_fingerprint=task_fingerprint(problems), model=model,
                        model_fingerprint=model_fp, sampling=sampling, system_prompt=system_prompt,
                        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        rlvr_version=__version__)


def _problem_prompt(p: Problem) -> str:
    if p.prompt is not None:
        return p.prompt
    users = [m.get("content", "") for m in (p.messages or []) if m.get("role") == "user"]
    return users[-1] if users else json.dumps(p.messages, ensure_ascii=False)


def record_from_samples(problem: Problem, samples: Iterable) -> SampleRecord:
    """A :class:`SampleRecord` from a problem and the engine's :class:`~rlvr.types.Sample` objects."""
    rows = [{"text": s.text, "num_tokens": int(s.num_tokens), "finish_reason": s.finish_reason,
             "logprob_sum": float(sum(s.logprobs))} for s in samples]
    meta = json.loads(json.dumps(problem.metadata, ensure_ascii=False, default=str))
    return SampleRecord(id=problem.id, answer=problem.answer, metadata=meta, prompt=_problem_prompt(problem),
                        samples=rows)


# ------------------------------------------------------------------------ reading
def _scan(path: Path) -> tuple[SampleHeader, list[SampleRecord], int]:
    """(header, whole records, byte offset just past the last whole line).

    The last line, terminated or not, counts as torn (a killed writer) when it is
    not valid JSON, and is left out; a bad line before it is an error naming
    file:line.  A file whose only content is a torn header raises too.
    """
    if not path.is_file():
        raise SampleFileError(f"{path}: no such samples file")
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file ends with a newline
    records: list[SampleRecord] = []
    header: SampleHeader | None = None
    good_end = offset = 0
    for lineno, raw in enumerate(lines, 1):
        offset += len(raw) + 1
        where = f"{path}:{lineno}"
        if not raw.strip():
            good_end = min(offset, len(data))
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            if lineno == len(lines):  # torn by a killed run: ignored (and cut off before appending)
                if header is None:
                    raise SampleFileError(f"{where}: torn header line (the run was killed while starting)") from None
                log.warning("%s: ignoring a torn last line (%d bytes)", where, len(raw))
                break
            raise SampleFileError(f"{where}: malformed JSON ({getattr(e, 'msg', e)})") from None
        if header is None:
            header = SampleHeader.from_dict(obj, where)
        else:
            rec = SampleRecord.from_dict(obj, where)
            if len(rec.samples) != header.n:
                raise SampleFileError(f"{where}: problem {rec.id!r} has {len(rec.samples)} samples, "
                                      f"the header says n={header.n}")
            records.append(rec)
        good_end = min(offset, len(data))
    if header is None:
        raise SampleFileError(f"{path}:1: no header line (empty file)")
    seen: set[str] = set()
    for r in records:
        if r.id in seen:
            raise SampleFileError(f"{path}: problem id {r.id!r} appears twice")
        seen.add(r.id)
    return header, records, good_end


def read_samples(path: str | os.PathLike) -> tuple[SampleHeader, list[SampleRecord]]:
    """The header and every whole problem record of a samples file.

    A torn last line (a killed run) is ignored.  Raises :class:`SampleFileError`
    naming ``file:line`` for a malformed line elsewhere, a missing or foreign
    header, a record with the wrong number of samples, or a duplicate id.
    """
    header, records, _ = _scan(Path(path))
    return header, records


# ------------------------------------------------------------------------ writing
def _mismatches(stored: SampleHeader, asked: SampleHeader) -> list[str]:
    out = []
    if stored.task != asked.task or stored.task_fingerprint != asked.task_fingerprint:
        out.append(f"task: file has {stored.task!r} (fingerprint {stored.task_fingerprint}), "
                   f"asked for {asked.task!r} (fingerprint {asked.task_fingerprint})")
    if stored.model_fingerprint != asked.model_fingerprint:
        out.append(f"model: file has {stored.model!r} (fingerprint {stored.model_fingerprint}), "
                   f"asked for {asked.model!r} (fingerprint {asked.model_fingerprint})")
    s = {k: stored.sampling.get(k) for k in SAMPLING_KEYS}
    a = {k: asked.sampling.get(k) for k in SAMPLING_KEYS}
    if s != a:
        diff = ", ".join(f"{k}={s[k]!r} vs {a[k]!r}" for k in SAMPLING_KEYS if s[k] != a[k])
        out.append(f"sampling: file has {diff} (file vs asked)")
    if (stored.system_prompt or None) != (asked.system_prompt or None):
        out.append(f"system prompt: file has {stored.system_prompt!r}, asked for {asked.system_prompt!r}")
    return out


class SampleWriter:
    """Appends whole problem records to a samples file (use :func:`open_for_append`).

    ``header`` is the file's header, ``records`` the records already stored and
    ``done`` their ids.  ``write`` appends one line and flushes it to disk.
    """

    def __init__(self, path: Path, header: SampleHeader, records: list[SampleRecord], fh):
        self.path, self.header, self.records, self._fh = path, header, records, fh
        self.done = {r.id for r in records}

    def write(self, record: SampleRecord) -> None:
        if record.id in self.done:
            raise ValueError(f"problem {record.id!r} is already stored in {self.path}")
        if len(record.samples) != self.header.n:
            raise ValueError(f"problem {record.id!r} has {len(record.samples)} samples, the file stores "
                             f"n={self.header.n}")
        self._fh.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.records.append(record)
        self.done.add(record.id)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "SampleWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_for_append(path: str | os.PathLike, header: SampleHeader, *, option: str = "samples file") -> SampleWriter:
    """Open (or create) a samples file for ``header``'s task, model and sampling, ready to append.

    A new file gets ``header`` as line 1.  An existing file must have been made
    for the same task (name and fingerprint), model fingerprint, sampling
    settings and system prompt, otherwise :class:`SampleFileError` names both
    sides and ``option``, the caller's way to name another file (``--samples``,
    ``samples_path``); its whole records are kept (``writer.records``) and a torn last line
    is cut off so that appending continues on a clean line boundary.
    """
    p = Path(path)
    if p.exists() and p.stat().st_size > 0 and b"\n" not in p.read_bytes():
        p.unlink()  # only a torn header: the run was killed before its first problem
    if p.exists() and p.stat().st_size > 0:
        stored, records, good_end = _scan(p)
        bad = _mismatches(stored, header)
        if bad:
            raise SampleFileError(f"{p}: was made for other settings than asked, refusing to mix samples; "
                                  + "; ".join(bad) + f". Use another {option}, or delete this one.")
        with p.open("r+b") as f:
            f.truncate(good_end)
            if good_end:
                f.seek(good_end - 1)
                if f.read(1) != b"\n":  # a whole last line written without its newline
                    f.seek(good_end)
                    f.write(b"\n")
        return SampleWriter(p, stored, records, p.open("a", encoding="utf-8"))
    p.parent.mkdir(parents=True, exist_ok=True)
    fh = p.open("w", encoding="utf-8")
    fh.write(json.dumps(header.to_dict(), ensure_ascii=False) + "\n")
    fh.flush()
    return SampleWriter(p, header, [], fh)


def generate_samples(engine, problems: Sequence[Problem], header: SampleHeader, path: str | os.PathLike, *,
                     indices: Sequence[int] | None = None, progress: bool = True,
                     stop: Sequence[str] = (), chunk: int | None = None,
                     option: str = "samples file") -> list[SampleRecord]:
    """Make sure ``path`` holds all samples of ``problems[i]`` for ``i`` in ``indices``; return their records.

    ``problems`` is the whole task (the one ``header`` was fingerprinted on);
    ``indices`` selects the ones to sample (default: all).  Problems already in
    the file are kept; the missing ones are generated ``chunk`` task positions at a
    time (default: the engine's ``batch_size // n``, at least 1), one
    ``engine.generate(chunk_problems, SamplingParams(n, ..., seeds=[seed + index, ...]))``
    call per chunk, and appended as soon as their chunk is done.  The returned
    records follow ``indices`` order.  ``option`` names the samples file in a refusal (:func:`open_for_append`).
    """
    from rlvr.engines.base import SamplingParams

    idx = list(range(len(problems))) if indices is None else list(indices)
    s = header.sampling
    n = int(s["n"])
    chunk = chunk or max(1, int(engine.batch_size) // n)
    with open_for_append(path, header, option=option) as w:
        todo = [i for i in idx if problems[i].id not in w.done]
        chunks: dict[int, list[int]] = {}
        for i in sorted(set(todo)):
            chunks.setdefault(i // chunk, []).append(i)
        bar = None
        if progress and todo:
            from tqdm import tqdm

            bar = tqdm(total=len(idx), initial=len(idx) - len(todo), desc="generate", unit="problem")
        try:
            for part in chunks.values():
                params = SamplingParams(n=n, max_new_tokens=int(s["max_new_tokens"]),
                                        temperature=float(s["temperature"]), top_p=float(s.get("top_p", 1.0)),
                                        seeds=[int(s["seed"]) + i for i in part], stop=tuple(stop))
                groups = engine.generate([problems[i] for i in part], params)
                for i, group in zip(part, groups):
                    w.write(record_from_samples(problems[i], group))
                if bar is not None:
                    bar.update(len(part))
        finally:
            if bar is not None:
                bar.close()
        by_id = {r.id: r for r in w.records}
    return [by_id[problems[i].id] for i in idx]


# ------------------------------------------------------------------------ scoring
@dataclass
class ScoredSet:
    """Verdicts of every stored sample, problem by problem.

    ``correct`` [P, n] bool, ``num_tokens`` [P, n] int and ``truncated`` [P, n]
    bool (finish_reason "length") are numpy arrays when every problem has the
    same n (always true for one samples file), else lists of 1-D arrays.
    ``extracted[i][j]`` is the canonical answer used for majority voting
    (:func:`voting_key`; None when no answer was found), ``raw_extracted`` the
    verifier's own extraction and ``reasons`` its explanation.
    """

    ids: list[str]
    answers: list[str]
    metadata: list[dict[str, Any]]
    correct: Any
    extracted: list[list[str | None]]
    raw_extracted: list[list[str | None]]
    num_tokens: Any
    truncated: Any
    reasons: list[list[str]]
    verifier: str

    @property
    def num_problems(self) -> int:
        return len(self.ids)

    @property
    def n(self) -> int:
        """Samples per problem (the smallest, if they differ)."""
        return min((len(row) for row in self.extracted), default=0)


def voting_key(extracted: str | None, verifier: str = "math") -> str | None:
    """The canonical form of an extracted answer, so that equal answers vote together.

    Two answers share a bucket when their keys are equal strings:

    * ``math`` (and any other verifier): the answer goes through the math
      verifier's :func:`~rlvr.verifiers.math.normalize.clean` (drops ``$``,
      ``\\left``, spacing, ``\\dfrac``, units, degrees, currency, ``x =``...);
      if it is then a plain number (integer, decimal, fraction, mixed number,
      repeating decimal, scientific notation, percentage) the key is its exact
      value as a reduced fraction (``"0.5"``, ``"\\frac12"``, ``"1/2"`` all give
      ``"1/2"``; ``"50%"`` gives ``"50"``); a choice letter gives the letter, a
      word answer its lower-case text; anything else its cleaned text without
      whitespace.  Symbolic equivalence (``\\frac{\\sqrt2}{2}`` vs
      ``\\frac{1}{\\sqrt2}``) is *not* detected: those are separate buckets,
      which can only split a vote, never merge different answers.
    * ``numeric``: the float value (``repr``) when the answer parses as a
      number, else the whitespace-free text.
    """
    if extracted is None:
        return None
    from fractions import Fraction

    from rlvr.verifiers.math.normalize import as_text, choice_letter, clean, squash, to_number

    s = str(extracted)
    if verifier == "numeric":
        from rlvr.verifiers.numeric import parse_number

        v = parse_number(s)
        return repr(float(v)) if v is not None else (squash(s) or None)
    try:
        c = clean(s)
    except Exception:  # noqa: BLE001 - odd strings keep their raw form
        c = s
    num = to_number(c)
    if num is not None:
        value: Fraction = num[0]
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    letter = choice_letter(c) if len(c) <= 40 else None
    if letter is not None and len(squash(c)) <= 12:
        return f"choice:{letter}"
    text = as_text(c)
    if text is not None:
        return f"text:{text}"
    return squash(c) or None


def score_samples(records: Sequence[SampleRecord], verifier: str | Callable[[str, str], Verdict] = "math",
                  workers: int = 1, progress: bool = False, **options: Any) -> ScoredSet:
    """Score every stored sample of ``records`` with ``verifier`` (a registered name or a callable).

    ``workers > 1`` verifies in that many processes (named verifiers only; same
    verdicts as one process).  Identical (completion, reference) pairs are
    verified once.  ``options`` go to the verifier factory (e.g. ``timeout``).
    """
    from rlvr.verifiers.base import safe_verify

    pairs: dict[tuple[str, str], int] = {}
    order: list[tuple[str, str]] = []
    for r in records:
        for s in r.samples:
            key = (s["text"], r.answer)
            if key not in pairs:
                pairs[key] = len(order)
                order.append(key)
    name = verifier if isinstance(verifier, str) else getattr(verifier, "__name__", "callable")
    completions = [c for c, _ in order]
    references = [a for _, a in order]
    if isinstance(verifier, str):
        from rlvr.verifiers.batch import iter_verify

        it: Iterable[Verdict] = iter_verify(verifier, completions, references, workers=workers, **options)
    else:
        it = (safe_verify(verifier, c, a) for c, a in order)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, total=len(order), desc="score", unit="sample")
    verdicts = list(it)
    vote_kind = "numeric" if name == "numeric" else "math"
    keys_cache: dict[str | None, str | None] = {}

    def key_of(extracted: str | None) -> str | None:
        if extracted not in keys_cache:
            keys_cache[extracted] = voting_key(extracted, vote_kind)
        return keys_cache[extracted]

    correct, extracted, raw, tokens, trunc, reasons = [], [], [], [], [], []
    for r in records:
        vs = [verdicts[pairs[(s["text"], r.answer)]] for s in r.samples]
        correct.append(np.array([v.correct for v in vs], dtype=bool))
        raw.append([v.extracted for v in vs])
        extracted.append([key_of(v.extracted) for v in vs])
        reasons.append([v.reason for v in vs])
        tokens.append(np.array([int(s.get("num_tokens", 0)) for s in r.samples], dtype=np.int64))
        trunc.append(np.array([s.get("finish_reason") == "length" for s in r.samples], dtype=bool))
    rect = len({len(r.samples) for r in records}) <= 1

    def stack(rows, dtype):
        if not rect:
            return rows
        n = len(records[0].samples) if records else 0
        return np.stack(rows).astype(dtype) if rows else np.zeros((0, n), dtype=dtype)

    return ScoredSet(ids=[r.id for r in records], answers=[r.answer for r in records],
                     metadata=[dict(r.metadata) for r in records], correct=stack(correct, bool),
                     extracted=extracted, raw_extracted=raw, num_tokens=stack(tokens, np.int64),
                     truncated=stack(trunc, bool), reasons=reasons, verifier=name)
