"""Verify many (completion, reference) pairs, optionally across processes.

:func:`verify_batch` builds the named verifier once per worker process (a
``concurrent.futures.ProcessPoolExecutor``) and maps chunks of pairs over the
pool; results come back in input order and equal a sequential run.  Each
worker keeps its own killable sandbox for slow symbolic checks, so the
per-check ``timeout`` of the ``math`` verifier holds in every process.  Every
call goes through :func:`~rlvr.verifiers.base.safe_verify`: one bad pair gives
a False verdict, never an exception.

Verifiers registered with the ``subprocess`` tag (the code verifiers: each check
runs in a sandboxed child process) are mapped over a thread pool instead: the work
happens in the children, so threads run checks in parallel without starting and
importing worker processes.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

from rlvr.types import Verdict
from rlvr.verifiers.base import VERIFIERS, get_verifier, safe_verify

__all__ = ["verify_batch", "iter_verify"]

_WORKER_VERIFIER: Any = None


def _init_worker(name: str, options: dict[str, Any], owner: int | None = None) -> None:
    global _WORKER_VERIFIER
    import rlvr.verifiers  # noqa: F401 - registers the built-in verifiers
    from rlvr.verifiers.math.sandbox import die_with_parent

    die_with_parent(owner)  # a pool worker never outlives the process that started the pool

    _WORKER_VERIFIER = get_verifier(name, **options)


def _run_chunk(pairs: list[tuple[Any, Any]]) -> list[tuple[float, str | None, str]]:
    out = []
    for completion, reference in pairs:
        v = safe_verify(_WORKER_VERIFIER, completion, reference)
        out.append((v.score, v.extracted, v.reason))
    return out


def _options(name: str, timeout: float | None, options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(options)
    if timeout is not None:
        opts["timeout"] = timeout
    get_verifier(name, **opts)  # fail fast on a bad name or option, in the caller
    return opts


def iter_verify(verifier: str, completions: Sequence[Any], references: Sequence[Any], *, workers: int = 1,
                timeout: float | None = None, chunksize: int = 16, **options: Any) -> Iterator[Verdict]:
    """Yield one Verdict per pair, in input order, as chunks finish (for progress bars)."""
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    if workers < 1 or chunksize < 1:
        raise ValueError(f"workers and chunksize must be >= 1, got {workers}, {chunksize}")
    opts = _options(verifier, timeout, options)
    pairs = list(zip(completions, references))
    if workers == 1:
        fn: Callable[[Any, Any], Verdict] = get_verifier(verifier, **opts)
        for completion, reference in pairs:
            yield safe_verify(fn, completion, reference)
        return
    if "subprocess" in VERIFIERS.entry(verifier).tags:
        fn = get_verifier(verifier, **opts)
        with ThreadPoolExecutor(max_workers=workers) as threads:
            yield from threads.map(lambda pair: safe_verify(fn, *pair), pairs)
        return
    from rlvr.verifiers.math.sandbox import mp_context

    chunks = [pairs[i:i + chunksize] for i in range(0, len(pairs), chunksize)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp_context(), initializer=_init_worker,
                             initargs=(verifier, opts, os.getpid())) as pool:
        for chunk in pool.map(_run_chunk, chunks):
            for score, extracted, reason in chunk:
                yield Verdict(score, extracted, reason)


def verify_batch(verifier: str, completions: Sequence[Any], references: Sequence[Any], *, workers: int = 1,
                 timeout: float | None = None, chunksize: int = 16, **options: Any) -> list[Verdict]:
    """Verdicts of ``get_verifier(verifier, timeout=timeout, **options)`` on each pair, in order.

    Args:
        verifier: a registered verifier name (``"math"``, ``"numeric"``...).
        completions, references: equal-length sequences.
        workers: processes to use (threads for ``subprocess``-tagged verifiers); 1 runs in this process.
        timeout: per-check time limit passed to the verifier (None: its default).
        chunksize: pairs sent to a worker at a time.
    """
    return list(iter_verify(verifier, completions, references, workers=workers, timeout=timeout,
                            chunksize=chunksize, **options))
