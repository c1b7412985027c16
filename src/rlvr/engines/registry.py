"""The rollout-engine registry: each engine is a builder ``(model, tokenizer, ctx, **engine_params) -> engine``.

``ctx`` is an :class:`EngineContext`: what every engine is given (batch size, system
prompt, sampler precision, where the policy's weights live, the seed); the recipe
makes it from the run's ``rollout.*``, ``model.*``, ``task.system_prompt`` and
``train.seed``.  An engine's own options come from ``rollout.engine_params`` and are
validated against its builder's keyword parameters when the config loads.  Adding an
engine is one file with one decorated builder::

    from rlvr.engines.registry import ENGINES

    @ENGINES.register("my_engine", doc="what it is")
    def my_engine(model, tokenizer, ctx, *, queue_depth: int = 4):
        return MyEngine(model, tokenizer, batch_size=ctx.batch_size, queue_depth=queue_depth)

The engine must implement every member of :class:`rlvr.engines.base.RolloutEngine` (``generate``,
``sync_weights``, ``tokenizer``, ``generator``, ``pad_id``, ``eos_ids``, ...); subclassing
:class:`rlvr.engines.base.EngineBase` gives the optional ones their "not supported" defaults.
:func:`build_engine` refuses an engine that lacks one, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from rlvr.registry import Registry

__all__ = ["ENGINES", "EngineContext", "build_engine", "check_engine", "hf_options", "vllm_options"]

ENGINES: Registry[Callable[..., Any]] = Registry("rollout engine", skip=3)
"""Rollout-engine builders by name: ``builder(model, tokenizer, ctx: EngineContext, **options) -> engine``."""


@dataclass(frozen=True, kw_only=True)
class EngineContext:
    """What every engine builder is given besides its own options; each field names the config key it comes from."""

    batch_size: int = 64
    """``rollout.batch_size``: sequences decoded together."""
    system_prompt: str | None = None
    """``task.system_prompt``: the system message of every prompt (None: the chat template's default)."""
    dtype: Literal["auto", "float32", "bfloat16", "fast"] = "auto"
    """``rollout.dtype``: the sampler's precision (auto: the policy's; fast: bfloat16 where native, else float32)."""
    policy_dtype: Literal["float32", "bfloat16"] = "float32"
    """``model.dtype``: the policy's parameter dtype."""
    merge_lora: bool = True
    """``model.lora.merge_for_rollout``: sample from merged LoRA weights."""
    model_name: str = "smollm2-135m-instruct"
    """``model.name``: where an engine that loads weights from disk (vLLM) finds them."""
    cache_dir: str | None = None
    """``model.cache_dir``: where bundled models are converted to."""
    seed: int = 0
    """``train.seed``: the engine's own sampling seed (vLLM)."""

    def resolved_dtype(self, device=None) -> str:
        """``dtype`` with ``fast`` resolved for ``device`` (None: CUDA when available, else the CPU) by
        :func:`rlvr.utils.precision.fast_dtype`: auto, float32 or bfloat16."""
        if self.dtype != "fast":
            return self.dtype
        from rlvr.utils.precision import fast_dtype

        return fast_dtype(device)

    def sampler_dtype(self, device=None) -> str:
        """The sampler's dtype name: ``dtype`` (``fast`` resolved for ``device``), or the policy's when auto."""
        d = self.resolved_dtype(device)
        return self.policy_dtype if d == "auto" else d

    def model_path(self) -> str:
        """The policy's directory on disk (a bundled model is converted first)."""
        from rlvr.models.loader import resolve_model_path

        return str(resolve_model_path(self.model_name, self.cache_dir))


def build_engine(name: str, model, tokenizer, ctx: EngineContext, **params: Any):
    """The engine registered as ``name``, built on ``model`` (its current weights) in ``ctx``.

    Raises :class:`~rlvr.types.ComponentError` naming the members an engine lacks (:func:`check_engine`)."""
    ENGINES.validate_params(name, params, key="rollout.engine_params")
    return check_engine(ENGINES.get(name)(model, tokenizer, ctx, **params), name)


def check_engine(engine, name: str):
    """``engine`` if it has every member of :class:`rlvr.engines.base.RolloutEngine`; else a
    :class:`~rlvr.types.ComponentError` naming the missing ones and the registry entry that built it."""
    from rlvr.engines.base import missing_members
    from rlvr.types import ComponentError

    missing = missing_members(engine)
    if missing:
        raise ComponentError(f"rollout engine {name!r}: its builder returned {type(engine).__name__}, which lacks "
                             f"{', '.join(missing)} (members of rlvr.engines.base.RolloutEngine; subclass "
                             "rlvr.engines.base.EngineBase for the defaults of the optional ones)")
    return engine


@ENGINES.register("hf", doc="in-process HF model with a KV cache (the CPU default); a bf16 sampler copy if "
                            "rollout.dtype asks (fast: where bf16 is native); engine_params {decode: compiled}: "
                            "static KV cache + CUDA graphs; {share_prefix: 16}: a batch's common prompt prefix "
                            "prefilled once; {cache_mb: 256}: cap on multi-turn episodes' kept KV cache")
def hf_engine(model, tokenizer, ctx: EngineContext, *, decode: Literal["dynamic", "static", "compiled"] = "dynamic",
              share_prefix: NonNegativeInt = 0, cache_mb: NonNegativeInt = 1024):
    """``decode``: dynamic (finished rows leave the batch; the CPU default), static (fixed shapes, a
    transformers StaticCache) or compiled (static, the step through torch.compile: CUDA graphs on a GPU).
    ``share_prefix``: prefill a chunk's common prompt prefix (chat template, system prompt) once when it is at
    least this many tokens (0: off; changes rounding, not the distribution).  ``cache_mb``: the most memory, in MiB,
    that multi-turn episodes' keys and values may keep between turns (rows beyond it are prefilled again at their
    next turn: less memory, more compute; a bf16 sampler then rounds those rows differently)."""
    from rlvr.engines.hf import HFEngine, sampler_dtype

    return HFEngine(model, tokenizer, batch_size=ctx.batch_size, system_prompt=ctx.system_prompt,
                    dtype=sampler_dtype(ctx.dtype, model), merge_lora=ctx.merge_lora, decode=decode,
                    share_prefix=share_prefix, cache_bytes=cache_mb << 20)


def hf_options(engine: str, params: dict[str, Any]) -> dict:
    """``HFEngine`` keyword options from ``rollout.engine_params`` (validated; empty unless ``engine`` is hf), for
    the places that build an ``HFEngine`` themselves (the FSDP learner, Ray rollout workers)."""
    if engine != "hf":
        return {}
    out = ENGINES.validate_params("hf", params, key="rollout.engine_params")
    if "cache_mb" in out:
        out["cache_bytes"] = out.pop("cache_mb") << 20
    return out


@ENGINES.register("vllm", doc="vLLM in this process, co-located with the learner (pip install rlvr[gpu]); "
                              "engine_params {gpu_memory_utilization, tensor_parallel_size, max_model_len, sleep}")
def vllm_engine(model, tokenizer, ctx: EngineContext, *,
                gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.5,
                tensor_parallel_size: PositiveInt = 1, max_model_len: NonNegativeInt = 0, sleep: bool = False):
    """``gpu_memory_utilization``: fraction of GPU memory for weights + KV cache (leave room for a learner on the
    same GPU).  ``tensor_parallel_size``: GPUs one engine shards the model over.  ``max_model_len``: context
    length to reserve KV cache for (0: the model's own).  ``sleep``: sleep (weights to CPU RAM, KV cache freed)
    during the learner step when both share a GPU; enables vLLM's sleep mode (CUDA/ROCm)."""
    from rlvr.engines.vllm import VLLMEngine, import_vllm

    import_vllm()  # a missing extra fails here, before a bundled model is converted for it
    eng = VLLMEngine(ctx.model_path(), tokenizer, system_prompt=ctx.system_prompt, dtype=ctx.sampler_dtype(),
                     batch_size=ctx.batch_size,
                     **vllm_options(ctx, gpu_memory_utilization=gpu_memory_utilization,
                                    tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len,
                                    sleep=sleep))
    eng.sync_weights(model)  # the learner's weights, whatever the directory holds
    return eng


def vllm_options(ctx: EngineContext, **params: Any) -> dict:
    """``VLLMEngine`` keyword arguments from the vllm engine's ``rollout.engine_params`` (validated; its defaults
    for the options not given), shared by the local and the Ray path."""
    given = ENGINES.validate_params("vllm", params, key="rollout.engine_params")
    defaults = {n: f.default for n, f in ENGINES.entry("vllm").params.model_fields.items()}
    o = {**defaults, **given}
    kw = dict(gpu_memory_utilization=o["gpu_memory_utilization"], tensor_parallel_size=o["tensor_parallel_size"],
              enable_sleep_mode=o["sleep"], sleep_between_steps=o["sleep"], seed=ctx.seed)
    if o["max_model_len"]:
        kw["max_model_len"] = o["max_model_len"]
    return kw
