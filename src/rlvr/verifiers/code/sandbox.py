"""Run untrusted Python in a child process with limits (the engine of the code verifiers).

:func:`run_python` executes a program in a fresh ``python -I -B`` interpreter
(started through :mod:`rlvr.verifiers.code._bootstrap`) and returns a
:class:`SandboxResult`; :func:`run_many` runs many programs on a thread pool
(the work happens in the children, so threads suffice).

What is enforced, by what (see :func:`isolation_level`):

``namespace`` (the parent runs as root and the kernel allows namespaces; the
default here):
  * no network: a new, empty network namespace (not even loopback is up);
  * file-system confinement: the program runs as a throw-away uid/gid unique to
    this run (no supplementary groups, ``no_new_privs``), so it cannot modify
    anything it does not own; in a private mount namespace the world-writable
    directories (/tmp, /var/tmp, /dev/shm, /run/lock) are covered by small
    private tmpfs mounts and the work directory is a size-capped tmpfs, so every
    write it can make vanishes with it;
  * processes: the program runs in a new PID namespace (with its own /proc, so it
    sees only its own processes); ``RLIMIT_NPROC`` counts the run's unique uid, so
    a fork bomb hits the cap; when the program's process ends (or the run is
    stopped) the namespace's init exits and the kernel kills and reaps every
    process left in it (an escaped ``setsid`` daemon too) before the process this
    module started can exit, so reaping that one process is the proof that nothing
    of the run survives (no scan of /proc, no waiting for leftovers); the unique uid
    also means it can signal nothing else;
  * the parent's environment: the child gets an empty environment and cannot read
    ``/proc/<parent>/environ`` (a different uid).
``userns`` (non-root, unprivileged user namespaces allowed): no network via a new
  user + network namespace; files and signals are only guarded by the audit hook
  (same uid as the parent); ``RLIMIT_NPROC`` is set to what the uid already runs
  plus ``max_processes`` (a process-count cap shared with the parent's uid).
``audit`` (nothing else available): an audit hook installed before the program
  refuses sockets, ctypes, fork/exec/subprocess, signals to other processes,
  writes and deletes outside the work directory and reads of other processes'
  /proc entries, plus the same process-count cap.  Python-level only: a guard
  against accidents and naive attacks, not a security boundary (native code, or
  private modules such as ``_posixsubprocess``, can get around it).

All levels: ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_FSIZE``,
``RLIMIT_NOFILE``, ``RLIMIT_CORE=0``, a wall-clock limit that kills the whole
process group, an empty environment, a fresh temporary working directory that is
deleted afterwards, and stdout/stderr read incrementally with a byte cap (the
child is killed once it writes more than ``max_output_bytes``).
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

__all__ = ["SandboxLimits", "SandboxResult", "run_python", "run_many", "isolation_level", "sandbox_python"]

_BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap.py")
_SETUP_FAILED = 97
_UID_BASE = 0x70000000  # throw-away uids: 1879048192 + (pid mod 2^20) * 64 + slot
_SLOTS = 64
MODES = ("namespace", "userns", "audit")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run."""

    timeout: float = 10.0
    """Wall-clock seconds before the process group is killed."""
    cpu_seconds: int | None = None
    """``RLIMIT_CPU``; default ``ceil(timeout) + 1``."""
    memory_mb: int = 1024
    """``RLIMIT_AS`` of each process, in MiB."""
    file_size_mb: int = 16
    """``RLIMIT_FSIZE``: the largest file the program may write."""
    tmpfs_mb: int = 64
    """Size of each private tmpfs (work directory, /tmp ...) in ``namespace`` mode."""
    max_processes: int = 32
    """``RLIMIT_NPROC`` (processes + threads of the run's uid; ``namespace`` mode)."""
    max_open_files: int = 64
    """``RLIMIT_NOFILE``."""
    max_output_bytes: int = 1 << 20
    """Stdout + stderr bytes read before the child is killed; the first ones are kept."""

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout}")
        for name in ("memory_mb", "file_size_mb", "tmpfs_mb", "max_processes", "max_open_files",
                     "max_output_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class SandboxResult:
    """What happened to one program."""

    status: str
    """``"ok"`` (exit 0), ``"error"`` (non-zero exit), ``"timeout"``, ``"output_limit"``,
    ``"killed"`` (by a signal, e.g. CPU limit) or ``"setup_error"`` (the sandbox could not start)."""
    returncode: int | None
    stdout: str
    stderr: str
    elapsed: float
    """Wall seconds from start to the last process reaped."""
    truncated: bool = False
    """True when output beyond ``max_output_bytes`` was dropped."""
    mode: str = ""
    """Isolation mode the program ran under."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# --------------------------------------------------------------------------- mode detection

def _world_readable_python(exe: str) -> bool:
    """True when every directory above ``exe``'s stdlib is traversable by other users."""
    try:
        out = subprocess.run([exe, "-I", "-S", "-c", "import os,sys;print(os.path.realpath(sys.executable));"
                              "print(os.path.dirname(os.__file__))"], capture_output=True, text=True, timeout=20,
                             env={})
    except (OSError, subprocess.SubprocessError):
        return False
    if out.returncode != 0:
        return False
    for path in out.stdout.split():
        p = path
        while p not in ("/", ""):
            try:
                if not os.stat(p).st_mode & 0o005:
                    return False
            except OSError:
                return False
            p = os.path.dirname(p)
    return True


_lock = threading.Lock()
_detected: dict[str, object] = {}


def sandbox_python() -> str:
    """The interpreter the sandbox runs: ours, or (when running as root with our stdlib
    unreadable by other users) the first world-readable ``python3`` on the system."""
    with _lock:
        if "python" not in _detected:
            exe = sys.executable
            if os.geteuid() == 0 and not _world_readable_python(exe):
                for cand in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
                    if os.path.exists(cand) and _world_readable_python(cand):
                        exe = cand
                        break
            _detected["python"] = exe
        return _detected["python"]  # type: ignore[return-value]


def isolation_level() -> str:
    """The strongest mode that works here (probed once with a trivial program, then cached)."""
    with _lock:
        cached = _detected.get("mode")
    if cached:
        return cached  # type: ignore[return-value]
    candidates = ["namespace", "userns", "audit"] if os.geteuid() == 0 else ["userns", "audit"]
    chosen = "audit"
    for mode in candidates[:-1]:
        res = _run(("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
                    "except OSError:\n    print('isolated')\n"), "", SandboxLimits(timeout=20), mode, False)
        if res.status == "ok" and res.stdout.strip() == "isolated":
            chosen = mode
            break
    with _lock:
        _detected["mode"] = chosen
    return chosen


# --------------------------------------------------------------------------- uid slots

_slot_cond = threading.Condition()
_slots_in_use: set[int] = set()
_slot_counter = itertools.count()


def _acquire_slot() -> int:
    with _slot_cond:
        while len(_slots_in_use) >= _SLOTS:
            _slot_cond.wait()
        while True:
            s = next(_slot_counter) % _SLOTS
            if s not in _slots_in_use:
                _slots_in_use.add(s)
                return s


def _release_slot(slot: int) -> None:
    with _slot_cond:
        _slots_in_use.discard(slot)
        _slot_cond.notify()


def _uid_for(slot: int) -> int:
    return _UID_BASE + (os.getpid() % (1 << 20)) * _SLOTS + slot


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


def _reap_uid(uid: int, deadline: float = 5.0) -> None:
    """SIGKILL every process owned by ``uid`` until none is left (or ``deadline`` s pass).

    Only a fallback, for a ``namespace`` run whose bootstrap did not exit after being
    told to stop (it normally reaps the whole PID namespace itself)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


# --------------------------------------------------------------------------- running

def _feed_stdin(pipe, data: bytes) -> None:
    try:
        if data:
            pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _stop(proc: subprocess.Popen, mode: str) -> None:
    """End the run now.  ``namespace``: ask the bootstrap (SIGTERM; the program cannot
    signal it) to kill its PID namespace's init, which takes every process of the run
    with it, and let the bootstrap reap the init before it exits; other modes: SIGKILL
    the process group."""
    if mode != "namespace":
        _killpg(proc.pid)
    elif proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except OSError:
            pass


def _finish(proc: subprocess.Popen, mode: str, uid: int) -> None:
    """Make sure nothing of the run is alive, then reap the process we started."""
    _stop(proc, mode)
    try:
        proc.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        pass
    _killpg(proc.pid)  # a bootstrap that did not stop: kill it; its init dies with it (parent-death signal)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if mode == "namespace":
        _reap_uid(uid)


def _nproc_limit(limits: SandboxLimits, mode: str, uid: int) -> int | None:
    """``RLIMIT_NPROC`` for the child: the cap for a fresh uid; for a shared non-root uid,
    what that uid already runs plus the cap (a process-count cap); none for root,
    which the kernel does not limit."""
    if mode == "namespace":
        return limits.max_processes
    if uid == 0:
        return None
    return len(_pids_of_uid(uid)) + limits.max_processes


def _run(source: str, stdin: str, limits: SandboxLimits, mode: str, audit_hook: bool,
         harness: dict | None = None) -> SandboxResult:
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="rlvr-sbx-")
    slot = _acquire_slot() if mode == "namespace" else None
    uid = _uid_for(slot) if slot is not None else os.getuid()
    try:
        program = os.path.join(workdir, "program.py")
        with open(program, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(source)
        cfg = {
            "mode": mode, "workdir": workdir, "program": program, "uid": uid, "gid": uid,
            "memory_mb": limits.memory_mb,
            "cpu_seconds": limits.cpu_seconds or int(limits.timeout) + 2,
            "file_size_mb": limits.file_size_mb, "tmpfs_mb": limits.tmpfs_mb,
            "max_open_files": limits.max_open_files,
            "max_processes": _nproc_limit(limits, mode, uid),
            "audit_hook": audit_hook, "harness": harness,
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8",
               "PYTHONIOENCODING": "utf-8"}
        proc = subprocess.Popen([sandbox_python(), "-I", "-B", _BOOTSTRAP, json.dumps(cfg)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=workdir, env=env, start_new_session=True, close_fds=True)
        try:
            return _collect(proc, stdin, limits, start, mode)
        finally:
            _finish(proc, mode, uid)
    finally:
        if slot is not None:
            _release_slot(slot)
        shutil.rmtree(workdir, ignore_errors=True)


def _collect(proc: subprocess.Popen, stdin: str, limits: SandboxLimits, start: float, mode: str) -> SandboxResult:
    """Feed stdin, read stdout/stderr up to the byte cap and the wall deadline."""
    data = stdin.encode("utf-8", "surrogateescape") if stdin else b""
    feeder = threading.Thread(target=_feed_stdin, args=(proc.stdin, data), daemon=True)
    feeder.start()
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    total, truncated, status = 0, False, None
    deadline = start + limits.timeout
    sel = selectors.DefaultSelector()
    for pipe in (proc.stdout, proc.stderr):
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe.fileno(), selectors.EVENT_READ)
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                status = "timeout"
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                if mode != "namespace":  # (in a PID namespace nothing outlives the bootstrap)
                    _killpg(proc.pid)  # the main process is done: stragglers only hold the pipes
            if exited_at is not None and now - exited_at > 0.5:
                break
            for key, _ in sel.select(timeout=min(0.1, deadline - now)):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                total += len(chunk)
                buf = bufs[key.fd]
                room = limits.max_output_bytes - len(bufs[proc.stdout.fileno()]) - len(bufs[proc.stderr.fileno()])
                if room > 0:
                    buf += chunk[:room]
                if total > limits.max_output_bytes:
                    truncated, status = True, "output_limit"
                    break
            if status:
                break
    finally:
        sel.close()
    if status:
        _stop(proc, mode)
    try:
        rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()) if not status else 5)
    except subprocess.TimeoutExpired:
        _stop(proc, mode)
        status = status or "timeout"
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
    out = bufs[proc.stdout.fileno()].decode("utf-8", "replace")
    err = bufs[proc.stderr.fileno()].decode("utf-8", "replace")
    for p in (proc.stdout, proc.stderr):
        p.close()
    if status is None:
        if rc == 0:
            status = "ok"
        elif rc == _SETUP_FAILED and "rlvr-sandbox: setup failed" in err:
            status = "setup_error"
        elif rc is not None and rc < 0:
            status = "killed"
        else:
            status = "error"
    return SandboxResult(status, rc, out, err, time.monotonic() - start, truncated, mode)


def run_python(source: str, stdin: str = "", limits: SandboxLimits | None = None, *,
               mode: str | None = None, audit_hook: bool = True, harness: dict | None = None) -> SandboxResult:
    """Run ``source`` as a Python program in the sandbox and return what happened.

    Args:
        source: program text (run as ``__main__`` in a fresh ``python -I -B``).
        stdin: text written to the program's standard input.
        limits: resource limits (default :class:`SandboxLimits`).
        mode: ``"namespace"``, ``"userns"`` or ``"audit"``; default :func:`isolation_level`.
        audit_hook: install the Python audit hook (always on in ``audit`` mode).
        harness: ``{"entry": NAME}``: ``source`` is a candidate's code only, and
            ``stdin`` a JSON line ``{"nonce", "test"}``; the bootstrap runs the test's
            ``check`` in a separate process that calls ``NAME`` in the candidate's
            process (see ``_bootstrap.harness_main``).

    Never raises on bad programs: a crash, timeout or limit is a ``status``.
    """
    limits = limits or SandboxLimits()
    mode = mode or isolation_level()
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}; choose one of {', '.join(MODES)}")
    return _run(source, stdin or "", limits, mode, audit_hook or mode == "audit", harness)


def run_many(jobs: Iterable[tuple[str, str]], limits: SandboxLimits | None = None, *,
             workers: int | None = None, mode: str | None = None) -> list[SandboxResult]:
    """Run ``(source, stdin)`` pairs on ``workers`` threads (default: CPU count); results in order."""
    jobs = list(jobs)
    if not jobs:
        return []
    mode = mode or isolation_level()
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs), _SLOTS))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda j: run_python(j[0], j[1], limits, mode=mode), jobs))
