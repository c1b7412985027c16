"""Per-token log-probabilities and entropy through the LM head, chunked so no [N, V] tensor is held whole.

The model is Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024,
"Liger Kernel: Efficient Triton Kernels for LLM Training", ``LigerFusedLinearCrossEntropy``):
instead of materialising logits ``z = h W^T / tau`` for every token ([N, V], plus
its log-softmax, its entropy and the gradient of each), walk over chunks of
``chunk_size`` tokens, compute that chunk's logits, reduce them to per-token
numbers at once, and recompute them in the backward pass.  For token ``i`` with
target ``y_i`` and ``p = softmax(z_i)``:

    log p(y_i)  = z_{i, y_i} - logsumexp(z_i)
    H_i         = logsumexp(z_i) - sum_j p_j z_{i, j}

and the gradients with respect to the logits, given upstream ``g_i`` (for log p)
and ``e_i`` (for the entropy):

    d/dz_{i, j} = g_i (1[j = y_i] - p_j)  -  e_i p_j (z_{i, j} - sum_k p_k z_{i, k})

then ``dh = (dz / tau) W`` and ``dW = sum_i (dz_i / tau)^T h_i`` (accumulated over
chunks; a tied embedding receives it through the shared weight).  Peak extra
memory is a few [chunk, V] float32 buffers instead of several [N, V] ones.
The values equal the eager ``log_softmax`` path up to float32 rounding.

Precision: the matmul runs in the weight's dtype, or in the autocast dtype when
autocast is on at the call (as ``nn.Linear`` would), and everything after it in
float32, like the eager path's ``logits.float()``.

Where liger-kernel and a CUDA device are present, :func:`fused_linear_logprobs`
can hand the work to liger's Triton kernel instead (``backend="liger"``; log-probs
only, no temperature-scaled entropy: see :func:`liger_available`).
"""

from __future__ import annotations

import torch

__all__ = ["chunked_linear_logprobs", "fused_linear_logprobs", "liger_available"]


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    dev = hidden.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return weight.dtype


def _acc(cdtype: torch.dtype) -> torch.dtype:
    """Dtype of the logits after the matmul: float32, or float64 for float64 inputs (tests)."""
    return torch.float64 if cdtype == torch.float64 else torch.float32


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, cdtype: torch.dtype, inv_temp: float) -> torch.Tensor:
    z = torch.nn.functional.linear(h.to(cdtype), weight.to(cdtype)).to(_acc(cdtype))
    if inv_temp != 1.0:
        z = z * inv_temp
    return z


