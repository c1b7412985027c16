"""Reward-side transformations: noisy-verifier corrections and length shaping (pure functions)."""

from rlvr.rewards.noisy import NoiseRateEstimator, backward_correction, flip_rewards, forward_correction_weights
from rlvr.rewards.shaping import laser_reward, soft_overlong_punishment

__all__ = [
    "NoiseRateEstimator",
    "backward_correction",
    "flip_rewards",
    "forward_correction_weights",
    "laser_reward",
    "soft_overlong_punishment",
]

import rlvr.rewards.functions  # noqa: E402,F401 - registers the built-in reward-function kinds
