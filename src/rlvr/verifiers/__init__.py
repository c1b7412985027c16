"""Verifiers: callables ``(completion, reference) -> Verdict`` and their registry.

Importing this package registers the built-in verifiers: ``numeric`` (boxed /
last number), ``code_humaneval`` and ``code_stdio`` (sandboxed execution),
``format`` and ``instruction`` (IFEval-style constraints), ``judge`` and
``judge_fallback`` (a model judge, alone or behind a rule verifier), ``grounding`` (a box by IoU), ``sql``
(execution accuracy on SQLite), ``smt`` (logical equivalence by Z3), ``program`` (the reference's checker
program in the code sandbox).
``list_verifiers()`` gives the current names.
"""

from rlvr.verifiers.base import (
    VERIFIERS,
    Verifier,
    VerifierFactory,
    get_verifier,
    list_verifiers,
    register_verifier,
    safe_verify,
)
from rlvr.verifiers.numeric import MODES, extract_final_answer, numeric_verifier, parse_number
from rlvr.verifiers import code as _code, format as _format, instruction as _instruction  # noqa: F401,E402 (register)
from rlvr.verifiers import judge as _judge  # noqa: F401,E402 (registers judge, judge_fallback)
from rlvr.verifiers import math as _math  # noqa: F401,E402 (registers math)
from rlvr.verifiers import procedural as _procedural  # noqa: F401,E402 (registers reasoning_gym)
from rlvr.verifiers import grounding as _grounding  # noqa: F401,E402 (registers grounding)
from rlvr.verifiers import sql as _sql  # noqa: F401,E402 (registers sql)
from rlvr.verifiers import smt as _smt  # noqa: F401,E402 (registers smt)
from rlvr.verifiers import program as _program  # noqa: F401,E402 (registers program)
from rlvr.verifiers import test_suite as _test_suite  # noqa: F401,E402 (registers test_suite)

__all__ = [
    "VERIFIERS",
    "Verifier",
    "VerifierFactory",
    "register_verifier",
    "get_verifier",
    "list_verifiers",
    "safe_verify",
    "MODES",
    "extract_final_answer",
    "parse_number",
    "numeric_verifier",
]
