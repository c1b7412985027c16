"""The verifier protocol and the registry of named verifiers.

A verifier is any callable ``(completion: str, reference: str) -> Verdict``.
Verifiers are registered by name as *factories*: callables that take keyword
options and return a verifier, so a config can say ``verifier: numeric`` and
pass options through :func:`get_verifier`::

    @register_verifier("exact")
    def exact_verifier(strip: bool = True) -> Verifier:
        def verify(completion: str, reference: str) -> Verdict: ...
        return verify

    verify = get_verifier("exact", strip=False)

Callers that must not crash on a buggy verifier wrap each call in
:func:`safe_verify`.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rlvr.registry import Registry
from rlvr.types import Verdict

__all__ = ["VERIFIERS", "Verifier", "VerifierFactory", "register_verifier", "get_verifier", "list_verifiers", "safe_verify"]

Verifier = Callable[[str, str], Verdict]
"""``verify(completion, reference) -> Verdict``."""

VerifierFactory = Callable[..., Verifier]
"""``factory(**options) -> Verifier``."""

_F = TypeVar("_F", bound=VerifierFactory)

VERIFIERS: Registry[VerifierFactory] = Registry("verifier")
"""Verifier factories by name; an entry's options are its factory's keyword parameters."""


def register_verifier(name: str, **kwargs: Any) -> Callable[[_F], _F]:
    """Decorator registering a verifier factory under ``name`` (returned unchanged).

    ``kwargs`` go to :meth:`rlvr.registry.Registry.register` (``params``, ``doc``).
    Registering a different factory under a name already taken is an error;
    registering the same one again (e.g. a module reload) is allowed.
    """
    return VERIFIERS.register(name, **kwargs)


def list_verifiers() -> list[str]:
    """Registered verifier names, sorted."""
    return VERIFIERS.names()


def get_verifier(name: str, **kwargs: Any) -> Verifier:
    """Build the verifier registered as ``name`` with options ``kwargs``.

    Raises:
        RegistryError (a ValueError): unknown name, or options the factory does not
        accept (the message lists the registered names or the accepted options).
    """
    return VERIFIERS.build(name, **kwargs)


def safe_verify(verifier: Verifier, completion: str, reference: str) -> Verdict:
    """``verifier(completion, reference)``, with any exception (or a non-Verdict result)
    turned into ``Verdict(0.0, None, reason="verifier error: ...")``."""
    try:
        verdict = verifier(completion, reference)
    except Exception as e:  # noqa: BLE001 - a reward must never crash training
        return Verdict(0.0, None, reason=f"verifier error: {type(e).__name__}: {e}"[:500])
    if not isinstance(verdict, Verdict):
        return Verdict(0.0, None, reason=f"verifier error: returned {type(verdict).__name__}, not a Verdict")
    return verdict
