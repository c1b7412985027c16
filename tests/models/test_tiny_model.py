"""`python -m rlvr.models.tiny OUT_DIR`: the tiny model for quick trials is the tests' own, loads with the
project's loader, and the docs home page's quick-trial commands run on it as written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import torch

from rlvr.cli import main
from rlvr.models import load_policy

from conftest import make_model, make_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def _quick_trial_commands() -> list[str]:
    text = (ROOT / "docs" / "index.md").read_text()
    section = text.split("\n### A tiny model for quick trials\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_module_writes_a_model_the_loader_and_the_documented_commands_accept(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the commands' relative outputs (runs/...) land here
    cmds = _quick_trial_commands()
    assert cmds[0] == "python -m rlvr.models.tiny /tmp/tiny-model"
    out = tmp_path / "tiny-model"

    res = subprocess.run([sys.executable, "-m", "rlvr.models.tiny", str(out)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"model.name={out}" in res.stdout
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()

    model, tok = load_policy(str(out))
    assert tok.padding_side == "left" and tok.pad_token == "<pad>" and tok.eos_token == "<|im_end|>"
    assert tok.apply_chat_template([{"role": "user", "content": "1+1"}], tokenize=False, add_generation_prompt=True) \
        == "<|im_start|>user\n1+1<|im_end|>\n<|im_start|>assistant\n"
    ref = make_model(make_tokenizer()).state_dict()  # the test suite's tiny model (seed 0)
    got = model.state_dict()
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)

    rlvr_cmds = [c for c in cmds if c.startswith("rlvr ")]
    assert [c.split()[1] for c in rlvr_cmds] == ["train", "eval"]
    for cmd in rlvr_cmds:
        cmd = cmd.replace("/tmp/tiny-model", str(out)).replace("configs/", f"{ROOT}/configs/")
        assert main([*shlex.split(cmd)[1:], "train.progress=false", "train.threads=1"]) == 0, cmd
    capsys.readouterr()
    lines = (tmp_path / "runs" / "tiny" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert list((tmp_path / "runs" / "eval").glob("*.results.json"))


def test_options_change_the_model(tmp_path):
    from rlvr.models.tiny import main as tiny_main

    assert tiny_main([str(tmp_path / "m"), "--seed", "1", "--layers", "1", "--hidden", "16"]) == 0
    model, _ = load_policy(str(tmp_path / "m"))
    ref = make_model(make_tokenizer(), seed=1, layers=1, hidden=16).state_dict()
    assert model.config.num_hidden_layers == 1 and model.config.hidden_size == 16
    assert all(torch.equal(model.state_dict()[k], ref[k]) for k in ref)
