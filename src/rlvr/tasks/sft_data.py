"""Supervised fine-tuning examples: chat ``messages`` or ``prompt``/``completion`` pairs, from a JSON-lines file,
a Hugging Face dataset, or a registered task's problems with a completion written from the gold answer.

Every source gives :class:`SFTExample` records (text, not tokens: the learner renders and tokenizes them,
:mod:`rlvr.learner.sft`).  Bad input fails here, before any model loads, with one :class:`DatasetError` line
naming the file (and line) and what is wrong::

    DatasetError: data/sft.jsonl:3: no completion field 'completion' (the record has: prompt, answer); set
    data.completion_field, or give chat 'messages'

A row is read as

- ``messages`` (the field ``messages_field``): a list of ``{role, content}``; the loss is on the assistant turns
  only; it must hold at least one assistant message;
- ``prompt`` + ``completion`` (``prompt_field`` / ``completion_field``): the prompt is a user message, rendered
  with the chat template and the task's system prompt as rlvr's rollouts render prompts; the loss is on the
  completion.

``format="auto"`` reads each row by the fields it has (messages first).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from rlvr.tasks.jsonl import DatasetError, read_jsonl
from rlvr.types import Problem

__all__ = ["SFTExample", "read_sft_jsonl", "read_sft_hf", "sft_rows", "task_examples", "template_fields",
           "SFT_FORMATS"]

SFT_FORMATS = ("auto", "messages", "prompt_completion")
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class SFTExample:
    """One supervised example: chat ``messages`` (loss on the assistant turns) or ``prompt`` + ``completion``."""

    id: str
    prompt: str | None = None
    completion: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    where: str = ""
    """Where it came from (``file:line``, ``dataset[row]``, ``task problem id``), for error messages."""
    weight: float = 1.0
    """The example's loss weight (``data.weight_field``: a reward or positive advantage, for offline RL)."""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _messages(value: Any, where: str, fld: str) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: field {fld!r} must be a non-empty list of {{role, content}} messages, "
                           f"got {type(value).__name__}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DatasetError(f"{where}: {fld}[{i}] must be an object with string 'role' and 'content', got "
                               f"{str(m)[:80]}")
        if m["role"] not in ROLES:
            raise DatasetError(f"{where}: {fld}[{i}] has role {m['role']!r} (expected one of {', '.join(ROLES)})")
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "assistant" for m in out):
        raise DatasetError(f"{where}: {fld} holds no assistant message: nothing to train on")
    if out[0]["role"] == "assistant":
        raise DatasetError(f"{where}: {fld} starts with an assistant message: it needs a user (or system) "
                           "message before it")
    return tuple(out)


def sft_rows(rows: Iterable[tuple[str, dict[str, Any]]], *, fmt: str = "auto", messages_field: str = "messages",
             prompt_field: str = "prompt", completion_field: str = "completion",
             id_prefix: str = "sft", weight_field: str | None = None) -> list[SFTExample]:
    """``(where, record)`` pairs as examples; a record that fits the format raises :class:`DatasetError` naming
    ``where`` and the fields it has.  With ``weight_field`` every record must hold a finite number >= 0 there (its
    loss weight)."""
    if fmt not in SFT_FORMATS:
        raise ValueError(f"unknown SFT format {fmt!r} ({', '.join(SFT_FORMATS)})")
    out: list[SFTExample] = []
    for i, (where, rec) in enumerate(rows):
        rid = str(rec.get("id", f"{id_prefix}-{i}"))
        has = ", ".join(sorted(map(str, rec))) or "no fields"
        weight = _weight(rec, weight_field, where, has)
        if fmt in ("auto", "messages") and rec.get(messages_field) is not None:
            out.append(SFTExample(rid, messages=_messages(rec[messages_field], where, messages_field), where=where,
                                  weight=weight))
            continue
        if fmt == "messages":
            raise DatasetError(f"{where}: no messages field {messages_field!r} (the record has: {has}); set "
                               "data.messages_field")
        if completion_field not in rec or rec[completion_field] is None:
            alt = f", or give chat {messages_field!r}" if fmt == "auto" else ""
            raise DatasetError(f"{where}: no completion field {completion_field!r} (the record has: {has}); set "
                               f"data.completion_field{alt}")
        if prompt_field not in rec or rec[prompt_field] is None:
            raise DatasetError(f"{where}: no prompt field {prompt_field!r} (the record has: {has}); set "
                               "data.prompt_field")
        prompt, completion = rec[prompt_field], rec[completion_field]
        for name, value in ((prompt_field, prompt), (completion_field, completion)):
            if not isinstance(value, str):
                raise DatasetError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
        if not completion.strip():
            raise DatasetError(f"{where}: field {completion_field!r} is empty: nothing to train on")
        out.append(SFTExample(rid, prompt=prompt, completion=completion, where=where, weight=weight))
    return out


