"""Build the rollout engine a run's config asks for: ``rollout.engine`` x ``distributed.backend``.

| distributed.backend | engine                                                                 |
| ------------------- | ---------------------------------------------------------------------- |
| none                | the ``rollout.engine`` entry of :data:`rlvr.engines.registry.ENGINES` (hf: the CPU default; vllm) |
| ray                 | ``RayRolloutEngine``: an hf or vllm engine in each Ray rollout worker    |

This is the one place that decides between a local engine and Ray workers; vLLM
and Ray are imported only on the rows that need them, and a missing one raises an
ImportError naming the extra to install (``rlvr[gpu]``, ``rlvr[distributed]``).
"""

from __future__ import annotations

from rlvr.distributed.settings import DistributedConfig
from rlvr.engines.registry import EngineContext, build_engine, hf_options, vllm_options
from rlvr.rollout.settings import RolloutConfig

__all__ = ["make_engine", "RAY_ENGINES"]

RAY_ENGINES = ("hf", "vllm")
"""Engines a Ray rollout worker can host (others are refused when the config loads)."""


def make_engine(model, tokenizer, rollout: RolloutConfig, ctx: EngineContext, distributed: DistributedConfig):
    """The rollout engine ``rollout.engine`` names, local or in ``distributed.backend``'s workers, starting from
    ``model``'s current weights."""
    engine, backend = rollout.engine, distributed.backend
    if backend == "none":
        return build_engine(engine, model, tokenizer, ctx, **rollout.engine_params)
    if backend == "ray":
        from rlvr.distributed.ray_backend import EngineSpec, RayRolloutEngine, init_ray

        if engine not in RAY_ENGINES:
            raise ValueError(f"rollout.engine={engine} cannot run in Ray rollout workers ({', '.join(RAY_ENGINES)})")
        d = distributed
        init_ray(d.address, d.num_cpus)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        spec = EngineSpec(engine=engine, tokenizer=tokenizer, batch_size=ctx.batch_size,
                          system_prompt=ctx.system_prompt,
                          model_config=base.config if engine == "hf" else None,
                          model_path=ctx.model_path() if engine == "vllm" else None,
                          dtype=ctx.resolved_dtype(next(base.parameters()).device) if engine == "hf"
                          else ctx.sampler_dtype(),
                          vllm_kwargs=vllm_options(ctx, **rollout.engine_params) if engine == "vllm" else {},
                          hf_kwargs=hf_options(engine, rollout.engine_params))
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return RayRolloutEngine(spec, model, num_workers=d.num_rollout_workers,
                                cpus_per_worker=d.cpus_per_rollout_worker, gpus_per_worker=d.gpus_per_rollout_worker,
                                strategy=d.placement_strategy, max_restarts=d.max_restarts, seed=ctx.seed,
                                pad_id=pad_id)
    raise ValueError(f"distributed.backend: unknown backend {backend!r} (none or ray)")
