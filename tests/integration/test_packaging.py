"""The wheel carries the benchmark data, and `rlvr eval --task math500` works from it with nothing beside it."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA_FILES = ["aime24_test.jsonl.gz", "amc23_test.jsonl.gz", "gsm8k_test.jsonl.gz", "gsm8k_train.jsonl.gz",
              "math500_test.jsonl.gz", "search_corpus.jsonl.gz"]
ROWS = {"search_corpus.jsonl.gz": 1250, "aime24_test.jsonl.gz": 30, "amc23_test.jsonl.gz": 40, "gsm8k_test.jsonl.gz": 1319,
        "gsm8k_train.jsonl.gz": 7473, "math500_test.jsonl.gz": 500}


def _clean_clone(dest: Path) -> Path:
    """The files a clone has (pyproject, README, src/) copied without build leftovers."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "src", dest / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return dest


def test_wheel_contains_the_benchmark_data_and_eval_runs_from_it(tmp_path, tiny_model_dir):
    clone = _clean_clone(tmp_path / "clone")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(clone), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels)], check=True, cwd=tmp_path, capture_output=True)
    (wheel,) = wheels.glob("rlvr-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in DATA_FILES:
            assert f"rlvr/data/{f}" in names
            rows = gzip.decompress(z.read(f"rlvr/data/{f}")).decode().splitlines()
            assert len(rows) == ROWS[f] and all(json.loads(r) for r in rows)
        assert "rlvr/data/README.md" in names
        assert b"MIT" in z.read("rlvr/data/README.md")

    # install it into a bare directory and run the CLI from an empty directory, with no
    # $RLVR_DATA_DIR and no checkout anywhere on sys.path (the venv supplies torch etc.)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RLVR_DATA_DIR", "PYTHONPATH")}
    env.update(PYTHONPATH=str(site), OMP_NUM_THREADS="1", RLVR_CACHE=str(tmp_path / "cache"))
    code = ("import sys, rlvr, rlvr.tasks as t; from rlvr.cli import main; "
            "print('RLVR_AT', rlvr.__file__); print('DATA_AT', t.find_data_dir()); "
            "sys.exit(main(sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", code, "eval", "--task", "math500", "--limit", "2",
                          "--model", str(tiny_model_dir), "--max-new-tokens", "2", "--output", "r.json",
                          "--samples", "s.jsonl"],
                         cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"RLVR_AT {site / 'rlvr' / '__init__.py'}" in out.stdout
    assert f"DATA_AT {site / 'rlvr' / 'data'}" in out.stdout
    res = json.loads((empty / "r.json").read_text())
    assert res["task"] == "math500"
    samples = (empty / "s.jsonl").read_text()
    assert "test/precalculus/807.json" in samples  # the first MATH-500 problem's id
