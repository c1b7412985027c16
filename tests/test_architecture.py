"""The layer contract (import-linter, configured in pyproject.toml) holds, and would catch a violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(src: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--config", str(ROOT / "pyproject.toml"),
                           "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _planted(tmp_path: Path, plants: dict[str, str]) -> Path:
    """A copy of the package with ``code`` appended to each module ``rel`` inside a function (``{rel: code}``)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "rlvr", src / "rlvr", ignore=shutil.ignore_patterns("__pycache__", "data"))
    for rel, code in plants.items():
        target = src / "rlvr" / rel
        target.write_text(target.read_text() + f"\n\ndef _planted():\n    {code}\n")
    return src


def test_layers_contract_is_kept():
    res = _lint(ROOT / "src")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "5 kept, 0 broken" in res.stdout


def test_a_planted_upward_import_breaks_the_contract(tmp_path):
    """An import inside a function counts: algorithms importing the recipe must fail the check."""
    res = _lint(_planted(tmp_path, {"algorithms/kl.py": "from rlvr.recipes.rl import RLRecipe\n    return RLRecipe"}))
    assert res.returncode != 0
    assert "rlvr.algorithms is not allowed to import rlvr.recipes" in res.stdout
    assert "rlvr.algorithms.kl -> rlvr.recipes.rl" in res.stdout


def test_a_planted_run_model_import_or_recipe_cycle_breaks_its_contract(tmp_path):
    """A layer below the recipes that imports the run model, and a recipe module importing one that imports it,
    are each reported by their own contract."""
    res = _lint(_planted(tmp_path, {
        "rollout/collect.py": "from rlvr.recipes.config import RunConfig\n    return RunConfig",
        "recipes/rules.py": "from rlvr.recipes.rl import RLRecipe\n    return RLRecipe"}))
    assert res.returncode != 0
    out = " ".join(res.stdout.split())
    assert "nothing below the recipes imports the run model (rlvr.recipes.config) BROKEN" in out
    assert "rlvr.rollout.collect -> rlvr.recipes.config" in out
    assert "the recipe modules import each other without a cycle BROKEN" in out


def test_a_planted_advantage_computation_outside_the_credit_stage_breaks_its_contract(tmp_path):
    """The reward stage importing GAE (as it did before the credit stage existed) is reported."""
    res = _lint(_planted(tmp_path, {"rewards/pipeline.py": "from rlvr.algorithms.gae import gae_advantages\n"
                                                           "    return gae_advantages"}))
    assert res.returncode != 0
    out = " ".join(res.stdout.split())
    assert "advantages are computed in the credit stage only BROKEN" in out
    assert "rlvr.rewards.pipeline -> rlvr.algorithms.gae" in out



def test_a_planted_command_import_in_the_clis_shared_modules_breaks_its_contract(tmp_path):
    """The help text and the commands' shared helpers import no command (rlvr.cli.<verb>) and not the registration
    (rlvr.cli): a command module is one file that nothing but the registration depends on."""
    res = _lint(_planted(tmp_path, {"cli/help.py": "from rlvr.cli.eval import EVAL_SETTINGS\n    return EVAL_SETTINGS",
                                    "cli/_common.py": "from rlvr.cli import VERBS\n    return VERBS"}))
    assert res.returncode != 0
    out = " ".join(res.stdout.split())
    assert "import no command BROKEN" in out
    assert "rlvr.cli.help -> rlvr.cli.eval" in out and "rlvr.cli._common -> rlvr.cli" in out

# --------------------------------------------------------------------------- typed boundaries, short functions
SRC = ROOT / "src" / "rlvr"
ABOVE_THE_LAYERS = ("recipes", "cli")  # what may read the run's config as a whole


def _modules_below_the_recipes():
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] not in ABOVE_THE_LAYERS:
            yield path


