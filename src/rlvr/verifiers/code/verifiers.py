"""The code verifiers: ``code_humaneval`` (a check function) and ``code_stdio`` (stdin/stdout cases).

References are JSON strings (dicts are accepted too):

* ``code_humaneval``: ``{"test": "<program defining check(candidate)>",
  "entry_point": "<function name>", "prompt": "<optional: the function header
  and docstring>"}``.  The candidate's process runs ``prompt + "\\n" + code``, so the
  code may be a full function or (as in the HumanEval canonical solutions) just the
  body that continues the prompt.  The tests (``prompt + test``) run in a separate
  runner process that calls ``entry_point`` in the candidate's process and receives
  each result as a tree of builtin values of exact builtin types; a pass needs the
  runner's own confirmation (with a per-run nonce the candidate never sees) that
  ``check`` returned.  Exiting early (``sys.exit``, ``os._exit``, ``SystemExit``,
  ``atexit``, killing itself), printing, patching builtins or the test helpers and
  returning objects whose ``__eq__`` always says True therefore all fail.
* ``code_stdio``: ``[{"input": "...", "output": "..."}, ...]``.  Outputs are
  compared line by line after stripping trailing whitespace and trailing blank lines.

The code is the last ```python fenced block of the completion, or the whole
completion when it has none (:func:`~rlvr.verifiers.code.extract.extract_code`).
Every failure, including bad input, is a 0.0 verdict with a reason; the verifiers
never raise.

A failed run's reason starts with its kind (:data:`FAILURE_KINDS`), then a colon and
the detail (the last line of the error): ``wrong answer: AssertionError: ...``,
``runtime error: ZeroDivisionError: division by zero``, ``syntax error: SyntaxError:
invalid syntax``, ``timeout: after 5.0 s`` ...  The reason's head is what the
verdict histograms and the reward-hack monitors bucket on
(:func:`rlvr.rewards.monitors.reason_bucket`), so a step's share of each failure kind
is its ``verdict/<kind>`` metric.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.code.extract import extract_code
from rlvr.verifiers.code.sandbox import SandboxLimits, SandboxResult, package_links, run_many, run_python

__all__ = ["humaneval_verifier", "stdio_verifier", "MAX_CODE_CHARS", "FAILURE_KINDS", "describe_failure"]

MAX_CODE_CHARS = 100_000
"""Longer programs are refused without running."""


FAILURE_KINDS = ("wrong answer", "runtime error", "syntax error", "timeout", "resource limit", "output limit",
                 "incomplete", "sandbox error")
"""Heads of the reasons of a run that failed (besides ``no code found``, ``code too long``, ``bad reference``):

