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
parent is a fork server rather than its owner, a watchdog *process* forked by the worker
kills it when its owner dies.  A thread would not do: a worker busy in C code (a GMP
power) holds the GIL, so a watchdog thread never runs, and the fork server's own exit
(which the kernel's parent-death signal waits for) took up to 9 s on a loaded machine.
See :func:`die_with_parent`.
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
    also a watchdog process (:func:`_start_watchdog`) that SIGKILLs this one once ``owner``
    (or the parent) is gone: it needs neither this process's GIL nor the fork server's exit.
    """
    parent = os.getppid()
    armed = _arm_pdeathsig()
    watched = owner if owner is not None else parent
    if os.getppid() != parent or not _alive(watched):  # the parent died before prctl took effect
        os._exit(1)
    if armed and watched == parent:
        return  # the kernel does it
    _start_watchdog(watched)


def _arm_pdeathsig() -> bool:
    """Ask the kernel to SIGKILL this process when its parent (the thread that forked it) exits."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _start_watchdog(watched: int) -> None:
    """Fork a small process that SIGKILLs this one once ``watched`` is gone (and dies with this one).

    It waits on a pidfd of ``watched`` where Linux offers one (woken at its exit, immune to pid
    reuse), else polls every :data:`WATCHDOG_INTERVAL` seconds.  It closes every inherited file
    descriptor first, so it never keeps a pipe of its parent's open.  Called while this process is
    single-threaded (a worker's first step); if ``fork`` fails, a watchdog thread is the fallback.
    """
    me = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid > 0:
        return
    if pid < 0:  # no process to spare: a thread (it cannot act while C code holds the GIL)
        def watch() -> None:
            while _alive(watched):
                time.sleep(WATCHDOG_INTERVAL)
            os._exit(1)

        threading.Thread(target=watch, name="rlvr-sandbox-watchdog", daemon=True).start()
        return
    try:  # the watchdog: never returns
        armed = _arm_pdeathsig()
        os.closerange(3, 1 << 16)
        if os.getppid() != me:
            os._exit(0)
        try:
            fd = os.pidfd_open(watched)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            import select

            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not poller.poll(int(WATCHDOG_INTERVAL * 1000)):
                if not armed and os.getppid() != me:  # the worker is gone
                    os._exit(0)
        else:
            while _alive(watched):
                time.sleep(WATCHDOG_INTERVAL)
                if os.getppid() != me:
                    os._exit(0)
        try:
            os.kill(me, signal.SIGKILL)
        except OSError:
            pass
    finally:
        os._exit(0)


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
