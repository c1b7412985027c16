"""One background asyncio event loop for the environments that talk to async libraries (verifiers, OpenEnv).

``reset`` / ``step`` are synchronous and may run on several threads at once (``step_workers``); the
coroutines of every episode run on one loop in one daemon thread, created on first use and shared by
every environment of the process, so no call creates an event loop of its own and connections made
on the loop (websockets, HTTP clients) stay bound to it.  ``env.timeout_s`` is enforced by the runner
(:mod:`rlvr.rollout.episodes`); :func:`run` takes a timeout of its own for calls made outside it.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Coroutine

__all__ = ["loop", "run", "submit"]

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The shared loop, started on a daemon thread the first time it is asked for."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            new = asyncio.new_event_loop()
            ready = threading.Event()

            def forever() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            threading.Thread(target=forever, name="rlvr-env-asyncio", daemon=True).start()
            ready.wait()
            _loop = new
        return _loop


def submit(coro: Coroutine[Any, Any, Any]) -> Future:
    """Schedule ``coro`` on the shared loop; its concurrent Future (``cancel()`` cancels the coroutine)."""
    return asyncio.run_coroutine_threadsafe(coro, loop())


def run(coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
    """``coro``'s result, run on the shared loop (from any thread but the loop's own); past ``timeout``
    seconds the coroutine is cancelled and TimeoutError raised."""
    fut = submit(coro)
    try:
        return fut.result(timeout)
    except TimeoutError:
        fut.cancel()
        raise TimeoutError(f"no result after {timeout:g} s") from None
