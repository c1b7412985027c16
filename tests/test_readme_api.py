"""The README's Python API block runs as written, with a tiny model and tiny sizes swapped in."""

from __future__ import annotations

import re
from pathlib import Path

import rlvr

ROOT = Path(__file__).resolve().parents[1]


def _readme_block(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_api_example_runs(tmp_path, tiny_model_dir, monkeypatch):
    code = _readme_block("Python API")
    assert "rlvr.train(" in code and "rlvr.evaluate(" in code
    tiny = [f"model.name={tiny_model_dir}", "task.params.num_train=8", "task.num_heldout=4", "train.prompts_per_step=2",
            "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.max_new_tokens=4", "train.progress=false"]
    calls = {}

    class Shim:  # the real API, with tiny sizes appended to what the README passes
        @staticmethod
        def train(config, *overrides, **kw):
            calls["train"] = overrides
            return rlvr.train(str(ROOT / config), *overrides, *tiny, **kw)

        @staticmethod
        def evaluate(model, **kw):
            calls["evaluate"] = kw
            kw["max_new_tokens"] = 4
            return rlvr.evaluate(model, samples_path=tmp_path / "samples.jsonl", **kw)

    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code.replace("import rlvr\n", ""), "README.md", "exec"), {"rlvr": Shim, "print": lambda *a: None}, ns)
    assert calls["train"][0] == "train.steps=2" and calls["evaluate"]["task"] == "gsm8k"
    assert (tmp_path / "runs" / "api_demo" / "metrics.jsonl").is_file()
    results = ns["results"]
    assert results["num_problems"] == 4 and 0.0 <= results["ci_low"] <= results["accuracy"] <= results["ci_high"] <= 1.0


def test_train_accepts_a_dict_and_refuses_bad_keys(tmp_path):
    import pytest

    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match="unknown config key 'train.stepz'"):
        rlvr.train({"train": {"stepz": 1}})
    with pytest.raises(ConfigError, match="train.steps: expected int"):
        rlvr.train({"train": {"output_dir": str(tmp_path)}}, "train.steps=many")
