"""Child-side bootstrap of the code sandbox (stdlib only; run as ``python -I -S -B _bootstrap.py CONFIG``).

The parent (:mod:`rlvr.verifiers.code.sandbox`) starts a fresh interpreter on this
file in a new session with an empty environment.  Before any user code runs it:

1. reads the program from the work directory;
2. ``namespace`` mode (root): enters new network, mount and PID namespaces, makes
   all mounts private, covers the world-writable directories (/tmp, /var/tmp,
   /dev/shm, /run/lock) with small private tmpfs mounts and mounts a size-capped
   tmpfs on the work directory; then forks the PID namespace's init (see
   :func:`_split_into_pid_namespace`), which mounts a /proc of the new namespace and
   forks the process that runs the program; ``userns`` mode (non-root): enters a
   new user + network namespace;
3. changes into the work directory, drops to the sandbox uid/gid with no
   supplementary groups (root only) and sets ``no_new_privs``;
4. sets hard resource limits (address space, CPU seconds, file size, open files,
   processes, no core dumps);
5. optionally installs an audit hook (see :func:`_install_audit_hook`);
6. executes the program as ``__main__`` or, with ``cfg["harness"]``, forks into a
   test runner and the candidate's process (see :func:`harness_main`).

Any failure in steps 1-5 exits with status 97 and a line on stderr starting with
``rlvr-sandbox: setup failed``, so the parent never runs user code with less
isolation than it asked for.

Process containment in ``namespace`` mode is the kernel's: every process the
program starts (forked children, ``setsid`` daemons, a fork bomb's copies) lives in
the run's PID namespace, whose init exits as soon as the program's process does;
the kernel then kills and reaps everything left in the namespace before the init's
own exit completes, and the bootstrap (the process the parent started) exits only
after it has reaped the init.  So when the parent has reaped the process it
started, nothing of the run is alive, without looking for leftovers.
"""

import ctypes
import json
import os
import resource
import signal
import sys

SETUP_FAILED = 97
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 8192, 16384, 1 << 18)
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
MASKED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")
"""World-writable (or socket-holding) directories covered by a private tmpfs in ``namespace`` mode:
nothing the program writes there outlives it, and no host Unix socket kept there (the X11,
D-Bus, Docker ... sockets) can be reached."""
PACKAGES_DIR = "/run/rlvr-packages"
STAGE_DIR = "/run/rlvr-stage"
WATCH_INTERVAL = 0.05


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc, source, target, fstype, flags, data):
    _check(libc.mount(source.encode() if source else None, target.encode(),
                      fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                      data.encode() if data else None), f"mount {target}")


def _mask_dirs(cfg, libc, opts):
    for d in MASKED_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            _mount(libc, "tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,{opts}")


