"""FSDP2 learner: shard the policy over ranks, train it with a globally normalised loss.

FSDP (Zhao et al. 2023, "PyTorch FSDP") keeps 1/N of every parameter, gradient and
optimizer state on each of N ranks; before a block runs, its parameters are
all-gathered, after its backward the gradients are reduce-scattered.  This module
uses FSDP2 (``torch.distributed.fsdp.fully_shard``, parameters are ``DTensor`` s
sharded on dim 0):

* :func:`shard_model` applies ``fully_shard`` to every decoder block, then to the
  root (embeddings, final norm and LM head -- tied embeddings stay in one group),
  with an optional bf16 mixed-precision policy (bf16 compute and all-gathers,
  fp32 gradient reduction, fp32 master weights and optimizer state) and optional
  activation checkpointing of each block.
* :func:`fsdp_update_policy` is the per-rank learner step: each rank passes its own
  rows; the loss is normalised by the *global* batch (token-mean over every rank's
  tokens, found with ``all_reduce``), so the summed gradient equals the one-process
  gradient of the whole batch.  It runs the ordinary
  :func:`rlvr.learner.update.update_policy` with a :class:`DataParallel` context.

Activation checkpointing uses ``checkpoint_wrapper`` (non-reentrant) around each
block *before* ``fully_shard``, the composition PyTorch's FSDP2 examples and
torchtitan use: the FSDP unit is the wrapper, so FSDP's all-gather / reduce-scatter
hooks sit outside the recomputed region and recomputation reuses the parameters
FSDP already gathered for the backward.  With HF's ``gradient_checkpointing_enable``
the checkpoint runs inside ``Module.__call__`` of the block, i.e. around FSDP's
forward hooks, which FSDP2 then has to special-case during recomputation; it also
only exists for HF models.  The wrapper adds ``_checkpoint_wrapped_module`` to
parameter names, which ``torch.distributed.checkpoint.state_dict`` strips, so
checkpoints are interchangeable with and without it (tested).

Launch one process per GPU with torchrun; on CPU the same code runs with the gloo
backend (that is how the tests run it, two processes on one machine).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from rlvr.learner.settings import LearnerSettings

__all__ = [
    "init_distributed",
    "make_mesh",
    "decoder_layers",
    "mixed_precision_policy",
    "shard_model",
    "DataParallel",
    "reduce_device",
    "shard_rows",
    "fsdp_update_policy",
]

MixedPrecision = Literal["bf16", "none"]


# --------------------------------------------------------------------------- process group
def init_distributed(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the process group that ``torchrun`` describes in the environment.

    ``backend`` defaults to ``nccl`` when CUDA is available, else ``gloo``; a group
    that already exists keeps its backend (gloo: CPU ranks, even on a GPU machine).
    On CUDA, ``LOCAL_RANK`` picks this process's GPU.  Returns
    ``(rank, world_size, device)``; calling it again is harmless.
    """
    if dist.is_initialized():  # an existing group decides: nccl means GPUs, gloo means CPU
        backend = dist.get_backend()
    use_cuda = torch.cuda.is_available() and backend != "gloo"
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if use_cuda else "gloo"), device_id=device if use_cuda else None)
    return dist.get_rank(), dist.get_world_size(), device


def make_mesh(device_type: str | None = None, world_size: int | None = None):
    """A 1-D device mesh over all ranks (pure FSDP; no tensor parallelism)."""
    from torch.distributed.device_mesh import init_device_mesh

    if device_type is None:
        device_type = "cuda" if dist.get_backend() == "nccl" else "cpu"
    return init_device_mesh(device_type, (world_size or dist.get_world_size(),))


