"""The command modules' contract (rlvr/cli/__init__.py): one module per command, registered by name in
``rlvr.cli.VERBS``, exposing ``add_parser(sub)`` and ``run(ns) -> int``; importing one stays cheap."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import rlvr.cli as cli
from rlvr.cli import main

CLI_DIR = Path(cli.__file__).parent
NOT_COMMANDS = {"__init__", "__main__", "_common", "help"}


def test_every_command_module_is_registered_and_has_add_parser_and_run():
    modules = {p.stem for p in CLI_DIR.glob("*.py")} - NOT_COMMANDS
    assert modules == set(cli.VERBS), "a module in rlvr/cli/ that VERBS does not name (or the reverse)"
    for verb in cli.VERBS:
        module = importlib.import_module(f"rlvr.cli.{verb}")
        assert callable(module.add_parser) and callable(module.run), verb


def test_the_parser_has_the_registered_commands_in_their_order():
    sub = cli.build_parser()._subparsers._group_actions[0]
    assert tuple(sub.choices) == cli.VERBS


def test_a_new_command_is_one_module_plus_its_name_in_verbs(monkeypatch, capsys):
    """A module registered in VERBS is listed by `rlvr --help` (last) and its run(ns) is the command."""
    hello = types.ModuleType("rlvr.cli.hello")

    def add_parser(sub):
        p = sub.add_parser("hello", help="say hello N times")
        p.add_argument("--n", type=int, default=1)
        p.set_defaults(func=hello.run)

    def run(ns):
        print("hello " * ns.n)
        return 3

    hello.add_parser, hello.run = add_parser, run
    monkeypatch.setitem(sys.modules, "rlvr.cli.hello", hello)
    monkeypatch.setattr(cli, "VERBS", cli.VERBS + ("hello",))
    assert main(["hello", "--n", "2"]) == 3
    assert capsys.readouterr().out.strip() == "hello hello"
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    ([a-z]+)  +\S", capsys.readouterr().out, flags=re.M)  # the commands' help lines
    assert [c for c in listed if c != "rlvr"] == [*cli.VERBS[:-1], "hello"]


def test_importing_the_command_modules_imports_no_library_stage():
    """The library a command calls is imported inside its run(): the modules themselves (all of them are
    imported for any `rlvr` command) load neither torch nor a recipe."""
    code = ("import importlib, sys, rlvr.cli as c\n"
            "[importlib.import_module('rlvr.cli.' + v) for v in c.VERBS]\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'pydantic')"
            " or m.startswith(('rlvr.recipes', 'rlvr.learner', 'rlvr.evaluate', 'rlvr.cli.help'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_python_dash_m_rlvr_cli_is_the_rlvr_command():
    """`python -m rlvr.cli` (also how torchrun starts `rlvr train` on each rank) runs main()."""
    res = subprocess.run([sys.executable, "-m", "rlvr.cli", "nosuchcommand"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1].startswith("rlvr: error: argument COMMAND: invalid choice: 'nosuchcommand'")
