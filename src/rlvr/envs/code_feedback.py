"""Execution feedback: the policy writes a function, the environment runs its tests and says what failed.

Each assistant turn is scored by ``reward.verifier`` (a code verifier: ``code_humaneval``
with a task whose tests report the failing call, as ``code_functions`` does).  A passing
function ends the episode with reward ``discount ** k`` (``k``: 0-based attempt); a
failing one is answered, as a user message, with what the run showed: the first failing
test's input with the expected and the actual output, or the error's last line (a syntax
error, an exception, a timeout), and the policy tries again, up to ``attempts`` times::

    Your function failed a test: evens_sum([3, 8]) returned 11, expected 8.
    Fix it and answer with the complete function in a ```python code block.

Token in, token out like every environment (:mod:`rlvr.rollout.episodes`): the
feedback is rendered with the chat template and appended to the trajectory as ids,
masked out of the loss.  ``info`` records ``correct_at_turn_k`` (first-attempt and
by-last-attempt pass rates in the held-out evaluation) and ``attempts``.  The checks
of one turn's episodes run in parallel on ``workers`` threads (each check is its own
sandboxed child process).
"""

from __future__ import annotations

import os

from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply
from rlvr.types import Problem, Verdict
from rlvr.verifiers import safe_verify

__all__ = ["CodeFeedbackEnvironment", "feedback_message", "RETRY_INSTRUCTION"]

RETRY_INSTRUCTION = "Fix it and answer with the complete function in a ```python code block."
"""The line that ends every feedback message."""

_MAX_DETAIL = 300


def _detail(reason: str) -> str:
    """The part of a code verdict's reason after its kind (and after a bare exception name's prefix)."""
    _, _, rest = reason.partition(": ")
    for prefix in ("AssertionError: ", "RuntimeError: candidate raised "):
        if rest.startswith(prefix):
            rest = rest[len(prefix):]
    rest = rest.strip()
    return rest if len(rest) <= _MAX_DETAIL else rest[: _MAX_DETAIL - 3] + "..."


def feedback_message(verdict: Verdict) -> str:
    """What the policy is told after a failed attempt, from the verdict's reason (``<kind>: <detail>``)."""
    reason = verdict.reason or ""
    kind = reason.split(":", 1)[0].strip()
    detail = _detail(reason)
    if kind == "wrong answer":
        what = f"Your function failed a test: {detail}." if detail and detail != "AssertionError" else \
            "Your function failed a test."
    elif kind in ("runtime error", "syntax error"):
        what = f"Your code raised an error: {detail}."
    elif kind == "timeout":
        what = "Your code ran out of time (an endless loop?)."
    elif kind in ("resource limit", "output limit"):
        what = f"Your code hit a {kind} ({detail})."
    elif reason.startswith("no code"):
        what = "I found no code in your answer."
    else:
        what = f"Your answer was not accepted ({reason[:_MAX_DETAIL]})."
    return f"{what}\n{RETRY_INSTRUCTION}"


class CodeFeedbackEnvironment(Environment):
    """Up to ``attempts`` functions per episode; each failing one gets the run's feedback (see the module doc).

    Reward ``discount ** k`` x the verdict's score for a passing function at attempt ``k`` (0-based), 0 if
    none passes: a later fix is worth less than a first-time pass, so the policy is not paid to submit
    carelessly first.
    """

    def __init__(self, verifier, *, attempts: int, discount: float, max_total_tokens: int, workers: int):
        self.verifier = verifier
        self.discount = discount
        self.limits = Limits(max_turns=attempts, max_total_tokens=max_total_tokens)
        self.step_workers = workers

    def reset(self, problem: Problem) -> EpisodeState:
        return EpisodeState(problem, problem.to_messages())

    def step(self, state: EpisodeState, text: str) -> Reply:
        k = state.turn
        verdict = safe_verify(self.verifier, text, state.problem.answer)
        info = {f"correct_at_turn_{k + 1}": float(verdict.correct), "attempts": 1}
        if verdict.correct:
            return Reply(done=True, reward=self.discount ** k * float(verdict.score), verdict=verdict, info=info)
        if k + 1 >= self.limits.max_turns:
            return Reply(done=True, reward=0.0, verdict=verdict, info=info)
        return Reply(observation=feedback_message(verdict), role="user", info=info)

    def close(self, state: EpisodeState, reason: str) -> Reply:
        return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=f"incomplete: {reason}"))


def _check(params: dict, *, task_options: dict | None = None, **_) -> None:
    """``task_options``: the run's task options; a task that declares ``reveal_safe`` (how many hidden tests
    may be shown before hard-coding them could pass, as ``code_functions`` does) must cover the
    ``attempts - 1`` failing tests the episodes show."""
    if params.get("attempts", 3) < 1:
        raise ValueError("attempts must be >= 1")
    safe = (task_options or {}).get("reveal_safe")
    if safe is not None and params.get("attempts", 3) - 1 > safe:
        raise ValueError(f"attempts={params.get('attempts', 3)} shows up to {params.get('attempts', 3) - 1} failing "
                         f"hidden tests, but the task's hidden tests stay decisive for {safe} shown "
                         f"(task.params.reveal_safe={safe}): a table of the shown cases plus a constant could pass. "
                         f"Set task.params.reveal_safe >= attempts - 1 or fewer attempts")
    if not 0 <= params.get("discount", 0.5) <= 1:
        raise ValueError("discount must be in [0, 1]")
    if params.get("workers", 0) < 0 or params.get("max_total_tokens", 0) < 0:
        raise ValueError("workers and max_total_tokens must be >= 0")


@ENVIRONMENTS.register("code_feedback", tags={"multi_turn"}, check=_check,
                       doc="execution feedback: a failing function is answered with the first failing test (input, "
                           "expected, actual) or the error, up to `attempts` tries, reward discount**attempt; "
                           "params attempts, discount, max_total_tokens, workers")
def code_feedback_env(verifier, tokenizer, *, attempts: int = 3, discount: float = 0.5, max_total_tokens: int = 0,
                      workers: int = 0) -> Environment:
    """``workers``: parallel checks per turn (0: one per CPU core)."""
    _check({"attempts": attempts, "discount": discount, "workers": workers, "max_total_tokens": max_total_tokens})
    return CodeFeedbackEnvironment(verifier, attempts=attempts, discount=discount, max_total_tokens=max_total_tokens,
                                   workers=workers or os.cpu_count() or 1)