# --------------------------------------------------------------------------- sharding
def decoder_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of the model's repeated transformer blocks, outermost only.

    Uses the HF ``_no_split_modules`` class names (e.g. ``LlamaDecoderLayer``),
    which every HF causal LM declares for exactly this purpose.
    """
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} declares no _no_split_modules: cannot find its decoder blocks")
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if type(module).__name__ in names and not any(name.startswith(p + ".") for p, _ in found):
            found.append((name, module))
    if not found:
        raise ValueError(f"no module of {sorted(names)} in {type(model).__name__}")
    return found


def mixed_precision_policy(mixed_precision: MixedPrecision):
    """``bf16``: compute and all-gather in bf16, reduce gradients in fp32; ``none``: parameter dtype throughout."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if mixed_precision == "none":
        return MixedPrecisionPolicy()
    raise ValueError(f"mixed_precision must be 'bf16' or 'none', not {mixed_precision!r}")


def _apply_activation_checkpointing(model: nn.Module, layers: list[tuple[str, nn.Module]]) -> list[nn.Module]:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    from rlvr.models.matmul import checkpoint_context

    wrapped = []
    for name, layer in layers:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        # recomputed under the forward's matmul backend (model.matmul), which the backward pass does not carry
        w = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT, context_fn=checkpoint_context)
        setattr(parent, child, w)  # ModuleList children are registered under "0", "1", ...
        wrapped.append(w)
    return wrapped


def shard_model(model: nn.Module, mesh=None, *, mixed_precision: MixedPrecision = "bf16",
                activation_checkpointing: bool = False, reshard_after_forward: bool = True) -> nn.Module:
    """Apply FSDP2 in place: one group per decoder block, then the root; returns ``model``.

    Args:
        mesh: a 1-D ``DeviceMesh`` (default: all ranks, :func:`make_mesh`).  The
            parameters move to the mesh's device (the current CUDA device, or CPU).
        mixed_precision: ``"bf16"`` (bf16 forward/backward and all-gathers, fp32
            gradient reduce-scatter; weights and AdamW state stay fp32) or ``"none"``.
        activation_checkpointing: recompute each block's activations in backward
            (``checkpoint_wrapper``, non-reentrant; see the module docstring).
        reshard_after_forward: free gathered parameters after each block's forward
            and gather again in backward (less memory, one more all-gather).

    Build the optimizer *after* this call: it must hold the sharded parameters.
    """
    from torch.distributed.fsdp import fully_shard

    mesh = mesh if mesh is not None else make_mesh()
    policy = mixed_precision_policy(mixed_precision)
    layers = decoder_layers(model)
    blocks = _apply_activation_checkpointing(model, layers) if activation_checkpointing else [m for _, m in layers]
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    return model