def _blocked_ancestor(path):
    """The topmost directory above ``path`` that other users cannot traverse, or None."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        d = "/" + "/".join(parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return d
    return None


def _expose(libc, paths):
    """Make each directory of ``paths`` (the interpreter's prefix, the allowed packages) readable
    by the sandbox uid, read-only, when an ancestor (such as a 0700 /root) hides it: the
    directory is bind-mounted aside, the hiding ancestor covered by an empty tmpfs (so the rest
    of it stays hidden), and the directory moved back to its own path, read-only."""
    staged = []
    for path in paths:
        top = _blocked_ancestor(path)
        if top is None:
            continue
        stage = f"{STAGE_DIR}/{len(staged)}"
        os.makedirs(stage)
        _mount(libc, path, stage, None, MS_BIND | MS_REC, None)
        staged.append((path, top, stage))
    covered = set()
    for path, top, stage in staged:
        if top not in covered:
            _mount(libc, "tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
            covered.add(top)
        os.makedirs(path, exist_ok=True)
        _mount(libc, stage, path, None, MS_MOVE, None)
        _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        os.rmdir(stage)
    if staged:
        os.rmdir(STAGE_DIR)


def _write_id_maps(uid, gid):
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1\n")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1\n")


def _enter_namespaces(cfg, libc):
    mode = cfg["mode"]
    if mode == "namespace":
        _check(libc.unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC), "unshare(net|mnt|pid|ipc)")
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)
        _mask_dirs(cfg, libc, "mode=1777")
        _expose(libc, cfg.get("expose", []))
        work = cfg["workdir"]
        os.makedirs(work, exist_ok=True)
        _mount(libc, "tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={cfg['tmpfs_mb']}m,mode=0700,uid={cfg['uid']},gid={cfg['gid']}")
    elif mode == "userns":
        uid, gid = os.getuid(), os.getgid()
        _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWNS),
               "unshare(user|net|ipc|mnt)")
        _write_id_maps(uid, gid)
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)
        _mask_dirs(cfg, libc, "mode=1777")
        os.makedirs(cfg["workdir"], exist_ok=True)  # (a new, empty one when /tmp held it)
        _mount(libc, "tmpfs", cfg["workdir"], "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,mode=0700")


def _packages_dir(cfg):
    """A directory holding one link per allowed package (``cfg["packages"]``: name -> real path),
    put on the program's ``sys.path`` after the standard library; None when none is allowed."""
    links = cfg.get("packages") or {}
    if not links:
        return None
    d = PACKAGES_DIR if cfg["mode"] == "namespace" else os.path.join(cfg["workdir"], ".rlvr-packages")
    os.makedirs(d, mode=0o755)
    for name, target in links.items():
        os.symlink(target, os.path.join(d, name))
    return d


def _program_path(cfg, pkgdir):
    """The program's ``sys.path``: its work directory, the standard library, the allowed packages
    (the interpreter's site-packages, and the sandbox's own directory, are left out)."""
    stdlib = [p for p in sys.path if p and p.startswith(sys.base_prefix)
              and "site-packages" not in p and "dist-packages" not in p]
    return [cfg["workdir"]] + stdlib + ([pkgdir] if pkgdir else [])


def _killer(pid):
    """A function that SIGKILLs ``pid``: through a pidfd when the kernel has them, so that
    a late call can never hit another process that reused the number."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        def kill():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return kill

    def kill_fd():
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
    return kill_fd


def _split_into_pid_namespace(cfg, libc):
    """Fork the PID namespace's init; return only in the process that will run the program.

    Three processes, all still root here:

    * this one (in the parent's PID namespace; the process the parent started) waits
      for the init; on SIGTERM (the parent's "stop now") it SIGKILLs the init.  It then
      exits the way the program's process did (the same exit status, or the same
      signal), or with the init's own status when the init failed before the program
      ran;
    * the init (PID 1 of the new namespace, root, with SIGKILL as its parent-death
      signal) mounts a /proc of the new namespace, forks the program's process and
      reaps children until that one ends; it then reports its wait status on a pipe
      and exits, and the kernel kills and reaps every process left in the namespace;
    * the program's process (PID 2) returns from this function and carries on with
      the setup (privilege drop, limits) and the program.

    The program runs as another uid, so it can signal neither the init nor this process.
    """
    status_r, status_w = os.pipe()
    kill_init = [None]

    def stop(signum, frame):
        if kill_init[0] is not None:
            kill_init[0]()

    signal.signal(signal.SIGTERM, stop)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # until kill_init is set
    pid = os.fork()
    if pid:
        os.close(status_w)
        kill_init[0] = _killer(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        _, own = os.waitpid(pid, 0)
        kill_init[0] = None
        reported = os.read(status_r, 64)
        status = int(reported) if reported else own
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.close(status_r)
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(pdeathsig)")
    _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # woken by sigtimedwait below
    program = os.fork()
    if program == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.close(status_w)
        return
    bound_kb = cfg["tree_memory_mb"] * 1024 if cfg.get("tree_memory_mb") else None
    cpu_bound = cfg.get("tree_cpu_seconds")
    verdict = None  # the wait status reported for a run the watchdog ended
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            os._exit(1)
        if pid == program:
            os.write(status_w, str(verdict if verdict is not None else status).encode())
            os._exit(0)
        if pid:
            continue
        if verdict is None:
            pss_kb, cpu = _tree_usage()
            why = None
            if bound_kb is not None and pss_kb > bound_kb:
                why, verdict = f"used more than {cfg['tree_memory_mb']} MiB", signal.SIGKILL
            elif cpu_bound is not None and cpu > cpu_bound:
                why, verdict = f"used more than {cpu_bound} CPU seconds", signal.SIGXCPU
            if why:
                sys.stderr.write(f"\nrlvr-sandbox: the run's processes together {why}; all killed\n")
                sys.stderr.flush()
                os.kill(-1, signal.SIGKILL)  # from the namespace's init: every process of the run but itself
        signal.sigtimedwait({signal.SIGCHLD}, WATCH_INTERVAL)


_TICK = os.sysconf("SC_CLK_TCK")


def _tree_usage():
    """(proportional set size in KiB, CPU seconds) of the run: every process of the PID
    namespace but its init (whose own /proc lists only the run's processes; shared pages are
    split among their users), plus the CPU time of those already reaped by the init."""
    pss, ticks = 0, 0
    for name in os.listdir("/proc"):
        if name.isdigit() and name != "1":
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                ticks += sum(int(v) for v in fields[11:15])  # utime, stime, and of its reaped children
                with open(f"/proc/{name}/smaps_rollup", "rb") as f:
                    for line in f:
                        if line.startswith(b"Pss:"):
                            pss += int(line.split()[1])
                            break
            except (OSError, ValueError, IndexError):
                pass
    t = os.times()
    return pss, ticks / _TICK + t.children_user + t.children_system


def _drop_privileges(cfg, libc):
    if cfg["mode"] == "namespace":
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
        if os.getuid() != cfg["uid"] or os.geteuid() != cfg["uid"]:
            raise OSError("privilege drop did not take effect")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def _set_limits(cfg):
    mb = 1024 * 1024
    limits = [
        (resource.RLIMIT_AS, cfg["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, cfg["file_size_mb"] * mb),
        (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
        (resource.RLIMIT_CORE, 0),
    ]
    if cfg.get("max_processes") is not None:
        limits.append((resource.RLIMIT_NPROC, cfg["max_processes"]))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    # CPU: SIGXCPU at the limit (the caller reports a timeout), SIGKILL one second later
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_seconds"], cfg["cpu_seconds"] + 1))


# event -> (indices of the path arguments, index of the dir_fd argument of each, or None)
_PATH_EVENTS = {"os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)),
                "os.rename": ((0, 1), (2, 3)), "os.replace": ((0, 1), (2, 3)),
                "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
                "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.mkdir": ((0,), (2,)),
                "os.utime": ((0,), (3,)), "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
                "os.truncate": ((0,), (None,)), "shutil.rmtree": ((0,), (None,)),
                "os.chflags": ((0,), (None,)), "os.setxattr": ((0,), (None,)),
                "os.removexattr": ((0,), (None,))}


def _path_checks(work):
    """Functions the audit hook judges paths with: (text, inside, climbs); ``inside(path, dir_fd)``
    resolves ``path`` as the kernel will (relative to ``dir_fd``'s directory when given)."""
    realpath, fspath, startswith, isinstance_, bytes_, int_ = (
        os.path.realpath, os.fspath, str.startswith, isinstance, bytes, int)
    join, isabs, readlink, sep = os.path.join, os.path.isabs, os.readlink, os.sep

    def text(path):
        p = fspath(path)
        return p.decode("utf-8", "surrogateescape") if isinstance_(p, bytes_) else p

    def resolve(path, dir_fd=None):
        """``path`` as the kernel will read it: relative to ``dir_fd``'s directory when given."""
        p = text(path)
        if isinstance_(dir_fd, int_) and dir_fd >= 0 and not isabs(p):  # (-1: no dir_fd)
            p = join(readlink(f"/proc/self/fd/{dir_fd}"), p)
        return realpath(p)

    def inside(path, dir_fd=None):
        if isinstance_(path, int_):
            return True  # an fd the program already holds (never a directory outside: see "open")
        p = resolve(path, dir_fd)
        return p == work or startswith(p, work + "/") or p == "/dev/null"

    def climbs(p):
        return ".." in p.split(sep)

    return text, inside, climbs


def _install_audit_hook(cfg):
    """Refuse, from Python code, what the program has no business doing.

    Always: sockets, ctypes/native loading, writes/deletes/renames/chmods outside
    the work directory, reading another process's /proc entries.  In ``audit``
    mode (no namespaces, same uid as the parent) also: fork, exec, subprocesses
    and signals to other processes.  This is defense in depth; native code could
    bypass it, which is why ctypes is refused too, but it is not a kernel boundary.
    """
    work = os.path.realpath(cfg["workdir"])
    me = str(os.getpid())
    strict = cfg["mode"] == "audit"
    realpath, startswith, isinstance_, str_, int_ = os.path.realpath, str.startswith, isinstance, str, int
    always = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
              "socket.gethostbyname", "socket.sendto", "ctypes.dlopen", "ctypes.dlsym",
              "ctypes.cdata", "ctypes.call_function", "ctypes.addressof", "ctypes.set_errno",
              "sys.addaudithook", "os.setuid", "os.setgid"}
    strict_only = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "signal.pthread_kill",
                   "os.startfile"}
    path_events = _PATH_EVENTS
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    isabs, isdir = os.path.isabs, os.path.isdir
    text, inside, climbs = _path_checks(work)

    def hook(event, args):
        if event in always or (strict and event in strict_only):
            if event == "os.kill" and args and args[0] == int_(me):
                return
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            # the event carries no dir_fd: os.open(path, flags, dir_fd=fd) is checked as if relative
            # to the work directory, so no fd of a directory outside it may be opened, and a write
            # through a relative path may not climb with ".."
            path, mode, flags = args
            if path is None or isinstance_(path, int_):
                return
            writing = (isinstance_(mode, str_) and any(c in mode for c in "wax+")) or (
                isinstance_(flags, int_) and flags & write_flags)
            p = text(path)
            if writing and (not inside(p) or (not isabs(p) and climbs(p))):
                raise PermissionError(f"sandbox: writing {p!r} outside the work directory")
            rp = realpath(p)
            if mode is None and ((not isabs(p) and climbs(p)) or (not inside(rp) and isdir(rp))):
                raise PermissionError(f"sandbox: opening the directory {rp!r} is not allowed")
            if startswith(rp, "/proc/") and rp.split("/")[2] not in (me, "self", "thread-self") \
                    and rp.split("/")[2].isdigit():
                raise PermissionError(f"sandbox: reading {rp!r} is not allowed")
            return
        spec = path_events.get(event)
        if spec is not None:
            for i, j in zip(*spec):
                fd = args[j] if j is not None and j < len(args) else None
                if i < len(args) and args[i] is not None and not inside(args[i], fd):
                    raise PermissionError(f"sandbox: {event} outside the work directory")
            if event == "os.symlink":  # a link may only point inside, and keep doing so when moved
                target = text(args[0])
                if (isabs(target) and not inside(target)) or (not isabs(target) and climbs(target)):
                    raise PermissionError("sandbox: a symbolic link pointing outside the work directory")

    sys.addaudithook(hook)


def _site_builtins():
    """``exit`` and ``quit``, which ``site`` (skipped: ``-S``) would have added."""
    import builtins
    import _sitebuiltins

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")


def main():
    harness = False
    try:
        cfg = json.loads(sys.argv[1])
        with open(cfg["program"], encoding="utf-8", errors="surrogateescape") as f:
            source = f.read()
        libc = _libc()
        if cfg.get("cgroup"):  # before anything forks: every process of the run is in it
            with open(os.path.join(cfg["cgroup"], "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        _enter_namespaces(cfg, libc)
        pkgdir = _packages_dir(cfg)
        if cfg["mode"] == "namespace":
            _split_into_pid_namespace(cfg, libc)
        os.chdir(cfg["workdir"])
        sys.path[:] = _program_path(cfg, pkgdir)
        _drop_privileges(cfg, libc)
        _set_limits(cfg)
        if cfg.get("harness"):
            harness = True
        elif cfg["audit_hook"]:
            _install_audit_hook(cfg)
    except BaseException as e:  # noqa: BLE001
        sys.stderr.write(f"rlvr-sandbox: setup failed: {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(SETUP_FAILED)
    sys.argv = ["program.py"]
    _site_builtins()
    if harness:
        del libc
        harness_main(cfg, source)
        return
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    del cfg, libc
    exec(compile(source, "program.py", "exec"), namespace)


# --------------------------------------------------------------------------- test harness
# With cfg["harness"] = {"entry": NAME}, the program file holds only the candidate's code
# and the tests arrive on stdin.  The process forks before any untrusted code runs:
#
# * the child closes stdin, installs the audit hook, runs the candidate's code and then
#   serves calls of NAME over a pipe, each result sent back as a tagged JSON tree of
#   builtin values of exact builtin types (an object with its own __eq__, a subclass of
#   int... cannot be sent: the call fails);
# * the parent (the runner) reads the tests and a per-run nonce from stdin, runs
#   check(candidate) with a proxy that calls the child, and only when check returns
#   writes "rlvr-harness: tests passed <nonce>" and exits 0.
#
# The candidate never shares a process with the tests: exiting early, atexit handlers,
# SystemExit, killing itself or its parent, printing, patching builtins or the test
# helpers, and overriding __eq__ cannot make the runner print the line, and the child
# never sees the nonce or the tests (stdin is closed before its code runs).

_MAX_REPLY = 64 << 20
_EXACT = (type(None), bool, int, str)


def _enc(x, depth=0):
    if depth > 200:
        raise ValueError("value nested too deeply")
    t = type(x)
    if t in _EXACT:
        return x
    if t is float:
        return {"f": repr(x)}
    if t is list or t is tuple or t is set or t is frozenset:
        items = [_enc(v, depth + 1) for v in x]
        if t is set or t is frozenset:
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return {{list: "l", tuple: "t", set: "s", frozenset: "fs"}[t]: items}
    if t is dict:
        return {"d": [[_enc(k, depth + 1), _enc(v, depth + 1)] for k, v in x.items()]}
    if t is bytes:
        return {"b": x.hex()}
    raise TypeError(f"the candidate returned a {t.__name__}, not a builtin value")


def _dec(x):
    if not isinstance(x, dict):
        return x
    (tag, v), = x.items()
    if tag == "f":
        return float(v)
    if tag == "l":
        return [_dec(i) for i in v]
    if tag == "t":
        return tuple(_dec(i) for i in v)
    if tag == "s":
        return {_dec(i) for i in v}
    if tag == "fs":
        return frozenset(_dec(i) for i in v)
    if tag == "d":
        return {_dec(k): _dec(val) for k, val in v}
    if tag == "b":
        return bytes.fromhex(v)
    raise ValueError(f"bad tag {tag!r}")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _serve_candidate(cfg, source, rfd, wfd):
    """Child: run the candidate's code, then answer calls until the runner hangs up."""
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if cfg["audit_hook"]:
        _install_audit_hook(cfg)
    entry = cfg["harness"]["entry"]
    del cfg
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(source, "program.py", "exec"), namespace)
    del source
    reader = os.fdopen(rfd, "rb")
    while True:
        line = reader.readline()
        if not line:
            os._exit(0)
        req = json.loads(line)
        try:
            if entry not in namespace:
                raise NameError(f"the code defines no function named {entry!r}")
            fn = namespace[entry]
            value = fn(*_dec(req["args"]), **{k: _dec(v) for k, v in req["kwargs"].items()})
            reply = {"ok": _enc(value)}
        except BaseException as e:  # noqa: BLE001 - SystemExit included: a call that exits is a failure
            try:
                why = f"{type(e).__name__}: {e}"
            except BaseException:  # noqa: BLE001
                why = "an exception whose message cannot be shown"
            reply = {"error": why[:500]}
        _write_all(wfd, (json.dumps(reply) + "\n").encode())


class _ChildGone(Exception):
    pass


def _run_tests(pid, wfd, rfd, entry):
    """Runner: run check(candidate) against the child and confirm that it returned."""
    import traceback

    job = json.loads(sys.stdin.readline())
    nonce = job["nonce"]
    reader = os.fdopen(rfd, "rb")

    def candidate(*args, **kwargs):
        try:
            _write_all(wfd, (json.dumps({"args": _enc(list(args)), "kwargs": {k: _enc(v) for k, v in kwargs.items()}})
                             + "\n").encode())
        except (BrokenPipeError, OSError):
            raise _ChildGone() from None
        line = reader.readline(_MAX_REPLY)
        if not line or not line.endswith(b"\n"):
            raise _ChildGone()
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"candidate raised {reply['error']}")
        return _dec(reply["ok"])

    namespace = {"__name__": "__rlvr_tests__", "__builtins__": __builtins__}
    try:
        exec(compile(job["test"], "tests.py", "exec"), namespace)
        namespace[entry] = candidate  # tests that call the function by its name (HumanEval/33) get the candidate
        namespace["check"](candidate)
    except _ChildGone:
        os.close(wfd)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1:
            os._exit(1)  # an uncaught exception: the child's own traceback (stderr) tells why
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
            signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # the CPU limit: end the same way
            os.kill(os.getpid(), signal.SIGXCPU)
        how = (f"with status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status)
               else f"by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "")
        sys.stderr.write(f"\nrlvr-harness: the candidate's process ended {how} before the tests finished\n")
        sys.stderr.flush()
        os._exit(1)
    except BaseException:  # noqa: BLE001 - a failed assertion, or the candidate's error re-raised
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    _write_all(1, f"\nrlvr-harness: tests passed {nonce}\n".encode())
    os.close(wfd)
    os._exit(0)


def harness_main(cfg, source):
    """Fork into the runner (parent) and the candidate (child); see the comment above."""
    to_child_r, to_child_w = os.pipe()
    to_runner_r, to_runner_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_child_w)
        os.close(to_runner_r)
        _serve_candidate(cfg, source, to_child_r, to_runner_w)
        os._exit(0)
    os.close(to_child_r)
    os.close(to_runner_w)
    del source
    _run_tests(pid, to_child_w, to_runner_r, cfg["harness"]["entry"])


if __name__ == "__main__":
    main()
