"""Sharded checkpoints of an FSDP learner with ``torch.distributed.checkpoint`` (DCP).

Each rank writes only its own shards of the weights and AdamW state, in parallel;
the checkpoint records every tensor's global shape and which slice each file
holds, so it can be loaded on any number of ranks (DCP reshards on load): saved on
N workers, resumed on M, including M = 1 in a plain process without
``torch.distributed`` (e.g. to inspect or evaluate a cluster checkpoint on a
laptop).  Model and optimizer state go through
``torch.distributed.checkpoint.state_dict.get_state_dict`` / ``set_state_dict``,
which key the optimizer state by parameter name (not by position) and strip
wrapper prefixes (``_checkpoint_wrapped_module``), so the same checkpoint loads
with or without activation checkpointing.

A checkpoint directory mirrors :mod:`rlvr.learner.checkpoint` (so
``latest_checkpoint`` finds it)::

    <output_dir>/checkpoints/step-000010/
        dcp/          model + optimizer: one ``__<rank>_0.distcp`` per rank and ``.metadata``
        state.pt      step, scheduler, data position, RNG ... (rank 0's; the loop decides)
        model/        optional full HF weights + tokenizer (``rlvr eval --model``, a rollout engine)
        DONE          written last

All ranks must call the save and load functions (they are collective), and all
ranks must see the same directory (one node, or a shared file system).  The
directory is assembled under a temporary name and renamed by rank 0 once every
rank has finished, so an interrupted save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

__all__ = [
    "save_sharded",
    "load_sharded",
    "export_full_state_dict",
    "save_hf",
    "save_checkpoint_sharded",
    "load_checkpoint_sharded",
]


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def _state(model, optimizer) -> dict[str, Any]:
    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    msd, osd = get_state_dict(model, optimizer)
    return {"model": msd, "optim": osd}


def save_sharded(path: str | Path, model, optimizer=None) -> None:
    """Write model (and optimizer) state to the DCP directory ``path``; collective."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process is the intent
        dcp.save(_state(model, optimizer), checkpoint_id=str(path), no_dist=not _distributed())


def load_sharded(path: str | Path, model, optimizer=None) -> None:
    """Load a DCP directory into ``model`` (and ``optimizer``) in place, whatever world size wrote it.

    The current model's (and optimizer's) sharding is the template: DCP reads
    the slices each rank needs from whichever files hold them.  An optimizer
    that has not stepped yet gets its state initialised first (by
    ``get_state_dict``, a zero-lr step), so a fresh optimizer can be resumed.
    """
    state = _state(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path), no_dist=not _distributed())
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def export_full_state_dict(model, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
    """Unsharded weights as plain CPU tensors with HF names (collective).

    For an HF ``save_pretrained`` or a rollout engine's weight sync.  With
    ``rank0_only`` (default) only rank 0 receives the tensors and the other
    ranks get ``{}``, so the host memory of a full copy is paid once; with
    ``rank0_only=False`` every rank gets a full copy (each rank samples from its
    own unsharded copy).  Works on an unsharded model too.
    """
    if not _distributed():
        return {k: v.detach().cpu() for k, v in get_model_state_dict(model).items()}
    if rank0_only:
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().cpu() for k, v in full.items()}


def _unwrap_hf(model):
    """The ``PreTrainedModel`` under a peft/other wrapper (FSDP2 keeps the class, adding a mixin)."""
    return model if hasattr(model, "save_pretrained") else getattr(model, "module", model)


def save_hf(path: str | Path, model, tokenizer=None) -> None:
    """Gather the full weights and write an HF model directory from rank 0 (collective)."""
    full = export_full_state_dict(model, rank0_only=True)
    if _rank() == 0:
        hf = _unwrap_hf(model)
        if getattr(hf.config, "tie_word_embeddings", False):
            # gathered separately, the tied head is a second copy of the embedding: store it once
            full.pop("lm_head.weight", None)
        hf.save_pretrained(str(path), state_dict=full, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(path))
    _barrier()


def save_checkpoint_sharded(output_dir: str | Path, step: int, model, optimizer, scheduler=None,
                            state: dict[str, Any] | None = None, *, tokenizer=None, hf_export: bool = False,
                            keep: int = 2) -> Path:
    """Write ``<output_dir>/checkpoints/step-NNNNNN`` (layout above) and prune to ``keep``; collective.

    ``state`` (loop state: data position, RNG, ...) is rank 0's and goes to
    ``state.pt`` with the scheduler; ``hf_export`` also writes the full weights
    as an HF directory ``model/`` (one extra all-gather).
    """
    from rlvr.learner.checkpoint import _complete_checkpoints

    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{step:06d}"
    tmp = root / f".step-{step:06d}.partial"  # the same name on every rank
    if _rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier()
    save_sharded(tmp / "dcp", model, optimizer)
    if hf_export:
        save_hf(tmp / "model", model, tokenizer)
    if _rank() == 0:
        torch.save({"step": step, "scheduler": scheduler.state_dict() if scheduler is not None else None,
                    "world_size": dist.get_world_size() if _distributed() else 1, **(state or {})},
                   tmp / "state.pt")
        (tmp / "DONE").write_text(str(step))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        if keep > 0:
            for old in _complete_checkpoints(root)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def load_checkpoint_sharded(path: str | Path, model, optimizer=None, scheduler=None) -> dict[str, Any]:
    """Load a sharded checkpoint (any saving world size) in place; returns the loop state (collective)."""
    path = Path(path)
    if not (path / "DONE").is_file() or not (path / "dcp").is_dir():
        raise FileNotFoundError(f"{path} is not a complete sharded rlvr checkpoint (no DONE marker or dcp/)")
    load_sharded(path / "dcp", model, optimizer)
    state = torch.load(path / "state.pt", weights_only=False)
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    return state
