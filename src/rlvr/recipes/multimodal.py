"""What a run with a vision-language policy may not combine, refused before any sampling.

The image inputs travel with the samples in this process (``Sample.image_inputs`` -> ``Batch.image_inputs``).
The paths that carry samples or run the policy elsewhere, and the passes that read the policy's hidden
states through other routes, do not carry them yet; each is refused with its key rather than failing
(or, worse, silently dropping the images) mid-run.
"""

from __future__ import annotations

from rlvr.algorithms import ADVANTAGE_ESTIMATORS

__all__ = ["check_vision_run", "VISION_REFUSED"]

VISION_REFUSED = {
    "train.async_steps": "the generator process does not carry image inputs",
    "train.rollout_worker": "the generator process does not carry image inputs",
    "distributed.fsdp": "the sharded learner does not carry image inputs",
    "distributed.backend=ray": "Ray workers do not carry image inputs",
    "a critic (estimator needing values)": "the critic reads text-only hidden states",
    "reward.source (policy-computed)": "its no-grad passes do not carry image inputs",
    "reward.process_prm": "the PRM scores text",
}
"""What is refused with a vision-language policy, and why."""


def check_vision_run(cfg) -> None:
    """Raise ValueError naming the key when ``cfg`` asks for something a VLM run cannot do (see VISION_REFUSED)."""
    from rlvr.rewards.pipeline import source_stage

    bad = []
    if cfg.train.async_steps > 0:
        bad.append("train.async_steps")
    if cfg.train.rollout_worker:
        bad.append("train.rollout_worker")
    if cfg.distributed.fsdp:
        bad.append("distributed.fsdp")
    if cfg.distributed.backend == "ray":
        bad.append("distributed.backend=ray")
    if "values" in ADVANTAGE_ESTIMATORS.entry(cfg.algorithm.advantage).needs:
        bad.append("a critic (estimator needing values)")
    if source_stage(cfg.reward.source) == "policy":
        bad.append("reward.source (policy-computed)")
    if cfg.reward.process_prm is not None:
        bad.append("reward.process_prm")
    if bad:
        raise ValueError("a vision-language policy cannot run with " + "; ".join(
            f"{k} ({VISION_REFUSED[k]})" for k in bad))
