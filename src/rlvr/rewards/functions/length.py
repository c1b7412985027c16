"""Length reward functions: DAPO's soft overlong punishment, LASER's short-and-correct bonus, a length penalty."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import PositiveInt

from rlvr.rewards.rubric import reward_function
from rlvr.rewards.shaping import soft_overlong_punishment

__all__ = ["overlong_reward", "laser_reward_fn", "length_reward"]


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
