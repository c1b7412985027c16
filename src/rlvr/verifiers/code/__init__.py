"""Code verifiers: run extracted programs in a sandboxed child process.

Importing this package registers ``"code_humaneval"`` and ``"code_stdio"``.
See :mod:`rlvr.verifiers.code.sandbox` for what the sandbox enforces.
"""

from rlvr.verifiers.code.extract import extract_code
from rlvr.verifiers.code.humaneval import humaneval_path, humaneval_reference, load_humaneval
from rlvr.verifiers.code.sandbox import SandboxLimits, SandboxResult, isolation_level, run_many, run_python
from rlvr.verifiers.code.verifiers import humaneval_verifier, stdio_verifier

__all__ = [
    "extract_code", "humaneval_path", "humaneval_reference", "load_humaneval",
    "SandboxLimits", "SandboxResult", "isolation_level", "run_many", "run_python",
    "humaneval_verifier", "stdio_verifier",
]
