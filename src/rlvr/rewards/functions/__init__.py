"""The built-in reward-function kinds, one module each; importing this package registers them in
:data:`rlvr.rewards.rubric.REWARD_FUNCTIONS` (a plugin registers its own the same way)."""

from rlvr.rewards.functions import (calibration, format, judge_rubric, length, reward_model,  # noqa: F401
                                   rm_ensemble, unlikeliness, verifier)

__all__ = ["calibration", "format", "judge_rubric", "length", "reward_model", "rm_ensemble", "unlikeliness",
           "verifier"]
