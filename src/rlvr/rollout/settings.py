"""The ``rollout`` and ``guidance`` sections of a run: how completions are sampled, and how all-fail groups are
guided."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from rlvr.config import ConfigModel, option

__all__ = ["RolloutConfig", "GuidanceConfig"]


class RolloutConfig(ConfigModel):
    group_size: int = option(8, "completions sampled per prompt (G)", ge=1)
    max_new_tokens: int = option(64, "cap on generated tokens per completion", ge=1)
    temperature: float = option(1.0, "sampling temperature during training", ge=0)
    top_p: float = option(1.0, "nucleus sampling mass during training", gt=0, le=1)
    batch_size: int = option(64, "sequences decoded together by the engine", ge=1)
    engine: str = option("hf", "rollout engine, a name in rlvr.engines.registry.ENGINES: hf (in-process HF model, "
                               "the CPU default) or vllm (needs the gpu extra)")
    engine_params: dict[str, Any] = option(None, "options of the rollout engine (validated against its registry "
                                                 "entry)", default_factory=dict)
    dtype: Literal["auto", "float32", "bfloat16", "fast"] = option(
        "auto", "sampler precision: auto = the policy's; bfloat16 samples from a bf16 copy synced every step; fast = "
                "bfloat16 on a CUDA GPU or a CPU with native bf16 (AVX-512 BF16, AMX, Arm BF16), else float32 (bf16 "
                "is emulated and many times slower there); the choice is printed at start, the CPU probed once")
    ignore_eos: bool = option(False, "generate past EOS to max_new_tokens (fixed-length benchmarks only)")
    length_schedule: list[list[int]] = option(
        None, "a schedule of the cap on new tokens, [[from_step, cap], ...] (steps from 1, increasing; each cap <= "
              "max_new_tokens, which applies before the first): context-length stages (DeepScaleR, AceReason) or "
              "shrinking budgets (ThinkPrune); [] = max_new_tokens throughout", default_factory=list)
    branches: int = option(0, "samples per group re-sampled from the critical token (the least likely sampled one) of "
                              "an ordinary sample of the group (CURE / ARPO branching; single-turn); 0: off", ge=0)
    sleep_while_learning: bool = option(
        False, "hf engine: free the sampler's own low-precision copy of the weights during the learner step and "
               "refill it at the weight sync (same samples; -0.27 GB peak for the 135M model with a bf16 sampler); "
               "for vLLM see rollout.engine_params.sleep")

    moved = {f"vllm_{k}": f"rollout.engine_params.{k} (with rollout.engine=vllm)"
             for k in ("gpu_memory_utilization", "tensor_parallel_size", "max_model_len", "sleep")}


    @model_validator(mode="after")
    def _branches_leave_samples(self) -> "RolloutConfig":
        if self.branches and self.branches >= self.group_size:
            raise ValueError(f"rollout.branches={self.branches} must be below rollout.group_size={self.group_size} "
                             "(branches start from the group's ordinary samples)")
        return self

    @model_validator(mode="after")
    def _length_schedule(self) -> "RolloutConfig":
        if any(len(e) != 2 for e in self.length_schedule):
            raise ValueError(f"rollout.length_schedule: each entry is [from_step, cap], got {self.length_schedule}")
        steps = [s for s, _ in self.length_schedule]
        if any(s < 1 for s in steps) or any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"rollout.length_schedule: the steps must be >= 1 and strictly increasing, got {steps}")
        bad = [c for _, c in self.length_schedule if not 1 <= c <= self.max_new_tokens]
        if bad:
            raise ValueError(f"rollout.length_schedule: every cap must be in [1, rollout.max_new_tokens="
                             f"{self.max_new_tokens}] (the learner and the memory estimate size for it), got {bad}")
        return self


def length_cap(schedule, step: int, default: int) -> int:
    """The cap on new tokens at 0-based ``step`` under ``rollout.length_schedule`` (``[(from_step, cap), ...]``,
    steps from 1 as the metrics count them): the last entry whose ``from_step <= step + 1``, else ``default``."""
    cap = default
    for from_step, c in schedule:
        if from_step <= step + 1:
            cap = c
    return cap


class GuidanceConfig(ConfigModel):
    """Guidance for groups whose samples all fail (rlvr.rollout.guidance): hints, demonstrations, replay, regeneration."""

    hints: bool = option(False, "re-sample an all-fail group with a growing prefix of the reference solution as "
                                "the start of the answer (not trained on) until a sample succeeds")
    hint_fractions: list[float] = option(None, "hint levels: shares of the solution's tokens revealed, increasing, "
                                               "each in (0, 1)", default_factory=lambda: [0.25, 0.5, 0.75],
                                       min_length=1)
    demonstrations: bool = option(False, "LUFFY: replace the last sample of an all-fail group by the reference "
                                         "solution as an off-policy completion (shaped, unclipped loss; no KL "
                                         "to the reference on its tokens, in the loss or the reward)")
    shaping_gamma: float = option(0.1, "LUFFY policy shaping f(p) = p / (p + gamma) of demonstration (and replayed) "
                                       "tokens", gt=0)
    replay: bool = option(False, "experience replay: keep each problem's latest correct completion by the policy and "
                                 "put it, as an off-policy row (LUFFY's shaped loss), in the place of the last sample "
                                 "of a later group of that problem that all fails (before any demonstration)")
    replay_capacity: int = option(100_000, "replay: problems whose latest success is kept (least recently updated "
                                           "dropped first)", ge=1)
    regenerate: Literal["none", "answer", "critique"] = option(
        "none", "answer again with help, and put a passing answer as an off-policy row of the original prompt in a "
                "failing group: answer (ExPO: the reference answer given, explain it), critique (Critique-GRPO: the "
                "failed attempt shown and called incorrect); none: off")
    regenerate_samples: int = option(2, "regenerate: answers drawn per failing group (the first that passes is used)",
                                     ge=1, le=64)

    synthesize: int = option(0, "problem synthesis from failures (SwS): queue this many new problems with the "
                                "structure of each problem whose group all failed (arithmetic: its operators, fresh "
                                "operands), drawn first in later steps; 0: off", ge=0, le=16)
    synthesize_share: float = option(0.5, "synthesize: the share of a step's prompts queued problems may take at most",
                                     gt=0, le=1)
    synthesize_capacity: int = option(1000, "synthesize: queued problems at most", ge=1)

    @property
    def active(self) -> bool:
        """Whether any guidance is on (hints, demonstrations, replay, regeneration, synthesis)."""
        return self.hints or self.demonstrations or self.replay or self.regenerate != "none" or self.synthesize > 0

    @field_validator("hint_fractions")
    @classmethod
    def _increasing_shares(cls, f: list[float]) -> list[float]:
        if not f or not all(0 < x < 1 for x in f) or any(b <= a for a, b in zip(f, f[1:])):
            raise ValueError(f"guidance.hint_fractions: must be a non-empty, strictly increasing list of shares in "
                             f"(0, 1), got {f}")
        return f

