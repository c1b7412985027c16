"""The reward-stage benchmarks run end to end on small inputs: benchmarks/rubric_overhead.py (the one-verifier
rubric's rewards equal the anchor's; a broken equality exits non-zero) and benchmarks/turn_baseline_bias.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                         timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                           "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_rubric_overhead_prints_ratios_and_the_equality():
    out = _run("rubric_overhead.py", "--groups", "20", "--repeats", "1")
    assert "anchor: no rubric" in out and "1.00" in out
    assert "equal the anchor's bit for bit: True" in out


def test_turn_baseline_bias_prints_both_baselines_against_the_exact_gradient():
    out = _run("turn_baseline_bias.py", "--groups", "2000")
    assert "exact gradient (anchor)" in out and "leave-one-out" in out and "incl. the episode" in out
