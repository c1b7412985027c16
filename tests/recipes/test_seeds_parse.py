"""`--seeds`: the seed list and the sweep's plan are checked when the command loads, before any model."""

from __future__ import annotations

import pytest

import rlvr
from rlvr.cli import main
from rlvr.config import save_config
from rlvr.recipes.seeds import SeedsError, check_seeds, parse_seeds, plan_seeds

from conftest import tiny_run_config


def test_parse_seeds():
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds(" 7 , 0-2, 10 - 11 ") == [7, 0, 1, 2, 10, 11]
    assert parse_seeds("3-3") == [3]
    assert check_seeds(range(3)) == [0, 1, 2] and check_seeds("1,2") == [1, 2]


@pytest.mark.parametrize("text,message", [
    ("", "empty seed list"), (" , ", "empty seed list"), ("0,,1", "empty item"), ("-1", "negative seed -1"),
    ("0,-2", "negative seed -2"), ("1.5", "'1.5' is not a seed"), ("a", "'a' is not a seed"),
    ("1e3", "'1e3' is not a seed"), ("4-1", "range 4-1 runs backwards"), ("0,0", "seed 0 listed more than once"),
    ("0-3,2", "seed 2 listed more than once"), (str(2**32), "too large"),
])
def test_bad_seed_lists(text, message):
    with pytest.raises(SeedsError, match=message):
        parse_seeds(text)


@pytest.mark.parametrize("seeds,message", [
    ([], "empty"), ([0, 0], "listed more than once"), ([-1], "negative"), ([1.0], "not a seed"),
    ([True], "not a seed"), (["1"], "not a seed"), (3, "expected a list"),
])
def test_bad_seed_lists_from_python(seeds, message):
    with pytest.raises(SeedsError, match=message):
        check_seeds(seeds)


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: the refusals must come first."""
    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("rlvr.recipes.rl.load_policy", boom)


@pytest.mark.parametrize("text", ["", "0,0", "-1", "1.5", "a", "2-1"])
def test_cli_refuses_a_bad_seed_list_with_one_line(text, tmp_path, capsys, no_model):
    assert main(["train", f"--seeds={text}", f"train.output_dir={tmp_path}", "train.steps=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlvr: error: --seeds: "), err
    assert not any(tmp_path.iterdir())


def test_cli_refuses_train_seed_beside_seeds(tmp_path, capsys, no_model):
    assert main(["train", "--seeds", "0,1", "train.seed=3", f"train.output_dir={tmp_path}"]) == 2
    assert "drop the train.seed override" in capsys.readouterr().err


def test_python_api_refuses_bad_seeds_before_the_config(no_model):
    with pytest.raises(SeedsError, match="listed more than once"):
        rlvr.train({"train": {"stepz": 1}}, seeds=[1, 1])  # the seeds are checked first: no ConfigError
    with pytest.raises(SeedsError, match="empty"):
        rlvr.train_seeds(None, seeds=[])


def test_plan_reads_what_each_seed_has(tmp_path):
    cfg = tiny_run_config(tmp_path)
    (tmp_path / "seed-0").mkdir()
    save_config(cfg.model_copy(update={"train": cfg.train.model_copy(
        update={"seed": 0, "output_dir": str(tmp_path / "seed-0")})}), tmp_path / "seed-0" / "config.yaml")
    (tmp_path / "seed-0" / "summary.json").write_text("{}")
    ck = tmp_path / "seed-1" / "checkpoints" / "step-000002"
    ck.mkdir(parents=True)
    (ck / "DONE").write_text("")  # a complete checkpoint (the marker save_checkpoint writes last)
    plans = plan_seeds(cfg, [0, 1, 2])
    assert [p.action for p in plans] == ["skip", "resume", "train"]
    assert plans[1].checkpoint == ck and plans[1].cfg.train.resume is True
    assert [p.cfg.train.seed for p in plans] == [0, 1, 2]
    assert [p.cfg.train.output_dir for p in plans] == [str(tmp_path / f"seed-{s}") for s in (0, 1, 2)]
    assert plans[2].cfg.train.resume is False and plans[0].cfg.train.steps == cfg.train.steps


def test_a_seed_trained_with_another_config_is_refused(tmp_path, capsys, no_model):
    cfg = tiny_run_config(tmp_path)
    other = cfg.model_copy(update={"train": cfg.train.model_copy(
        update={"seed": 1, "output_dir": str(tmp_path / "seed-1"), "lr": 0.5})})
    (tmp_path / "seed-1").mkdir()
    save_config(other, tmp_path / "seed-1" / "config.yaml")
    with pytest.raises(SeedsError, match=r"seed-1 was trained with another config \(train.lr: 0.01 here, 0.5 there\)"):
        plan_seeds(cfg, [0, 1])
    assert main(["train", "--seeds", "0-1", f"train.output_dir={tmp_path}", "train.lr=1e-2", "train.steps=4",
                 "train.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
                 "train.micro_batch_size=4", "train.warmup_steps=0", "train.save_every=0", "train.progress=false",
                 "eval.before_training=false", "eval.after_training=false"]) == 2
    assert "rlvr: error: --seeds: " in capsys.readouterr().err
    assert not (tmp_path / "seed-0").exists()


def test_fsdp_sweeps_are_refused(tmp_path):
    cfg = tiny_run_config(tmp_path, "distributed.fsdp=true")
    with pytest.raises(SeedsError, match="distributed.fsdp"):
        plan_seeds(cfg, [0, 1])
