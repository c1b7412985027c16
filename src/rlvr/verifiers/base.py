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

from numbers import Real
from typing import Any, Callable, TypeVar

from rlvr.registry import Registry
from rlvr.types import ComponentError, Verdict, component_name

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
        RegistryError: (a ValueError) unknown name, or options the factory does not
            accept (the message lists the registered names or the accepted options).
    """
    verifier = VERIFIERS.build(name, **kwargs)
    try:  # messages about it name the registry entry (rlvr.types.component_name)
        verifier.rlvr_name = name
    except (AttributeError, TypeError):  # a bound method or a slotted object: named by its Python name
        pass
    return verifier


def safe_verify(verifier: Verifier, completion: str, reference: str) -> Verdict:
    """``verifier(completion, reference)``, with any exception turned into
    ``Verdict(0.0, None, reason="verifier error: ...")``.

    A result that is not a :class:`Verdict` with a numeric score is a broken verifier, not a wrong
    answer: it raises :class:`~rlvr.types.ComponentError` naming the verifier at its first call.
    """
    try:
        verdict = verifier(completion, reference)
    except Exception as e:  # noqa: BLE001 - a reward must never crash training
        return Verdict(0.0, None, reason=f"verifier error: {type(e).__name__}: {e}"[:500])
    if not isinstance(verdict, Verdict) or not isinstance(verdict.score, Real):
        got = f"{type(verdict).__name__} {verdict!r}"[:120] if not isinstance(verdict, Verdict) else \
            f"a Verdict whose score is {type(verdict.score).__name__} {verdict.score!r}"[:120]
        raise ComponentError(f"verifier {component_name(verifier)} returned {got}: a verifier returns "
                             "rlvr.types.Verdict(score: float, extracted, reason)")
    return verdict
