"""A killable worker process that runs one function call with a hard deadline.

``signal.alarm`` cannot interrupt C code (a sympy/GMP power of ``9^{9^{9^9}}``)
and only works in the main thread, so slow checks run in a child process
instead: :meth:`Sandbox.call` sends the call over a pipe, waits at most
``timeout`` seconds, and on expiry kills the child (SIGKILL) and starts a fresh
one on the next call.  The child is forked when the caller has a single thread
(fast; modules already imported) and started from a fork server otherwise
(forking a multi-threaded process such as a torch trainer is unsafe).

**A worker never outlives its owner.**  A parent killed by SIGTERM or SIGKILL runs no
``atexit`` handler, and a forked worker still holds the parent's end of its pipe, so it
would wait forever.  Each worker therefore asks the kernel (Linux ``prctl(PR_SET_PDEATHSIG,
SIGKILL)``) to kill it when its parent dies, and where that is unavailable or the worker's
parent is a fork server rather than its owner, a watchdog thread in the worker exits it
within half a second of its owner's death.  See :func:`die_with_parent`.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

__all__ = ["Sandbox", "mp_context", "die_with_parent"]

_MEMORY_LIMIT = 4 << 30  # bytes of address space for a worker


def mp_context() -> Any:
    """``fork`` in a single-threaded process, else ``forkserver`` (POSIX) / ``spawn``."""
    methods = mp.get_all_start_methods()
    if threading.active_count() == 1 and "fork" in methods:
        return mp.get_context("fork")
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


_PR_SET_PDEATHSIG = 1
WATCHDOG_INTERVAL = 0.5
"""Seconds between the worker watchdog's checks that its owner is alive."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (pid reused): not ours any more, but alive
        return True
    try:  # a zombie (dead, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return True


def die_with_parent(owner: int | None = None) -> None:
    """Make this (worker) process die with its parent, and with ``owner`` when given.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills it the moment its parent
    exits, however it was killed (checked again right after, in case the parent died first).
    Where that is not available, or the parent is not ``owner`` (a fork server started it),
    also a daemon thread that ``os._exit``s once ``owner`` (or the parent) is gone.
    """
    parent = os.getppid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            pass
    watched = owner if owner is not None else parent
    if os.getppid() != parent or not _alive(watched):  # the parent died before prctl took effect
        os._exit(1)
    if armed and watched == parent:
        # The kernel does it; no thread, so this process stays single-threaded (its own sandbox is then
        # forked, not started from a fork server).
        return

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_INTERVAL)
            if os.getppid() != parent or not _alive(watched):
                os._exit(1)

    threading.Thread(target=watch, name="rlvr-sandbox-watchdog", daemon=True).start()


def _worker_main(conn: Any, warmup: tuple[Callable[..., Any], tuple] | None = None, owner: int | None = None) -> None:
    """Child loop: receive ``(fn, args)``, send back ``("ok", result)`` or ``("error", message)``.

    ``warmup`` (a call made before reporting ready) moves imports and lazy
    initialisation out of the first timed call.  ``owner``: the pid of the process that
    created the sandbox; the worker dies with it and with its own parent.
    """
    die_with_parent(owner)
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
        proc = ctx.Process(target=_worker_main, args=(child, self.warmup, os.getpid()), daemon=True,
                           name="rlvr-math-sandbox")
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
