"""The ``eval`` section of a run: held-out evaluation before, during and after training."""

from __future__ import annotations

from rlvr.config import ConfigModel, option

__all__ = ["EvalConfig", "DEFAULT_MAX_NEW_TOKENS"]

DEFAULT_MAX_NEW_TOKENS = 64
"""The one default cap on generated tokens of an evaluation: ``eval.max_new_tokens``, ``rlvr eval
--max-new-tokens``, ``rlvr.evaluate(max_new_tokens=...)`` (an evaluation whose answers mostly reach it says so)."""


class EvalConfig(ConfigModel):
    num_problems: int = option(256, "held-out problems to evaluate (<= task.num_heldout for arithmetic)", ge=0)
    n: int = option(1, "samples per problem", ge=1)
    temperature: float = option(0.0, "sampling temperature for evaluation (0: greedy)", ge=0)
    max_new_tokens: int = option(DEFAULT_MAX_NEW_TOKENS, "cap on generated tokens at evaluation (rlvr eval warns "
                                                         "when most answers reach it)", ge=1)
    before_training: bool = option(True, "evaluate the initial policy before training")
    after_training: bool = option(True, "evaluate the trained policy after training")
    extra_temperatures: list[float] = option(None, "also evaluate at these temperatures (n samples each)",
                                             default_factory=list)
    seed: int = option(1234, "sampling seed for evaluation")
    batch_size: int = option(0, "HF engine: rows decoded together in evaluation (0: rollout.batch_size); fewer "
                                "rows hold less KV cache at once (long multi-turn episodes)", ge=0)
    every: int = option(0, "also evaluate every N steps during training (greedy-or-eval.temperature, "
                           "logged as heldout_accuracy in metrics.jsonl; 0: off)", ge=0)

