"""Plugins: modules named by --import, by `plugins:` in a config, or by an `rlvr.plugins` entry point are
imported before the config is checked, so the components they register are known names; a broken plugin
is one error line naming it (and its distribution)."""

from __future__ import annotations

import re
import textwrap

import pytest

import rlvr.plugins as plugins
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.envs import ENVIRONMENTS
from rlvr.plugins import PluginError, load_entry_points, load_plugins
from rlvr.recipes.config import RunConfig
from rlvr.verifiers import VERIFIERS

ENV_PLUGIN = '''
from rlvr.envs import ENVIRONMENTS
from rlvr.envs.single_turn import SingleTurnEnvironment


@ENVIRONMENTS.register("{name}")
def build(verifier, tokenizer, *, rounds: int = 1):
    """A test environment from a plugin module. It says so."""
    return SingleTurnEnvironment(verifier)
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A directory on sys.path for throw-away plugin modules; their registrations are undone afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[tuple[object, str]] = []

    def write(module: str, source: str, registry=None, name: str | None = None) -> None:
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(__import__("sys").modules, module, raising=False)
        if registry is not None:
            made.append((registry, name))

    yield write
    for registry, name in made:
        registry.unregister(name)
    import sys

    for mod in [m for m in sys.modules if m.startswith("rlvrtest_")]:
        del sys.modules[mod]


def test_unknown_environment_without_the_plugin_says_how_to_add_one(capsys):
    assert main(["config", "env.name=guess_number"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown environment 'guess_number'" in err[0] and "--import MODULE" in err[0]


def test_import_flag_registers_a_plugin_before_the_config_is_checked(plugin_dir, capsys):
    plugin_dir("rlvrtest_env_a", ENV_PLUGIN.format(name="rlvrtest_env_a"), ENVIRONMENTS, "rlvrtest_env_a")
    assert main(["config", "env.name=rlvrtest_env_a", "env.params={rounds: 3}", "--import", "rlvrtest_env_a"]) == 0
    out = capsys.readouterr().out
    assert "name: rlvrtest_env_a" in out and "rounds: 3" in out


def test_import_flag_lists_the_plugin_in_help(plugin_dir, capsys):
    plugin_dir("rlvrtest_env_b", ENV_PLUGIN.format(name="rlvrtest_env_b"), ENVIRONMENTS, "rlvrtest_env_b")
    with pytest.raises(SystemExit) as e:
        main(["train", "--import=rlvrtest_env_b", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert re.search(r"\n    rlvrtest_env_b +A test environment from a plugin module\.\n", out)
    assert "It says so" not in out  # the first sentence only


def test_plugins_in_yaml_are_imported_before_validation(plugin_dir, tmp_path, capsys):
    plugin_dir("rlvrtest_env_c", ENV_PLUGIN.format(name="rlvrtest_env_c"), ENVIRONMENTS, "rlvrtest_env_c")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("plugins: [rlvrtest_env_c]\nenv:\n  name: rlvrtest_env_c\n")
    assert main(["config", str(cfg)]) == 0
    assert "- rlvrtest_env_c" in capsys.readouterr().out
    loaded = load_config(RunConfig, cfg)  # the library path too
    assert loaded.plugins == ["rlvrtest_env_c"] and loaded.env.name == "rlvrtest_env_c"


def test_a_missing_or_broken_plugin_is_one_error_line_naming_it(plugin_dir, capsys):
    assert main(["config", "--import", "rlvrtest_not_there"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rlvr: error: plugin 'rlvrtest_not_there': no module named 'rlvrtest_not_there' (is its "
                   "package installed, or its directory on PYTHONPATH?)"]
    plugin_dir("rlvrtest_broken", "import json\nraise RuntimeError('bad registration')\n")
    assert main(["train", "--import", "rlvrtest_broken", "--help"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rlvr: error: plugin 'rlvrtest_broken' failed to import: RuntimeError: bad registration"]
    with pytest.raises(ConfigError, match="plugin 'rlvrtest_broken' failed to import: RuntimeError"):
        load_config(RunConfig, None, ["plugins=[rlvrtest_broken]"])
    plugin_dir("rlvrtest_needs", "import rlvrtest_dependency_missing\n")
    with pytest.raises(PluginError, match="plugin 'rlvrtest_needs' failed to import: ModuleNotFoundError: No "
                                          "module named 'rlvrtest_dependency_missing'"):
        load_plugins(["rlvrtest_needs"])


def _dist(site, name: str, module: str, entry: str = "example") -> None:
    """A minimal installed distribution (a .dist-info directory) with one rlvr.plugins entry point."""
    info = site / f"{name.replace('-', '_')}-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(f"[rlvr.plugins]\n{entry} = {module}\n")


def test_entry_points_are_discovered_and_their_errors_name_the_distribution(plugin_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(plugins, "_loaded_entry_points", None)  # restored after the test
    plugin_dir("rlvrtest_ep_ok", '''
        from rlvr.types import Verdict
        from rlvr.verifiers import register_verifier

        @register_verifier("rlvrtest_ep_verifier")
        def factory():
            """Always right."""
            return lambda completion, reference: Verdict(1.0, completion, "ok")
    ''', VERIFIERS, "rlvrtest_ep_verifier")
    _dist(tmp_path, "rlvrtest-good", "rlvrtest_ep_ok", entry="good")
    assert "rlvrtest_ep_verifier" not in VERIFIERS
    cfg = load_config(RunConfig, None, ["reward.verifier=rlvrtest_ep_verifier"])  # discovery at config load
    assert cfg.reward.verifier == "rlvrtest_ep_verifier" and "good" in load_entry_points()

    plugin_dir("rlvrtest_ep_bad", "raise ImportError('needs libfoo')\n")
    _dist(tmp_path, "rlvrtest-bad", "rlvrtest_ep_bad", entry="bad")
    with pytest.raises(PluginError) as e:
        load_entry_points(reload=True)
    assert str(e.value) == ("plugin 'bad' (rlvr.plugins entry point 'rlvrtest_ep_bad' of the distribution "
                            "rlvrtest-bad 0.3) failed to import: ImportError: needs libfoo")
