"""Training-free sharpening: sampling from the power distribution ``p(x)^alpha`` of the base model by
Metropolis-Hastings (live: it samples with a rollout engine).

Karan and Du 2025 ("Reasoning with Sampling: Your Base Model is Smarter Than You Think", arXiv 2510.14901): the
power distribution ``pi(x) ∝ p(x)^alpha`` (``alpha > 1``) puts more mass on sequences the base model finds likely
as a whole, unlike low-temperature sampling, which sharpens each token's distribution on its own; sampled by
MCMC, it matches RL-trained models on reasoning benchmarks without training.  The chain here:

1. ``x`` is one sample of the base model (temperature 1);
2. each step picks a position ``t`` uniformly in ``x``'s completion and proposes ``x'``: ``x`` up to ``t``, then
   a fresh continuation from the base model (temperature 1, up to the token budget);
3. with that proposal ``q(x' | x) = p(x'_{>=t} | x_{<t})``, so the Metropolis-Hastings ratio is
   ``[p(x')^alpha q(x | x')] / [p(x)^alpha q(x' | x)] = (p(x'_{>=t} | x_{<t}) / p(x_{>=t} | x_{<t}))^(alpha - 1)``,
   computed from the sampler's per-token log-probs of the two suffixes; ``x'`` is accepted with probability
   ``min(1, ratio)``.

The paper interleaves the chain with block-wise generation (the chain runs on each growing prefix); here it runs
on whole completions, ``steps`` proposals per problem.  With ``alpha = 1`` every proposal is accepted (the chain
samples ``p`` itself).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from rlvr.engines.base import SamplingParams

__all__ = ["PowerConfig", "PowerResult", "acceptance", "power_sample", "power_sample_many"]


@dataclass(frozen=True)
class PowerConfig:
    """Knobs of :func:`power_sample`."""

    alpha: float = 4.0
    """The power (``alpha > 1`` sharpens; the paper uses 4)."""
    steps: int = 8
    """Metropolis-Hastings proposals per problem."""
    max_new_tokens: int = 256
    """The completion's token budget (a proposal continues up to it)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.alpha >= 1 and math.isfinite(self.alpha)):
            raise ValueError(f"alpha must be a finite number >= 1, got {self.alpha}")
        if self.steps < 0 or self.max_new_tokens < 1:
            raise ValueError("steps must be >= 0 and max_new_tokens >= 1")


@dataclass
class PowerResult:
    """One problem's chain: its final completion and what it cost."""

    problem_id: str
    text: str
    logprob: float
    """``log p(x)`` of the final completion under the base model."""
    accepted: int
    proposed: int
    generated_tokens: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def acceptance(alpha: float, old_suffix_logprob: float, new_suffix_logprob: float) -> float:
    """``min(1, exp((alpha - 1) (log p(new suffix) - log p(old suffix))))``: the Metropolis-Hastings acceptance
    probability of a suffix proposal drawn from the base model itself."""
    return math.exp(min(0.0, (alpha - 1.0) * (new_suffix_logprob - old_suffix_logprob)))


def power_sample(engine: Any, problem: Any, cfg: PowerConfig = PowerConfig(), seed: int | None = None,
                 rng: random.Random | None = None) -> PowerResult:
    """One chain on ``problem`` (see the module docstring); ``rng`` draws positions and acceptances."""
    base = cfg.seed if seed is None else seed
    rng = rng or random.Random(base)
    first = engine.generate([problem], SamplingParams(n=1, max_new_tokens=cfg.max_new_tokens, temperature=1.0,
                                                      seed=base))[0][0]
    ids, lps, text = list(first.completion_ids), list(first.logprobs), first.text
    tokens, accepted = first.num_tokens, 0
    tok = engine.tokenizer
    for step in range(cfg.steps):
        if not ids:
            break
        t = rng.randrange(len(ids))
        params = SamplingParams(n=1, max_new_tokens=cfg.max_new_tokens - t, temperature=1.0, seed=base + 1 + step)
        prompt_prefix = ids[:t]
        new = engine.generate([problem], params, prefixes=[prompt_prefix])[0][0]
        tokens += new.num_tokens
        a = acceptance(cfg.alpha, sum(lps[t:]), sum(new.logprobs))
        if rng.random() < a:
            ids, lps = prompt_prefix + list(new.completion_ids), lps[:t] + list(new.logprobs)
            text = tok.decode(ids, skip_special_tokens=True)
            accepted += 1
    return PowerResult(str(getattr(problem, "id", "")), text, float(sum(lps)), accepted, cfg.steps, tokens)


def power_sample_many(engine: Any, problems: Sequence[Any], cfg: PowerConfig = PowerConfig(),
                      progress: bool = False) -> list[PowerResult]:
    """:func:`power_sample` on each problem (problem ``i`` seeded with ``cfg.seed + 1000 * i``)."""
    it = enumerate(problems)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, total=len(problems), desc="power sampling", unit="problem")
    return [power_sample(engine, p, cfg, seed=cfg.seed + 1000 * i) for i, p in it]
