"""Length reward functions: DAPO's soft overlong punishment, LASER's short-and-correct bonus, a length penalty."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import PositiveInt

from rlvr.rewards.rubric import reward_function
from rlvr.rewards.shaping import soft_overlong_punishment

__all__ = ["overlong_reward", "laser_reward_fn", "length_reward", "kimi_length_reward"]


def _check_overlong(params: dict[str, Any], *, max_new_tokens: int | None = None, **_: Any) -> None:
    if max_new_tokens is not None and params["cache_len"] > max_new_tokens:
        raise ValueError(f"cache_len={params['cache_len']} must be at most rollout.max_new_tokens={max_new_tokens} "
                         "(the window ends there)")


@reward_function("overlong", check=_check_overlong, tags={"bounded"})
def overlong_reward(cache_len: PositiveInt) -> Callable[..., float]:
    """DAPO's soft overlong punishment: a ramp from 0 to -1 over the last ``cache_len`` tokens of the budget.

    DAPO (Yu et al. 2025, Eq. 13; :func:`~rlvr.rewards.shaping.soft_overlong_punishment`):
    0 up to ``max_new_tokens - cache_len`` tokens, then a linear ramp to -1 at ``max_new_tokens``."""

    def score(num_tokens: int, max_new_tokens: int) -> float:
        return float(soft_overlong_punishment([num_tokens], max_new_tokens, cache_len)[0])

    return score


@reward_function("laser", tags={"bounded"})
def laser_reward_fn(target_length: PositiveInt) -> Callable[..., float]:
    """LASER's bonus: 1 for a correct answer of at most ``target_length`` tokens (the weight is LASER's alpha).

    LASER (Liu et al. 2025, Sec. 3: ``R^ = C(y) + alpha 1[y correct] 1[L(y) <= L_T]``): 1 for a correct
    answer of at most ``target_length`` tokens, else 0; the rubric's weight is LASER's ``alpha``, and a
    ``verifier`` function beside it is ``C(y)``."""

    def score(correct: float, num_tokens: int) -> float:
        return float(correct > 0 and num_tokens <= target_length)

    return score


@reward_function("length", tags={"bounded"})
def length_reward() -> Callable[..., float]:
    """Minus the share of the length budget used, ``-|y| / max_new_tokens``.

    In [-1, 0]: with weight ``c``, a penalty of ``c`` for a completion that fills ``rollout.max_new_tokens``."""

    def score(num_tokens: int, max_new_tokens: int) -> float:
        return -num_tokens / max_new_tokens

    return score


@reward_function("kimi_length", scope="group", tags={"bounded"})
def kimi_length_reward() -> Callable[..., Any]:
    """Kimi k1.5's length reward: within a group, shorter correct answers earn more, long wrong ones lose.

    Kimi Team 2025 ("Kimi k1.5: Scaling Reinforcement Learning with LLMs", Sec. 2.3.3): with ``len_i`` the tokens of
    completion i and ``min_len`` / ``max_len`` the group's shortest and longest,
    ``lambda_i = 0.5 - (len_i - min_len) / (max_len - min_len)`` in [-0.5, 0.5], and the reward is ``lambda_i`` for
    a correct completion and ``min(0, lambda_i)`` for a wrong one (a wrong answer is never paid for being short).
    All 0 when every completion has the same length.  Kimi adds it with a weight that is warmed up from 0 during
    training; here the weight is the function's rubric weight.
    """
    import torch

    def score(lengths, correct):
        lo, hi = float(lengths.min()), float(lengths.max())
        if hi == lo:
            return torch.zeros_like(lengths, dtype=torch.float32)
        lam = 0.5 - (lengths.float() - lo) / (hi - lo)
        return torch.where(correct > 0, lam, lam.clamp(max=0.0))

    return score
