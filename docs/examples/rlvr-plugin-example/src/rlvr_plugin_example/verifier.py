"""The ``last_integer`` verifier: the last integer of a completion against the reference."""

import re

from rlvr.types import Verdict
from rlvr.verifiers import register_verifier


@register_verifier("last_integer")
def last_integer(partial: float = 0.0):
    """Score 1.0 when the completion's last integer equals the reference (``partial`` for any other integer).

    A completion without an integer scores 0 with the reason "no integer".
    """

    def verify(completion: str, reference: str) -> Verdict:
        numbers = re.findall(r"-?\d+", completion)
        if not numbers:
            return Verdict(0.0, None, "no integer")
        if int(numbers[-1]) == int(reference):
            return Verdict(1.0, numbers[-1], "equal")
        return Verdict(partial, numbers[-1], "different")

    return verify
