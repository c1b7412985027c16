"""The peak-memory estimate of a training run: every term on hand-computed numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.utils.memory import RUNTIME_BYTES, ModelShape, RunSizes, estimate_training_memory

SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "max_position_embeddings": 8192,
           "tie_word_embeddings": True}
# layers 2, hidden 8, heads 2 (head_dim 4), kv heads 1, MLP 16, vocab 10, tied
TINY = ModelShape(layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=10, context=64)


def test_the_shape_and_parameter_count_come_from_config_json():
    shape = ModelShape.from_config(SMOLLM2)
    assert (shape.layers, shape.hidden, shape.kv_heads, shape.head_dim, shape.context) == (30, 576, 3, 64, 8192)
    assert shape.params == 134_515_008  # SmolLM2-135M-Instruct's own count
    # by hand: embedding 10*8 = 80; per layer q 64 + k 32 + v 32 + o 64 + MLP 3*8*16 = 384 + norms 16 = 592
    assert TINY.params == 80 + 2 * 592 + 8
    untied = ModelShape(**{**TINY.__dict__, "tied": False})
    assert untied.params == TINY.params + 80
    assert ModelShape.from_config({"text_config": SMOLLM2}).params == shape.params  # a VLM's language model
    assert ModelShape.from_config({"model_type": "x"}) is None


def test_learner_phase_terms_by_hand():
    sizes = RunSizes(prompt_tokens=6, max_new_tokens=10, sampler_rows=4, micro_batch_tokens=32, row_tokens=16)
    est = estimate_training_memory(TINY, sizes)
    P = TINY.params  # 1272
    # per layer and token: 6*8 + 2*4 + 4*16 + 2 heads * 16 = 152 values of 4 bytes; one layer: 32 tokens
    one_layer = 32 * 152 * 4
    activations = 3 * one_layer  # (layers + 1) layers held without checkpointing
    logits = 4 * 32 * 10 * 4  # four [tokens, vocab] float32 tensors
    assert est.parts == {"runtime": RUNTIME_BYTES, "weights": 4 * P, "optimizer": 8 * P, "gradients": 4 * P,
                         "activations": activations + logits, "sampler_copy": 0}
    assert est.total == RUNTIME_BYTES + 16 * P + activations + logits
    assert est.describe().startswith(f"{est.total / 1e9:.2f} GB (runtime 0.50")


def test_checkpointing_chunking_bf16_moments_reference_and_critic():
    sizes = RunSizes(prompt_tokens=6, max_new_tokens=10, sampler_rows=4, micro_batch_tokens=32, row_tokens=16,
                     activation_checkpointing=True, logprob_chunk=8, optimizer_bytes=4, reference=True,
                     critic="separate")
    est = estimate_training_memory(TINY, sizes)
    P = TINY.params
    assert est.parts["activations"] == (2 * 32 * 8 * 4 + 3 * 32 * 152 * 4) + 4 * 8 * 10 * 4  # inputs + 3 layers
    assert est.parts["optimizer"] == 4 * P and est.parts["reference"] == 4 * P
    assert est.parts["critic"] == P * (2 * 4 + 8)


def test_the_sampler_phase_wins_with_a_large_kv_cache():
    sizes = RunSizes(prompt_tokens=100, max_new_tokens=900, sampler_rows=64, micro_batch_tokens=8, row_tokens=8,
                     sampler_bytes=2, kv_bytes=2, sampler_sleeps=True)
    est = estimate_training_memory(TINY, sizes)
    kv = 2 * 2 * (1 * 4) * 2 * 64 * 1000 + 2 * 64 * 10 * 4  # K and V, layers, kv width, bytes, rows x tokens
    assert est.parts["kv_cache"] == kv and est.parts["sampler_copy"] == 2 * TINY.params
    assert "gradients" not in est.parts  # freed after the optimizer step: not held while sampling


def test_a_generator_process_holds_its_own_copy():
    sizes = RunSizes(prompt_tokens=6, max_new_tokens=10, sampler_rows=4, micro_batch_tokens=32, row_tokens=16,
                     generator_process=True)
    est = estimate_training_memory(TINY, sizes)
    kv = 2 * 2 * 4 * 4 * 4 * 16 + 2 * 4 * 10 * 4
    assert est.parts["generator"] == RUNTIME_BYTES + 4 * TINY.params + kv


def test_the_demo_config_is_estimated_near_its_measured_peak():
    """configs/arithmetic_grpo.yaml: 2,420 MiB peak RSS measured (docs/results.md); the estimate within 10%."""
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.preflight import run_sizes

    cfg = load_config(RunConfig, Path(__file__).resolve().parents[2] / "configs" / "arithmetic_grpo.yaml")
    shape = ModelShape.from_config(SMOLLM2)
    est = estimate_training_memory(shape, run_sizes(cfg, shape, prompt=45))
    assert est.total / 2**20 == pytest.approx(2420, rel=0.10)


def test_a_no_grad_log_prob_pass_by_hand():
    from rlvr.utils.memory import inference_pass_bytes

    # one layer per token: 4*8 hidden + 2*4 k/v + 3*16 MLP + 2 heads * 16 attention = 120 values, + the last
    # hidden states (8): 128 values of 4 bytes for 32 tokens; the head: 3 x chunk x vocab 10 float32
    assert inference_pass_bytes(TINY, 32, 16, 4, 8) == 32 * 128 * 4 + 3 * 8 * 10 * 4
    assert inference_pass_bytes(TINY, 32, 16, 4, 0) == 32 * 128 * 4 + 3 * 32 * 10 * 4  # 0: all tokens at once
    assert inference_pass_bytes(TINY, 32, 16, 2, 100) == 32 * 128 * 2 + 3 * 32 * 10 * 4  # bf16 activations


def test_a_sleeping_teacher_counts_only_in_its_own_pass():
    base = dict(prompt_tokens=6, max_new_tokens=10, sampler_rows=4, micro_batch_tokens=32, row_tokens=16)
    P = TINY.params
    learner = 4 * P + 3 * 32 * 152 * 4 + 4 * 32 * 10 * 4  # gradients + activations + logits (first test)
    # a small teacher: resident all the time unless it sleeps; asleep, the learner phase is the peak without it
    small = dict(teacher_weight_bytes=4 * P, teacher_pass_bytes=1000)
    awake = estimate_training_memory(TINY, RunSizes(**base, **small))
    asleep = estimate_training_memory(TINY, RunSizes(**base, **small, teacher_sleeps=True))
    assert awake.parts["teacher"] == 4 * P and awake.total == RUNTIME_BYTES + 12 * P + 4 * P + learner
    assert "teacher" not in asleep.parts and asleep.total == RUNTIME_BYTES + 12 * P + learner
    # a large teacher: asleep, its pass (weights + transient) is the peak, without the learner's gradients
    large = dict(teacher_weight_bytes=10**6, teacher_pass_bytes=1000, sampler_bytes=2)
    est = estimate_training_memory(TINY, RunSizes(**base, **large, teacher_sleeps=True, sampler_sleeps=True))
    assert est.parts == {"runtime": RUNTIME_BYTES, "weights": 4 * P, "optimizer": 8 * P, "teacher": 10**6,
                         "teacher_pass": 1000, "sampler_copy": 2 * P}  # the sampler's copy sleeps only in learning
    assert est.total == max(est.total, RUNTIME_BYTES + 12 * P + learner)
    awake = estimate_training_memory(TINY, RunSizes(**base, **large, sampler_sleeps=True))
    assert awake.parts["teacher"] == 10**6 and "gradients" in awake.parts  # resident: the learner phase on top
    assert awake.total - est.total == learner - 1000 - 2 * P
