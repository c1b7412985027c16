"""The layer contract (import-linter, configured in pyproject.toml) holds, and would catch a violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(src: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--config", str(ROOT / "pyproject.toml"),
                           "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_layers_contract_is_kept():
    res = _lint(ROOT / "src")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "3 kept, 0 broken" in res.stdout


def test_a_planted_upward_import_breaks_the_contract(tmp_path):
    """An import inside a function counts: algorithms importing the recipe must fail the check."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "rlvr", src / "rlvr", ignore=shutil.ignore_patterns("__pycache__", "data"))
    target = src / "rlvr" / "algorithms" / "kl.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from rlvr.recipes.rl import RLRecipe\n"
                                            "    return RLRecipe\n")
    res = _lint(src)
    assert res.returncode != 0
    assert "rlvr.algorithms is not allowed to import rlvr.recipes" in res.stdout
    assert "rlvr.algorithms.kl -> rlvr.recipes.rl" in res.stdout
