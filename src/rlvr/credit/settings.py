"""What the credit stage reads of a run: a typed record the recipe builds (nothing here sees the run config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.algorithms.gae import GAEParams

__all__ = ["GAEParams", "CreditSettings", "ProcessSettings", "TurnSettings", "DistillSettings"]


@dataclass(frozen=True, kw_only=True)
class ProcessSettings:
    """``reward.process_*``: how a PRM's step scores become token advantages (None fields: off)."""

    transforms: tuple[tuple[str, dict], ...] = ()
    credit: str = "sum"
    credit_params: dict[str, Any] = field(default_factory=dict)
    filter: str = "none"
    filter_params: dict[str, Any] = field(default_factory=dict)
    baseline: str = "steps"
    process_coef: float = 1.0
    outcome_coef: float = 1.0


@dataclass(frozen=True, kw_only=True)
class TurnSettings:
    """``algorithm.turn_credit``: per-turn credit of multi-turn episodes (name in TURN_CREDIT and its options)."""

    name: str = "none"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DistillSettings:
    """``distill.*``: on-policy distillation's per-token advantage (:func:`rlvr.algorithms.distill.distill_advantages`)."""

    coef: float = 1.0
    """``distill.coef``: weight of ``log pi_teacher - log pi_student``."""
    reward_coef: float = 0.0
    """``distill.reward_coef``: weight of the estimator's advantage of the verifier reward (KDRL)."""


@dataclass(frozen=True, kw_only=True)
class CreditSettings:
    """The credit stage's slice of a run; each field names its config key."""

    group_size: int
    """``rollout.group_size``."""
    advantage: str = "grpo"
    """``algorithm.advantage``: the registered outcome estimator."""
    advantage_params: dict[str, Any] = field(default_factory=dict)
    """``algorithm.advantage_params``."""
    kl_coef: float = 0.0
    """``algorithm.kl_coef`` (the KL penalty a token-level estimator places itself)."""
    process: ProcessSettings = field(default_factory=ProcessSettings)
    """``reward.process_*``."""
    turns: TurnSettings = field(default_factory=TurnSettings)
    """``algorithm.turn_credit`` / ``turn_credit_params``."""
    distill: DistillSettings | None = None
    """``distill.*`` when ``distill.teacher`` is set, else None (off)."""
    entropy_token_fraction: float = 1.0
    """``algorithm.entropy_token_fraction``: the top share of tokens by entropy that keep their advantage (1: all)."""
