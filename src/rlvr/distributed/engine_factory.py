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

from rlvr.engines.registry import build_engine, hf_options, model_path, vllm_dtype, vllm_options

__all__ = ["make_engine", "vllm_options", "RAY_ENGINES"]

RAY_ENGINES = ("hf", "vllm")
"""Engines a Ray rollout worker can host (others are refused when the config loads)."""


def make_engine(cfg, model, tokenizer):
    """The rollout engine for ``cfg`` (a ``RunConfig``), starting from ``model``'s current weights."""
    engine, backend = cfg.rollout.engine, cfg.distributed.backend
    if backend == "none":
        return build_engine(engine, model, tokenizer, cfg, **cfg.rollout.engine_params)
    if backend == "ray":
        from rlvr.distributed.ray_backend import EngineSpec, RayRolloutEngine, init_ray

        if engine not in RAY_ENGINES:
            raise ValueError(f"rollout.engine={engine} cannot run in Ray rollout workers ({', '.join(RAY_ENGINES)})")
        d = cfg.distributed
        init_ray(d.address, d.num_cpus)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        spec = EngineSpec(engine=engine, tokenizer=tokenizer, batch_size=cfg.rollout.batch_size,
                          system_prompt=cfg.task.system_prompt,
                          model_config=base.config if engine == "hf" else None,
                          model_path=model_path(cfg) if engine == "vllm" else None,
                          dtype=cfg.rollout.dtype if engine == "hf" else vllm_dtype(cfg),
                          vllm_kwargs=vllm_options(cfg) if engine == "vllm" else {}, hf_kwargs=hf_options(cfg))
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return RayRolloutEngine(spec, model, num_workers=d.num_rollout_workers,
                                cpus_per_worker=d.cpus_per_rollout_worker, gpus_per_worker=d.gpus_per_rollout_worker,
                                strategy=d.placement_strategy, max_restarts=d.max_restarts, seed=cfg.train.seed,
                                pad_id=pad_id)
    raise ValueError(f"distributed.backend: unknown backend {backend!r} (none or ray)")
