"""Fault injection: what a run does when it is killed, damaged, crowded, starved of disk, preempted or stalled.

Every scenario drives ``rlvr train`` as a separate process on a tiny random model (``rlvr.models.tiny``; seconds
per run, no download), injects one fault, and checks what a user relies on. One table row per scenario:
what was injected, what was expected, what happened.

    python benchmarks/fault_injection.py                 # all scenarios (about 5 minutes on 2 CPU cores)
    python benchmarks/fault_injection.py --only kill,sigterm --kills 10

Scenarios:
  kill        SIGKILL at random moments (``--kills`` of them, seeded), each followed by ``--resume``: the final
              weights and metrics equal an uninterrupted run's
  corrupt     256 zeroed bytes in the newest checkpoint's weights: resume names the file and falls back
  disk        the file-size limit (RLIMIT_FSIZE) hit while checkpointing, as on a full disk: the run fails
              with an error, the earlier checkpoint and eval file stay intact, the next run resumes
  two-runs    a second run into a directory in use: refused at once, naming the first's PID
  overwrite   a rerun without --resume into a finished run's directory: refused, nothing of it deleted
  sigterm     SIGTERM mid-run: a checkpoint of the last finished step, exit 143, a message
  hang        a verifier that never returns (``env.timeout_s``): the step goes on, the calls count as
              errors, the run ends
  changed     --resume with another group size: refused before the model loads, naming the key
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from rlvr.types import Verdict
    from rlvr.verifiers import register_verifier

    @register_verifier("parity_fi")
    def _parity():
        return lambda c, r: Verdict(1.0 if len(c) % 2 == 0 else 0.0, str(len(c)), "parity")

    @register_verifier("hang_fi")
    def _hang():
        calls = [0]
        def check(c, r):  # every third call never returns
            calls[0] += 1
            if calls[0] % 3 == 0:
                time.sleep(3600)
            return Verdict(1.0 if len(c) % 2 == 0 else 0.0, str(len(c)), "parity")
        return check

    from rlvr.cli import main
    sys.exit(main(sys.argv[1:]))
""")


