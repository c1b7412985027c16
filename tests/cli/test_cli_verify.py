"""``rlvr verify``: JSONL in, verdicts JSONL and a summary out, bad lines named by file:line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("math_verify")

from rlvr.cli import main  # noqa: E402

ROWS = [
    {"id": "ok", "completion": "so \\boxed{\\frac{1}{2}}", "reference": "0.5"},
    {"id": "wrong", "completion": "the answer is 4", "reference": "5"},
    {"id": "none", "completion": "I give up", "reference": "7"},
]


def _write(path, rows, extra_lines=()):
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")


def test_verify_writes_verdicts_and_summary(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out" / "v.jsonl"
    _write(src, ROWS)
    assert main(["verify", str(src), "--output", str(out), "--no-progress"]) == 0
    verdicts = [json.loads(x) for x in out.read_text().splitlines()]
    assert [v["id"] for v in verdicts] == ["ok", "wrong", "none"]
    assert [v["correct"] for v in verdicts] == [True, False, False]
    assert verdicts[1]["extracted"] == "4" and verdicts[2]["reason"] == "no answer found"
    summary = json.loads((tmp_path / "out" / "v.summary.json").read_text())
    assert summary["n"] == 3 and summary["correct"] == 1 and summary["accuracy"] == pytest.approx(1 / 3)
    assert summary["reasons"]["no answer found"] == 1 and sum(summary["reasons"].values()) == 3
    assert "1/3 correct" in capsys.readouterr().out


def test_custom_fields_and_workers(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "v.jsonl"
    _write(src, [{"text": r["completion"], "gold": r["reference"]} for r in ROWS])
    assert main(["verify", str(src), "--completion-field", "text", "--reference-field", "gold",
                 "--workers", "2", "--timeout", "3", "--output", str(out), "--no-progress"]) == 0
    verdicts = [json.loads(x) for x in out.read_text().splitlines()]
    assert [v["correct"] for v in verdicts] == [True, False, False]
    assert [v["id"] for v in verdicts] == [1, 2, 3]  # line numbers when there is no id field


def test_bad_lines_are_named_and_skipped_or_stop(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "v.jsonl"
    _write(src, ROWS[:1], extra_lines=["{not json", json.dumps({"completion": "x"})])
    assert main(["verify", str(src), "--output", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"{src}:2:" in err and f"{src}:3:" in err
    assert json.loads((tmp_path / "v.summary.json").read_text())["bad_lines"] == 2
    assert main(["verify", str(src), "--output", str(out), "--on-error", "stop"]) == 2  # bad data
    assert capsys.readouterr().err.startswith(f"rlvr: error: {src}:2:")


def test_help_and_missing_file(tmp_path, capsys):
    res = subprocess.run([sys.executable, "-m", "rlvr.cli", "verify", "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    for flag in ("--completion-field", "--reference-field", "--verifier", "--workers", "--timeout", "--output"):
        assert flag in res.stdout
    assert main(["verify", str(tmp_path / "missing.jsonl")]) == 2
    assert "rlvr: error: input file not found" in capsys.readouterr().err
