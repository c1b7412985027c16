"""Overriding the component a section names replaces the file's options of the former component, and an error
on an option names where that option was set (the file's line or the override)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "arithmetic_grpo.yaml"


def test_a_task_name_override_drops_the_files_task_params(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(8)))
    cfg = load_config(RunConfig, DEMO, ["task.name=jsonl", f"task.path={data}", "task.num_heldout=2"])
    assert cfg.task.name == "jsonl" and cfg.task.params == {}
    kept = load_config(RunConfig, DEMO, ["task.name=arithmetic"])  # the same component: its options stay
    assert kept.task.params == {"num_train": 2000}


def test_options_given_as_overrides_apply_to_the_new_component(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"q": "1+1", "a": "2"}\n' * 8)
    cfg = load_config(RunConfig, DEMO, ["task.name=jsonl", f"task.path={data}", "task.params.prompt_field=q",
                                        "task.params.answer_field=a", "task.num_heldout=2"])
    assert cfg.task.params == {"prompt_field": "q", "answer_field": "a"}  # not the file's num_train


def test_an_option_kept_from_the_file_names_its_line_not_an_override(tmp_path):
    with pytest.raises(ConfigError) as e:  # the file's own task (arithmetic) keeps its options
        load_config(RunConfig, DEMO, ["task.params={bogus: 1}", "task.params.num_operands=2"])
    assert "override 'task.params={bogus: 1}': task.params.bogus: not an option" in str(e.value)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task:\n  name: arithmetic\n  params:\n    num_train: 20\n    bogus: 3\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}:5: task.params.bogus: not an option"):
        load_config(RunConfig, cfg, ["task.params={num_train: 30}"])  # the override sets params, not bogus


def test_an_option_set_by_an_override_names_the_override():
    with pytest.raises(ConfigError, match=r"^override 'task.params.bogus=1': task.params.bogus: not an option"):
        load_config(RunConfig, DEMO, ["train.steps=2", "task.params.bogus=1"])


def test_an_option_in_the_file_names_its_line_even_beside_other_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task:\n  name: arithmetic\n  params:\n    num_train: 20\n    bogus: 3\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}:5: task.params.bogus: not an option"):
        load_config(RunConfig, cfg, ["train.steps=2"])


def test_every_component_name_with_options_is_replaced_the_same_way(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  verifier: math\n  verifier_params: {timeout: 9}\n"
                   "algorithm:\n  advantage: passk\n  advantage_params: {k: 4}\n"
                   "env:\n  name: single_turn\n  params: {}\n")
    out = load_config(RunConfig, cfg, ["reward.verifier=numeric", "algorithm.advantage=grpo"])
    assert out.reward.verifier_params == {} and out.algorithm.advantage_params == {}
    assert load_config(RunConfig, cfg, ["train.steps=1"]).reward.verifier_params == {"timeout": 9}


def test_naming_the_default_component_again_keeps_the_files_options(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task:\n  params: {num_train: 30}\n")  # task.name is the default, arithmetic
    assert load_config(RunConfig, cfg, ["task.name=arithmetic"]).task.params == {"num_train": 30}
