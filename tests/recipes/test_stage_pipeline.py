"""Stages in one config: each stage starts from the one before's final model, a killed pipeline resumes at the
right stage and step, bad stage lists fail when the pipeline loads (before any model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.config import ConfigError
from rlvr.recipes.pipeline import load_pipeline, plan_stages, run_pipeline
from rlvr.recipes.rl import TrainingInterrupted
from rlvr.recipes.rundir import RunDirectoryError

TINY = ["train.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8", "train.micro_batch_size=4",
        "train.lr=1e-2", "train.warmup_steps=0", "train.progress=false", "eval.before_training=false",
        "eval.after_training=false", "train.seed=3", "train.threads=1", "train.check_memory=false",
        # the tiny model earns no reward: an entropy bonus moves its weights all the same
        "algorithm.skip_zero_advantage=false", "algorithm.entropy_coef=0.1"]


def _stage(name: str, steps: int, extra: tuple[str, ...] = ()) -> str:
    return "{kind: rl, name: %s, overrides: [%s]}" % (name, ", ".join([f"train.steps={steps}", *TINY, *extra]))


def _pipeline(tmp_path: Path, model: Path, *stages: str, extra: tuple[str, ...] = ()):
    return load_pipeline(None, [f"model={model}", f"output_dir={tmp_path / 'pipe'}",
                                f"stages=[{', '.join(stages)}]", *extra])


def _weights(model_dir: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def test_each_stage_starts_from_the_previous_final_model(tmp_path, tiny_model_dir):
    cfg = _pipeline(tmp_path, tiny_model_dir, _stage("a", 2), _stage("b", 1, ("train.save_every=0",)))
    out = run_pipeline(cfg, print_fn=lambda s: None)
    a, b = out["stages"]
    assert a["name"] == "a" and b["name"] == "b" and a["steps"] == 2 and b["steps"] == 1
    # stage b's run loaded stage a's final model
    saved_b = (Path(b["directory"]) / "config.yaml").read_text()
    assert f"name: {a['final_model']}" in saved_b
    assert out["final_model"] == b["final_model"] != a["final_model"]
    wa, wb, w0 = _weights(a["final_model"]), _weights(b["final_model"]), _weights(str(tiny_model_dir))
    assert any(not torch.equal(wa[k], w0[k]) for k in wa)  # stage a trained
    assert any(not torch.equal(wb[k], wa[k]) for k in wb)  # stage b trained on from a
    summary = json.loads((tmp_path / "pipe" / "summary.json").read_text())
    assert [s["name"] for s in summary["stages"]] == ["a", "b"]
    assert "| 1. a | rl | 2 |" in (tmp_path / "pipe" / "summary.md").read_text()
    # a second run into the same directory is refused without --resume / --overwrite
    with pytest.raises(RunDirectoryError, match="earlier pipeline"):
        run_pipeline(cfg, print_fn=lambda s: None)


def test_a_killed_pipeline_resumes_at_its_stage_and_step(tmp_path, tiny_model_dir):
    stages = (_stage("a", 2), _stage("b", 3, ("train.save_every=1",)))
    straight = run_pipeline(_pipeline(tmp_path / "straight", tiny_model_dir, *stages), print_fn=lambda s: None)

    calls = []

    def kill_in_stage_b(row):
        calls.append(row["step"])
        if len(calls) == 2 + 2:  # stage a's two steps, then stage b's second step
            raise KeyboardInterrupt

    cfg = _pipeline(tmp_path / "killed", tiny_model_dir, *stages)
    with pytest.raises(TrainingInterrupted):
        run_pipeline(cfg, print_fn=lambda s: None, on_step=kill_in_stage_b)
    lines: list[str] = []
    resumed_steps = []
    out = run_pipeline(_pipeline(tmp_path / "killed", tiny_model_dir, *stages, extra=("resume=true",)),
                       print_fn=lines.append, on_step=lambda row: resumed_steps.append(row["step"]))
    assert any("stage 1/2 a (rl): finished earlier, skipped" in s for s in lines)
    assert any("stage 2/2 b (rl)" in s and "(resuming)" in s for s in lines)
    assert resumed_steps == [3]  # stage a not rerun; stage b continued after its 2 finished steps
    assert [s["skipped"] for s in out["stages"]] == [True, False]
    w_straight, w_resumed = _weights(straight["final_model"]), _weights(out["final_model"])
    assert all(torch.equal(w_straight[k], w_resumed[k]) for k in w_straight)


def test_a_changed_finished_stage_is_refused_on_resume(tmp_path, tiny_model_dir):
    run_pipeline(_pipeline(tmp_path, tiny_model_dir, _stage("a", 1)), print_fn=lambda s: None)
    changed = _pipeline(tmp_path, tiny_model_dir, _stage("a", 1, ("train.lr=0.5",)), extra=("resume=true",))
    with pytest.raises(RunDirectoryError, match=r"train\.lr"):
        run_pipeline(changed, print_fn=lambda s: None)


def test_placeholders_name_earlier_stages(tmp_path, tiny_model_dir):
    cfg = _pipeline(tmp_path, tiny_model_dir, _stage("a", 1),
                    "{kind: rl, name: b, model: %s, overrides: [train.steps=1]}" % tiny_model_dir)
    planned = plan_stages(cfg, finals={"a": "/x/a-final", "#1": "/x/a-final"})
    assert planned[1].config.model.name == str(tiny_model_dir)  # its own model, not the previous one
    assert [p.directory.name for p in planned] == ["01-a", "02-b"]
    rep = load_pipeline(None, [f"model={tiny_model_dir}", "repeat=2",
                               "stages=[{kind: rl, name: s}, {kind: rl, name: r}]"])
    assert [p.directory.name for p in plan_stages(rep)] == ["01-s", "02-r", "03-s", "04-r"]


@pytest.mark.parametrize("stages, message", [
    ("[]", "the list is empty"),
    ("[{kind: sftt}]", "unknown stage kind 'sftt'"),
    ("[{kind: rl, name: 'a/b'}]", "letters, digits"),
    ("[{kind: rl, overrides: [train.steps]}]", "not a key=value override"),
    ("[{kind: rl, overrides: ['model.name={stage:zz}']}]", "no earlier stage is named 'zz'"),
    ("[{kind: rl, overrides: ['model.name={previous}']}]", "the first stage has no previous stage"),
    ("[{kind: rl, name: a}, {kind: rl, name: a}]", "more than one stage"),
])
def test_bad_stage_lists_fail_at_load(stages, message):
    with pytest.raises(ConfigError, match=message):
        load_pipeline(None, [f"stages={stages}"])


def test_a_bad_stage_config_names_the_pipeline_file_and_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("output_dir: x\nstages:\n  - kind: rl\n  - kind: rl\n    overrides: [train.steps=-1]\n")
    cfg = load_pipeline(path)
    with pytest.raises(ConfigError, match=r"p\.yaml:4 \(stage 2, rl\).*train\.steps"):
        plan_stages(cfg, path)
    path.write_text("stages:\n  - {kind: rl, config: nowhere.yaml}\n")
    with pytest.raises(ConfigError, match="config file not found: nowhere.yaml"):
        plan_stages(load_pipeline(path), path)


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("pipeline_*.yaml")), ids=lambda p: p.name)
def test_every_shipped_pipeline_loads_with_all_its_stages(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # stage configs are named from the project root, as the README runs them
    cfg = load_pipeline(path)
    planned = plan_stages(cfg, path)
    assert len(planned) == len(cfg.stages) * cfg.repeat >= 2
    assert all(p.directory.parent == Path(cfg.output_dir) for p in planned)
