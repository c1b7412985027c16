"""Build the rollout engine a run's config asks for: ``rollout.engine`` x ``distributed.backend``.

| rollout.engine | distributed.backend | engine                                                    |
| -------------- | ------------------- | --------------------------------------------------------- |
| hf             | none                | ``HFEngine`` on the learner's model (the CPU default)      |
| vllm           | none                | ``VLLMEngine`` in this process (co-located with the learner) |
| hf / vllm      | ray                 | ``RayRolloutEngine``: that engine in each Ray rollout worker |

vLLM and Ray are imported only on the rows that need them; a missing one raises
an ImportError naming the extra to install (``rlvr[gpu]``, ``rlvr[distributed]``).
"""

from __future__ import annotations

__all__ = ["make_engine", "vllm_options"]


def vllm_options(cfg) -> dict:
    """``VLLMEngine`` keyword arguments from ``cfg.rollout`` (shared by the local and the Ray path)."""
    r = cfg.rollout
    kw = dict(gpu_memory_utilization=r.vllm_gpu_memory_utilization, tensor_parallel_size=r.vllm_tensor_parallel_size,
              enable_sleep_mode=r.vllm_sleep, sleep_between_steps=r.vllm_sleep, seed=cfg.train.seed)
    if r.vllm_max_model_len:
        kw["max_model_len"] = r.vllm_max_model_len
    return kw


def _vllm_dtype(cfg) -> str:
    return cfg.model.dtype if cfg.rollout.dtype == "auto" else cfg.rollout.dtype


def _model_path(cfg) -> str:
    from rlvr.models.loader import resolve_model_path

    return str(resolve_model_path(cfg.model.name, cfg.model.cache_dir))


def make_engine(cfg, model, tokenizer):
    """The rollout engine for ``cfg`` (a ``RunConfig``), starting from ``model``'s current weights."""
    engine, backend = cfg.rollout.engine, cfg.distributed.backend
    if backend == "none":
        if engine == "hf":
            from rlvr.engines.hf import HFEngine, sampler_dtype

            return HFEngine(model, tokenizer, batch_size=cfg.rollout.batch_size,
                            system_prompt=cfg.task.system_prompt, dtype=sampler_dtype(cfg.rollout.dtype),
                            merge_lora=cfg.model.lora.merge_for_rollout)
        if engine == "vllm":
            from rlvr.engines.vllm import VLLMEngine, import_vllm

            import_vllm()  # a missing extra fails here, before a bundled model is converted for it
            eng = VLLMEngine(_model_path(cfg), tokenizer, system_prompt=cfg.task.system_prompt,
                             dtype=_vllm_dtype(cfg), **vllm_options(cfg))
            eng.sync_weights(model)  # the learner's weights, whatever the directory holds
            return eng
        raise ValueError(f"rollout.engine: unknown engine {engine!r} (hf or vllm)")
    if backend == "ray":
        from rlvr.distributed.ray_backend import EngineSpec, RayRolloutEngine, init_ray

        d = cfg.distributed
        init_ray(d.address, d.num_cpus)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        spec = EngineSpec(engine=engine, tokenizer=tokenizer, batch_size=cfg.rollout.batch_size,
                          system_prompt=cfg.task.system_prompt,
                          model_config=base.config if engine == "hf" else None,
                          model_path=_model_path(cfg) if engine == "vllm" else None,
                          dtype=cfg.rollout.dtype if engine == "hf" else _vllm_dtype(cfg),
                          vllm_kwargs=vllm_options(cfg) if engine == "vllm" else {})
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return RayRolloutEngine(spec, model, num_workers=d.num_rollout_workers,
                                cpus_per_worker=d.cpus_per_rollout_worker, gpus_per_worker=d.gpus_per_rollout_worker,
                                strategy=d.placement_strategy, max_restarts=d.max_restarts, seed=cfg.train.seed,
                                pad_id=pad_id)
    raise ValueError(f"distributed.backend: unknown backend {backend!r} (none or ray)")
