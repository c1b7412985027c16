"""On-policy distillation's teacher: where it comes from, whether its tokenizer is the student's, and loading it
frozen.

The teacher (``distill.teacher``) is any causal LM :func:`rlvr.models.loader.resolve_model_path` accepts: a bundled
name, an HF directory, an rlvr checkpoint directory (``<run>/checkpoints/step-N``, whose ``model/`` holds the
weights) or a hub id.  It scores the tokens the student sampled, so both must map text to the same token ids:
:func:`tokenizer_mismatch` compares the two tokenizers (the size, the whole token -> id map, the special tokens
that end and pad a sequence) before any weight loads, and :func:`check_teacher_tokenizer` refuses a teacher whose
tokenizer differs, naming both models.  :func:`load_teacher` loads it like the KL reference
(:func:`rlvr.models.frozen.freeze`: eval mode, no gradients).

:class:`TeacherSleep` (``distill.sleep_while_learning``) frees the teacher's weights between its log-prob passes and
reads them back from its files right before the next one, the counterpart of the HF engine's
:meth:`rlvr.engines.hf.HFEngine.sleep` for the sampler's copy: the modules (and their hooks) are kept, each
parameter's storage is released, and waking reads every tensor into a fresh buffer of the parameter's own shape,
dtype and device, so the teacher's weights, and its log-probs, are bit for bit those of the first load.
"""

from __future__ import annotations

import json
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
    resolve_model_path,
    load_tokenizer,
    model_config,
)

__all__ = ["TeacherError", "teacher_path_problem", "tokenizer_mismatch", "check_teacher_tokenizer", "load_teacher",
           "teacher_config", "TeacherSleep"]


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


def _safetensors_files(directory: Path) -> list[Path]:
    """The safetensors files of an HF model directory: its index's shards, else every ``*.safetensors``."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()))
        return [directory / f for f in shards]
    return sorted(directory.glob("*.safetensors"))


class TeacherSleep:
    """Free a frozen teacher's weights after its log-prob pass; read them back from its files before the next.

    :meth:`sleep` releases every parameter's storage (an empty tensor of the same dtype and device takes its
    place; the modules, their hooks and the buffers stay); :meth:`wake` gives each parameter a fresh buffer of its
    shape, dtype and device and fills it.  Two ways to fill it, chosen once by :meth:`for_teacher`:

    * ``files`` (a local directory whose safetensors files hold every parameter under one of its names, with its
      shape, e.g. the bundled model's conversion, an HF directory, an rlvr checkpoint): each tensor is read
      alone (the file is opened per tensor, so its mapped pages are released at once: the wake never holds
      more than the teacher's weights) and ``copy_`` into the buffer, with ``from_pretrained``'s cast when the
      teacher's dtype differs from the file's;
    * ``rebuild`` (anything else: a hub id, ``*.bin`` weights, keys ``from_pretrained`` renames): ``rebuild()``
      loads the teacher again as at the start (:func:`load_teacher`) and its parameters are moved in by name.

    Either way the weights after :meth:`wake` equal those of the first load bit for bit.
    """

    def __init__(self, model, plan: list[tuple[Any, Path, str]] | None = None, rebuild=None):
        if plan is None and rebuild is None:
            raise ValueError("TeacherSleep needs a plan (files) or a rebuild function")
        self.model, self.plan, self.rebuild = model, plan, rebuild
        self._asleep: list[tuple[str, Any, Any]] | None = None  # (name, parameter, shape) while asleep

    @classmethod
    def for_teacher(cls, model, teacher: str, *, dtype: str = "float32", device: Any = "cpu",
                    cache: str | os.PathLike | None = None) -> TeacherSleep:
        """The sleeper of ``model``, loaded from ``teacher``: from its safetensors files when they hold every
        parameter under one of its names (tied parameters have several) with its shape, else by rebuilding."""
        plan = cls.file_plan(model, teacher, cache)
        if plan is not None:
            return cls(model, plan=plan)
        return cls(model, rebuild=lambda: load_teacher(teacher, dtype=dtype, device=device, cache=cache))

    @staticmethod
    def file_plan(model, teacher: str, cache: str | os.PathLike | None = None) -> list[tuple[Any, Path, str]] | None:
        """``[(parameter, file, key)]`` for every distinct parameter, or None when the files do not hold them all."""
        try:
            directory = Path(resolve_model_path(teacher, cache))
        except ModelNotFoundError:
            return None
        if not directory.is_dir():
            return None
        from safetensors import safe_open

        where: dict[str, tuple[Path, list[int]]] = {}
        for f in _safetensors_files(directory):
            if not f.is_file():
                return None
            with safe_open(str(f), framework="pt", device="cpu") as st:
                for key in st.keys():
                    where[key] = (f, list(st.get_slice(key).get_shape()))
        if not where:
            return None
        names: dict[int, list[str]] = {}
        params: dict[int, Any] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(name)
            params[id(p)] = p
        plan = []
        for pid, p in params.items():
            key = next((n for n in names[pid] if n in where and where[n][1] == list(p.shape)), None)
            if key is None:
                return None
            plan.append((p, where[key][0], key))
        return plan

    @property
    def sleeping(self) -> bool:
        return self._asleep is not None

    def sleep(self) -> bool:
        """Release every parameter's storage until :meth:`wake` (False, a no-op, when already asleep)."""
        if self._asleep is not None:
            return False
        self._asleep = [(name, p, p.shape) for name, p in self.model.named_parameters()]
        for _, p, _ in self._asleep:
            p.data = _empty(p)
        return True

    def wake(self) -> None:
        """Read the weights back (a no-op when awake)."""
        if self._asleep is None:
            return
        import torch

        if self.plan is not None:
            from safetensors import safe_open

            shapes = {id(p): shape for _, p, shape in self._asleep}
            for p, f, key in self.plan:
                buf = torch.empty(shapes[id(p)], dtype=p.dtype, device=p.device)
                with safe_open(str(f), framework="pt", device="cpu") as st:  # unmapped after each tensor
                    buf.copy_(st.get_tensor(key))
                p.data = buf
        else:
            fresh = dict(self.rebuild().named_parameters())
            for name, p, _ in self._asleep:
                p.data = fresh.pop(name).data
            del fresh
        self._asleep = None


def _empty(p):
    """An empty tensor of ``p``'s dtype and device (what a sleeping parameter holds)."""
    import torch

    return torch.empty(0, dtype=p.dtype, device=p.device)
