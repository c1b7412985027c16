"""Guards of the training loop: nothing non-finite reaches the weights, and a broken reward is named.

A sample whose reward is NaN or infinite takes its whole group out of the step's update
(:func:`nonfinite_groups`: a group-relative advantage has no meaning with one undefined
member); the step trains on the other groups, its metrics row counts what was left out
(``dropped_groups``, ``nonfinite_rewards``) and one console warning names where the bad
number came from (the verifier, the environment, the reward source, with one example
problem and completion).

A step with nothing finite left to train on, or whose advantages or gradients hold NaN
or infinity, is *skipped*: the optimizer does not step, the step is counted
(``skipped_step`` / ``skipped_steps`` in its metrics row) and one warning names the
source.  After ``train.max_bad_steps`` skipped steps in a row the run stops with
:class:`TrainingDiverged`; the checkpoints already written stay as they are.

The checks read what the loop already has on the host: the rewards and advantages are CPU
tensors, and the gradient norm is the float that clipping computes anyway
(:func:`require_finite_norm`), so a healthy step does no extra device work.

A step in which more than ``reward.warn_verifier_errors`` of the verdicts are verifier
errors (an exception in the verifier, or a check past ``env.timeout_s``: the sample scores
0) warns once, with the first error, when the share first rises above the threshold.  A
verifier that fails on *every* call stops the run with :class:`VerifierFailed` once that
held for ``reward.max_verifier_failed_steps`` steps in a row, or, in a shorter run, for
every step of it by its last step (:meth:`StepGuard.verifier_failures`).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import torch

__all__ = ["NonFiniteError", "TrainingDiverged", "VerifierFailed", "StepGuard", "require_finite_norm",
           "nonfinite_rewards", "nonfinite_groups", "nonfinite_advantages", "verifier_error_share"]

log = logging.getLogger(__name__)

VERIFIER_ERROR = "verifier error"
"""How :func:`rlvr.verifiers.safe_verify` starts the reason of a verifier that raised."""


class NonFiniteError(RuntimeError):
    """A step's rewards, advantages or gradients are not finite; raised before anything reaches the weights."""


class TrainingDiverged(RuntimeError):
    """``train.max_bad_steps`` steps in a row were skipped: the run stops."""


class VerifierFailed(TrainingDiverged):
    """Every verifier call failed for ``reward.max_verifier_failed_steps`` steps in a row: the run stops (as a
    diverged run does: its logs are closed and it ends with an error)."""


def require_finite_norm(norm: float, what: str = "policy") -> None:
    """Raise :class:`NonFiniteError` when a gradient norm (the float clipping returns) is NaN or infinite."""
    if not math.isfinite(norm):
        raise NonFiniteError(f"the {what} gradient norm is {norm} (a non-finite loss or gradient in the learner; "
                             "the rewards and advantages were finite)")


def _short(text: Any, n: int = 80) -> str:
    text = str(text)
    return repr(text if len(text) <= n else text[: n - 3] + "...")


def _example(sample, prompts: Mapping[str, str] | None) -> str:
    prompt = (prompts or {}).get(sample.problem_id)
    shown = f" {_short(prompt)}" if prompt else ""
    return f"problem {sample.problem_id!r}{shown} -> completion {_short(sample.text)}"


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def nonfinite_rewards(rewards: torch.Tensor, samples: Sequence, verdicts: Sequence, *, verifier: str,
                      env: str = "single_turn", source: str = "verifier",
                      prompts: Mapping[str, str] | None = None) -> str | None:
    """None when every reward is finite; else what produced the first non-finite one, with that sample.

    Blame goes to the first of: the verifier (its verdict's score; ``verifier`` is ``reward.verifier``), the
    environment (the episode's return in ``sample.env_return``; ``env`` is ``env.name``), the reward source
    (``source``: ``reward.source``) or reward shaping.
    """
    finite = torch.isfinite(rewards)
    if bool(finite.all()):
        return None
    bad = (~finite).nonzero().flatten().tolist()
    i = bad[0]
    s, v, r = samples[i], verdicts[i], float(rewards[i])
    env_return = s.env_return
    if not _finite(v.score):
        src = f"the verifier (reward.verifier={verifier}) gave score {v.score}"
    elif env_return is not None and not _finite(env_return):
        src = f"the environment (env.name={env}) returned reward {env_return}"
    elif source != "verifier":
        src = f"the reward source (reward.source={source}) gave reward {r}"
    else:
        src = f"reward shaping (reward.* on a finite verdict {v.score}) gave reward {r}"
    return f"non-finite reward on {len(bad)} of {len(rewards)} samples: {src}; e.g. {_example(s, prompts)}"


def nonfinite_groups(rewards: torch.Tensor, group_size: int) -> list[int]:
    """The indices of the groups (``group_size`` consecutive samples each) holding a non-finite reward."""
    bad = ~torch.isfinite(rewards.reshape(-1, group_size))
    return bad.any(-1).nonzero().flatten().tolist()


