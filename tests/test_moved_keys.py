"""Settings that moved into a registry's parameter map are refused where they used to be, with one line naming the
new key (from an override, from a file, from the command line), and the new keys reach the component."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]

MOVED = {
    "task.num_train=100": "task.params.num_train",
    "task.template=Q {expression}": "task.params.template",
    "task.num_operands=3": "task.params.num_operands",
    "task.min_value=2": "task.params.min_value",
    "task.max_value=9": "task.params.max_value",
    "task.operators=[+]": "task.params.operators",
    "task.prompt_field=q": "task.params.prompt_field",
    "task.answer_field=a": "task.params.answer_field",
    "rollout.vllm_gpu_memory_utilization=0.4": "rollout.engine_params.gpu_memory_utilization",
    "rollout.vllm_tensor_parallel_size=2": "rollout.engine_params.tensor_parallel_size",
    "rollout.vllm_max_model_len=512": "rollout.engine_params.max_model_len",
    "rollout.vllm_sleep=true": "rollout.engine_params.sleep",
    "reward.overlong_cache_len=4": "reward.shaping.overlong.cache_len",
    "reward.laser_target_length=8": "reward.shaping.laser.target_length",
    "reward.laser_alpha=0.5": "reward.shaping.laser.alpha",
}


@pytest.mark.parametrize("override", sorted(MOVED))
def test_a_moved_key_is_refused_naming_its_new_place(override):
    old = override.split("=")[0]
    with pytest.raises(ConfigError) as err:
        load_config(RunConfig, None, [override])
    assert str(err.value) == f"override {override!r}: {old}: moved to {MOVED[override]}" + \
        str(err.value).split(MOVED[override], 1)[1]
    assert len(str(err.value).splitlines()) == 1


def test_a_moved_key_in_a_file_is_one_line_with_the_file_and_line(tmp_path, capsys):
    f = tmp_path / "old.yaml"
    f.write_text("task:\n  name: arithmetic\n  num_train: 100\nrollout:\n  vllm_sleep: true\n")
    assert main(["config", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rlvr: error: {f}:3: task.num_train: moved to task.params.num_train (an option of the task's "
                   "registry entry)",
                   f"rlvr: error: {f}:5: rollout.vllm_sleep: moved to rollout.engine_params.sleep (with "
                   "rollout.engine=vllm)"]


def test_the_new_keys_are_validated_by_the_registry_entries():
    cfg = load_config(RunConfig, None, ["task.params={num_train: 5, max_value: 9, operators: [+, '-']}",
                                        "task.num_heldout=4",
                                        "rollout.engine_params={gpu_memory_utilization: 0.4, sleep: true}",
                                        "rollout.engine=vllm", "reward.shaping.overlong={cache_len: 8}"])
    assert cfg.task.params["num_train"] == 5 and cfg.reward.shaping == {"overlong": {"cache_len": 8}}
    from rlvr.tasks.registry import build_task

    train, held = build_task(cfg.task)
    assert len(train) == 5 and all(int(p.answer) <= 18 for p in train + held)
    for bad, why in (("task.params={num_operands: 1}", r"task.params.num_operands: Input should be greater than or "
                                                       "equal to 2"),
                     ("task.params={min_value: 9, max_value: 1}", r"task.params: .*min_value"),
                     ("task.params={template: 'no field'}", r"task.params: .*\{expression\}"),
                     ("task.params={max_value: 9}", r"task.params: the arithmetic spec allows only 81 distinct "
                                                    r"expressions but num_train \+ num_heldout = 2256"),
                     ("rollout.engine_params={gpu_memory_utilization: 1.5}",
                      r"rollout.engine_params.gpu_memory_utilization: Input should be less than or equal to 1"),
                     ("reward.shaping={overlong: {cache_len: 99}}", r"cache_len=99 must be at most "
                                                                    "rollout.max_new_tokens=64")):
        extra = ["rollout.engine=vllm"] if "engine_params" in bad else []
        with pytest.raises(ConfigError, match=why):
            load_config(RunConfig, None, [bad, *extra])


def test_every_shipped_config_loads():
    from rlvr.recipes.rft_config import RFTConfig
    from rlvr.recipes.sft_config import SFTConfig

    recipes = {"sft_": SFTConfig, "rft_": RFTConfig}  # the SFT / RFT recipes' configs; every other one is rlvr train's
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        if path.name.startswith("pipeline_"):  # a pipeline's stages: tests/recipes/test_pipeline.py
            continue
        load_config(next((c for p, c in recipes.items() if path.name.startswith(p)), RunConfig), path)
