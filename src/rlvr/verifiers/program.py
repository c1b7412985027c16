"""Answers checked by a program: the reference's ``check(answer)`` run in the code sandbox on the extracted answer.

Some answers can only be checked by computing (a construction, one of many valid values, a number with a property):
comparing strings or values with one gold answer refuses right answers.  Tool-augmented verifiers (CoSineVerifier,
Themis) let the checker compute; here the *reference* carries the computation: a Python ``check(answer: str) ->
bool`` written by whoever wrote the problem, run in rlvr's code sandbox (the same isolation and limits as the code
verifiers) with the completion's extracted answer passed as data (a JSON string on stdin, never executed).  The
verdict is 1 only when ``check`` returns exactly ``True``; a checker that raises, prints no verdict, times out or
returns anything else scores 0 with the reason.

Extraction is the last ``\\boxed{}`` of the completion (none: 0).  The reference is the checker's source, or JSON
``{"checker": source}``.
"""

from __future__ import annotations

import json
import secrets

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.code.sandbox import SandboxLimits, run_python
from rlvr.verifiers.numeric import _last_boxed

__all__ = ["program_verifier", "RUNNER"]

RUNNER = """
import json as _rlvr_json, sys as _rlvr_sys
_rlvr_job = _rlvr_json.loads(_rlvr_sys.stdin.read())
_rlvr_ok = check(_rlvr_job["answer"]) is True
print(("rlvr-check: yes " if _rlvr_ok else "rlvr-check: no ") + _rlvr_job["nonce"])
"""
"""Appended to the checker: reads the answer (data) and prints the verdict line with the run's nonce."""


@register_verifier("program", tags={"subprocess"})
def program_verifier(timeout: float = 5.0, memory_mb: int = 512, max_chars: int = 10_000) -> Verifier:
    """1 when the reference's ``check(answer)`` returns ``True`` on the completion's last boxed answer, run in the
    code sandbox; see the module doc."""
    if not timeout > 0 or memory_mb < 64 or max_chars < 1:
        raise ValueError("program verifier: timeout > 0, memory_mb >= 64 and max_chars >= 1 are needed")
    limits = SandboxLimits(timeout=timeout, memory_mb=memory_mb)

    def verify(completion: str, reference: str) -> Verdict:
        source = reference
        try:
            parsed = json.loads(reference)
            if isinstance(parsed, dict) and isinstance(parsed.get("checker"), str):
                source = parsed["checker"]
        except (TypeError, ValueError):
            pass
        if "def check" not in source:
            raise ValueError("the program verifier's reference is Python source defining check(answer) -> bool")
        answer = _last_boxed(completion or "")
        if answer is None or not answer.strip():
            return Verdict(0.0, None, "no boxed answer")
        if len(answer) > max_chars:
            return Verdict(0.0, answer[:80], f"answer longer than {max_chars} characters")
        nonce = secrets.token_hex(16)
        res = run_python(source + "\n" + RUNNER, json.dumps({"answer": answer.strip(), "nonce": nonce}), limits)
        lines = res.stdout.splitlines()
        if res.ok and f"rlvr-check: yes {nonce}" in lines:
            return Verdict(1.0, answer, "the checker accepts it")
        if res.ok and f"rlvr-check: no {nonce}" in lines:
            return Verdict(0.0, answer, "the checker refuses it")
        tail = (res.stderr.strip().splitlines() or [res.status])[-1][:200]
        return Verdict(0.0, answer, f"the checker did not decide ({res.status}: {tail})")

    return verify
