"""The ``distributed`` section of a run: Ray rollout workers, a Ray learner actor, FSDP sharding."""

from __future__ import annotations

from typing import Literal

from rlvr.config import ConfigModel, option

__all__ = ["DistributedConfig"]


class DistributedConfig(ConfigModel):
    backend: Literal["none", "ray"] = option(
        "none", "none: everything in this process; ray: rollout workers are Ray actors (needs the distributed extra)")
    fsdp: bool = option(False, "shard the learner with FSDP2 over the ranks torchrun starts, one per GPU (gloo on "
                               "CPU): torchrun --nproc-per-node N -m rlvr.cli train ... distributed.fsdp=true")
    mixed_precision: Literal["bf16", "none"] = option(
        "bf16", "fsdp: bf16 compute and all-gathers, fp32 master weights, AdamW state and gradient reduction; "
                "none: the model's dtype throughout")
    activation_checkpointing: bool = option(
        False, "fsdp: recompute each decoder block's activations in backward (less memory, more compute)")
    address: str | None = option(None, "Ray cluster to join (auto: the one `ray start --head` started here; "
                                       "ray://host:10001; None: start a local one)")
    num_cpus: int = option(0, "CPUs a locally started Ray cluster offers (0: all cores)", ge=0)
    num_rollout_workers: int = option(2, "Ray actors that sample rollouts (prompts are sharded across them)", ge=1)
    cpus_per_rollout_worker: float = option(1.0, "CPUs reserved for each rollout worker", ge=0)
    gpus_per_rollout_worker: float = option(0.0, "GPUs reserved for each rollout worker (vllm: tensor_parallel_size)",
                                            ge=0)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = option(
        "PACK", "Ray placement-group strategy for the workers' bundles (PACK: fill a node first; SPREAD: spread)")
    max_restarts: int = option(3, "times Ray restarts a dead rollout worker before rlvr recreates it", ge=-1)
    learner: Literal["driver", "actor"] = option(
        "driver", "where the learner runs: driver (this process) or actor (a Ray actor in the same placement "
                  "group as the rollout workers, bundle 0)")
    cpus_per_learner: float = option(1.0, "CPUs reserved for the learner actor (learner=actor)", ge=0)
    gpus_per_learner: float = option(0.0, "GPUs reserved for the learner actor (learner=actor)", ge=0)