def _config_reads(path: Path) -> list[str]:
    """``getattr`` / ``hasattr`` calls whose object is a name ending in ``cfg`` (``cfg``, ``rcfg``, ``self.cfg``...)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args:
            obj = node.args[0]
            name = obj.id if isinstance(obj, ast.Name) else obj.attr if isinstance(obj, ast.Attribute) else ""
            if name.endswith("cfg"):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_layer_below_the_recipes_reads_a_config_with_getattr():
    """Each layer gets a typed section (rlvr.learner.settings, rlvr.engines.registry.EngineContext,
    rlvr.rollout.collect.CollectSettings, ...) and reads its fields: no ``getattr(cfg, ..., default)``.  (An HF
    model's config, whose fields vary by architecture, is named ``hf_config`` where it is read that way.)"""
    found = [hit for path in _modules_below_the_recipes() for hit in _config_reads(path)]
    assert not found, "\n".join(found)


def test_the_getattr_check_finds_a_planted_read(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f(cfg, run):\n    return getattr(cfg, 'x', 1), hasattr(run.rcfg, 'y'), getattr(run, 'z')\n")
    assert [h.split(": ", 1)[1] for h in _config_reads(planted)] == ["getattr(cfg, 'x', 1)", "hasattr(run.rcfg, 'y')"]


MAX_FUNCTION_LINES = 80
LONG_FUNCTION_EXCEPTIONS: set[str] = set()
"""``path::name`` of functions allowed past the limit: declarative tables only (a function whose body is one
literal table, e.g. a list of registrations or an argparse spec), each with a comment saying what it tabulates."""


def long_functions(root: Path = SRC, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(path::name, lines)`` of every function (or method) of more than ``limit`` lines, docstring included."""
    import ast

    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append((f"{path.relative_to(root.parent).as_posix()}::{node.name}", n))
    return out


def test_no_function_is_longer_than_80_lines():
    found = {name: n for name, n in long_functions() if name not in LONG_FUNCTION_EXCEPTIONS}
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {found}"
    assert {name for name, _ in long_functions()} == LONG_FUNCTION_EXCEPTIONS  # no exception outlives its reason


def test_the_length_check_counts_a_function_with_its_docstring(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"x{i} = {i}" for i in range(78))
    (pkg / "m.py").write_text(f'def ok():\n    """Doc."""\n{textwrap.indent(body, " " * 4)}\n\n\nclass C:\n'
                              f'    def long(self):\n        """Doc."""\n        y = 0\n{textwrap.indent(body, " " * 8)}\n')
    assert long_functions(pkg) == [("pkg/m.py::long", 81)]


def _self_assignments(cls_node) -> dict[str, set[str]]:
    """For each method of a class: the attributes it assigns on ``self``."""
    import ast

    out: dict[str, set[str]] = {}
    for fn in cls_node.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        names = set()
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for e in ast.walk(t):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                        names.add(e.attr)
        out[fn.name] = names
    return out


def test_the_recipes_declare_all_their_state_in_init():
    """Every attribute a recipe's method sets is declared in ``__init__`` (its own, or RLRecipe's for FSDPRecipe),
    so a reader finds a recipe's whole state in one place."""
    import ast

    classes = {}
    for name in ("rl.py", "fsdp.py"):
        tree = ast.parse((SRC / "recipes" / name).read_text(encoding="utf-8"))
        classes.update({n.name: n for n in tree.body if isinstance(n, ast.ClassDef)})
    declared = _self_assignments(classes["RLRecipe"])["__init__"]
    missing = {}
    for cls in ("RLRecipe", "FSDPRecipe"):
        methods = _self_assignments(classes[cls])
        own = declared | methods.get("__init__", set())
        for method, names in methods.items():
            if names - own:
                missing[f"{cls}.{method}"] = sorted(names - own)
    assert not missing, f"set outside __init__: {missing}"
    assert {"engine", "sampler", "optimizer", "rewards"} <= declared  # the scan sees the recipe's state
