"""Selection strategies over stored samples: best-of-N, majority vote, score-weighted majority vote.

Every strategy looks at the first ``N`` samples of a problem (or random
``N``-subsets, see :func:`evaluate_strategy`) and picks one of them as *the*
answer; the problem counts as solved when the picked sample is correct.

* **best-of-N** (e.g. Cobbe et al. 2021, "Training Verifiers to Solve Math Word
  Problems"): the sample with the highest scorer score.  Ties: the earliest
  sample (lowest index) wins.
* **majority vote** / self-consistency (Wang et al. 2022): the most frequent
  extracted answer among samples that have one (``None`` = no answer, never
  votes).  Ties: the answer whose first occurrence comes earliest.  No answer at
  all: nothing is picked and the problem counts as wrong.
* **weighted majority** (Li et al. 2023 / Uesato et al. 2022 "weighted
  voting"): each sample votes for its answer with its score (scores must be >= 0,
  e.g. probabilities); the answer with the largest total wins.  Ties: earliest
  first occurrence.  All-zero totals still pick the earliest answer.

The answer a vote picks is represented by the first sample that gave it; its
verdict is the vote's verdict (the answers are canonical voting keys, so samples
with the same key are judged alike).

All functions are pure: inputs are per-problem rows (answers, scores,
correctness, token counts) such as a :class:`rlvr.evaluate.samples.ScoredSet`
provides, plus a scorer's ``scores`` [P, n].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "STRATEGIES",
    "best_of_n",
    "majority_vote",
    "weighted_majority",
    "StrategyResult",
    "evaluate_strategy",
    "subset_indices",
]


def best_of_n(scores: Sequence[float], answers: Sequence | None = None) -> int:
    """Index of the highest-scoring sample (the earliest on ties); -1 for no samples."""
    s = np.asarray(scores, dtype=float)
    if s.size == 0:
        return -1
    if np.isnan(s).any():
        raise ValueError("best_of_n: scores contain NaN")
    return int(np.argmax(s))  # argmax returns the first maximum


def _vote(answers: Sequence, weights: Sequence[float]) -> int:
    totals: dict = {}
    first: dict = {}
    for j, (a, w) in enumerate(zip(answers, weights)):
        if a is None:
            continue
        if a not in first:
            first[a], totals[a] = j, 0.0
        totals[a] += float(w)
    if not totals:
        return -1
    best = max(totals.values())
    # earliest first occurrence among the tied leaders (dicts keep insertion order = first occurrence)
    return next(first[a] for a, t in totals.items() if t == best)


def majority_vote(answers: Sequence, scores: Sequence[float] | None = None) -> int:
    """Index of the first sample carrying the most frequent non-None answer (-1: no answer at all).

    Ties between answers go to the one that appeared first.  ``scores`` is ignored.
    """
    return _vote(answers, [1.0] * len(answers))


def weighted_majority(answers: Sequence, scores: Sequence[float]) -> int:
    """Index of the first sample carrying the answer with the largest total score (-1: no answer).

    ``scores`` must be finite and >= 0.  Ties go to the answer that appeared first.
    """
    s = np.asarray(scores, dtype=float)
    if len(s) != len(answers):
        raise ValueError(f"weighted_majority: {len(answers)} answers but {len(s)} scores")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("weighted_majority needs finite scores >= 0 (e.g. probabilities)")
    return _vote(answers, s)


STRATEGIES: dict[str, Callable[[Sequence, Sequence[float]], int]] = {
    "best_of_n": lambda answers, scores: best_of_n(scores),
    "majority": majority_vote,
    "weighted_majority": weighted_majority,
}
"""Strategy name -> ``choose(answers_row, scores_row) -> picked index or -1``."""


@dataclass
class StrategyResult:
    """How one strategy did with ``n`` samples per problem."""

    strategy: str
    n: int
    accuracy: float
    """Mean over problems of ``per_problem``."""
    mean_tokens: float
    """Generated tokens per problem, averaged: the sum of ``num_tokens`` over the samples used."""
    per_problem: np.ndarray
    """[P] fraction of draws in which the picked sample was correct (0/1 with ``subsets="first"``)."""
    tokens_per_problem: np.ndarray
    """[P] generated tokens used per problem (mean over draws)."""
    chosen: list = field(default_factory=list)
    """Per problem, the picked sample's index (first draw; -1 when nothing was picked)."""

    def to_dict(self, with_per_problem: bool = False) -> dict:
        d = {"strategy": self.strategy, "n": self.n, "accuracy": self.accuracy, "mean_tokens": self.mean_tokens}
        if with_per_problem:
            d["per_problem"] = [float(x) for x in self.per_problem]
        return d


