"""Corrections for a noisy verifier (Mansouri et al. / Natarajan et al. 2013 style), as pure tensor functions.

``backward_correction`` makes the expected corrected reward equal the clean one;
``forward_correction_weights`` rescales policy-gradient weights instead.  See
:mod:`rlvr.rewards.noisy` for the noise model, the flips and the rate estimator.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backward_correction", "forward_correction_weights", "check_rates"]


def check_rates(rho0: float, rho1: float) -> None:
    if not (0.0 <= rho0 < 1.0 and 0.0 <= rho1 < 1.0):
        raise ValueError(f"need 0 <= rho0, rho1 < 1, got {rho0}, {rho1}")
    if rho0 + rho1 >= 1.0:
        raise ValueError(f"need rho0 + rho1 < 1 (a verifier better than chance), got {rho0} + {rho1}")


def _float(r: Tensor) -> Tensor:
    r = torch.as_tensor(r)
    return r if r.is_floating_point() else r.to(torch.get_default_dtype())


def backward_correction(observed: Tensor, rho0: float, rho1: float) -> Tensor:
    """Backward correction (Cai et al. 2025, Sec. 3): the unbiased surrogate reward::

        R^ = (R~ - rho0) / (1 - rho0 - rho1)

    Unbiased: ``E[R^ | R] = (rho0 + (1 - rho0 - rho1) R - rho0) / (1 - rho0 - rho1) = R``,
    hence ``E[R^ grad log pi] = E[R grad log pi]``, the clean policy gradient.
    Observed 1 maps to ``(1 - rho0) / (1 - rho0 - rho1) > 1``, observed 0 to
    ``-rho0 / (1 - rho0 - rho1) <= 0``; the variance grows as the channel gets noisier.

    Args:
        observed: rewards in {0, 1}, any shape.

    Returns:
        The corrected rewards, same shape, floating point.
    """
    check_rates(rho0, rho1)
    r = _float(observed)
    return (r - rho0) / (1.0 - rho0 - rho1)


def forward_correction_weights(observed: Tensor, rho1: float) -> Tensor:
    """Forward correction (Cai et al. 2025, Sec. 3, "PGFC"): score-function weights that need only
    the false-negative rate::

        w(R~) = R~ - (1 - rho1),   i.e.  w_1 = rho1  (observed correct),  w_0 = rho1 - 1  (observed wrong)

    and the update is ``sum_i w(R~_i) grad log pi(y_i)`` (use ``w`` as the
    advantage).  Under the channel, ``E[w | R = 1] = (1 - rho1) rho1 + rho1 (rho1 - 1) = 0``
    and ``E[w | R = 0] = rho0 rho1 + (1 - rho0)(rho1 - 1) = -(1 - rho0 - rho1)``, so
    ``E[w | R] = (1 - rho0 - rho1)(R - 1)`` and, since ``E[grad log pi] = 0``,

        E[w grad log pi] = (1 - rho0 - rho1) * E[R grad log pi],

    the clean gradient times a positive constant: the expected update points
    in the clean direction whatever ``rho0`` is.

    Args:
        observed: rewards in {0, 1}, any shape.

    Returns:
        The weights, same shape, floating point.
    """
    if not 0.0 <= rho1 < 1.0:
        raise ValueError(f"need 0 <= rho1 < 1, got {rho1}")
    r = _float(observed)
    return r - (1.0 - rho1)


