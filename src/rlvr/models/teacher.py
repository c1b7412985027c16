"""On-policy distillation's teacher: where it comes from, whether its tokenizer is the student's, and loading it
frozen.

The teacher (``distill.teacher``) is any causal LM :func:`rlvr.models.loader.resolve_model_path` accepts: a bundled
name, an HF directory, an rlvr checkpoint directory (``<run>/checkpoints/step-N``, whose ``model/`` holds the
weights) or a hub id.  It scores the tokens the student sampled, so both must map text to the same token ids:
:func:`tokenizer_mismatch` compares the two tokenizers (the size, the whole token -> id map, the special tokens
that end and pad a sequence) before any weight loads, and :func:`check_teacher_tokenizer` refuses a teacher whose
tokenizer differs, naming both models.  :func:`load_teacher` loads it like the KL reference
(:func:`rlvr.models.frozen.freeze`: eval mode, no gradients).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlvr.models.loader import (
    BUNDLED_MODELS,
    ModelNotFoundError,
    _accepted_message,
    _typo_message,
    bundled_typo,
    load_policy,
    load_tokenizer,
    model_config,
)

__all__ = ["TeacherError", "teacher_path_problem", "tokenizer_mismatch", "check_teacher_tokenizer", "load_teacher",
           "teacher_config"]


class TeacherError(ModelNotFoundError):
    """A teacher that cannot teach this student: missing, or with another tokenizer (one line, naming both)."""


def teacher_path_problem(name: str) -> str | None:
    """Why ``name`` cannot be a teacher, decided without loading anything (None: it may be one).

    A bundled name and a hub id (``org/name``, resolved when it loads) pass; a misspelt bundled name, a path
    that does not exist, and a directory with no ``config.json`` (nor ``model/config.json``, an rlvr checkpoint)
    are refused.
    """
    if not name or not str(name).strip():
        return "an empty name: give a model directory, an rlvr checkpoint directory, a bundled name or a hub id"
    if str(name).lower() in BUNDLED_MODELS:
        return None
    path = Path(name).expanduser()
    if path.exists():
        if path.is_dir() and ((path / "config.json").is_file() or (path / "model" / "config.json").is_file()):
            return None
        return f"{path} holds no config.json (an HF model directory) nor model/config.json (an rlvr checkpoint)"
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith("/"):
        return f"no such directory: {path}"
    close = bundled_typo(name)
    if close:
        return _typo_message(name, close)
    return None  # a hub id: resolved when it loads


def _vocab(tok: Any) -> dict[str, int]:
    get = getattr(tok, "get_vocab", None)
    return dict(get()) if callable(get) else {}


def tokenizer_mismatch(student: Any, teacher: Any) -> str | None:
    """How the two tokenizers map text to ids differently, or None when they agree.

    Compared: the number of tokens (``len``), the whole token -> id map (added tokens included), and the ids of
    the end-of-sequence and padding tokens.  The first difference found is described.
    """
    if len(student) != len(teacher):
        return f"{len(student)} vs {len(teacher)} tokens"
    vs, vt = _vocab(student), _vocab(teacher)
    if vs != vt:
        diff = sorted(set(vs.items()) ^ set(vt.items()), key=lambda kv: (kv[1], kv[0]))
        tok, _ = diff[0]
        return (f"token {tok!r} has id {vs.get(tok)} vs {vt.get(tok)} "
                f"({len({k for k, _ in diff})} tokens differ)")
    for what in ("eos_token_id", "pad_token_id"):
        a, b = getattr(student, what, None), getattr(teacher, what, None)
        if a != b:
            return f"{what} {a} vs {b}"
    return None


def check_teacher_tokenizer(student_tokenizer: Any, student_name: str, teacher: str,
                            cache: str | os.PathLike | None = None) -> Any:
    """Load the teacher's tokenizer (no weights) and refuse a teacher whose tokenizer differs from the student's
    (:class:`TeacherError`, naming both models and the difference); returns the teacher's tokenizer."""
    problem = teacher_path_problem(teacher)
    if problem:
        raise TeacherError(f"distill.teacher: {problem}")
    try:
        teacher_tok = load_tokenizer(teacher, cache)
    except ModelNotFoundError as e:
        raise TeacherError(f"distill.teacher: {e}") from None
    why = tokenizer_mismatch(student_tokenizer, teacher_tok)
    if why:
        raise TeacherError(f"distill.teacher: the teacher {teacher!r} has another tokenizer than the student "
                           f"{student_name!r} ({why}): the teacher must score the student's own token ids, so "
                           "both need the same tokenizer")
    return teacher_tok


def teacher_config(teacher: str, cache: str | os.PathLike | None = None) -> dict | None:
    """The teacher's ``config.json`` read without its weights (None when not at hand): its size for the memory
    estimate."""
    return model_config(teacher, cache)


def load_teacher(teacher: str, *, dtype: str = "float32", device: Any = "cpu",
                 cache: str | os.PathLike | None = None):
    """The teacher model, frozen (:func:`rlvr.models.frozen.freeze`: eval mode, no parameter requires grad)."""
    from rlvr.models.frozen import freeze

    try:
        model = load_policy(teacher, dtype=dtype, device="cpu", cache=cache, with_tokenizer=False)
    except ModelNotFoundError as e:
        raise TeacherError(f"distill.teacher: {e}") from None
    except OSError as e:  # pragma: no cover - a hub id that does not resolve
        raise TeacherError(f"distill.teacher: {_accepted_message(teacher)} ({e})") from None
    return freeze(model.to(device))
