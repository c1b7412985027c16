"""Pluggable scorers for test-time search: how good is a completion, or each step of one?

A scorer answers two questions (:class:`Scorer`):

* ``score(problem, completion_text) -> float``: an *outcome* score in [0, 1]
  (best-of-N ranks by it, weighted majority sums it);
* ``score_steps(problem, steps) -> list[float]``: one score per reasoning step,
  the score of step ``k`` judging the solution prefix ``steps[:k+1]`` (a
  *process* score; beam search prunes by it).

Implementations:

* :class:`OracleScorer` - a registered verifier against the reference answer.
  It knows the answer, so search with it is an **upper bound** (best-of-N with
  it is pass@N), never a deployable method.
* :class:`~rlvr.rewards.genrm.GenerativeVerifier` (GenRM): a causal LM's probability of answering "Yes" to
  "Is the answer correct?"; reference-free.
* :class:`~rlvr.rewards.models.OutcomeRewardModel` (an ORM) and
  :class:`~rlvr.rewards.models.ProcessRewardModel` (a Math-Shepherd PRM): the
  learned reward models of the reward stage, used here for ranking; they live
  in :mod:`rlvr.rewards.models` (search is inference only and computes no reward).

:func:`load_scorer` builds one from a CLI spec (``oracle``, ``orm:PATH``, ``prm:PATH``, ``genrm:PATH``).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from rlvr.rewards.models import (AGGREGATIONS, OutcomeRewardModel, ProcessRewardModel, aggregate_step_scores,
                                 check_reward_model_dir, orm_input_ids, prm_input_ids, split_steps)
from rlvr.types import problem_text

__all__ = [
    "Scorer",
    "AGGREGATIONS",
    "aggregate_step_scores",
    "split_steps",
    "problem_text",
    "OracleScorer",
    "OutcomeRewardModel",
    "ProcessRewardModel",
    "load_scorer",
    "orm_input_ids",
    "prm_input_ids",
    "check_reward_model_dir",
]

@runtime_checkable
class Scorer(Protocol):
    """Scores completions (outcome) and reasoning steps (process); higher is better, in [0, 1]."""

    name: str

    def score(self, problem: Any, completion: str) -> float: ...

    def score_steps(self, problem: Any, steps: list[str]) -> list[float]: ...


class OracleScorer:
    """A verifier used as the scorer: 1.0 when the completion's answer matches the reference, else 0.0.

    An **upper bound**: it reads the reference answer, which a deployed search
    never has.  ``score_steps`` gives, for each step, the verdict on the text up to
    and including it (so 1.0 only from the step that states a correct answer).
    """

    def __init__(self, verifier: str | Callable = "math", **options: Any):
        from rlvr.verifiers import get_verifier

        self.name = f"oracle:{verifier}" if isinstance(verifier, str) else "oracle"
        self.verify = get_verifier(verifier, **options) if isinstance(verifier, str) else verifier

    def score(self, problem: Any, completion: str) -> float:
        from rlvr.verifiers import safe_verify

        return 1.0 if safe_verify(self.verify, completion, problem.answer).correct else 0.0

    def score_steps(self, problem: Any, steps: list[str], delimiter: str = "\n\n") -> list[float]:
        return [self.score(problem, delimiter.join(steps[: k + 1])) for k in range(len(steps))]


def load_scorer(spec: str, *, verifier: str = "math", delimiter: str = "\n\n", aggregate: str = "min",
                step_tag: str = "ки", device: str = "cpu") -> Scorer:
    """A scorer from a spec: ``oracle`` (the ``verifier`` against the reference), ``orm:PATH``, ``prm:PATH``,
    ``genrm:PATH`` (a causal LM's probability of "Yes", :class:`~rlvr.rewards.genrm.GenerativeVerifier`)."""
    kind, _, path = spec.partition(":")
    if kind == "oracle" and not path:
        return OracleScorer(verifier)
    if kind == "genrm" and path:
        from rlvr.rewards.genrm import GenerativeVerifier, check_causal_lm_dir

        check_causal_lm_dir(path)
        return GenerativeVerifier(path, device=device)
    if kind in ("orm", "prm") and path:
        from pathlib import Path

        if not Path(path).exists():
            raise ValueError(f"scorer {spec!r}: no model directory at {path}")
        if kind == "orm":
            return OutcomeRewardModel(path, device=device)
        return ProcessRewardModel(path, step_tag=step_tag, delimiter=delimiter, aggregate=aggregate, device=device)
    raise ValueError(f"bad scorer {spec!r}: use oracle, orm:PATH, prm:PATH or genrm:PATH")
