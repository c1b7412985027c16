"""The rollout-engine registry: each engine is a builder ``(model, tokenizer, cfg, **engine_params) -> engine``.

``cfg`` is the run's config (``rlvr.recipes.config.RunConfig``); a builder reads
what it needs from it (``rollout.*``, ``task.system_prompt``, ...).  Extra options
come from ``rollout.engine_params`` and are validated when the config loads.
Adding an engine is one file with one decorated builder::

    from rlvr.engines.registry import ENGINES

    @ENGINES.register("my_engine", doc="what it is")
    def my_engine(model, tokenizer, cfg, *, queue_depth: int = 4):
        return MyEngine(model, tokenizer, queue_depth=queue_depth)

The engine must implement :class:`rlvr.engines.base.RolloutEngine` (``generate``,
``sync_weights``, ``pad_id``, ``generator``).
"""

from __future__ import annotations

from typing import Any, Callable, Literal

from pydantic import NonNegativeInt

from rlvr.registry import Registry

__all__ = ["ENGINES", "build_engine", "hf_options"]

ENGINES: Registry[Callable[..., Any]] = Registry("rollout engine", skip=3)
"""Rollout-engine builders by name: ``builder(model, tokenizer, cfg, **options) -> engine``."""


def build_engine(name: str, model, tokenizer, cfg, **params: Any):
    """The engine registered as ``name``, built on ``model`` (its current weights) from ``cfg``."""
    ENGINES.validate_params(name, params, key="rollout.engine_params")
    return ENGINES.get(name)(model, tokenizer, cfg, **params)


@ENGINES.register("hf", doc="in-process HF model with a KV cache (the CPU default); a bf16 sampler copy if "
                            "rollout.dtype asks; engine_params {decode: compiled}: static KV cache + CUDA graphs; "
                            "{share_prefix: 16}: a batch's common prompt prefix prefilled once")
def hf_engine(model, tokenizer, cfg, *, decode: Literal["dynamic", "static", "compiled"] = "dynamic",
              share_prefix: NonNegativeInt = 0):
    """``decode``: dynamic (finished rows leave the batch; the CPU default), static (fixed shapes, a
    transformers StaticCache) or compiled (static, the step through torch.compile: CUDA graphs on a GPU).
    ``share_prefix``: prefill a chunk's common prompt prefix (chat template, system prompt) once when it is at
    least this many tokens (0: off; changes rounding, not the distribution)."""
    from rlvr.engines.hf import HFEngine, sampler_dtype

    return HFEngine(model, tokenizer, batch_size=cfg.rollout.batch_size, system_prompt=cfg.task.system_prompt,
                    dtype=sampler_dtype(cfg.rollout.dtype), merge_lora=cfg.model.lora.merge_for_rollout,
                    decode=decode, share_prefix=share_prefix)


def hf_options(cfg) -> dict:
    """``HFEngine`` keyword options from ``rollout.engine_params`` (validated; empty unless ``rollout.engine=hf``),
    for the places that build an ``HFEngine`` themselves (the FSDP learner, Ray rollout workers)."""
    if cfg.rollout.engine != "hf":
        return {}
    return ENGINES.validate_params("hf", cfg.rollout.engine_params, key="rollout.engine_params")


def vllm_options(cfg) -> dict:
    """``VLLMEngine`` keyword arguments from ``cfg.rollout`` (shared by the local and the Ray path)."""
    r = cfg.rollout
    kw = dict(gpu_memory_utilization=r.vllm_gpu_memory_utilization, tensor_parallel_size=r.vllm_tensor_parallel_size,
              enable_sleep_mode=r.vllm_sleep, sleep_between_steps=r.vllm_sleep, seed=cfg.train.seed)
    if r.vllm_max_model_len:
        kw["max_model_len"] = r.vllm_max_model_len
    return kw


def vllm_dtype(cfg) -> str:
    return cfg.model.dtype if cfg.rollout.dtype == "auto" else cfg.rollout.dtype


def model_path(cfg) -> str:
    from rlvr.models.loader import resolve_model_path

    return str(resolve_model_path(cfg.model.name, cfg.model.cache_dir))


@ENGINES.register("vllm", doc="vLLM in this process, co-located with the learner (pip install rlvr[gpu]); "
                              "rollout.vllm_* options")
def vllm_engine(model, tokenizer, cfg):
    from rlvr.engines.vllm import VLLMEngine, import_vllm

    import_vllm()  # a missing extra fails here, before a bundled model is converted for it
    eng = VLLMEngine(model_path(cfg), tokenizer, system_prompt=cfg.task.system_prompt, dtype=vllm_dtype(cfg),
                     **vllm_options(cfg))
    eng.sync_weights(model)  # the learner's weights, whatever the directory holds
    return eng
