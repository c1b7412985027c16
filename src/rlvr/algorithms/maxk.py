"""max@k advantages for continuous rewards (PKPO; The Best of N Worlds)."""

from __future__ import annotations

import math

import torch
from pydantic import PositiveInt
from torch import Tensor

__all__ = ["maxk_estimate", "maxk_gradient_weights", "maxk_advantages"]


def maxk_estimate(values: Tensor, k: int) -> float:
    """The unbiased estimate of ``max@k = E[max of k i.i.d. rewards]`` from ``n >= k`` samples.

    Walder and Karkhanis 2025 (PKPO, "Pass@K Policy Optimization", the continuous ``maxg@k``): the mean over
    all ``C(n, k)`` size-k subsets of their maximum, which with the rewards sorted ascending,
    ``g_(1) <= ... <= g_(n)``, is ``sum_i C(i - 1, k - 1) / C(n, k) * g_(i)``.
    """
    n = values.numel()
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n ({n}), got {k}")
    g = torch.sort(values.double().reshape(-1)).values.tolist()
    return sum(math.comb(i, k - 1) * x for i, x in enumerate(g)) / math.comb(n, k)


def maxk_gradient_weights(values: Tensor, k: int) -> Tensor:
    """``s_i``, each sample's weight in PKPO's unbiased estimate of ``grad max@k = sum_i s_i grad log p(x_i)``.

    ``s_i`` is the sum of the maxima of the size-k subsets that contain sample ``i``, over ``C(n, k)``: with
    ``i`` at sorted position ``p`` (ascending, 1-based; ties broken by group order),
    ``s_i = [C(p - 1, k - 1) g_(p) + sum_{m > p} C(m - 2, k - 2) g_(m)] / C(n, k)``: subsets whose maximum is
    ``i`` itself, and those whose maximum is a larger ``m`` (``i`` and ``k - 2`` more among the ``m - 2`` others
    below ``m``).  For binary rewards this is PKPO's ``k / n`` for a correct sample and
    ``k / n * rho(n - 1, c, k - 1)`` for a wrong one.
    """
    v = values.double().reshape(-1)
    n = v.numel()
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n ({n}), got {k}")
    order = torch.sort(v, stable=True).indices.tolist()
    g = [float(v[j]) for j in order]
    total = math.comb(n, k)
    out = torch.zeros(n, dtype=torch.float64)
    for p0, j in enumerate(order):  # p0 = p - 1
        above = sum(math.comb(m0 - 1, k - 2) * g[m0] for m0 in range(p0 + 1, n)) if k >= 2 else 0.0
        out[j] = (math.comb(p0, k - 1) * g[p0] + above) / total
    return out


def maxk_advantages(rewards: Tensor, group_size: int, *, k: PositiveInt = 3) -> Tensor:
    """max@k advantages for continuous (or binary) rewards: PKPO's unbiased gradient weights with a
    leave-one-out baseline, scaled so that ``k = 1`` is RLOO.

    Walder and Karkhanis 2025 (PKPO, arXiv 2505.15201) and Bagirov et al. 2025 ("The Best of N Worlds: Aligning
    RL with Best-of-N Sampling via max@k Optimization", arXiv 2510.23393) optimise ``max@k``, the expected best
    of k samples' rewards, the continuous generalisation of pass@k.  Per group of ``n = G`` rewards::

        A_i = (n / k) * (s_i - b_i),   b_i = (k / n) * maxk_estimate(rewards without i, k)

    ``s_i``: :func:`maxk_gradient_weights` (``E[sum_i s_i grad log p(x_i)] = grad max@k``).  ``b_i`` depends only
    on the other samples, so ``E[b_i grad log p(x_i)] = 0`` and the estimate stays unbiased: ``E[sum_i A_i
    grad log p(x_i)] = (n / k) grad max@k`` (a test checks it by exact enumeration).  With ``k = 1``,
    ``A_i = g_i - mean(others)``: RLOO.  Needs ``k <= G - 1``.
    """
    if not isinstance(k, int) or k < 1 or k > group_size - 1:
        raise ValueError(f"need 1 <= k <= group_size - 1 ({group_size - 1}), got {k!r}")
    n = group_size
    r = rewards.reshape(-1, n)
    out = torch.zeros(r.shape, dtype=torch.float64)
    for row in range(r.shape[0]):
        g = r[row].double()
        s = maxk_gradient_weights(g, k)
        for i in range(n):
            others = torch.cat([g[:i], g[i + 1:]])
            out[row, i] = (n / k) * (s[i] - (k / n) * maxk_estimate(others, k))
    return out.reshape(-1).to(rewards.dtype)