def nonfinite_advantages(rewards: torch.Tensor, advantages: torch.Tensor, samples: Sequence, *, estimator: str,
                         source: str = "verifier", values: torch.Tensor | None = None,
                         prompts: Mapping[str, str] | None = None) -> str | None:
    """None when the step's rewards (after a policy-based reward source) and advantages are all finite; else
    what went wrong first, with one sample (``estimator``: ``algorithm.advantage``; ``source``:
    ``reward.source``)."""
    if not bool(torch.isfinite(rewards).all()):  # a reward source computed from the policy (in the recipe)
        i = int((~torch.isfinite(rewards)).nonzero()[0, 0])
        return (f"non-finite reward {float(rewards[i])}: the reward source (reward.source={source}) "
                f"computed from the policy; e.g. {_example(samples[i], prompts)}")
    finite = torch.isfinite(advantages)
    if bool(finite.all()):
        return None
    rows = (~finite).reshape(len(advantages), -1).any(-1).nonzero().flatten().tolist()
    i = rows[0]
    cause = f"the advantage estimator (algorithm.advantage={estimator})"
    if values is not None and not bool(torch.isfinite(values).all()):
        cause = "the critic's values (algorithm.advantage=gae)"
    return (f"non-finite advantage on {len(rows)} of {len(advantages)} samples from finite rewards: {cause}; "
            f"e.g. {_example(samples[i], prompts)}")


def verifier_error_share(verdicts: Sequence) -> tuple[float, int | None]:
    """The share of ``verdicts`` that are verifier errors, and the index of the first one (None: none)."""
    errs = [i for i, v in enumerate(verdicts) if str(getattr(v, "reason", "")).startswith(VERIFIER_ERROR)]
    return (len(errs) / len(verdicts) if verdicts else 0.0), (errs[0] if errs else None)


class StepGuard:
    """Counts skipped steps, warns once per skipped step, and stops the run after ``max_bad_steps`` in a row."""

    def __init__(self, max_bad_steps: int, warn_verifier_errors: float = 0.2):
        if max_bad_steps < 1:
            raise ValueError(f"max_bad_steps must be >= 1, got {max_bad_steps}")
        self.max_bad_steps = max_bad_steps
        self.warn_verifier_errors = warn_verifier_errors
        self.in_a_row = 0
        self.skipped = 0
        self._verifier_warned = False
        self.verifier_failed = 0  # steps in a row in which every verifier call failed
        self.steps_seen = 0  # steps checked by verifier_failures in this process

    def verifier_errors(self, step: int, verdicts: Sequence, samples: Sequence, verifier: str,
                        prompts: Mapping[str, str] | None = None) -> None:
        """Warn when the share of verifier errors first rises above ``warn_verifier_errors``."""
        share, first = verifier_error_share(verdicts)
        if share <= self.warn_verifier_errors or first is None:
            self._verifier_warned = False
            return
        if self._verifier_warned:
            return
        self._verifier_warned = True
        n = round(share * len(verdicts))
        log.warning("step %d: %d of %d verdicts (%.0f%%) are verifier errors of reward.verifier=%s, scored 0 "
                    "(warned above reward.warn_verifier_errors=%g; said again only after a step below it): "
                    "first: %s; on %s", step, n, len(verdicts), 100 * share, verifier, self.warn_verifier_errors,
                    verdicts[first].reason, _example(samples[first], prompts))

    def verifier_failures(self, step: int, verdicts: Sequence, samples: Sequence, verifier: str, limit: int,
                          *, last: bool = False, prompts: Mapping[str, str] | None = None) -> str | None:
        """Count the steps in a row in which every verdict is a verifier error; the reason to stop the run
        (:class:`VerifierFailed`) once ``limit`` of them came in a row (0: never), or at the run's ``last`` step
        when every step this process ran was one; else None."""
        self.steps_seen += 1
        share, first = verifier_error_share(verdicts)
        if first is None or share < 1.0:
            self.verifier_failed = 0
            return None
        self.verifier_failed += 1
        n = self.verifier_failed
        if not limit or (n < limit and not (last and n == self.steps_seen)):
            return None
        return (f"the verifier {verifier} failed on every call ({len(verdicts)} of {len(verdicts)} verdicts are "
                f"verifier errors) in {n} step{'s' if n > 1 else ''} in a row, the last step {step} "
                f"(reward.max_verifier_failed_steps={limit}); its first error: {verdicts[first].reason}; on "
                f"{_example(samples[first], prompts)}")

    def dropped(self, step: int, groups: int, total: int, reason: str) -> None:
        """Warn that ``groups`` of ``total`` groups were left out of the step's update for non-finite rewards."""
        log.warning("step %d: %d of %d groups left out of the update (the step trains on the rest): %s", step,
                    groups, total, reason)

    def passed(self) -> None:
        """A step whose update went through."""
        self.in_a_row = 0

    def skip(self, step: int, reason: str) -> None:
        """Count a skipped step and warn."""
        self.in_a_row += 1
        self.skipped += 1
        log.warning("step %d skipped, the weights were not updated: %s (%d in a row; train.max_bad_steps=%d "
                    "stops the run)", step, reason, self.in_a_row, self.max_bad_steps)

    def stop_if_diverged(self, step: int, reason: str) -> None:
        """Raise :class:`TrainingDiverged` once ``max_bad_steps`` steps in a row were skipped."""
        if self.in_a_row >= self.max_bad_steps:
            raise TrainingDiverged(f"{self.in_a_row} steps in a row were skipped for non-finite values "
                                   f"(train.max_bad_steps={self.max_bad_steps}); the last, step {step}: {reason}")

    def metrics(self, skipped: bool) -> dict[str, float]:
        """``skipped_step`` / ``skipped_steps`` for the metrics row (nothing until a step has been skipped)."""
        if not self.skipped:
            return {}
        return {"skipped_step": 1.0 if skipped else 0.0, "skipped_steps": float(self.skipped)}