def subset_indices(num_samples: int, n: int, *, subsets: str = "first", draws: int = 1,
                   seed: int = 0, num_problems: int = 1) -> np.ndarray:
    """Sample indices used per draw and problem: ``[draws, P, n]``.

    ``"first"``: the first ``n`` samples (one draw: the order they were generated).
    ``"random"``: ``draws`` independent random ``n``-subsets per problem
    (``np.random.default_rng(seed)``), so that accuracy at ``n`` is an average
    over subsets rather than the luck of one ordering.
    """
    if not 1 <= n <= num_samples:
        raise ValueError(f"n must be in [1, {num_samples}] (samples stored per problem), got {n}")
    if subsets == "first":
        return np.broadcast_to(np.arange(n), (1, num_problems, n))
    if subsets != "random":
        raise ValueError(f"subsets must be 'first' or 'random', got {subsets!r}")
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((draws, num_problems, num_samples)), axis=-1)[..., :n]


def evaluate_strategy(strategy: str, n: int, *, correct, answers: Sequence[Sequence] | None = None,
                      scores=None, num_tokens=None, subsets: str = "first", draws: int = 16,
                      seed: int = 0) -> StrategyResult:
    """Accuracy and token cost of ``strategy`` with ``n`` samples per problem.

    Args:
        strategy: a name in :data:`STRATEGIES`.
        n: samples per problem the strategy may look at (<= stored samples).
        correct: [P, n_stored] verdict of every stored sample.
        answers: [P][n_stored] canonical extracted answers (votes); needed by the votes.
        scores: [P, n_stored] scorer scores; needed by best-of-N and weighted majority.
        num_tokens: [P, n_stored] generated tokens per sample (default: all zero).
        subsets: ``"first"`` (the first n samples) or ``"random"`` (average over
            ``draws`` random n-subsets, seeded; see :func:`subset_indices`).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    choose = STRATEGIES[strategy]
    correct = np.asarray(correct, dtype=bool)
    P, stored = correct.shape
    if strategy != "best_of_n" and answers is None:
        raise ValueError(f"{strategy} needs the extracted answers")
    if strategy != "majority" and scores is None:
        raise ValueError(f"{strategy} needs scorer scores")
    sc = np.zeros((P, stored)) if scores is None else np.asarray(scores, dtype=float)
    tok = np.zeros((P, stored)) if num_tokens is None else np.asarray(num_tokens, dtype=float)
    if sc.shape != (P, stored) or tok.shape != (P, stored):
        raise ValueError(f"scores {sc.shape} and num_tokens {tok.shape} must match correct {(P, stored)}")
    ans = answers if answers is not None else [[None] * stored for _ in range(P)]
    idx = subset_indices(stored, n, subsets=subsets, draws=draws, seed=seed, num_problems=P)
    hits = np.zeros((idx.shape[0], P))
    chosen = []
    for d in range(idx.shape[0]):
        for i in range(P):
            sub = idx[d, i]
            k = choose([ans[i][j] for j in sub], sc[i, sub])
            pick = int(sub[k]) if k >= 0 else -1
            hits[d, i] = correct[i, pick] if pick >= 0 else 0.0
            if d == 0:
                chosen.append(pick)
    tokens = np.take_along_axis(np.broadcast_to(tok, (idx.shape[0], P, stored)), idx, axis=-1).sum(-1).mean(0)
    per_problem = hits.mean(0)
    return StrategyResult(strategy=strategy, n=n, accuracy=float(per_problem.mean()) if P else 0.0,
                          mean_tokens=float(tokens.mean()) if P else 0.0, per_problem=per_problem,
                          tokens_per_problem=tokens, chosen=chosen)
