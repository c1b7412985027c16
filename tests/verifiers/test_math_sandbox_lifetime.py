"""A sandbox worker never outlives the process that owns it: a parent killed by SIGTERM
(no atexit handlers run) takes its sympy worker with it, idle or busy, forked or started
from the fork server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

from rlvr.verifiers.math.sandbox import _alive  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"

_PARENT = r"""
import sys, threading, time
if sys.argv[2] == "threaded":  # a second thread: the worker comes from the fork server
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
from rlvr.verifiers import get_verifier
from rlvr.verifiers.math import get_sandbox
v = get_verifier("math", timeout=120, require_value=False)
assert v("\\boxed{\\sqrt{8}}", "2\\sqrt{2}").correct  # starts the worker
print(get_sandbox()._proc.pid, flush=True)
if sys.argv[1] == "busy":
    v("\\boxed{9^{9^{9^9}}}", "1")  # the worker computes for the whole timeout
else:
    time.sleep(600)
"""


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals and /proc")
@pytest.mark.parametrize("state", ["idle", "busy"])
@pytest.mark.parametrize("threads", ["single", "threaded"])
def test_the_worker_dies_with_a_parent_killed_by_sigterm(state, threads):
    env = dict(os.environ, PYTHONPATH=str(SRC), OMP_NUM_THREADS="1")
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, state, threads], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), parent.stderr.read()[-2000:] if parent.poll() is not None else line
        worker = int(line)
        assert _alive(worker)
        time.sleep(1.0 if state == "busy" else 0.2)  # the busy call is in the worker by now
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=60)
        assert parent.returncode == -signal.SIGTERM
        # a hang guard, not a timing claim: PDEATHSIG and the watchdog process act at once
        assert _gone_within(worker, 15.0), f"worker {worker} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)


_POOL_PARENT = r"""
import multiprocessing, time
from rlvr.verifiers.batch import iter_verify
it = iter_verify("math", ["\\boxed{1}"] * 8, ["1"] * 8, workers=2, chunksize=1)
next(it)  # the pool is up (the generator holds it open)
print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals and /proc")
def test_verify_batch_pool_workers_die_with_a_parent_killed_by_sigterm():
    env = dict(os.environ, PYTHONPATH=str(SRC), OMP_NUM_THREADS="1")
    parent = subprocess.Popen([sys.executable, "-c", _POOL_PARENT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        line = parent.stdout.readline()
        pids = [int(x) for x in line.split()]
        assert pids, parent.stderr.read()[-2000:] if parent.poll() is not None else line
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=60)
        for pid in pids:  # a hang guard: the kernel kills them as the parent exits
            assert _gone_within(pid, 15.0), f"pool worker {pid} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
