"""The plugin package of the docs (docs/examples/rlvr-plugin-example), installed into a temporary
directory, is found through its entry point and trains from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "rlvr-plugin-example"


def _build_leftovers() -> set[Path]:
    """What a package build leaves beside the sources: ``build/`` and ``*.egg-info`` in the example, ``build/`` at
    the repository's root."""
    found = {p for p in EXAMPLE.rglob("*") if p.name == "build" or p.name.endswith(".egg-info")}
    return found | ({ROOT / "build"} if (ROOT / "build").exists() else set())


def _install(tmp_path: Path) -> Path:
    """pip-install the example, from where it lies in the repository as the docs say, into tmp_path/site."""
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "-q", "--target", str(site), str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return site


def test_installing_the_docs_plugin_leaves_nothing_in_the_repository(tmp_path):
    before = _build_leftovers()
    site = _install(tmp_path)
    assert (site / "rlvr_plugin_example" / "task.py").is_file()
    assert _build_leftovers() - before == set()


_TWO_COMMANDS = """\
import sys
from rlvr.cli import main
try:
    main(["train", "--help"])
except SystemExit as e:
    assert e.code == 0, e.code
print("=" * 20 + " end of help", flush=True)
sys.exit(main(sys.argv[1:]))
"""


def _rlvr(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``rlvr train --help`` then ``rlvr ARGS`` in one fresh interpreter (one start-up: torch imports slowly)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(ROOT / "src")]), OMP_NUM_THREADS="1", COLUMNS="100")
    return subprocess.run([sys.executable, "-c", _TWO_COMMANDS, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_docs_plugin_installs_and_trains_from_the_cli(tmp_path, tiny_model_dir):
    site = _install(tmp_path)
    assert (site / "rlvr_plugin_example").is_dir() and list(site.glob("rlvr_plugin_example-*.dist-info"))
    run = tmp_path / "run"
    res = _rlvr(site, tmp_path, "train", "task.name=guess_targets", "reward.verifier=last_integer",
                "env.name=guess_number", "env.params={max_guesses: 2}", f"model.name={tiny_model_dir}",
                f"train.output_dir={run}", "train.steps=2", "task.params.num_train=8", "task.num_heldout=4",
                "train.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.num_problems=2",
                "eval.max_new_tokens=4", "train.progress=false", "train.threads=1")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    help_text, _, out = res.stdout.partition("=" * 20 + " end of help")

    # --help lists the plugin's components (imported through the rlvr.plugins entry point, no --import)
    text = " ".join(help_text.split())
    assert "guess_targets Hidden numbers from low to high to guess; training and held-out targets drawn apart." in text
    assert ("last_integer Score 1.0 when the completion's last integer equals the reference "
            "(partial for any other integer).") in text
    assert 'guess_number A number-guessing game scored by reward.verifier: "higher" or "lower"' in text

    # and training ran with all three
    assert f"run directory: {run}" in out
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert (cfg["task"]["name"], cfg["reward"]["verifier"], cfg["env"]["name"]) == \
        ("guess_targets", "last_integer", "guess_number")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["env/turns"] > 1 for r in rows)  # the plugin's environment ran multi-turn episodes
    after = json.loads((run / "eval_after.json").read_text())["greedy"]
    for ex in after["examples"]:  # the plugin's task made the prompt; its environment (via the verifier) replied
        assert ex["prompt"] == "I am thinking of a number from 1 to 100. Guess it: reply with one number."
        assert any(obs in ex["completion"] for obs in ("Reply with a number.", "Higher.", "Lower."))
