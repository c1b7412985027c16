"""Generated test suites scored by their detection rate: pass on the correct implementation, fail on mutants.

The completion's last fenced ```python block is a test suite (asserts calling the function).  It runs in the code
sandbox after the reference's correct implementation, and after each mutant (the reference JSON of
:mod:`rlvr.tasks.suite_writing`: ``{"entry_point", "solution", "mutants"}``).  A run passes when the suite runs to
its end and the harness line carrying that run's random nonce is printed (a suite that exits early, or prints a
forged line, passes nothing).  The score is 0 unless the suite passes on the correct implementation and holds at
least one ``assert``; otherwise the share of mutants on which it fails (SAGA's detection rate).

The implementations are defined from strings compiled under a file name that does not exist, so a suite cannot
read their source (``inspect.getsource`` raises, on the correct one too); a suite can still inspect the function
object (its bytecode constants), which tests the implementation rather than its behaviour: a known limit.
"""

from __future__ import annotations

import json
import secrets

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.code.extract import extract_code
from rlvr.verifiers.code.sandbox import SandboxLimits, run_python

__all__ = ["suite_verifier"]


def _program(implementation: str, suite: str, nonce: str) -> str:
    return (f"exec(compile({implementation!r}, '<implementation>', 'exec'))\n"
            f"{suite}\n"
            f"print('rlvr-suite: ran ' + {nonce!r})\n")


@register_verifier("test_suite", tags={"subprocess"})
def suite_verifier(timeout: float = 5.0, memory_mb: int = 512, max_chars: int = 20_000) -> Verifier:
    """The detection rate of the completion's test suite, 0 unless it passes on the correct implementation."""
    if not timeout > 0 or memory_mb < 64 or max_chars < 1:
        raise ValueError("test_suite verifier: timeout > 0, memory_mb >= 64 and max_chars >= 1 are needed")
    limits = SandboxLimits(timeout=timeout, memory_mb=memory_mb)

    def passes(implementation: str, suite: str) -> bool:
        nonce = secrets.token_hex(16)
        res = run_python(_program(implementation, suite, nonce), "", limits)
        return res.ok and f"rlvr-suite: ran {nonce}" in res.stdout.splitlines()

    def verify(completion: str, reference: str) -> Verdict:
        ref = json.loads(reference)
        if not (isinstance(ref, dict) and isinstance(ref.get("solution"), str) and ref.get("mutants")):
            raise ValueError('the test_suite reference is JSON {"entry_point", "solution", "mutants": [...]}')
        suite = extract_code(completion)
        if suite is None or "assert" not in suite:
            return Verdict(0.0, None, "no ```python block with an assert")
        if len(suite) > max_chars:
            return Verdict(0.0, suite[:80], f"suite longer than {max_chars} characters")
        if not passes(ref["solution"], suite):
            return Verdict(0.0, suite, "the suite fails on the correct implementation")
        killed = sum(not passes(m, suite) for m in ref["mutants"])
        return Verdict(killed / len(ref["mutants"]), suite, f"fails on {killed} of {len(ref['mutants'])} mutants")

    return verify
