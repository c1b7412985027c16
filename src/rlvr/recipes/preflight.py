"""Checks a training run passes before its policy loads: what would otherwise fail minutes later.

:func:`check_before_model` (called by :meth:`rlvr.recipes.rl.RLRecipe.setup` once the data is built) refuses,
with one line naming the key:

* a ``distill.teacher`` that does not exist (a path to no directory, a directory with no model);
* a ``train.output_dir`` that cannot be created or written (a path under a file, a read-only place), and a
  cache directory the bundled model would be converted into that cannot be written;
* ``rollout.max_new_tokens`` (or ``eval.max_new_tokens``) plus the longest prompt beyond the model's context
  (``max_position_embeddings`` of its ``config.json``, read without loading any weight);
* a run whose estimated peak memory (:func:`rlvr.utils.memory.estimate_training_memory`, printed at the start)
  exceeds the memory available now (``train.check_memory=false`` runs it anyway).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rlvr.config import ConfigError
from rlvr.models.loader import conversion_dir, model_config
from rlvr.types import problem_text
from rlvr.utils.memory import (GB, RUNTIME_BYTES, MemoryEstimate, ModelShape, RunSizes, estimate_training_memory,
                                inference_pass_bytes)
from rlvr.utils.paths import unwritable_reason

if TYPE_CHECKING:
    from rlvr.recipes.config import RunConfig

__all__ = ["check_before_model", "check_teacher_path", "run_sizes", "prompt_tokens", "available_memory", "teacher_weight_bytes",
           "teacher_pass_bytes"]

log = logging.getLogger(__name__)

TEMPLATE_TOKENS = 32
"""Tokens a chat template adds around a prompt (role markers, a default system message)."""


def prompt_tokens(problems: Sequence[Any], system_prompt: str | None = None) -> int:
    """An estimate of the longest prompt in tokens: about 4 characters a token, plus :data:`TEMPLATE_TOKENS`."""
    longest = max((len(problem_text(p)) for p in problems), default=0) + len(system_prompt or "")
    return -(-longest // 4) + TEMPLATE_TOKENS


def _lora_params(shape: ModelShape, r: int) -> int:
    """LoRA adapters of rank ``r`` on q, k, v, o and the gated MLP of every layer."""
    h, q, kv, f = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    return shape.layers * r * ((h + q) * 2 + (h + kv) * 2 + (h + f) * 3)


def run_sizes(cfg: RunConfig, shape: ModelShape, prompt: int) -> RunSizes:
    """What the run holds at once, from its config (see :class:`rlvr.utils.memory.RunSizes`)."""
    m, r, t, e = cfg.model, cfg.rollout, cfg.train, cfg.eval
    param_bytes = 4 if m.dtype == "float32" else 2
    sampler = r.dtype
    if sampler == "fast":  # bfloat16 where it is native (rlvr.utils.precision; the CPU is probed once, then cached)
        from rlvr.utils.device import resolve_device
        from rlvr.utils.precision import fast_dtype

        sampler = fast_dtype(resolve_device(m.device), announce=False)
    bf16_sampler = sampler == "bfloat16" and m.dtype == "float32"
    sampler_bytes = 2 if bf16_sampler else (param_bytes if m.lora.enabled and m.lora.merge_for_rollout else 0)
    rows = min(t.prompts_per_step, max(1, r.batch_size // r.group_size)) * r.group_size
    eval_rows = max(1, (e.batch_size or r.batch_size) // e.n) * e.n
    evaluates = e.before_training or e.after_training or e.every > 0
    if evaluates and eval_rows * (prompt + e.max_new_tokens) > rows * (prompt + r.max_new_tokens):
        rows, max_new = eval_rows, e.max_new_tokens
    else:
        max_new = r.max_new_tokens
    seq = prompt + r.max_new_tokens
    return RunSizes(
        prompt_tokens=prompt, max_new_tokens=max_new, sampler_rows=rows,
        micro_batch_tokens=t.micro_batch_tokens or t.micro_batch_size * seq, row_tokens=t.micro_batch_tokens or seq,
        param_bytes=param_bytes, trainable_params=_lora_params(shape, m.lora.r) if m.lora.enabled else None,
        optimizer_bytes=4 if t.optimizer == "adamw_bf16" else 8, sampler_bytes=sampler_bytes,
        sampler_sleeps=r.sleep_while_learning, kv_bytes=2 if bf16_sampler or m.dtype == "bfloat16" else 4,
        activation_bytes=2 if m.dtype == "bfloat16" or t.autocast == "bfloat16" else 4,
        activation_checkpointing=t.activation_checkpointing, logprob_chunk=t.logprob_chunk_size,
        reference=cfg.algorithm.kl_coef > 0,
        critic=cfg.algorithm.value.critic if cfg.algorithm.advantage == "gae" else "none",
        teacher_weight_bytes=teacher_weight_bytes(cfg, shape), teacher_sleeps=cfg.distill.sleep_while_learning,
        teacher_pass_bytes=teacher_pass_bytes(cfg, shape, seq),
        generator_process=t.async_steps > 0 or t.rollout_worker)


def teacher_weight_bytes(cfg: RunConfig, student: ModelShape) -> int:
    """Bytes of ``distill.teacher``'s weights (0 without a teacher): its parameter count from its ``config.json``
    (read without weights; the student's when the teacher's is not at hand, e.g. a hub id not in the HF cache)
    times the bytes of ``distill.dtype``."""
    d = cfg.distill
    if d.teacher is None:
        return 0
    raw = model_config(d.teacher, cfg.model.cache_dir)
    shape = (ModelShape.from_config(raw) if raw else None) or student
    dtype = cfg.model.dtype if d.dtype == "policy" else d.dtype
    return shape.params * (4 if dtype == "float32" else 2)


def teacher_pass_bytes(cfg: RunConfig, student: ModelShape, seq: int) -> int:
    """Transient bytes of distillation's no-grad log-prob passes (0 without a teacher): the larger of the
    student's (``train.logprob_chunk_size`` head tokens) and the teacher's (``distill.chunk_size``), each over a
    micro-batch of ``train.micro_batch_size`` rows of ``seq`` tokens."""
    d, t, m = cfg.distill, cfg.train, cfg.model
    if d.teacher is None:
        return 0
    raw = model_config(d.teacher, m.cache_dir)
    teacher = (ModelShape.from_config(raw) if raw else None) or student
    tokens = t.micro_batch_size * seq
    amp = t.autocast == "bfloat16"
    tdtype = m.dtype if d.dtype == "policy" else d.dtype
    return max(inference_pass_bytes(student, tokens, seq, 2 if amp or m.dtype == "bfloat16" else 4,
                                    t.logprob_chunk_size),
               inference_pass_bytes(teacher, tokens, seq, 2 if amp or tdtype == "bfloat16" else 4, d.chunk_size))


def available_memory(device: str) -> int | None:
    """Bytes a run could still use: on a CUDA device its free memory; else the machine's available memory plus
    this process's resident memory (already counted by the estimate's runtime).  None when unknown."""
    if str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info(torch.device(device))[0]) + RUNTIME_BYTES
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available + psutil.Process().memory_info().rss)


def _check_dirs(cfg: RunConfig, loads_model: bool) -> None:
    why = unwritable_reason(cfg.train.output_dir)
    if why:
        raise ConfigError(f"train.output_dir: cannot write the run there: {why}")
    convert = conversion_dir(cfg.model.name, cfg.model.cache_dir) if loads_model else None
    if convert is not None:
        why = unwritable_reason(convert.parent)
        if why:
            raise ConfigError(f"model.cache_dir: the bundled model {cfg.model.name!r} is converted into the cache on "
                              f"its first use, which cannot be written: {why}; set model.cache_dir or $RLVR_CACHE "
                              "to a writable directory")


def _check_context(cfg: RunConfig, shape: ModelShape, prompt: int) -> None:
    if not shape.context:
        return
    e = cfg.eval
    limits = [("rollout.max_new_tokens", cfg.rollout.max_new_tokens)]
    if e.before_training or e.after_training or e.every > 0:
        limits.append(("eval.max_new_tokens", e.max_new_tokens))
    for key, value in limits:
        if value + prompt > shape.context:
            raise ConfigError(f"{key}: {value} new tokens plus the longest prompt (~{prompt} tokens) exceed the "
                              f"context of {cfg.model.name!r} ({shape.context} tokens, max_position_embeddings in "
                              f"its config.json): set {key} <= {max(1, shape.context - prompt)}")


def check_teacher_path(cfg: RunConfig) -> None:
    """``distill.teacher`` names something that can be a model: a bundled name, a directory with a ``config.json``
    (or an rlvr checkpoint's ``model/config.json``), or a hub id; a path that does not exist is refused."""
    teacher = cfg.distill.teacher
    if teacher is None:
        return
    from rlvr.models.teacher import teacher_path_problem

    problem = teacher_path_problem(teacher)
    if problem:
        raise ConfigError(f"distill.teacher: {problem}; train the teacher first or set distill.teacher=PATH (an HF "
                          "model directory, an rlvr checkpoint directory, a bundled name or a hub id)")


def check_before_model(cfg: RunConfig, problems: Sequence[Any], model: Any = None,
                       out: Callable[[str], Any] = print) -> MemoryEstimate | None:
    """The checks of this module, for ``cfg`` on ``problems`` (training and held-out); ``model``: a policy
    passed in (its config gives the shape; nothing is converted).  Prints the memory estimate with ``out`` and
    returns it (None when the model's shape is unknown or the run is distributed or samples with vLLM)."""
    check_teacher_path(cfg)
    _check_dirs(cfg, loads_model=model is None)
    config = getattr(model, "config", None) if model is not None else None
    raw = config.to_dict() if hasattr(config, "to_dict") else model_config(cfg.model.name, cfg.model.cache_dir)
    shape = ModelShape.from_config(raw) if raw else None
    if shape is None:
        return None
    prompt = prompt_tokens(problems, cfg.task.system_prompt)
    _check_context(cfg, shape, prompt)
    d = cfg.distributed
    if d.backend != "none" or d.fsdp or cfg.rollout.engine != "hf":
        return None  # memory spread over processes or held by vLLM's own pool: not this estimate's
    est = estimate_training_memory(shape, run_sizes(cfg, shape, prompt))
    from rlvr.utils.device import resolve_device

    device = str(resolve_device(cfg.model.device))
    avail = available_memory(device)
    where = f"{avail / GB:.1f} GB available" + (" on the GPU" if device.startswith("cuda") else "") \
        if avail is not None else "available memory unknown"
    out(f"memory: estimated peak {est.describe()}; {where}")
    if avail is not None and est.total > avail and cfg.train.check_memory:
        raise ConfigError(f"train.check_memory: the run needs an estimated {est.total / GB:.1f} GB, more than the "
                          f"{avail / GB:.1f} GB available: lower rollout.batch_size, train.micro_batch_size (or set "
                          "train.micro_batch_tokens), rollout.max_new_tokens or train.prompts_per_step, or set "
                          "train.check_memory=false to run anyway (the estimate can be off)")
    return est
