"""What the learner reads of a run, as typed records the recipe builds from the run's config.

The user-facing keys are grouped by concept (``algorithm.*``, ``train.*``, ``rollout.*``); the
learner needs a slice of several of them.  :class:`LearnerSettings` is that slice (the loss, the
optimizer steps per batch, the micro-batches) and :class:`ScheduleSettings` the learning-rate
schedule; ``RunConfig.learner_settings()`` / ``schedule_settings()`` make them, and nothing in
:mod:`rlvr.learner` sees the run's config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = ["LearnerSettings", "ScheduleSettings"]


@dataclass(frozen=True, kw_only=True)
class LearnerSettings:
    """One policy (and critic) update: what :func:`rlvr.learner.update.update_policy` and the no-grad passes read.

    Each field names the config key it comes from.
    """

    temperature: float
    """``rollout.temperature``: the policy's logits are divided by it (the learner's policy is the sampler's)."""
    max_new_tokens: int
    """``rollout.max_new_tokens``: the constant of the ``seq_mean_token_sum_norm`` aggregation."""
    micro_batch_size: int
    """``train.micro_batch_size``: rows per forward/backward pass (and per no-grad pass)."""
    micro_batch_tokens: int = 0
    """``train.micro_batch_tokens``: packed micro-batches of this many tokens (0: padded rows)."""
    share_prompts: bool = False
    """``train.share_prompts``: a group's completions share one copy of its prompt in a packed row."""
    logprob_chunk_size: int = 0
    """``train.logprob_chunk_size``: log-probs from the last hidden states this many tokens at a time (0: off)."""
    activation_checkpointing: bool = False
    """``train.activation_checkpointing``: recompute each decoder layer in the backward."""
    autocast: Literal["none", "bfloat16"] = "none"
    """``train.autocast``: mixed precision for the forward/backward."""
    max_grad_norm: float = 1.0
    """``train.max_grad_norm``: gradient clipping norm (0: none)."""
    ppo_epochs: int = 1
    """``algorithm.ppo_epochs``: passes over the batch."""
    mini_batches: int = 1
    """``algorithm.mini_batches``: optimizer steps per pass."""
    skip_zero_advantage: bool = True
    """``algorithm.skip_zero_advantage``: no learner pass over rows whose advantage is 0 (when exact)."""
    policy_loss: str = "ppo_clip"
    """``algorithm.policy_loss``: a name in :data:`rlvr.algorithms.POLICY_LOSSES`."""
    policy_loss_params: dict[str, Any] = field(default_factory=dict)
    """``algorithm.policy_loss_params``."""
    loss_agg: str = "token_mean"
    """``algorithm.loss_agg``: how per-token losses are averaged."""
    clip_low: float = 0.2
    """``algorithm.clip_low``."""
    clip_high: float = 0.2
    """``algorithm.clip_high``."""
    kl_coef: float = 0.0
    """``algorithm.kl_coef``: weight of the KL term (a loss term unless ``kl_in_reward``)."""
    kl_estimator: str = "k3"
    """``algorithm.kl_estimator``."""
    kl_in_reward: bool = False
    """``algorithm.kl_in_reward``: the KL penalty is folded into the reward, not the loss."""
    entropy_coef: float = 0.0
    """``algorithm.entropy_coef``: weight of the entropy bonus."""
    is_correction: str = "none"
    """``algorithm.is_correction``: sampler-vs-learner importance correction."""
    is_params: dict[str, Any] = field(default_factory=dict)
    """``algorithm.is_params``."""
    value_coef: float = 0.5
    """``algorithm.value.coef``: weight of PPO's value loss."""
    value_clip: float | None = 0.2
    """``algorithm.value.clip``: the critic's value clipping (None: unclipped)."""
    shaping_gamma: float = 0.1
    """``guidance.shaping_gamma``: LUFFY's policy shaping of demonstration tokens."""
    entropy_bonus_fraction: float = 1.0
    """``algorithm.entropy_bonus_fraction``: the entropy bonus on the top share of the batch's tokens by entropy."""
    clip_schedule: tuple[tuple[float, float, float], ...] = ()
    """``algorithm.clip_schedule``: ``(from_step, clip_low, clip_high)`` entries, steps from 1, increasing."""

    def at_step(self, step: int) -> "LearnerSettings":
        """These settings for 0-based ``step``: the clip range of the last ``clip_schedule`` entry whose
        ``from_step <= step + 1`` (steps from 1, as the metrics count them), else ``clip_low`` / ``clip_high``."""
        low, high = self.clip_low, self.clip_high
        for from_step, lo, hi in self.clip_schedule:
            if from_step <= step + 1:
                low, high = lo, hi
        if (low, high) == (self.clip_low, self.clip_high):
            return self
        return replace(self, clip_low=float(low), clip_high=float(high))

    @property
    def loss_kl_coef(self) -> float:
        """The KL weight of the loss: 0 when the penalty is in the reward instead."""
        return 0.0 if self.kl_in_reward else self.kl_coef


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings:
    """The learning-rate schedule (``train.warmup_steps``, ``train.steps``, ``train.schedule``)."""

    warmup_steps: int
    total_steps: int
    kind: Literal["constant", "cosine", "linear"] = "constant"