* ``wrong answer``: a test's assertion failed (the candidate returned something else);
* ``runtime error``: an exception other than a failed assertion (in the candidate's code or call);
* ``syntax error``: the code does not compile (``SyntaxError``, ``IndentationError``, ``TabError``);
* ``timeout``: the CPU-time limit, or the wall-clock backstop; ``resource limit``: killed by a signal
  (e.g. the memory limit);
* ``output limit``: more output than the cap; ``incomplete``: exited 0 without the harness's confirmation;
* ``sandbox error``: the sandbox could not start the program (not the candidate's fault).
"""

_SYNTAX = ("SyntaxError", "IndentationError", "TabError")


def _limits(timeout: float, memory_mb: int, max_processes: int = 32, max_output_kb: int = 1024,
            wall_timeout: float | None = None) -> SandboxLimits:
    return SandboxLimits(timeout=timeout, memory_mb=memory_mb, max_processes=max_processes,
                         max_output_bytes=max_output_kb * 1024, wall_timeout=wall_timeout or None)


def _packages(packages: Any) -> tuple[str, ...]:
    names = (packages,) if isinstance(packages, str) else tuple(packages or ())
    package_links(names)  # a package that is not installed fails here, when the verifier is built
    return names


def _load_reference(reference: Any) -> Any:
    if isinstance(reference, (dict, list)):
        return reference
    if not isinstance(reference, str):
        raise ValueError(f"reference must be a JSON string, got {type(reference).__name__}")
    return json.loads(reference)


def _code_or_reason(completion: Any) -> tuple[str | None, str]:
    if not isinstance(completion, str):
        return None, f"completion is not a string ({type(completion).__name__})"
    code = extract_code(completion)
    if code is None:
        return None, "no code found"
    if len(code) > MAX_CODE_CHARS:
        return None, f"code too long ({len(code)} chars > {MAX_CODE_CHARS})"
    if "\x00" in code:
        return None, "code contains NUL bytes"
    return code, ""


def _last_line(text: str, limit: int = 200) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    s = lines[-1].strip() if lines else ""
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _error_kind(last: str) -> str:
    """``wrong answer`` for a failed assertion, ``syntax error`` for code that does not compile, else
    ``runtime error`` (``last``: the error's last line, e.g. ``ZeroDivisionError: division by zero``)."""
    name = last.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    if name == "AssertionError":
        return "wrong answer"
    if name in _SYNTAX:
        return "syntax error"
    return "runtime error"


def describe_failure(res: SandboxResult) -> str:
    """A one-line reason for a failed run: ``<kind>: <detail>`` (see :data:`FAILURE_KINDS`)."""
    if res.status == "timeout":
        return f"timeout: after {res.elapsed:.1f} s (wall clock)"
    if res.status == "cpu_limit":
        return "timeout: CPU time limit"
    if res.status == "output_limit":
        return "output limit: output limit exceeded"
    if res.status == "killed":
        tree = [ln for ln in res.stderr.splitlines() if ln.startswith("rlvr-sandbox: the run's processes together")]
        if tree:
            return f"resource limit: {tree[-1][len('rlvr-sandbox: '):]}"
        return f"resource limit: killed by signal {-(res.returncode or 0)} (memory or CPU limit)"
    if res.status == "setup_error":
        return f"sandbox error: {_last_line(res.stderr)}"
    last = _last_line(res.stderr)
    if not last:
        return f"runtime error: exit code {res.returncode}"
    return f"{_error_kind(last)}: {last}"


@register_verifier("code_humaneval", tags={"subprocess"})
def humaneval_verifier(timeout: float = 10.0, memory_mb: int = 1024, max_processes: int = 32,
                       max_output_kb: int = 1024, packages: tuple[str, ...] = ("numpy",),
                       wall_timeout: float = 0.0) -> Verifier:
    """Score 1.0 when the completion's code passes the reference's ``check(entry_point)``.

    Args:
        timeout: CPU seconds of the run (its own CPU time: the machine's load does not count).
        memory_mb: address-space limit of each process, and the memory of the whole process tree.
        max_processes: processes and threads the run may have at once (namespace mode).
        max_output_kb: stdout + stderr read before the run is stopped.
        packages: installed top-level packages the code may import besides the standard library.
        wall_timeout: wall-clock backstop in seconds (0: ``max(10 * timeout, timeout + 30)``).
    """
    limits = _limits(timeout, memory_mb, max_processes, max_output_kb, wall_timeout)
    packages = _packages(packages)

    def verify(completion: str, reference: str) -> Verdict:
        try:
            code, why = _code_or_reason(completion)
            if code is None:
                return Verdict(0.0, None, why)
            try:
                ref = _load_reference(reference)
                test, entry = ref["test"], ref["entry_point"]
                prompt = ref.get("prompt", "") or ""
                if not all(isinstance(x, str) for x in (test, entry, prompt)) or not entry.isidentifier():
                    raise ValueError("test/entry_point/prompt must be strings, entry_point an identifier")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                return Verdict(0.0, code, f"bad reference: {type(e).__name__}: {str(e)[:200]}")
            nonce = secrets.token_hex(16)
            job = json.dumps({"nonce": nonce, "test": f"{prompt}\n{test}\n"})
            res = run_python(f"{prompt}\n{code}\n", job + "\n", limits, harness={"entry": entry},
                             packages=packages)
            if res.ok and f"rlvr-harness: tests passed {nonce}" in res.stdout.splitlines():
                return Verdict(1.0, code, "passed")
            if res.ok:
                return Verdict(0.0, code, "incomplete: the tests did not run to the end (no confirmation from the "
                                          "harness)")
            return Verdict(0.0, code, describe_failure(res))
        except Exception as e:  # noqa: BLE001 - a reward must never crash training
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {str(e)[:200]}")

    return verify


def _normalise(out: str) -> list[str]:
    lines = [ln.rstrip() for ln in out.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@register_verifier("code_stdio", tags={"subprocess"})
def stdio_verifier(timeout: float = 5.0, memory_mb: int = 1024, partial: bool = False,
                   workers: int | None = None, max_processes: int = 32, max_output_kb: int = 1024,
                   packages: tuple[str, ...] = (), wall_timeout: float = 0.0) -> Verifier:
    """Score the completion's program on ``[{"input", "output"}, ...]`` test cases.

    Args:
        timeout: CPU seconds per test case (its own CPU time: the machine's load does not count).
        memory_mb: address-space limit of each process, and the memory of a case's whole process tree.
        max_processes: processes and threads a run may have at once (namespace mode).
        max_output_kb: stdout + stderr read before a run is stopped.
        partial: score = fraction of cases passed (default: 1.0 only if all pass).
        workers: cases run in parallel on this many threads (default: CPU count).
        packages: installed top-level packages the code may import besides the standard library.
        wall_timeout: wall-clock backstop per case in seconds (0: ``max(10 * timeout, timeout + 30)``).
    """
    limits = _limits(timeout, memory_mb, max_processes, max_output_kb, wall_timeout)
    packages = _packages(packages)

    def verify(completion: str, reference: str) -> Verdict:
        try:
            code, why = _code_or_reason(completion)
            if code is None:
                return Verdict(0.0, None, why)
            try:
                cases = _load_reference(reference)
                if not isinstance(cases, list) or not cases:
                    raise ValueError("expected a non-empty list of {input, output} cases")
                cases = [(str(c.get("input", "")), str(c["output"])) for c in cases]
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                return Verdict(0.0, code, f"bad reference: {type(e).__name__}: {str(e)[:200]}")
            results = run_many([(code, inp) for inp, _ in cases], limits, workers=workers, packages=packages)
            passed, first_fail = 0, ""
            for i, ((_, expected), res) in enumerate(zip(cases, results)):
                if res.ok and _normalise(res.stdout) == _normalise(expected):
                    passed += 1
                elif not first_fail:
                    first_fail = describe_failure(res) if not res.ok else "wrong answer: wrong output"
                    kind, detail = first_fail.split(": ", 1)
                    first_fail = f"{kind}: case {i}: {detail}"
            score = passed / len(cases) if partial else float(passed == len(cases))
            if passed == len(cases):
                reason = f"passed {passed}/{len(cases)}"
            else:  # the failure's kind first (what the verdict histograms bucket on)
                reason = f"{first_fail}; passed {passed}/{len(cases)}"
            return Verdict(score, code, reason)
        except Exception as e:  # noqa: BLE001
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {str(e)[:200]}")

    return verify
