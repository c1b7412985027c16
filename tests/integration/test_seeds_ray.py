"""`rlvr train --seeds` with distributed.backend=ray: every seed a learner actor placed with its rollout worker in
its own placement group, on a local 2-CPU Ray cluster; Ray decides when each starts."""

from __future__ import annotations

import json
import sys

import pytest

from rlvr.learner.checkpoint import latest_checkpoint

LOWERCASE = json.dumps([{"type": "lowercase"}])


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray not installed (optional extra: pip install 'rlvr[distributed]')")
    for attempt in range(3):  # Ray gives its raylet a fixed 30 s to register: too short on a saturated machine
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception as e:  # "The current node timed out during startup"
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_seeds_run_as_ray_learner_actors(cluster, tmp_path, tiny_model_dir, capsys):
    from rlvr.cli import main

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {i}.", "answer": LOWERCASE}) + "\n" for i in range(12)))
    out = tmp_path / "sweep"
    args = ["train", "--seeds", "0,1", f"model.name={tiny_model_dir}", "task.name=jsonl", f"task.path={data}",
            "task.num_heldout=4", "reward.verifier=instruction", f"train.output_dir={out}", "train.steps=2",
            "train.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=4", "train.micro_batch_size=4",
            "train.lr=5e-2", "train.warmup_steps=0", "train.save_every=1", "train.threads=1", "eval.num_problems=4",
            "eval.max_new_tokens=4", "distributed.backend=ray", "distributed.num_rollout_workers=1",
            "distributed.cpus_per_learner=0.5", "distributed.cpus_per_rollout_worker=0.25"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "2 seeds in" in printed and "(Ray)" in printed
    for s in (0, 1):
        assert f"training in {out / f'seed-{s}'} (submitted to Ray)" in printed and f"seed {s} [{s + 1}/2]: done in" in printed
        assert (out / f"seed-{s}" / "summary.json").is_file()
        assert latest_checkpoint(out / f"seed-{s}").name == "step-000002"
    summary = json.loads((out / "seeds.json").read_text())
    assert summary["finished"] == [0, 1] and summary["statistics"]["greedy"]["after"]["n"] == 2


@pytest.mark.slow  # the local cluster takes 10-40 s to start
def test_a_run_larger_than_the_cluster_is_refused(cluster, tmp_path):
    from rlvr.config import load_config
    from rlvr.distributed.ray_backend import submit_to_cluster
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import RLRecipe, actor_run

    cfg = load_config(RunConfig, None, [f"train.output_dir={tmp_path}", "distributed.backend=ray",
                                        "distributed.cpus_per_learner=3"])
    with pytest.raises(RuntimeError, match="one run needs 5 CPU"):  # 3 for the learner + 2 workers x 1
        submit_to_cluster(actor_run(RLRecipe, cfg), cfg.distributed, ready_timeout=None)
