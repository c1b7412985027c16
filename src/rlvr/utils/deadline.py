"""Calls with a time limit: nothing a run waits on can hold it forever, and Ctrl-C always gets through.

:func:`call_all` runs calls on daemon threads (at most ``workers`` at once) and gives each ``timeout``
seconds from its start; a call past its limit is given up on (:data:`TIMED_OUT` in its place) and the
others go on.  Python cannot stop a thread, so a call that never returns keeps its thread until the
process ends; being a daemon thread, it never holds up the exit (a ``concurrent.futures`` pool joins its
threads at exit, so one hung call there keeps the process alive after Ctrl-C).

The caller waits in slices of at most :data:`POLL_S` seconds, so a ``KeyboardInterrupt`` (Ctrl-C, or
``_thread.interrupt_main``) reaches it at once: the calls not yet started never start, the running ones are
abandoned.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Sequence

__all__ = ["TIMED_OUT", "POLL_S", "call_all", "call_with_timeout"]

POLL_S = 0.1
"""The longest single wait of the calling thread (how soon it sees a KeyboardInterrupt)."""


class _TimedOut:
    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT: Any = _TimedOut()
"""What :func:`call_all` returns for a call that gave no result within its time limit."""


def call_all(calls: Sequence[Callable[[], Any]], timeout: float, *, workers: int = 1,
             name: str = "rlvr-call") -> list[Any]:
    """Every call's result, in order, or :data:`TIMED_OUT` for one that ran ``timeout`` seconds (0: no limit).

    At most ``workers`` calls run at once, each on its own daemon thread; one past its limit frees its place
    for the next.  An exception raised by a call is raised here at once (the calls not yet started never
    start): callers wrap what may fail in their own handling and let only real bugs through.
    """
    n = len(calls)
    results: list[Any] = [None] * n
    done: queue.SimpleQueue = queue.SimpleQueue()
    running: dict[int, float] = {}  # index -> when it started
    workers, nxt, left = max(1, int(workers)), 0, n

    def work(i: int) -> None:
        try:
            out = (True, calls[i]())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out = (False, e)
        done.put((i, out))

    while left:
        while nxt < n and len(running) < workers:
            running[nxt] = time.monotonic()
            threading.Thread(target=work, args=(nxt,), name=f"{name}-{nxt}", daemon=True).start()
            nxt += 1
        wait = POLL_S
        if timeout:
            wait = min(wait, max(0.0, min(running.values()) + timeout - time.monotonic()))
        try:
            i, (ok, value) = done.get(timeout=wait)
        except queue.Empty:
            pass
        else:
            if i in running:  # not one already given up on
                del running[i]
                if not ok:
                    raise value
                results[i], left = value, left - 1
        if timeout:
            now = time.monotonic()
            for i in [i for i, t0 in running.items() if now - t0 >= timeout]:
                del running[i]
                results[i], left = TIMED_OUT, left - 1
    return results


def call_with_timeout(fn: Callable[[], Any], timeout: float, name: str = "rlvr-call") -> Any:
    """``fn()``, or :data:`TIMED_OUT` when it gives no result within ``timeout`` seconds (0: no limit)."""
    return call_all([fn], timeout, name=name)[0]
