"""The learner's optimizer: AdamW, optionally with its two moments stored in bfloat16.

``train.optimizer``:

- ``adamw``: ``torch.optim.AdamW`` (fp32 moments: 8 bytes per trainable parameter, 1.08 GB for
  SmolLM2-135M);
- ``adamw_bf16``: :class:`AdamWBF16State`, the same update with the first and second moments kept in
  bfloat16 (4 bytes per parameter: half the optimizer state) and written back with stochastic rounding.

Why stochastic rounding. bfloat16 has 8 significant bits, so an exponential moving average
``v <- beta2 * v + (1 - beta2) * g^2`` stored with round-to-nearest loses every change smaller than about
0.4% of ``v``: with ``beta2 = 0.99`` a step whose ``g^2`` is within 0.4 / 0.01 = 40% of ``v`` leaves ``v``
unchanged, a bias that deterministic rounding accumulates. Rounding up with probability equal to the
discarded fraction makes each write unbiased (E[round(x)] = x), the remedy of Zamirai et al. 2020,
"Revisiting BFloat16 Training" (arXiv:2010.06192) and of torchao's ``bf16_stochastic_round``. The
update itself is computed in float32 from the float32 moments of this step (they are rounded only when
stored), so the first step equals fp32 AdamW exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("adamw", "adamw_bf16")


def fp32_to_bf16_stochastic(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Round float32 ``x`` to bfloat16, up or down with probabilities that make the result unbiased.

    A bfloat16 is the top 16 bits of a float32. Adding a uniform random integer in [0, 2^16) to the bit
    pattern and truncating the low 16 bits rounds away from zero (in magnitude) exactly when the random
    number is at least 2^16 minus the discarded bits, i.e. with probability discarded / 2^16.
    """
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32, device=x.device, generator=generator)
    rounded = (bits + noise) & -65536  # 0xFFFF0000 as a signed int32
    return rounded.view(torch.float32).to(torch.bfloat16)  # exact: the low 16 bits are zero


class AdamWBF16State(torch.optim.Optimizer):
    """AdamW (Loshchilov & Hutter 2019, decoupled weight decay) with bfloat16 moments.

    Per parameter, with ``t`` the step and ``m, v`` read from bfloat16 as float32::

        p <- p - lr * wd * p
        m <- beta1 * m + (1 - beta1) * g          v <- beta2 * v + (1 - beta2) * g^2
        p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    then ``m`` and ``v`` are stored back in bfloat16 with :func:`fp32_to_bf16_stochastic`. Parameters
    and gradients keep their own dtype (float32 master weights). ``seed`` makes the rounding
    reproducible: the generator's state is part of ``state_dict`` so a resumed run continues it. Large
    parameters are updated ``chunk`` elements at a time, so the float32 temporaries stay a few MB instead
    of several copies of the 113 MB embedding matrix.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, seed: int = 0, chunk: int = 1 << 20):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid AdamW hyper-parameters: lr={lr}, betas={betas}, eps={eps}, "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.generator = torch.Generator().manual_seed(seed)
        self.chunk = chunk

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamWBF16State does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.bfloat16)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.bfloat16)
                state["step"] += 1
                gen = self.generator if p.device.type == "cpu" else None
                if p.is_contiguous() and p.grad.is_contiguous():  # a slice at a time: small fp32 temporaries
                    views = (p.view(-1), p.grad.view(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1))
                    for s in range(0, p.numel(), self.chunk):
                        self._update(*(v[s:s + self.chunk] for v in views), state["step"], lr, b1, b2, eps, wd, gen)
                else:
                    self._update(p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"], lr, b1, b2, eps,
                                 wd, gen)
        return loss

    @staticmethod
    def _update(p, grad, exp_avg, exp_avg_sq, t, lr, b1, b2, eps, wd, gen) -> None:
        g = grad.float()
        m = exp_avg.float().lerp_(g, 1 - b1)
        v = exp_avg_sq.float().lerp_(g.square(), 1 - b2)
        exp_avg.copy_(fp32_to_bf16_stochastic(m, gen))
        exp_avg_sq.copy_(fp32_to_bf16_stochastic(v, gen))
        denom = v.div_(1 - b2 ** t).sqrt_().add_(eps)
        update = m.div_(1 - b1 ** t).div_(denom)
        if wd:
            p.mul_(1 - lr * wd)
        p.add_(update.to(p.dtype), alpha=-lr)

    def state_dict(self):
        sd = super().state_dict()
        sd["rng_state"] = self.generator.get_state()
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        rng = state_dict.pop("rng_state", None)
        super().load_state_dict(state_dict)  # torch casts floating state to the parameter's dtype ...
        for state in self.state.values():  # ... so store the moments in bfloat16 again (lossless)
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].to(torch.bfloat16)
        if rng is not None:
            self.generator.set_state(rng)


def sparse_update_masks(model: torch.nn.Module, fraction: float, seed: int) -> dict[str, torch.Tensor]:
    """Train a fixed random ``fraction`` of each trainable tensor's entries; the rest never move.

    Adewuyi et al. 2026 ("The Multiple Ticket Hypothesis: Random Sparse Subnetworks Suffice for RLVR", arXiv
    2602.01599): a mask drawn uniformly per tensor, keeping a proportion ``p`` of its entries (here exactly
    ``max(1, round(p * n))`` of its ``n``, a uniform random subset from a generator seeded with ``seed``, so a
    resumed run draws the same masks), and only those entries are trained; at ``p = 1%`` RLVR matched full
    fine-tuning in their runs.  A gradient hook multiplies each gradient by its mask, so AdamW's moments of a
    frozen entry stay exactly 0 and so does its update (with ``weight_decay = 0``, which the config requires).
    Returns the masks by parameter name (bool, the parameter's shape and device).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    gen = torch.Generator().manual_seed(seed)
    masks: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():  # a tied weight appears once: one mask for both uses
        if not p.requires_grad:
            continue
        n = p.numel()
        keep = torch.randperm(n, generator=gen)[:max(1, round(fraction * n))]
        m = torch.zeros(n, dtype=torch.bool)
        m[keep] = True
        mask = m.view(p.shape).to(p.device)
        p.register_hook(lambda grad, mask=mask: grad * mask)
        masks[name] = mask
    return masks


def make_optimizer(params, name: str, lr: float, betas, weight_decay: float, seed: int = 0) -> torch.optim.Optimizer:
    """``train.optimizer`` by name (see the module docstring)."""
    params = list(params)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    if name == "adamw_bf16":
        return AdamWBF16State(params, lr=lr, betas=tuple(betas), weight_decay=weight_decay, seed=seed)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
