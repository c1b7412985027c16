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

from rlvr.types import Verdict

__all__ = ["Verifier", "VerifierFactory", "register_verifier", "get_verifier", "list_verifiers", "safe_verify"]

Verifier = Callable[[str, str], Verdict]
"""``verify(completion, reference) -> Verdict``."""

VerifierFactory = Callable[..., Verifier]
"""``factory(**options) -> Verifier``."""

_F = TypeVar("_F", bound=VerifierFactory)
_REGISTRY: dict[str, VerifierFactory] = {}


def register_verifier(name: str) -> Callable[[_F], _F]:
    """Decorator registering a verifier factory under ``name`` (returned unchanged).

    Registering a different factory under a name already taken is an error;
    registering the same one again (e.g. a module reload) is allowed.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"verifier name must be a non-empty string, got {name!r}")

    def decorator(factory: _F) -> _F:
        if not callable(factory):
            raise TypeError(f"verifier factory for {name!r} must be callable, got {factory!r}")
        old = _REGISTRY.get(name)
        if old is not None and _origin(old) != _origin(factory):
            raise ValueError(f"a verifier named {name!r} is already registered ({old!r})")
        _REGISTRY[name] = factory
        return factory

    return decorator


def _origin(factory: Any) -> tuple[Any, ...]:
    """Where a factory was defined; a reloaded module's factory has the same origin."""
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    return (module, qualname) if module and qualname else (id(factory),)


def list_verifiers() -> list[str]:
    """Registered verifier names, sorted."""
    return sorted(_REGISTRY)


def get_verifier(name: str, **kwargs: Any) -> Verifier:
    """Build the verifier registered as ``name`` with options ``kwargs``.

    Raises:
        ValueError: unknown name (the message lists the registered ones).
        TypeError: an option the factory does not accept.
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        known = ", ".join(list_verifiers()) or "none"
        raise ValueError(f"unknown verifier {name!r}; registered verifiers: {known}")
    try:
        return factory(**kwargs)
    except TypeError as e:
        raise TypeError(f"bad options for verifier {name!r} {sorted(kwargs)}: {e}") from e


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
