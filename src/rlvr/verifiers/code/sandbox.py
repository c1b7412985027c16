"""Run untrusted Python in a child process with limits (the engine of the code verifiers).

:func:`run_python` executes a program in a fresh ``python -I -S -B`` interpreter (no ``site``:
its ``sys.path`` is the standard library plus the packages the run allows)
(started through :mod:`rlvr.verifiers.code._bootstrap`) and returns a
:class:`SandboxResult`; :func:`run_many` runs many programs on a thread pool
(the work happens in the children, so threads suffice).

What is enforced, by what (see :func:`isolation_level`):

``namespace`` (the parent runs as root and the kernel allows namespaces; the
default here):
  * no network: a new, empty network namespace (not even loopback is up); no host IPC: a new IPC
    namespace (SysV shared memory, semaphores, POSIX message queues die with the run);
  * file-system confinement: the program runs as a throw-away uid/gid unique to
    this run (no supplementary groups, ``no_new_privs``), so it cannot modify
    anything it does not own; in a private mount namespace the world-writable
    directories and socket homes (/tmp, /var/tmp, /dev/shm, /run) are covered by small
    private tmpfs mounts (no host Unix socket kept there is reachable) and the work
    directory is a size-capped tmpfs, so every write it can make vanishes with it;
    the interpreter's prefix is bind-mounted read-only where a 0700 parent would hide it;
  * the whole tree's memory and CPU time: a cgroup v2 when one is delegated (see
    :func:`memory_enforcement`), else the PID namespace's init sums the tree's memory (PSS)
    and CPU seconds every 50 ms and kills the run past ``tree_memory_mb`` / ``cpu_seconds``;
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
``userns`` (non-root, unprivileged user namespaces allowed): new user, network, IPC and
  mount namespaces (no network, own IPC, private /tmp, /var/tmp, /dev/shm, /run); files and signals are only guarded by the audit hook
  (same uid as the parent); ``RLIMIT_NPROC`` is set to what the uid already runs
  plus ``max_processes`` (a process-count cap shared with the parent's uid).
``audit`` (nothing else available): an audit hook installed before the program
  refuses sockets, ctypes, fork/exec/subprocess, signals to other processes,
  writes and deletes outside the work directory and reads of other processes'
  /proc entries, plus the same process-count cap.  Python-level only: a guard
  against accidents and naive attacks, not a security boundary (native code, or
  private modules such as ``_posixsubprocess``, can get around it).

All levels: ``RLIMIT_AS`` (memory), ``RLIMIT_CPU`` (``timeout`` is CPU seconds: the
machine's load does not fail a program), ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``,
``RLIMIT_CORE=0``, a generous wall-clock backstop that kills the whole run, an empty environment, a fresh temporary working directory that is
deleted afterwards, and stdout/stderr read incrementally with a byte cap (the
child is killed once it writes more than ``max_output_bytes``).
"""

from __future__ import annotations

import itertools
import functools
import importlib.util
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

__all__ = ["SandboxLimits", "SandboxResult", "SandboxWarning", "run_python", "run_many", "isolation_level",
           "sandbox_python", "memory_enforcement", "package_links"]

_BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap.py")
_SETUP_FAILED = 97
_UID_BASE = 0x70000000  # throw-away uids: 1879048192 + (pid mod 2^20) * 64 + slot
_SLOTS = 64
MODES = ("namespace", "userns", "audit")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run."""

    timeout: float = 10.0
    """CPU seconds the run may use (``cpu_seconds`` rounds it up): its own CPU time, not the
    machine's load, ends it.  A wall-clock backstop (``wall_timeout``) ends a program that sleeps."""
    cpu_seconds: int | None = None
    """CPU seconds: ``RLIMIT_CPU`` of each process and (``namespace`` mode) the budget of the whole
    process tree; default ``ceil(timeout)``."""
    wall_timeout: float | None = None
    """Wall-clock seconds before the run is killed; default ``max(10 * timeout, timeout + 30)``, generous
    so that a machine loaded by many checks at once does not fail honest ones."""
    memory_mb: int = 1024
    """``RLIMIT_AS`` of each process, in MiB."""
    tree_memory_mb: int | None = None
    """Memory of the whole process tree, in MiB (default ``memory_mb``): a cgroup's ``memory.max`` where
    a delegated cgroup v2 is writable, else (``namespace`` mode) a watchdog of the tree's summed
    proportional set size; see :func:`memory_enforcement`."""
    file_size_mb: int = 16
    """``RLIMIT_FSIZE``: the largest file the program may write."""
    tmpfs_mb: int = 64
    """Size of each private tmpfs (work directory, /tmp ...) in ``namespace`` mode."""
    max_processes: int = 32
    """``RLIMIT_NPROC`` (processes + threads of the run's uid; ``namespace`` mode), ``pids.max`` with a cgroup."""
    max_open_files: int = 64
    """``RLIMIT_NOFILE``."""
    max_output_bytes: int = 1 << 20
    """Stdout + stderr bytes read before the child is killed; the first ones are kept."""

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout}")
        if self.wall_timeout is not None and not self.wall_timeout > 0:
            raise ValueError(f"wall_timeout must be > 0, got {self.wall_timeout}")
        for name in ("memory_mb", "file_size_mb", "tmpfs_mb", "max_processes", "max_open_files",
                     "max_output_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("cpu_seconds", "tree_memory_mb"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def cpu(self) -> int:
        """CPU seconds of the run."""
        return self.cpu_seconds or max(1, math.ceil(self.timeout))

    @property
    def wall(self) -> float:
        """Wall-clock seconds of the run."""
        return self.wall_timeout or max(10 * self.timeout, self.timeout + 30)

    @property
    def tree_memory(self) -> int:
        """MiB of the whole process tree."""
        return self.tree_memory_mb or self.memory_mb


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

class SandboxWarning(UserWarning):
    """The sandbox runs with less isolation than its strongest mode (said once per process)."""


_lock = threading.Lock()
_detected: dict[str, object] = {}
_LOST = {
    "userns": "files, signals and other processes are guarded only by the audit hook (same uid as the "
              "parent); processes x memory_mb bounds the run's memory",
    "audit": "no network, IPC or mount namespace: only the Python audit hook guards sockets, files and "
             "processes (not a security boundary); processes x memory_mb bounds the run's memory",
}


def sandbox_python() -> str:
    """The interpreter the sandbox runs: this one (so the packages a run allows, such as numpy, match
    its ABI).  In ``namespace`` mode its prefix is made readable to the sandbox uid, read-only, by a
    bind mount when a parent directory (such as a 0700 ``/root``) would hide it."""
    return sys.executable


def isolation_level() -> str:
    """The strongest mode that works here (probed once with a trivial program, then cached).

    A mode weaker than ``namespace`` is announced once with a :class:`SandboxWarning` saying what it
    does not isolate."""
    with _lock:
        cached = _detected.get("mode")
    if cached:
        return cached  # type: ignore[return-value]
    candidates = ["namespace", "userns", "audit"] if os.geteuid() == 0 else ["userns", "audit"]
    chosen, why = "audit", []
    for mode in candidates[:-1]:
        res = _run(("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
                    "except OSError:\n    print('isolated')\n"), "", SandboxLimits(timeout=20), mode, False)
        if res.status == "ok" and res.stdout.strip() == "isolated":
            chosen = mode
            break
        why.append(f"{mode}: {(res.stderr.strip().splitlines() or [res.status])[-1][:200]}")
    with _lock:
        _detected["mode"] = chosen
    if chosen != "namespace":
        warnings.warn(f"rlvr sandbox: running in {chosen!r} mode ({'; '.join(why) or 'not root'}): {_LOST[chosen]}",
                      SandboxWarning, stacklevel=2)
    return chosen


# --------------------------------------------------------------------------- cgroups

CGROUP_ENV = "RLVR_SANDBOX_CGROUP"
"""Environment variable naming a delegated cgroup v2 directory for the runs' cgroups."""


def _cgroup2_mount() -> str | None:
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    return parts[1]
    except OSError:
        pass
    return None


def _usable_cgroup_parent(path: str) -> bool:
    """True when ``path`` is a cgroup v2 directory whose children get the memory and pids
    controllers and that this process may create children in."""
    try:
        with open(os.path.join(path, "cgroup.subtree_control")) as f:
            enabled = set(f.read().split())
    except OSError:
        return False
    return {"memory", "pids"} <= enabled and os.access(path, os.W_OK)


def cgroup_parent() -> str | None:
    """The cgroup v2 directory the runs' cgroups are made in, or None (probed once).

    ``$RLVR_SANDBOX_CGROUP`` when set (it must be usable, else this raises); else this process's own
    cgroup v2 when the memory and pids controllers are enabled for its children and it is writable
    (a container's root cgroup, a ``Delegate=yes`` systemd unit whose processes moved to a leaf)."""
    with _lock:
        if "cgroup" in _detected:
            return _detected["cgroup"]  # type: ignore[return-value]
    explicit = os.environ.get(CGROUP_ENV)
    found = None
    if explicit:
        if not _usable_cgroup_parent(explicit):
            raise RuntimeError(f"{CGROUP_ENV}={explicit} is not a writable cgroup v2 directory with the memory "
                               "and pids controllers in cgroup.subtree_control")
        found = explicit
    else:
        mount = _cgroup2_mount()
        own = None
        try:
            with open("/proc/self/cgroup") as f:
                for line in f:
                    if line.startswith("0::"):
                        own = line[3:].strip()
        except OSError:
            pass
        if mount and own is not None:
            cand = os.path.join(mount, own.lstrip("/"))
            if _usable_cgroup_parent(cand):
                found = cand
    with _lock:
        _detected["cgroup"] = found
    return found


def memory_enforcement(mode: str | None = None) -> str:
    """How the run's whole process tree is held to ``tree_memory_mb``:

    * ``"cgroup"``: a cgroup v2 per run (``memory.max``, ``memory.swap.max=0``, ``pids.max``): a hard
      bound enforced by the kernel;
    * ``"watchdog"`` (``namespace`` mode without a usable cgroup): the run's PID-namespace init sums
      the proportional set size of the run's processes every 50 ms and kills them all past the bound:
      a soft bound (a burst between two samples can overshoot); the hard bound stays
      ``max_processes`` x ``memory_mb`` (``RLIMIT_NPROC`` x ``RLIMIT_AS``);
    * ``"per-process"`` (other modes): only ``max_processes`` x ``memory_mb``.
    """
    if cgroup_parent() is not None:
        return "cgroup"
    return "watchdog" if (mode or isolation_level()) == "namespace" else "per-process"


_cg_counter = itertools.count()


def _make_cgroup(limits: SandboxLimits) -> str | None:
    parent = cgroup_parent()
    if parent is None:
        return None
    path = os.path.join(parent, f"rlvr-sbx-{os.getpid()}-{next(_cg_counter)}")
    os.mkdir(path)
    try:
        for name, value in (("memory.max", limits.tree_memory * 1024 * 1024), ("memory.swap.max", 0),
                            ("pids.max", limits.max_processes)):
            if name == "memory.swap.max" and not os.path.exists(os.path.join(path, name)):
                continue  # no swap accounting in this kernel
            with open(os.path.join(path, name), "w") as f:
                f.write(str(value))
    except BaseException:
        _remove_cgroup(path)
        raise
    return path


def _remove_cgroup(path: str) -> None:
    """Kill whatever is left in the run's cgroup and remove it."""
    kill = os.path.join(path, "cgroup.kill")
    if os.path.exists(kill):
        try:
            with open(kill, "w") as f:
                f.write("1")
        except OSError:
            pass
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


# --------------------------------------------------------------------------- packages

def package_links(names: Sequence[str]) -> dict[str, str]:
    return dict(_package_links(tuple(names)))


@functools.lru_cache(maxsize=64)
def _package_links(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``{link name: real path}`` of the allowed top-level packages ``names`` in this interpreter's
    environment (each package's directory or module file, and its ``<name>.libs`` directory of
    vendored shared libraries when there is one).  A package's dependencies must be listed too.

    Raises:
        ValueError: a name is not an importable top-level package here.
    """
    links: dict[str, str] = {}
    for name in names:
        if not name.isidentifier():
            raise ValueError(f"sandbox package {name!r} is not a top-level import name")
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ValueError(f"sandbox package {name!r} is not installed in {sys.prefix}")
        if spec.submodule_search_locations:
            target = os.path.realpath(list(spec.submodule_search_locations)[0])
        elif spec.origin and os.path.isfile(spec.origin):
            target = os.path.realpath(spec.origin)
        else:
            raise ValueError(f"sandbox package {name!r} has no files to share (a built-in module?)")
        links[os.path.basename(target)] = target
        libs = os.path.join(os.path.dirname(target), f"{name}.libs")
        if os.path.isdir(libs):
            links[f"{name}.libs"] = os.path.realpath(libs)
    return tuple(links.items())


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
         harness: dict | None = None, packages: Sequence[str] = ()) -> SandboxResult:
    start = time.monotonic()
    links = package_links(packages) if packages else {}
    workdir = tempfile.mkdtemp(prefix="rlvr-sbx-")
    slot = _acquire_slot() if mode == "namespace" else None
    uid = _uid_for(slot) if slot is not None else os.getuid()
    cgroup = None
    try:
        cgroup = _make_cgroup(limits)
        program = os.path.join(workdir, "program.py")
        with open(program, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(source)
        watchdog = mode == "namespace"
        cfg = {
            "mode": mode, "workdir": workdir, "program": program, "uid": uid, "gid": uid,
            "memory_mb": limits.memory_mb,
            "cpu_seconds": limits.cpu,
            "file_size_mb": limits.file_size_mb, "tmpfs_mb": limits.tmpfs_mb,
            "max_open_files": limits.max_open_files,
            "max_processes": _nproc_limit(limits, mode, uid),
            "audit_hook": audit_hook, "harness": harness, "cgroup": cgroup,
            "packages": links,
            "expose": sorted({os.path.realpath(sys.base_prefix), *links.values()}) if mode == "namespace" else [],
            "tree_memory_mb": limits.tree_memory if watchdog and cgroup is None else None,
            "tree_cpu_seconds": limits.cpu if watchdog else None,
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8",
               "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
        proc = subprocess.Popen([sandbox_python(), "-I", "-S", "-B", _BOOTSTRAP, json.dumps(cfg)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=workdir, env=env, start_new_session=True, close_fds=True)
        try:
            return _collect(proc, stdin, limits, start, mode)
        finally:
            _finish(proc, mode, uid)
    finally:
        if cgroup is not None:
            _remove_cgroup(cgroup)
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
    deadline = start + limits.wall
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
        elif rc == -signal.SIGXCPU:
            status = "cpu_limit"
        elif rc is not None and rc < 0:
            status = "killed"
        else:
            status = "error"
    return SandboxResult(status, rc, out, err, time.monotonic() - start, truncated, mode)


def run_python(source: str, stdin: str = "", limits: SandboxLimits | None = None, *,
               mode: str | None = None, audit_hook: bool = True, harness: dict | None = None,
               packages: Sequence[str] = ()) -> SandboxResult:
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
        packages: top-level packages of this interpreter's environment the program may import
            (e.g. ``("numpy",)``); its ``sys.path`` is otherwise the standard library only.  They are
            shared read-only (see :func:`package_links`).

    Never raises on bad programs: a crash, timeout or limit is a ``status``.

    Raises:
        ValueError: an unknown ``mode``, or a package that is not installed.
    """
    limits = limits or SandboxLimits()
    mode = mode or isolation_level()
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}; choose one of {', '.join(MODES)}")
    return _run(source, stdin or "", limits, mode, audit_hook or mode == "audit", harness, tuple(packages))


def run_many(jobs: Iterable[tuple[str, str]], limits: SandboxLimits | None = None, *,
             workers: int | None = None, mode: str | None = None,
             packages: Sequence[str] = ()) -> list[SandboxResult]:
    """Run ``(source, stdin)`` pairs on ``workers`` threads (default: CPU count); results in order."""
    jobs = list(jobs)
    if not jobs:
        return []
    mode = mode or isolation_level()
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs), _SLOTS))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda j: run_python(j[0], j[1], limits, mode=mode, packages=packages), jobs))
