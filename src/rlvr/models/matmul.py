"""fp32 CPU matmuls through oneDNN (``model.matmul: onednn``).

PyTorch multiplies float32 matrices on CPU with its BLAS, MKL.  On AMD CPUs MKL
does not take its AVX-512 code path (its verbose mode reports the generic
"Intel(R) Architecture processors" kernels), so it reaches about half of the
machine: on this project's 2-vCPU AMD EPYC (Zen 5, full-width AVX-512) a
2048³ GEMM runs at 210–220 GFLOP/s through ``torch.mm`` and 440–490 GFLOP/s through
oneDNN, which ships inside PyTorch (``benchmarks/matmul_backends.py``).

:func:`matmul_backend` is a context manager; with ``"onednn"`` every 2-D
float32 CPU product in it (``F.linear``, ``torch.matmul``/``mm``/``@`` of two
matrices) goes through oneDNN's ``linear`` kernel, forward and backward (the
two gradient products are oneDNN ``linear`` calls too), so a whole training
step (sampler, learner, chunked LM head) uses it.  Everything else is untouched:
other dtypes (bf16 autocast already goes to oneDNN), batched attention
products, GPU tensors.  Results agree with MKL's to float32 rounding (~1e-6
relative), not bitwise, so a seeded run's numbers change when it is turned on.

The autograd engine does not carry torch function modes into the backward pass.
The products recorded in the forward are unaffected (their backward calls oneDNN
itself); activation checkpointing re-enters the mode for its recompute through
:func:`checkpoint_context`; the hand-written backward of the chunked LM head
(``rlvr.algorithms.logprobs``) runs its products with aten.

The kernel is ``torch.ops.mkldnn._linear_pointwise``: the op PyTorch's own
compiler (inductor) emits for CPU linear layers.  It is not public API;
:func:`onednn_available` checks it exists and computes a product correctly
before a run relies on it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["matmul_backend", "onednn_available", "onednn_mm", "checkpoint_context", "MATMUL_BACKENDS"]

MATMUL_BACKENDS = ("aten", "onednn")


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w.T`` by oneDNN (``x`` [m, k], ``w`` [n, k]; strided views are fine)."""
    return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


class _OneDNNMM(torch.autograd.Function):
    """``a @ b`` for 2-D float32 CPU tensors, forward and backward through oneDNN."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _linear(a, b.t())

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad = grad.contiguous()
        ga = _linear(grad, b) if ctx.needs_input_grad[0] else None  # grad @ b.T
        gb = _linear(a.t(), grad.t()) if ctx.needs_input_grad[1] else None  # a.T @ grad
        return ga, gb


def onednn_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (2-D float32 CPU) through oneDNN, differentiable."""
    return _OneDNNMM.apply(a, b)


def _ours(*ts) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device.type == "cpu" for t in ts) \
        and not torch.is_autocast_enabled("cpu")


class _OneDNNMode(TorchFunctionMode):
    _MATMULS = {torch.matmul, torch.mm, torch.Tensor.__matmul__, torch.Tensor.matmul, torch.Tensor.mm}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, w = args[0], args[1]
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            if _ours(x, w) and w.dim() == 2 and x.dim() >= 1 and (b is None or _ours(b)):
                out = onednn_mm(x.reshape(-1, x.shape[-1]), w.t()).reshape(*x.shape[:-1], w.shape[0])
                return out if b is None else out + b
        elif func in self._MATMULS and len(args) == 2 and not kwargs:
            a, b = args
            if _ours(a, b) and a.dim() == 2 and b.dim() == 2:
                return onednn_mm(a, b)
        return func(*args, **kwargs)


def _active() -> bool:
    from torch.overrides import _get_current_function_mode_stack

    return any(isinstance(m, _OneDNNMode) for m in _get_current_function_mode_stack())


def checkpoint_context():
    """``context_fn`` for ``torch.utils.checkpoint`` (non-reentrant): recompute under the backend the forward used.

    The autograd engine does not carry torch function modes into the backward pass, so without
    this an activation-checkpointed layer would be recomputed with aten's kernels after a oneDNN
    forward, and checkpoint's check of the saved tensors fails (aten's ``linear`` saves its two
    operands in the other order)."""
    return contextlib.nullcontext(), (_OneDNNMode() if _active() else contextlib.nullcontext())


def onednn_available() -> str | None:
    """None when oneDNN's linear kernel is present and right on this build; otherwise why not."""
    if not torch.backends.mkldnn.is_available():
        return "this PyTorch build has no oneDNN (mkldnn)"
    try:
        a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        got = _linear(a, a)
    except (RuntimeError, AttributeError) as e:
        return f"torch.ops.mkldnn._linear_pointwise is unavailable ({type(e).__name__}: {e})"
    if not torch.equal(got, a @ a.t()):
        return "torch.ops.mkldnn._linear_pointwise returned a wrong product"
    return None


@contextlib.contextmanager
def matmul_backend(name: str) -> Iterator[None]:
    """Run the block with float32 CPU matmuls through ``name``: ``"aten"`` (PyTorch's default, MKL) or
    ``"onednn"``.  The setting is per thread (a torch function mode): enter it in each thread that computes."""
    if name not in MATMUL_BACKENDS:
        raise ValueError(f"matmul backend must be one of {', '.join(MATMUL_BACKENDS)}, got {name!r}")
    if name == "aten":
        yield
        return
    why = onednn_available()
    if why is not None:
        raise RuntimeError(f"model.matmul=onednn: {why}; use model.matmul=aten")
    with _OneDNNMode():
        yield