class Bench:
    def __init__(self, root: Path):
        from rlvr.models.tiny import save_tiny_model

        self.root = root
        self.model = save_tiny_model(root / "tiny-model")
        self.data = root / "data.jsonl"
        self.data.write_text("".join(json.dumps({"prompt": f"What is {i}?", "answer": str(i)}) + "\n"
                                     for i in range(40)))
        self.script = root / "run.py"
        self.script.write_text(SCRIPT)
        import rlvr

        self.env = {**os.environ, "PYTHONPATH": str(Path(rlvr.__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}

    def args(self, out: Path, steps: int, *extra: str) -> list[str]:
        return [sys.executable, str(self.script), "train", f"model.name={self.model}", "task.name=jsonl",
                f"task.path={self.data}", "task.num_heldout=2", "reward.verifier=parity_fi",
                f"train.output_dir={out}", f"train.steps={steps}", "train.prompts_per_step=2", "rollout.group_size=4",
                "rollout.max_new_tokens=8", "train.lr=1e-2", "train.warmup_steps=0", "train.save_every=1",
                "train.keep_checkpoints=3", "eval.before_training=true", "eval.num_problems=2",
                "eval.max_new_tokens=4", "eval.extra_temperatures=[]", "eval.after_training=false", "train.seed=5",
                "train.threads=1", "train.progress=false", *extra]

    def run(self, out: Path, steps: int, *extra: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.args(out, steps, *extra), env=self.env, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def start(self, out: Path, steps: int, *extra: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.args(out, steps, *extra), env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, **kw)


def _steps(out: Path) -> list[int]:
    from rlvr.trackers import read_metrics

    return [r["step"] for r in read_metrics(out / "metrics.jsonl")] if (out / "metrics.jsonl").exists() else []


def _weights(out: Path) -> dict:
    from safetensors.torch import load_file

    from rlvr.learner.checkpoint import latest_checkpoint

    return load_file(latest_checkpoint(out) / "model" / "model.safetensors")


def _same_weights(a: Path, b: Path) -> bool:
    import torch

    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def _wait_rows(out: Path, n: int, deadline: float) -> None:
    while time.time() < deadline and len(_steps(out)) < n:
        time.sleep(0.02)


def scenario_kill(b: Bench, kills: int, seed: int) -> tuple[str, str, bool]:
    steps = 8
    ref = b.root / "kill-ref"
    r = b.run(ref, steps)
    assert r.returncode == 0, r.stderr[-2000:]
    rng = random.Random(seed)
    out, done, exact = b.root / "kill-run", 0, True
    for i in range(kills):
        proc = b.start(out, steps, *(["--resume"] if (out / "checkpoints").exists() else []))
        time.sleep(rng.uniform(0.5, 8.0))
        proc.kill()
        proc.wait()
        done += 1
    r = b.run(out, steps, "--resume")
    ok = r.returncode == 0 and _steps(out) == list(range(1, steps + 1)) and _same_weights(ref, out)
    return (f"{done} SIGKILLs at random moments (seed {seed}), then --resume",
            f"exit {r.returncode}; metrics steps {_steps(out)}; weights equal the uninterrupted run's: "
            f"{_same_weights(ref, out) if r.returncode == 0 else 'n/a'}", ok and exact)


def scenario_corrupt(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "corrupt"
    r = b.run(out, 3)
    f = out / "checkpoints" / "step-000003" / "model" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2:len(data) // 2 + 256] = bytes(256)
    f.write_bytes(bytes(data))
    r = b.run(out, 4, "--resume")
    said = [line for line in r.stdout.splitlines() if "damaged" in line]
    ok = (r.returncode == 0 and "model/model.safetensors" in (said[0] if said else "")
          and "step-000002 instead" in (said[0] if said else "") and _steps(out) == [1, 2, 3, 4])
    return ("256 zeroed bytes in the newest checkpoint's weights, then --resume",
            f"exit {r.returncode}; said: {said[0][:150] if said else '(nothing)'}; steps {_steps(out)}", ok)


def scenario_disk(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "disk"
    r = b.run(out, 2)
    before = (out / "eval_before.json").read_text()
    size = (out / "checkpoints" / "step-000002" / "model" / "model.safetensors").stat().st_size

    def limit():  # a write past this size fails with EFBIG (SIGXFSZ ignored), as ENOSPC does on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))

    r = b.run(out, 4, "--resume", preexec_fn=limit)
    failed_cleanly = r.returncode != 0
    from rlvr.learner.checkpoint import latest_checkpoint, verify_checkpoint

    intact = latest_checkpoint(out) is not None and verify_checkpoint(latest_checkpoint(out)) is None
    leftovers = [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    eval_ok = (out / "eval_before.json").read_text() == before
    r2 = b.run(out, 4, "--resume")
    ok = failed_cleanly and intact and eval_ok and r2.returncode == 0 and _steps(out) == [1, 2, 3, 4]
    last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
    return ("writes past half a checkpoint's size fail (EFBIG, as a full disk's ENOSPC)",
            f"exit {r.returncode} ({last[:120]}); earlier checkpoint intact: {intact}; eval_before.json unchanged: "
            f"{eval_ok}; temporary dirs left: {leftovers or 'none'}; the next --resume: exit {r2.returncode}, "
            f"steps {_steps(out)}", ok)


def scenario_two_runs(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "two"
    first = b.start(out, 200, "train.save_every=0")
    _wait_rows(out, 1, time.time() + 120)
    t = time.time()
    second = b.run(out, 2, "--resume")
    took = time.time() - t
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=120)
    ok = second.returncode == 2 and f"PID {first.pid}" in second.stderr
    return ("a second run (--resume) into a directory a running run holds",
            f"exit {second.returncode} after {took:.1f} s: {second.stderr.strip()[:160]}", ok)


def scenario_overwrite(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "rerun"
    b.run(out, 2)
    rows = _steps(out)
    r = b.run(out, 3)
    ok = r.returncode == 2 and _steps(out) == rows and "--overwrite" in r.stderr
    return ("a rerun without --resume into a finished run's directory",
            f"exit {r.returncode}: {r.stderr.strip()[:160]}; its metrics kept: {_steps(out) == rows}", ok)


def scenario_sigterm(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "term"
    proc = b.start(out, 500, "train.save_every=0")
    _wait_rows(out, 2, time.time() + 120)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=120)
    import torch

    from rlvr.learner.checkpoint import latest_checkpoint

    ck = latest_checkpoint(out)
    step = torch.load(ck / "state.pt", weights_only=False)["step"] if ck else None
    said = [line for line in text.splitlines() if "SIGTERM" in line]
    ok = proc.returncode == 143 and ck is not None and step == _steps(out)[-1] and "Traceback" not in text
    return ("SIGTERM mid-run (a cluster's preemption)",
            f"exit {proc.returncode}; checkpoint of step {step} (last logged {(_steps(out) or [None])[-1]}); "
            f"said: {said[-1][:120] if said else '(nothing)'}", ok)


def scenario_hang(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "hang"
    t = time.time()
    try:
        r = b.run(out, 2, "reward.verifier=hang_fi", "env.timeout_s=2", timeout=240)
    except subprocess.TimeoutExpired:
        return ("a verifier that never returns on a third of the samples", "still running after 240 s", False)
    took = time.time() - t
    from rlvr.trackers import read_metrics

    rows = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
    errors = [{k: round(v, 3) for k, v in r.items() if "timeout" in k or "error" in k or k.startswith("verdict/")}
              for r in rows]
    ok = r.returncode == 0 and _steps(out) == [1, 2]
    return ("a verifier that never returns on a third of the samples (env.timeout_s=2)",
            f"exit {r.returncode} after {took:.0f} s; steps {_steps(out)}; counted per step: {errors}", ok)


def scenario_changed(b: Bench) -> tuple[str, str, bool]:
    out = b.root / "changed"
    b.run(out, 2)
    t = time.time()
    r = b.run(out, 3, "--resume", "rollout.group_size=2")
    took = time.time() - t
    ok = r.returncode == 2 and "rollout.group_size: 4 -> 2" in r.stderr and _steps(out) == [1, 2]
    return ("--resume with rollout.group_size changed 4 -> 2",
            f"exit {r.returncode} after {took:.1f} s: {r.stderr.strip()[:170]}", ok)


SCENARIOS = ["kill", "corrupt", "disk", "two-runs", "overwrite", "sigterm", "hang", "changed"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios: " + ", ".join(SCENARIOS))
    ap.add_argument("--kills", type=int, default=5, help="SIGKILLs in the kill scenario")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    a = ap.parse_args(argv)
    chosen = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in chosen if s not in SCENARIOS]
    if bad:
        ap.error(f"unknown scenarios {bad}; choose from {SCENARIOS}")
    root = Path(tempfile.mkdtemp(prefix="rlvr-faults-"))
    b = Bench(root)
    rows, failures = [], 0
    for name in chosen:
        t = time.time()
        fn = globals()[f"scenario_{name.replace('-', '_')}"]
        try:
            injected, seen, ok = fn(b, a.kills, a.seed) if name == "kill" else fn(b)
        except Exception as e:  # a scenario that breaks is a failed row, not a crashed table
            injected, seen, ok = name, f"{type(e).__name__}: {e}"[:200], False
        failures += not ok
        rows.append((name, injected, seen, "yes" if ok else "NO", time.time() - t))
        print(f"[{name}] {'ok' if ok else 'FAILED'} ({time.time() - t:.0f} s): {seen}", flush=True)
    print("\n| scenario | injected | what happened | as expected |\n|---|---|---|---|")
    for name, injected, seen, ok, _ in rows:
        print(f"| {name} | {injected} | {seen.replace('|', '/')} | {ok} |")
    if not a.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"scratch directory: {root}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
