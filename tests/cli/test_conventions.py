"""One convention for every command: `rlvr: error: ...` on stderr, exit 2 for bad input (usage, config, data),
1 for a failure while running, 130 for an interrupt; and `rlvr eval --help` lists only what eval reads."""

from __future__ import annotations

import importlib

import pytest

from rlvr.cli import main

BAD_INPUT = [
    ["config", "missing.yaml"],
    ["config", "train.stepz=3"],
    ["train", "missing.yaml"],
    ["train", "--seeds", "x"],
    ["eval", "missing.yaml"],
    ["eval", "--n", "0"],
    ["eval", "--k", "a,b", "eval.n=1"],
    ["eval", "model.name=smollm2-135m-instruc"],
    ["verify", "missing.jsonl"],
    ["search"],
    ["search", "s.jsonl", "--budgets", "x"],
    ["compare", "missing.json", "other.json"],
    ["contamination", "missing.jsonl", "missing2.jsonl"],
    ["export", "missing-checkpoint", "out"],
    ["seeds", "summarize", "missing-dir"],
    ["rm", "train", "missing.yaml"],
]


@pytest.mark.parametrize("argv", BAD_INPUT, ids=lambda a: " ".join(a))
def test_bad_input_exits_2_with_rlvr_error_lines(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert lines and all(line.startswith("rlvr: error: ") for line in lines), err


@pytest.mark.parametrize("argv", [["eval", "--n", "two"], ["train", "--bogus"], ["verify"], ["nosuchcommand"]])
def test_usage_mistakes_exit_2_with_the_usage_and_an_rlvr_error_line(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: rlvr") and err[-1].startswith("rlvr: error: ")
    assert len(err) >= 2


@pytest.mark.parametrize("command", ["config", "verify", "eval", "contamination"])
def test_interrupt_exits_130_and_a_failure_while_running_exits_1(command, monkeypatch, capsys):
    args = {"config": [], "verify": ["in.jsonl"], "eval": [], "contamination": ["a", "b"]}[command]

    def interrupted(ns):
        raise KeyboardInterrupt

    def broken(ns):
        raise OSError(28, "No space left on device")

    verb = importlib.import_module(f"rlvr.cli.{command}")  # the command's handler, run(ns)
    monkeypatch.setattr(verb, "run", interrupted)
    assert main([command, *args]) == 130
    monkeypatch.setattr(verb, "run", broken)
    assert main([command, *args]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == "rlvr: error: [Errno 28] No space left on device"


def test_the_cli_page_documents_the_convention():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for text in ("rlvr: error:", "| 2 |", "| 1 |", "| 130 |"):
        assert text in page


def test_eval_help_lists_only_what_eval_reads(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "102")
    for flag in ("--help", "--help-all"):
        with pytest.raises(SystemExit):
            main(["eval", flag])
        out = capsys.readouterr().out
        for used in ("tasks: task.name", "verifiers: reward.verifier", "rollout engines: rollout.engine"):
            assert used in out, (flag, used)
        for training_only in ("advantage estimators", "policy losses", "KL estimators", "environments:",
                              "algorithm.", "train.lr", "curriculum", "guidance", "distributed", "group_size",
                              "reward shaping terms"):
            assert training_only not in out, (flag, training_only)
    with pytest.raises(SystemExit):
        main(["eval", "--help-all"])
    out = capsys.readouterr().out
    for key in ("eval.max_new_tokens", "model.name", "task.params", "rollout.engine_params", "train.threads"):
        assert f"\n  {key}  " in out, key
