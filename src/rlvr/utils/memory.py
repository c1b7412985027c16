"""An estimate of a training run's peak memory, from the model's shape and the run's sizes, before any weight loads.

:func:`estimate_training_memory` is a pure function of a :class:`ModelShape` (read from the model's
``config.json``: :meth:`ModelShape.from_config`) and a :class:`RunSizes`.  It adds up, in bytes:

* ``runtime``: the interpreter, torch, transformers, the tokenizer and allocator slack
  (:data:`RUNTIME_BYTES`, calibrated on the demo, ``configs/arithmetic_grpo.yaml``: 2,420 MiB peak RSS
  measured, docs/results.md; 2,405 MiB estimated);
* ``weights``: ``params x`` the policy's bytes per parameter; ``reference``: a frozen copy for a KL term;
  ``teacher``: on-policy distillation's frozen teacher (its own parameter count and bytes; in the teacher phase
  only when it sleeps between its passes);
  ``critic``: PPO's separate critic (a copy of the trunk with its gradients and AdamW moments);
* ``optimizer``: AdamW's two moments per trainable parameter (4 bytes each, 2 with ``adamw_bf16``);
* the larger of the two phases of a step:

  - learner: ``gradients`` (trainable x bytes) + ``activations`` of one micro-batch of ``T`` tokens
    in rows of ``s`` tokens: per layer and token ``6 h + 2 kv + 4 f + heads x s`` values
    (norms, q/k/v/o inputs, the gated MLP's inputs, the attention weights), all layers held, or with
    activation checkpointing only each layer's input plus three layers' worth (recompute and its
    gradients) + ``logits``: four ``[tokens, vocab]`` float32 tensors (logits, log-softmax and their
    gradients) for ``T`` tokens, or for ``logprob_chunk`` tokens at a time + the sampler's own copy
    unless it sleeps while learning;
  - sampler: its copy of the weights + the KV cache, ``2 x layers x kv x bytes`` per token of
    ``rows x (prompt + max_new_tokens)`` + the rows' last logits;

  - teacher (on-policy distillation): the no-grad log-prob passes before the advantage, one micro-batch at a
    time (``teacher_pass``: one layer's activations and ``3 x chunk x vocab`` float32 values of its LM head)
    + the sampler's own copy + the teacher's weights when it sleeps (``distill.sleep_while_learning``: they are
    resident only then, not in the other phases);

* ``generator``: a separate generator process (asynchronous rollouts): its runtime, weights and KV cache.

It is an estimate: allocator fragmentation, a growing heap and framework caches are not modelled
(the demo's configuration without its memory options: 6,617 MiB measured, with a heap that grew step after
step, against 5,806 MiB estimated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["ModelShape", "RunSizes", "MemoryEstimate", "estimate_training_memory", "inference_pass_bytes",
           "RUNTIME_BYTES", "GB"]

GB = 1e9
RUNTIME_BYTES = 500_000_000
"""Memory of a process before the model: Python, torch, transformers, tokenizer, data, allocator slack."""


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    return None


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that memory depends on."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int | None = None
    """``max_position_embeddings``: the longest sequence the model was trained for (None: unknown)."""
    tied: bool = True
    """The LM head shares the input embedding's weights."""

    @property
    def params(self) -> int:
        """Parameter count of a Llama-style model: embedding, per layer q/k/v/o, a gated MLP and two norms, a
        final norm, and an LM head unless tied (SmolLM2-135M: 134,515,008)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate + 2 * h
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape | None:
        """The shape in an HF ``config.json`` (a vision-language model's ``text_config``), or None when it lacks
        the sizes."""
        if isinstance(config.get("text_config"), Mapping):
            inner = dict(config["text_config"])
            inner.setdefault("tie_word_embeddings", config.get("tie_word_embeddings"))
            config = inner
        hidden = _first(config, "hidden_size", "n_embd", "d_model")
        layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
        heads = _first(config, "num_attention_heads", "n_head")
        vocab = _first(config, "vocab_size")
        if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, heads, vocab)):
            return None
        kv = _first(config, "num_key_value_heads", "num_kv_heads") or heads
        head_dim = _first(config, "head_dim") or hidden // heads
        inter = _first(config, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
        context = _first(config, "max_position_embeddings", "n_positions", "max_sequence_length")
        tied = config.get("tie_word_embeddings")
        return cls(layers=layers, hidden=hidden, heads=heads, kv_heads=int(kv), head_dim=int(head_dim),
                   intermediate=int(inter), vocab=vocab, context=int(context) if context else None,
                   tied=True if tied is None else bool(tied))


@dataclass(frozen=True)
class RunSizes:
    """What a training run holds at once (:func:`estimate_training_memory`)."""

    prompt_tokens: int
    """Tokens of the longest prompt (with its chat template)."""
    max_new_tokens: int
    sampler_rows: int
    """Sequences the engine decodes together."""
    micro_batch_tokens: int
    """Tokens of one learner micro-batch (rows x their padded length, or the packed budget)."""
    row_tokens: int
    """Length of one learner row (the attention span)."""
    param_bytes: int = 4
    trainable_params: int | None = None
    """Parameters with gradients and optimizer state (None: all; LoRA: the adapters')."""
    optimizer_bytes: int = 8
    """Optimizer state per trainable parameter (AdamW: 8; with bf16 moments: 4)."""
    sampler_bytes: int = 0
    """Bytes per parameter of the sampler's own copy of the weights (0: it samples from the policy's)."""
    sampler_sleeps: bool = False
    """The sampler's copy is freed during the learner step."""
    kv_bytes: int = 4
    activation_bytes: int = 4
    activation_checkpointing: bool = False
    logprob_chunk: int = 0
    """LM-head tokens at a time (0: the whole micro-batch)."""
    reference: bool = False
    """A frozen reference copy (KL term)."""
    critic: str = "none"
    """PPO's critic: none, separate (a trained copy of the trunk) or shared (a head only)."""
    teacher_weight_bytes: int = 0
    """On-policy distillation's frozen teacher: its parameters x its bytes per parameter (0: no teacher)."""
    teacher_sleeps: bool = False
    """The teacher's weights are freed after its log-prob pass and read back before the next
    (``distill.sleep_while_learning``): resident only during that pass."""
    teacher_pass_bytes: int = 0
    """Transient bytes of the largest no-grad log-prob pass before the advantage (the teacher's or the
    student's; :func:`inference_pass_bytes`)."""
    generator_process: bool = False
    """Sampling runs in a second process with its own weights."""


@dataclass
class MemoryEstimate:
    """Bytes per part (:attr:`parts`) and their :attr:`total`, the estimated peak."""

    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        """``2.41 GB (weights 0.54, optimizer 0.54, ...)``: the total and every non-zero part, in GB."""
        inner = ", ".join(f"{k.replace('_', ' ')} {v / GB:.2f}" for k, v in self.parts.items() if v)
        return f"{self.total / GB:.2f} GB ({inner})"


def inference_pass_bytes(shape: ModelShape, tokens: int, row_tokens: int, activation_bytes: int,
                         head_chunk: int) -> int:
    """Transient bytes of a no-grad log-prob pass over ``tokens`` tokens in rows of ``row_tokens``: one layer's
    activations at a time (per token ``4 h + 2 kv + 3 f + heads x s`` values: the hidden states in and out, q/k/v,
    the gated MLP's three, the attention weights), the last hidden states, and the LM head's ``3 x chunk x
    vocab`` float32 values (logits, their float copy and log-softmax) for ``head_chunk`` tokens at a time
    (0: all)."""
    kv = shape.kv_heads * shape.head_dim
    layer = (4 * shape.hidden + 2 * kv + 3 * shape.intermediate + shape.heads * row_tokens) * activation_bytes
    head = min(head_chunk, tokens) if head_chunk else tokens
    return tokens * (layer + shape.hidden * activation_bytes) + 3 * head * shape.vocab * 4


def estimate_training_memory(shape: ModelShape, sizes: RunSizes) -> MemoryEstimate:
    """The estimated peak memory of a training step (see the module doc for every term)."""
    s, P = sizes, shape.params
    trainable = P if s.trainable_params is None else s.trainable_params
    kv = shape.kv_heads * shape.head_dim
    h, L = shape.hidden, shape.layers
    per_token_layer = (6 * h + 2 * kv + 4 * shape.intermediate + shape.heads * s.row_tokens) * s.activation_bytes
    one_layer = s.micro_batch_tokens * per_token_layer
    if s.activation_checkpointing:
        activations = L * s.micro_batch_tokens * h * s.activation_bytes + 3 * one_layer
    else:
        activations = (L + 1) * one_layer
    head_tokens = min(s.logprob_chunk, s.micro_batch_tokens) if s.logprob_chunk else s.micro_batch_tokens
    logits = 4 * head_tokens * shape.vocab * 4
    sampler_copy = P * s.sampler_bytes
    kv_cache = 2 * L * kv * s.kv_bytes * s.sampler_rows * (s.prompt_tokens + s.max_new_tokens) \
        + 2 * s.sampler_rows * shape.vocab * 4
    learner = trainable * s.param_bytes + activations + logits + (0 if s.sampler_sleeps else sampler_copy)
    sampler = (0 if s.generator_process else sampler_copy + kv_cache)
    teacher = 0  # the no-grad passes before the advantage (distillation), with the teacher's weights if it sleeps
    if s.teacher_weight_bytes:
        teacher = s.teacher_pass_bytes + (0 if s.generator_process else sampler_copy) \
            + (s.teacher_weight_bytes if s.teacher_sleeps else 0)
    parts = {"runtime": RUNTIME_BYTES, "weights": P * s.param_bytes, "optimizer": trainable * s.optimizer_bytes}
    if s.reference:
        parts["reference"] = P * s.param_bytes
    if s.critic == "separate":
        parts["critic"] = P * (2 * s.param_bytes + 8)
    if s.teacher_weight_bytes and not s.teacher_sleeps:
        parts["teacher"] = s.teacher_weight_bytes
    if learner >= sampler and learner >= teacher:
        parts.update(gradients=trainable * s.param_bytes, activations=activations + logits,
                     sampler_copy=0 if s.sampler_sleeps else sampler_copy)
    elif sampler >= teacher:
        parts.update(sampler_copy=sampler_copy, kv_cache=kv_cache)
    else:
        if s.teacher_sleeps:
            parts["teacher"] = s.teacher_weight_bytes
        parts.update(teacher_pass=s.teacher_pass_bytes, sampler_copy=0 if s.generator_process else sampler_copy)
    if s.generator_process:
        parts["generator"] = RUNTIME_BYTES + P * (s.sampler_bytes or s.param_bytes) + kv_cache
    return MemoryEstimate(parts)
