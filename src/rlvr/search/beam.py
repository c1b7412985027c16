"""Step-level beam search guided by a process scorer (live: it samples with a rollout engine).

As in Snell et al. 2024 (Sec. 5.2, "beam search" against a PRM) and Yao et al.'s
step-wise search: a *step* is the text up to the step delimiter (default a blank
line, ``"\\n\\n"``).  Per problem:

1. start from one empty beam; sample ``beam_width * expansions`` first steps;
2. score every candidate's steps with the process scorer
   (``scorer.score_steps(problem, steps)``) and aggregate them into one number
   (``min`` / ``last`` / ``mean`` / ``prod``, :func:`~rlvr.search.scorers.aggregate_step_scores`);
3. keep the ``beam_width`` best (finished beams compete too; ties keep the
   earlier candidate); each unfinished kept beam samples ``expansions`` next
   steps, continuing its own text (``engine.generate(..., prefixes=token ids)``);
4. stop when every kept beam has finished (EOS) or after ``max_steps`` steps.

The answer is the best-scoring finished beam (the best beam when none
finished).  ``generated_tokens`` counts every sampled token, pruned candidates
included: the compute the search really spent.

The engine must accept ``prefixes`` in ``generate`` (``rlvr.engines.HFEngine`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvr.engines.base import SamplingParams
from rlvr.search.scorers import AGGREGATIONS, aggregate_step_scores

__all__ = ["BeamConfig", "Beam", "BeamResult", "beam_search", "beam_search_many"]


@dataclass
class BeamConfig:
    """Knobs of :func:`beam_search`."""

    beam_width: int = 4
    """Beams kept after each step."""
    expansions: int = 4
    """Candidate next steps sampled per kept beam (the first step samples ``beam_width * expansions``)."""
    delimiter: str = "\n\n"
    """Text that ends a reasoning step (a stop string for the engine)."""
    aggregate: str = "min"
    """How step scores make a beam's score: min, last, mean or prod."""
    max_steps: int = 8
    """Steps per beam at most (so at most ``max_steps * step_max_tokens`` tokens per beam)."""
    step_max_tokens: int = 128
    """Generated tokens per step at most (a longer step is cut and counts as a step)."""
    temperature: float = 0.8
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.beam_width < 1 or self.expansions < 1 or self.max_steps < 1 or self.step_max_tokens < 1:
            raise ValueError("beam_width, expansions, max_steps and step_max_tokens must be >= 1")
        if self.aggregate not in AGGREGATIONS:
            raise ValueError(f"aggregate must be one of {AGGREGATIONS}, got {self.aggregate!r}")
        if not self.delimiter:
            raise ValueError("the step delimiter must be a non-empty string")


@dataclass
class Beam:
    """One partial solution: its token ids, steps (texts, delimiter included) and step scores."""

    ids: list[int] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    step_scores: list[float] = field(default_factory=list)
    done: bool = False
    score: float = 0.0

    @property
    def text(self) -> str:
        return "".join(self.steps)


@dataclass
class BeamResult:
    """Outcome of one problem's beam search."""

    problem_id: str
    text: str
    score: float
    step_scores: list[float]
    num_steps: int
    finished: bool
    generated_tokens: int
    candidates: int
    """Candidate steps sampled in all (pruned ones included)."""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _strip_delim(step: str, delimiter: str) -> str:
    return step[: -len(delimiter)] if step.endswith(delimiter) else step


def beam_search(engine: Any, scorer: Any, problem: Any, cfg: BeamConfig = BeamConfig(), seed: int | None = None
                ) -> BeamResult:
    """Beam search over reasoning steps for one problem (see the module docstring)."""
    base_seed = cfg.seed if seed is None else seed
    beams = [Beam()]
    tokens = candidates = 0
    for step in range(cfg.max_steps):
        active = [b for b in beams if not b.done]
        if not active:
            break
        n = cfg.beam_width * cfg.expansions if step == 0 else cfg.expansions
        params = SamplingParams(n=n, max_new_tokens=cfg.step_max_tokens, temperature=cfg.temperature,
                                top_p=cfg.top_p, stop=(cfg.delimiter,), seed=base_seed + step)
        groups = engine.generate([problem] * len(active), params, prefixes=[b.ids for b in active])
        pool: list[Beam] = []
        for b, group in zip(active, groups):
            for s in group:
                tokens += s.num_tokens
                candidates += 1
                ended_by_eos = s.finish_reason == "stop" and not s.text.endswith(cfg.delimiter)
                steps = b.steps + [s.text]
                scores = [float(x) for x in scorer.score_steps(problem, [_strip_delim(t, cfg.delimiter)
                                                                         for t in steps])]
                pool.append(Beam(ids=b.ids + list(s.completion_ids), steps=steps, step_scores=scores,
                                 done=ended_by_eos, score=aggregate_step_scores(scores, cfg.aggregate)))
        pool += [b for b in beams if b.done]  # finished beams keep competing for a place
        order = sorted(range(len(pool)), key=lambda i: -pool[i].score)  # stable: ties keep the earlier
        beams = [pool[i] for i in order[: cfg.beam_width]]
    finished = [b for b in beams if b.done]
    best = max(finished or beams, key=lambda b: b.score)
    return BeamResult(problem_id=str(getattr(problem, "id", "")), text=best.text.rstrip(), score=best.score,
                      step_scores=best.step_scores, num_steps=len(best.steps), finished=best.done,
                      generated_tokens=tokens, candidates=candidates)


def beam_search_many(engine: Any, scorer: Any, problems: Sequence[Any], cfg: BeamConfig = BeamConfig(),
                     progress: bool = False) -> list[BeamResult]:
    """:func:`beam_search` on each problem (problem ``i`` seeded with ``cfg.seed + 1000 * i``)."""
    it = enumerate(problems)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, total=len(problems), desc="beam", unit="problem")
    return [beam_search(engine, scorer, p, cfg, seed=cfg.seed + 1000 * i) for i, p in it]
