"""RL algorithms as pure functions on tensors: advantages, KL estimators, policy losses."""

from rlvr.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    drgrpo_advantages,
    get_advantage_estimator,
    group_normalized_advantages,
    group_stats,
    grpo_advantages,
)
from rlvr.algorithms.kl import KL_ESTIMATORS, kl_estimate
from rlvr.algorithms.losses import (
    AGGREGATION_MODES,
    aggregate_loss,
    entropy_from_logits,
    grpo_loss,
    masked_mean,
    masked_sum,
    ppo_clip_loss,
    selective_log_softmax,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "aggregate_loss",
    "drgrpo_advantages",
    "entropy_from_logits",
    "get_advantage_estimator",
    "group_normalized_advantages",
    "group_stats",
    "grpo_advantages",
    "grpo_loss",
    "kl_estimate",
    "masked_mean",
    "masked_sum",
    "ppo_clip_loss",
    "selective_log_softmax",
]
