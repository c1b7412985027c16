"""The command line: help text, config errors, and `rlvr eval` on a tiny model."""

from __future__ import annotations

import json

import pytest

from rlvr.cli import main


def test_train_help_all_lists_every_config_key(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help-all"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for key in ("train.steps", "rollout.group_size", "algorithm.clip_high", "eval.num_problems", "model.name"):
        assert key in out


def test_unknown_key_and_wrong_type_are_reported(capsys):
    assert main(["config", "train.stepz=3"]) == 2
    err = capsys.readouterr().err
    assert "train.stepz" in err and "train.steps" in err
    assert main(["config", "train.steps=ten"]) == 2
    assert "expected int" in capsys.readouterr().err


def test_config_prints_resolved_yaml(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train:\n  steps: 7\n")
    assert main(["config", str(cfg), "rollout.group_size=4"]) == 0
    out = capsys.readouterr().out
    assert "steps: 7" in out and "group_size: 4" in out


def test_missing_config_file(capsys):
    assert main(["config", "does-not-exist.yaml"]) == 2  # bad input: the one convention of every command
    assert capsys.readouterr().err == "rlvr: error: config file not found: does-not-exist.yaml\n"


def test_eval_on_jsonl_task_writes_json(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+0", "a": str(i)}) + "\n" for i in range(6)))
    out = tmp_path / "res.json"
    rc = main(["eval", "task.name=jsonl", f"task.path={data}", "task.params={prompt_field: q, answer_field: a}",
               "task.num_heldout=4", "eval.max_new_tokens=4", "--model", str(tiny_model_dir), "--output", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["n"] == 4 and 0 <= res["ci_low"] <= res["accuracy"] <= res["ci_high"] <= 1
    assert "accuracy" in capsys.readouterr().out


def test_eval_applies_the_configs_onednn_cache_before_generating(tmp_path, tiny_model_dir, monkeypatch):
    from rlvr.utils import accounting

    calls = []
    monkeypatch.setattr(accounting, "set_onednn_cache_capacity", lambda n: calls.append(n) or {})
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+0", "a": str(i)}) + "\n" for i in range(3)))
    common = ["task.name=jsonl", f"task.path={data}", "task.params={prompt_field: q, answer_field: a}",
              "task.num_heldout=2", "eval.max_new_tokens=2", "--model", str(tiny_model_dir)]
    assert main(["eval", *common, "train.onednn_cache=96", "--output", str(tmp_path / "a.json")]) == 0
    assert main(["eval", *common, "--output", str(tmp_path / "b.json")]) == 0  # 0 (default): the libraries' own
    assert calls == [96]


def test_malformed_dataset_line_names_file_and_line(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "1+1", "answer": "2"}\n{"prompt": "2+2", "answer": \n')
    rc = main(["eval", "task.name=jsonl", f"task.path={data}", "--model", str(tiny_model_dir),
               "--output", str(tmp_path / "o.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "malformed JSON" in err