# --------------------------------------------------------------------------- learner
def reduce_device(group=None) -> torch.device:
    """Where tensors for a collective must live: the current GPU for nccl, CPU for gloo."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@dataclass
class DataParallel:
    """What :func:`rlvr.learner.update.update_policy` needs to be one rank of a data-parallel step.

    * ``global_sizes`` turns this rank's token / row / micro-batch counts into the
      global token and row counts (loss normalisers) and the largest micro-batch
      count of any rank: FSDP's collectives run inside every forward and backward,
      so every rank must run the same number of passes.
    * ``idle_pass`` is the pass a rank with fewer micro-batches runs instead: a
      one-token forward whose loss is multiplied by 0 (zero gradient, same
      collectives).
    * ``grad_scale`` undoes FSDP's averaging of the reduce-scatter over ranks, so
      the reduced gradient is the *sum* of the per-rank terms, each already
      divided by the global normaliser.
    """

    group: dist.ProcessGroup | None = None

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @property
    def grad_scale(self) -> float:
        return float(self.world_size)

    def _device(self) -> torch.device:
        return reduce_device(self.group)

    def global_sizes(self, tokens: float, rows: int, passes: int) -> tuple[float, int, int]:
        """(tokens summed over ranks clamped to >= 1, rows summed, max passes)."""
        sums = torch.tensor([float(tokens), float(rows)], dtype=torch.float64, device=self._device())
        dist.all_reduce(sums, group=self.group)
        most = torch.tensor([passes], dtype=torch.int64, device=self._device())
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.group)
        return max(float(sums[0]), 1.0), int(sums[1]), int(most[0])

    def idle_pass(self, model, ref_model=None, backward: bool = True) -> None:
        """Forward + backward with zero loss (and a reference forward when the step has one); ``backward=False``:
        the forward alone (a no-grad pass, e.g. the ``logp_old`` pass before several optimizer steps)."""
        device = next(model.parameters()).device
        ids = torch.zeros((1, 1), dtype=torch.long, device=device)
        if ref_model is not None:
            with torch.no_grad():
                ref_model(input_ids=ids, use_cache=False, logits_to_keep=1)
        if not backward:
            with torch.no_grad():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
            return
        out = model(input_ids=ids, use_cache=False, logits_to_keep=1)
        (out.logits.float().sum() * 0.0).backward()

    def combine_metrics(self, local: dict[str, float]) -> dict[str, float]:
        """Token-weighted average of every rank's diagnostics (``grad_norm`` is already global)."""
        everyone: list[dict] = [None] * self.world_size  # type: ignore[list-item]
        dist.all_gather_object(everyone, local, group=self.group)
        from rlvr.learner.update import OBJECTIVE_TERMS

        tokens = sum(m.get("learner_tokens", 0) for m in everyone)
        out: dict[str, float] = {}
        keys = {k for m in everyone for k in m} - {"grad_norm", "learner_tokens", "learner_seqs", "objective_seqs"}
        for k in sorted(keys):
            # a sequence-mean objective (loss, pg_loss, value_loss under a sequence loss_agg): weighted by the rank's
            # sequences; per-first-epoch-token means and per-token means: by the rank's token count
            by = "objective_seqs" if k in OBJECTIVE_TERMS and any("objective_seqs" in m for m in everyone) \
                else "learner_tokens"
            w = sum(m.get(by, 0) for m in everyone if k in m)
            out[k] = sum(m[k] * m.get(by, 0) for m in everyone if k in m) / w if w else 0.0
        out["grad_norm"] = local.get("grad_norm", 0.0)
        out["learner_tokens"] = int(tokens)
        out["learner_seqs"] = int(sum(m.get("learner_seqs", 0) for m in everyone))
        return out


def shard_rows(batch, rank: int, world_size: int):
    """This rank's rows of a batch that every rank holds (rows ``rank, rank + W, ...``).

    Round-robin keeps the per-rank row counts within one of each other.  Zero-advantage
    rows (skipped by the learner when there is no KL/entropy term) are dealt out
    separately from the rest so the learner work, not just the rows, is balanced.
    """
    adv = batch.advantages
    order = torch.cat([(adv != 0).nonzero().flatten(), (adv == 0).nonzero().flatten()])
    mine = order[rank::world_size].sort().values
    return type(batch)(**{k: (None if v is None else v[mine]) for k, v in vars(batch).items()})


def fsdp_update_policy(model, optimizer, batch, settings: LearnerSettings, ref_model=None, *,
                       group=None) -> dict[str, float]:
    """One rank's share of :func:`rlvr.learner.update.update_policy` on an FSDP-sharded ``model``.

    ``batch`` holds this rank's rows only (its own rollouts, or :func:`shard_rows`
    of a batch every rank has).  Every rank must call this, even with no rows.
    The result is the same optimizer step as one process running ``update_policy``
    on the concatenation of all ranks' rows: the token-mean (or sequence-mean)
    normaliser is the global one and gradients are summed over ranks.  Returns the
    diagnostics averaged over all ranks (token-weighted), identical on every rank.
    """
    from rlvr.learner.update import update_policy

    dp = DataParallel(group)
    local = update_policy(model, optimizer, batch, settings, ref_model, dp=dp)  # micro-batches move to the model's device
    return dp.combine_metrics(local)
