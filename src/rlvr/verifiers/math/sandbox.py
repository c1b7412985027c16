"""A killable worker process that runs one function call with a hard deadline.

``signal.alarm`` cannot interrupt C code (a sympy/GMP power of ``9^{9^{9^9}}``)
and only works in the main thread, so slow checks run in a child process
instead: :meth:`Sandbox.call` sends the call over a pipe, waits at most
``timeout`` seconds, and on expiry kills the child (SIGKILL) and starts a fresh
one on the next call.  The child is forked when the caller has a single thread
(fast; modules already imported) and started from a fork server otherwise
(forking a multi-threaded process such as a torch trainer is unsafe).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import threading
from typing import Any, Callable

__all__ = ["Sandbox", "mp_context"]

_MEMORY_LIMIT = 4 << 30  # bytes of address space for a worker


def mp_context() -> Any:
    """``fork`` in a single-threaded process, else ``forkserver`` (POSIX) / ``spawn``."""
    methods = mp.get_all_start_methods()
    if threading.active_count() == 1 and "fork" in methods:
        return mp.get_context("fork")
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


def _worker_main(conn: Any, warmup: tuple[Callable[..., Any], tuple] | None = None) -> None:
    """Child loop: receive ``(fn, args)``, send back ``("ok", result)`` or ``("error", message)``.

    ``warmup`` (a call made before reporting ready) moves imports and lazy
    initialisation out of the first timed call.
    """
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    if warmup is not None:
        try:
            warmup[0](*warmup[1])
        except Exception:  # noqa: BLE001 - a failing warm-up only loses its head start
            pass
    conn.send(("ready", os.getpid()))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args))
        except MemoryError:
            reply = ("error", "MemoryError: out of memory")
        except BaseException as e:  # noqa: BLE001 - report everything, keep serving
            reply = ("error", f"{type(e).__name__}: {e}"[:300])
        conn.send(reply)


class Sandbox:
    """One lazily started worker process; calls are serialised by a lock.

    ``warmup``: a ``(fn, args)`` call every new worker makes before it counts as
    started, e.g. a first symbolic comparison, so that importing sympy and its
    caches (~0.7 s here) never eats into a call's ``timeout``, after a restart
    included.
    """

    def __init__(self, startup_timeout: float = 120.0,
                 warmup: tuple[Callable[..., Any], tuple] | None = None) -> None:
        self.startup_timeout = startup_timeout
        self.warmup = warmup
        self._proc: Any = None
        self._conn: Any = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.restarts = 0
        atexit.register(self.close)

    def _start(self) -> None:
        ctx = mp_context()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(child, self.warmup), daemon=True, name="rlvr-math-sandbox")
        proc.start()
        child.close()
        if not parent.poll(self.startup_timeout):
            proc.kill()
            raise RuntimeError("math sandbox worker did not start")
        parent.recv()
        self._proc, self._conn = proc, parent

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(5)
            self.restarts += 1
        if conn is not None:
            conn.close()

    def call(self, fn: Callable[..., Any], args: tuple, timeout: float) -> tuple[str, Any]:
        """``("ok", fn(*args))``, ``("error", message)`` or ``("timeout", None)`` after ``timeout`` s.

        ``fn`` must be importable by name (a module-level function).  Start-up of
        the worker is not counted against ``timeout``.
        """
        if self._pid != os.getpid():  # inherited through fork: the worker belongs to the parent
            self._proc = self._conn = None
            self._lock, self._pid = threading.Lock(), os.getpid()
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._kill()
                self._start()
            try:
                self._conn.send((fn, args))
                if self._conn.poll(timeout):
                    return self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as e:
                self._kill()
                return "error", f"worker died: {type(e).__name__}"
            self._kill()
            return "timeout", None

    def close(self) -> None:
        """Stop the worker (it is restarted by the next call)."""
        if self._pid != os.getpid():
            return
        with self._lock:
            self._kill()