def _weight(rec: dict[str, Any], field: str | None, where: str, has: str) -> float:
    """The record's loss weight: 1 without ``field``; else its finite value >= 0 (DatasetError otherwise)."""
    import math

    if field is None:
        return 1.0
    if field not in rec:
        raise DatasetError(f"{where}: no weight field {field!r} (the record has: {has}); set data.weight_field")
    v = rec[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise DatasetError(f"{where}: field {field!r} must be a finite number >= 0 (a loss weight), got {v!r}")
    return float(v)


def read_sft_jsonl(path: str | Path, **kw: Any) -> list[SFTExample]:
    """The examples of a JSON-lines file (a missing, empty or malformed file, or a row that fits no format,
    raises :class:`DatasetError` naming the file and line)."""
    p = Path(path)
    return sft_rows(((f"{p}:{n}", rec) for n, rec in read_jsonl(p)), id_prefix=p.stem, **kw)


def read_sft_hf(dataset: str, split: str = "train", name: str | None = None, **kw: Any) -> list[SFTExample]:
    """The examples of a Hugging Face dataset split: a ``save_to_disk`` directory (``datasets.load_from_disk``),
    a data file or directory, or a hub id (``datasets.load_dataset``)."""
    from rlvr.tasks.hf_dataset import _open_split

    ds = _open_split(dataset, split, name, None, None, None)
    if len(ds) == 0:
        raise DatasetError(f"{dataset}: split {split!r} is empty (no rows)")
    label = f"{dataset}[{split}]"
    return sft_rows(((f"{label} row {i}", dict(rec)) for i, rec in enumerate(ds)), id_prefix=Path(dataset).name,
                    **kw)


def template_fields(problem: Problem) -> dict[str, Any]:
    """What a completion template may name for ``problem``: ``answer``, ``prompt``, ``id`` and every metadata key
    (arithmetic: ``solution``, the worked solution ending in ``\\boxed{answer}``; ``expression``, ...)."""
    return {**{k: v for k, v in problem.metadata.items() if isinstance(k, str)},
            "answer": problem.answer, "prompt": problem.prompt or "", "id": problem.id}


def check_template(template: str) -> list[str]:
    """The field names of a ``str.format`` completion template (a malformed one raises ValueError)."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ValueError(f"data.completion_template: not a format string ({e}): {template!r}") from None
    if any(not n or not n.isidentifier() for n in names):
        raise ValueError(f"data.completion_template: every field must be a name like {{answer}}, got {template!r}")
    return names


def task_examples(problems: Sequence[Problem], template: str,
                  source: Literal["train", "heldout"] = "train") -> list[SFTExample]:
    """One prompt/completion example per problem: the problem's prompt (or chat messages, followed by the
    completion as the assistant turn) and ``template`` filled from :func:`template_fields`."""
    names = check_template(template)
    out = []
    for p in problems:
        fields = template_fields(p)
        missing = [n for n in names if n not in fields or fields[n] is None]
        if missing:
            raise DatasetError(f"data.completion_template names {', '.join(missing)}, which {source} problem "
                               f"{p.id!r} does not have (its fields: {', '.join(sorted(fields))})")
        completion = template.format(**fields)
        where = f"{source} problem {p.id}"
        if p.messages:
            msgs = tuple(dict(m) for m in p.messages) + ({"role": "assistant", "content": completion},)
            out.append(SFTExample(p.id, messages=msgs, where=where, metadata={"answer": p.answer}))
        else:
            out.append(SFTExample(p.id, prompt=p.prompt, completion=completion, where=where,
                                  metadata={"answer": p.answer}))
    return out
