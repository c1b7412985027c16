"""The built-in reward-function kinds, one module each; importing this package registers them in
:data:`rlvr.rewards.rubric.REWARD_FUNCTIONS` (a plugin registers its own the same way)."""

from rlvr.rewards.functions import (arithmetic_steps, calibration, diversity, format, genrm,  # noqa: F401
                                   judge_rubric, length, no_think, patch_similarity, reward_model, rm_ensemble,
                                   translation, unlikeliness, verifier)

__all__ = ["arithmetic_steps", "calibration", "diversity", "format", "genrm", "judge_rubric", "length", "no_think",
           "patch_similarity", "reward_model", "rm_ensemble", "translation", "unlikeliness", "verifier"]
