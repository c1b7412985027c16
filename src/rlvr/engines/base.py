"""The interface every rollout engine implements (HF on CPU today, vLLM on GPU later)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

from rlvr.types import Problem, Sample

__all__ = ["SamplingParams", "RolloutEngine"]


@dataclass
class SamplingParams:
    """How to sample completions."""

    n: int = 1
    """Completions per prompt (the GRPO group size)."""
    max_new_tokens: int = 64
    """Hard cap on generated tokens per completion."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables it)."""
    stop: Sequence[str] = field(default_factory=tuple)
    """Extra stop strings (EOS always stops). The completion is cut after the stop string."""
    seed: int | None = None
    """Seed for this call's sampling (None: continue the engine's generator)."""
    seeds: Sequence[int] | None = None
    """One seed per problem (overrides ``seed``): each problem's samples are drawn from its own
    generator, so they do not depend on which other problems share the call (up to the float
    rounding of the batch layout), and a batched call draws what one call per problem would."""
    ignore_eos: bool = False
    """Keep generating past EOS up to max_new_tokens (benchmarks: fixed-length work)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def check_seeds(self, num_problems: int) -> None:
        """Raise unless ``seeds`` is unset or holds one seed per problem of the call (engines call this)."""
        if self.seeds is not None and len(self.seeds) != num_problems:
            raise ValueError(f"SamplingParams.seeds holds {len(self.seeds)} seeds for {num_problems} problems")


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates completions for problems.

    ``generate`` returns one list per problem, holding ``params.n`` samples in
    group order; each sample carries token ids and per-token log-probs under the
    sampling distribution (logits / temperature, before top-p truncation), which
    is what the learner recomputes for importance ratios.  An engine honours
    ``params.seed`` and, when given, ``params.seeds`` (one generator per problem:
    ``rlvr eval`` relies on it to batch problems and still resume exactly).
    """

    def generate(self, problems: Sequence[Problem], params: SamplingParams) -> list[list[Sample]]: ...

    def sync_weights(self, model) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...
