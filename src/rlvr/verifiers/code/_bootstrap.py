"""Child-side bootstrap of the code sandbox (stdlib only; run as ``python -I -B _bootstrap.py CONFIG``).

The parent (:mod:`rlvr.verifiers.code.sandbox`) starts a fresh interpreter on this
file in a new session with an empty environment.  Before any user code runs it:

1. reads the program from the work directory;
2. ``namespace`` mode (root): enters new network and mount namespaces, makes all
   mounts private, covers the world-writable directories (/tmp, /var/tmp,
   /dev/shm, /run/lock) with small private tmpfs mounts and mounts a size-capped
   tmpfs on the work directory; ``userns`` mode (non-root): enters a new user +
   network namespace;
3. changes into the work directory, drops to the sandbox uid/gid with no
   supplementary groups (root only) and sets ``no_new_privs``;
4. sets hard resource limits (address space, CPU seconds, file size, open files,
   processes, no core dumps);
5. optionally installs an audit hook (see :func:`_install_audit_hook`);
6. executes the program as ``__main__``.

Any failure in steps 1-5 exits with status 97 and a line on stderr starting with
``rlvr-sandbox: setup failed``, so the parent never runs user code with less
isolation than it asked for.
"""

import ctypes
import json
import os
import resource
import sys

SETUP_FAILED = 97
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
MASKED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


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


def _enter_namespaces(cfg, libc):
    mode = cfg["mode"]
    if mode == "namespace":
        _check(libc.unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare(net|mnt)")
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)
        for d in MASKED_DIRS:
            if os.path.isdir(d) and not os.path.islink(d):
                _mount(libc, "tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,mode=1777")
        work = cfg["workdir"]
        os.makedirs(work, exist_ok=True)
        _mount(libc, "tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={cfg['tmpfs_mb']}m,mode=0700,uid={cfg['uid']},gid={cfg['gid']}")
    elif mode == "userns":
        _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(user|net)")


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
        (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
        (resource.RLIMIT_FSIZE, cfg["file_size_mb"] * mb),
        (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
        (resource.RLIMIT_CORE, 0),
    ]
    if cfg.get("max_processes") is not None:
        limits.append((resource.RLIMIT_NPROC, cfg["max_processes"]))
    for which, value in limits:
        resource.setrlimit(which, (value, value))


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
    realpath, fspath, startswith, isinstance_, str_, bytes_, int_ = (
        os.path.realpath, os.fspath, str.startswith, isinstance, str, bytes, int)
    always = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
              "socket.gethostbyname", "socket.sendto", "ctypes.dlopen", "ctypes.dlsym",
              "ctypes.cdata", "ctypes.call_function", "ctypes.addressof", "ctypes.set_errno",
              "sys.addaudithook", "os.setuid", "os.setgid"}
    strict_only = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "signal.pthread_kill",
                   "os.startfile"}
    path_events = {"os.remove": 0, "os.rmdir": 0, "os.rename": (0, 1), "os.replace": (0, 1),
                   "os.chmod": 0, "os.chown": 0, "os.truncate": 0, "os.link": (0, 1),
                   "os.symlink": 1, "os.mkdir": 0, "os.utime": 0, "shutil.rmtree": 0,
                   "os.chflags": 0, "os.mkfifo": 0, "os.mknod": 0, "os.setxattr": 0,
                   "os.removexattr": 0}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def inside(path):
        if isinstance_(path, int_):
            return True  # an fd the program already holds
        p = realpath(fspath(path))
        if isinstance_(p, bytes_):
            p = p.decode("utf-8", "surrogateescape")
        return p == work or startswith(p, work + "/") or p == "/dev/null"

    def hook(event, args):
        if event in always or (strict and event in strict_only):
            if event == "os.kill" and args and args[0] == int_(me):
                return
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance_(path, int_):
                return
            writing = (isinstance_(mode, str_) and any(c in mode for c in "wax+")) or (
                isinstance_(flags, int_) and flags & write_flags)
            p = fspath(path)
            if isinstance_(p, bytes_):
                p = p.decode("utf-8", "surrogateescape")
            if writing and not inside(p):
                raise PermissionError(f"sandbox: writing {p!r} outside the work directory")
            rp = realpath(p)
            if startswith(rp, "/proc/") and rp.split("/")[2] not in (me, "self", "thread-self") \
                    and rp.split("/")[2].isdigit():
                raise PermissionError(f"sandbox: reading {rp!r} is not allowed")
            return
        idx = path_events.get(event)
        if idx is not None:
            for i in (idx if isinstance_(idx, tuple) else (idx,)):
                if i < len(args) and args[i] is not None and not inside(args[i]):
                    raise PermissionError(f"sandbox: {event} outside the work directory")

    sys.addaudithook(hook)


def main():
    try:
        cfg = json.loads(sys.argv[1])
        with open(cfg["program"], encoding="utf-8", errors="surrogateescape") as f:
            source = f.read()
        libc = _libc()
        _enter_namespaces(cfg, libc)
        os.chdir(cfg["workdir"])
        _drop_privileges(cfg, libc)
        _set_limits(cfg)
        if cfg["audit_hook"]:
            _install_audit_hook(cfg)
    except BaseException as e:  # noqa: BLE001
        sys.stderr.write(f"rlvr-sandbox: setup failed: {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(SETUP_FAILED)
    sys.argv = ["program.py"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    del cfg, libc
    exec(compile(source, "program.py", "exec"), namespace)


if __name__ == "__main__":
    main()