class _ChunkedLinearLogprobs(torch.autograd.Function):
    """Forward and backward of :func:`chunked_linear_logprobs`, recomputing each chunk's logits in backward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_temp: float, chunk: int, with_entropy: bool):
        cdtype = _compute_dtype(hidden, weight)
        N = hidden.shape[0]
        acc = _acc(cdtype)
        logp = hidden.new_empty(N, dtype=acc)
        lse = hidden.new_empty(N, dtype=acc)
        ent = hidden.new_empty(N, dtype=acc) if with_entropy else None
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, N, chunk):
                e = min(s + chunk, N)
                z = _chunk_logits(hidden[s:e], weight, cdtype, inv_temp)
                lse[s:e] = torch.logsumexp(z, -1)
                logp[s:e] = z.gather(-1, targets[s:e, None]).squeeze(-1) - lse[s:e]
                if with_entropy:
                    p = torch.softmax(z, -1)
                    ent[s:e] = lse[s:e] - (p * z).sum(-1)
                del z
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.set_materialize_grads(False)  # an unused (detached) entropy arrives as None: no work for it
        ctx.inv_temp, ctx.chunk, ctx.cdtype, ctx.with_entropy = inv_temp, chunk, cdtype, with_entropy
        if with_entropy:
            return logp, ent
        dummy = lse.new_zeros(0)
        ctx.mark_non_differentiable(dummy)
        return logp, dummy

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, targets, lse = ctx.saved_tensors
        inv_temp, chunk, cdtype = ctx.inv_temp, ctx.chunk, ctx.cdtype
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        use_ent = ctx.with_entropy and g_ent is not None and g_ent.numel() > 0
        if g_logp is None and not use_ent:
            return None, None, None, None, None, None
        N = hidden.shape[0]
        grad_h = torch.empty_like(hidden) if need_h else None
        acc = _acc(cdtype)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        w = weight.to(cdtype)
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, N, chunk):
                e = min(s + chunk, N)
                h = hidden[s:e].to(cdtype)
                z = torch.nn.functional.linear(h, w).to(acc)
                if inv_temp != 1.0:
                    z = z * inv_temp
                p = torch.exp(z - lse[s:e, None])  # softmax, from the saved logsumexp
                gl = g_logp[s:e] if g_logp is not None else z.new_zeros(e - s)
                if use_ent:
                    mean_z = (p * z).sum(-1, keepdim=True)
                    # dz = -g p - e p (z - E[z]) , then + g at the target
                    dz = p * (-(gl[:, None]) - g_ent[s:e, None] * (z - mean_z))
                else:
                    dz = p * -(gl[:, None])
                del z, p
                dz.scatter_add_(-1, targets[s:e, None], gl[:, None].to(dz.dtype))
                if inv_temp != 1.0:
                    dz = dz * inv_temp
                dzc = dz.to(cdtype)
                del dz
                if need_h:
                    grad_h[s:e] = (dzc @ w).to(hidden.dtype)
                if need_w and cdtype == acc:
                    grad_w.addmm_(dzc.t(), h)
                elif need_w:
                    grad_w.add_((dzc.t() @ h).to(acc))
                del dzc
        if need_w:
            grad_w = grad_w.to(weight.dtype)
        return grad_h, grad_w, None, None, None, None


def chunked_linear_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                            temperature: float = 1.0, chunk_size: int = 1024, with_entropy: bool = False,
                            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(targets) and (optionally) the entropy under ``softmax(hidden @ weight.T / temperature)``, in chunks.

    ``hidden`` [N, H], ``weight`` [V, H] (the LM head's; a tied input embedding
    is fine: its gradient arrives through this argument), ``targets`` [N] long.
    Returns ``(logp [N] float32, entropy [N] float32 or None)``, both
    differentiable with respect to ``hidden`` and ``weight``.  ``chunk_size``
    tokens' logits exist at a time (forward and backward).  See the module
    docstring for the formulas.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"need hidden [N, H] and weight [V, H], got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must be [N] = [{hidden.shape[0]}], got {tuple(targets.shape)}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if temperature <= 0:
        temperature = 1.0  # greedy sampling: the learner scores under the untempered distribution (as eager does)
    logp, ent = _ChunkedLinearLogprobs.apply(hidden, weight, targets.long(), 1.0 / temperature, int(chunk_size),
                                             bool(with_entropy))
    return logp, (ent if with_entropy else None)


def liger_available(device: torch.device | str) -> bool:
    """True when liger-kernel is importable and ``device`` is a CUDA device (its kernels are Triton)."""
    if torch.device(device).type != "cuda":
        return False
    try:
        import liger_kernel.ops.fused_linear_cross_entropy  # noqa: F401
    except ImportError:
        return False
    return True


def fused_linear_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          temperature: float = 1.0, chunk_size: int = 1024, with_entropy: bool = False,
                          backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`chunked_linear_logprobs`, or liger-kernel's fused kernel on CUDA.

    ``backend``: ``torch`` (the pure-PyTorch chunked path), ``liger`` (liger-kernel's
    ``liger_fused_linear_cross_entropy`` with ``reduction="none"``: per-token
    cross-entropy = -log p; needs CUDA and liger-kernel), or ``auto``.  ``auto``
    uses liger only where it is known to be right for rlvr: no entropy asked for
    (the kernel does not produce it) and no gradient needed (liger computes its
    gradient inside the forward pass assuming a mean/sum reduction, and releases
    with ``reduction="none"`` have not all scaled it per token), i.e. the
    reference model's and the no-grad passes.  Everything else takes the torch path.
    """
    if backend not in ("auto", "torch", "liger"):
        raise ValueError(f"backend must be auto, torch or liger, got {backend!r}")
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    use_liger = backend == "liger" or (backend == "auto" and not grad and not with_entropy
                                       and liger_available(hidden.device))
    if use_liger:
        if with_entropy:
            raise ValueError("backend='liger' computes no entropy: use backend='torch' or 'auto'")
        if not liger_available(hidden.device):
            raise RuntimeError("backend='liger' needs liger-kernel and a CUDA device")
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        scale = 1.0 if temperature in (0.0, 1.0) else 1.0 / temperature
        # liger knows no temperature: scale the input instead, z = (h / tau) W^T
        out = liger_fused_linear_cross_entropy(hidden * scale, weight, targets.long(), reduction="none")
        loss = out[0] if isinstance(out, tuple) else out
        return -loss.float(), None
    return chunked_linear_logprobs(hidden, weight, targets, temperature, chunk_size, with_entropy)
