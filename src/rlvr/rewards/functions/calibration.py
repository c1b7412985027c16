"""The ``calibration`` reward function: RLCR's Brier term for a stated confidence."""

from __future__ import annotations

import math
import re
from typing import Callable

from rlvr.rewards.rubric import reward_function

__all__ = ["calibration_reward", "stated_confidence"]

_NUMBER = r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(%?)\s*"


def stated_confidence(text: str, tag: str = "confidence") -> float | None:
    """The confidence in ``<tag>q</tag>`` as a probability (``0.8`` or ``80%``), or None: no tag, more than one
    (a hedge), not a number, or outside [0, 1]."""
    if not isinstance(text, str):
        return None
    opens = text.count(f"<{tag}>")
    found = re.findall(rf"<{re.escape(tag)}>{_NUMBER}</{re.escape(tag)}>", text)
    if opens != 1 or len(found) != 1:
        return None
    number, percent = found[0]
    q = float(number) / (100.0 if percent else 1.0)
    return q if math.isfinite(q) and 0.0 <= q <= 1.0 else None


@reward_function("calibration", tags={"bounded"})
def calibration_reward(tag: str = "confidence") -> Callable[..., float]:
    """RLCR's calibration term: the negative Brier score of a stated confidence.

    RLCR (Damani et al. 2025, "Beyond Binary Rewards: Training LMs to Reason About Their
    Uncertainty", Eq. 2: ``R = 1[y = y*] - (q - 1[y = y*])^2``): the negative Brier score ``-(q - c)^2`` of the
    confidence ``q`` stated in ``<confidence>q</confidence>``, with ``c`` the verdict; -1 (the worst a stated
    confidence can score) when no single confidence in [0, 1] is stated, so leaving it out never pays.

    A ``verifier`` function beside it (both weight 1) is RLCR's reward.  The Brier score is a proper scoring rule:
    a policy that is right with probability p earns most in expectation by stating exactly p.
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", tag):
        raise ValueError(f"tag must be a plain tag name, got {tag!r}")

    def score(completion: str, correct: float) -> float:
        q = stated_confidence(completion, tag)
        if q is None:
            return -1.0
        return -(q - (1.0 if correct > 0 else 0.0)) ** 2

    return score
