"""The typed configuration of rejection-sampling fine-tuning (:mod:`rlvr.recipes.rft`: RFT, STaR, RAFT).

Loaded like ``rlvr train``'s (:func:`load_rft_config`).  ``model``, ``task``, ``reward`` and ``eval`` are rlvr
train's sections; ``rft`` says how each round samples and what it keeps; ``train`` is the SFT recipe's, used by
every round's fine-tuning (its ``output_dir`` is the whole run's: round ``i`` writes ``round-<i>/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import model_validator

from rlvr.config import ConfigModel, load_config, option
from rlvr.evaluate.settings import EvalConfig
from rlvr.models.settings import ModelConfig
from rlvr.recipes.sft_config import SFTTrainConfig, check_task_and_verifier
from rlvr.rewards.settings import RewardConfig
from rlvr.tasks.settings import TaskConfig

__all__ = ["RFTSection", "RFTTrainConfig", "RFTConfig", "load_rft_config"]


class RFTSection(ConfigModel):
    """Rounds of sample -> score -> keep -> fine-tune."""

    rounds: int = option(2, "rounds of sampling and fine-tuning; each samples from the previous round's model", ge=1)
    k: int = option(4, "completions sampled per problem", ge=1)
    problems_per_round: int = option(64, "training problems sampled each round, in seeded order that moves on from "
                                         "round to round (0: every training problem)", ge=0)
    temperature: float = option(1.0, "sampling temperature", gt=0)
    top_p: float = option(1.0, "nucleus sampling mass", gt=0, le=1)
    max_new_tokens: int = option(64, "cap on generated tokens per completion", ge=1)
    batch_size: int = option(64, "sequences decoded together", ge=1)
    keep: Literal["accepted", "all"] = option(
        "accepted", "accepted: keep only samples the reward accepts (rejection sampling); all: keep every sample "
                    "(the unfiltered control)")
    min_reward: float | None = option(None, "a sample is accepted when its reward (the reward section's: verifier, "
                                            "rubric, shaping) is at least this (null: when the verifier's verdict "
                                            "is correct)")
    max_per_problem: int = option(1, "kept samples per problem at most (0: every kept one)", ge=0)
    dedupe: bool = option(True, "keep one copy of identical completions of a problem")
    drop_truncated: bool = option(True, "never keep a completion cut at max_new_tokens (it has no end of sequence "
                                        "to learn)")
    sampler: str | None = option(None, "who samples: null: the current policy (RFT / STaR: each round samples from "
                                       "the last round's model); a model name or directory: that teacher samples "
                                       "every round (SFT on teacher samples, usually rounds=1)")
    eval_every_round: bool = option(False, "evaluate held-out accuracy after every round (false: before the first "
                                           "and after the last)")


class RFTTrainConfig(SFTTrainConfig):
    """The SFT recipe's ``train`` section with defaults for fine-tuning on a round's kept samples."""

    epochs: float = option(2.0, "passes over each round's kept samples (when > 0, train.steps is ignored)", ge=0)
    warmup_steps: int = option(0, "linear warm-up steps of each round", ge=0)
    save_every: int = option(0, "checkpoint every N steps within a round (0: at its end and on interrupt)", ge=0)
    output_dir: str = option("runs/rft", "the run's directory: config, metrics, summary, and round-<i>/ (samples.jsonl, "
                                         "the round's SFT run in sft/)")


class RFTConfig(ConfigModel):
    """Rejection-sampling fine-tuning: one section per concern; model, task, reward and eval are rlvr train's."""

    plugins: list[str] = option(None, "modules to import before the config is checked", default_factory=list)
    model: ModelConfig = option(None, "the policy the first round starts from", default_factory=ModelConfig)
    task: TaskConfig = option(None, "training problems (sampled) and held-out problems (evaluated)",
                              default_factory=TaskConfig)
    reward: RewardConfig = option(None, "the reward that accepts samples (verifier, rubric, shaping), and the "
                                        "held-out accuracy's verifier", default_factory=RewardConfig)
    rft: RFTSection = option(None, "sampling, acceptance, rounds", default_factory=RFTSection)
    train: RFTTrainConfig = option(None, "each round's fine-tuning (train.output_dir: the whole run's directory)",
                                   default_factory=RFTTrainConfig)
    eval: EvalConfig = option(None, "held-out accuracy before the first and after the last round",
                              default_factory=EvalConfig)
    max_length: int = option(1024, "tokens per training example at most (as data.max_length of SFT)", ge=1)

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any) -> Any:
        from rlvr.plugins import load_config_plugins

        return load_config_plugins(data)

    def check(self) -> None:
        check_task_and_verifier(self.task, self.reward)
        from rlvr.rewards.pipeline import source_stage

        if source_stage(self.reward.source) == "policy":
            raise ValueError(f"reward.source={self.reward.source} is computed from the policy by the RL learner; "
                             "rejection sampling scores samples with the verifier, a rubric or a collect source")


def load_rft_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RFTConfig:
    """An :class:`RFTConfig` from an optional YAML file and ``key=value`` overrides (defaults < file < overrides)."""
    return load_config(RFTConfig, path, list(overrides))
