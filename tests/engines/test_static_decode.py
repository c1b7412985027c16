"""HFEngine's fixed-shape decode (decode="static" / "compiled"): the same samples as the dynamic loop.

The CUDA-graph replay itself needs a GPU; what runs here is everything around it: the
static cache and mask bookkeeping, rows kept in the batch after they finish, padded
batch rows, and the ``torch.compile(fullgraph=True)`` trace the GPU path replays
(a graph break fails these tests).
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from rlvr.engines import HFEngine, SamplingParams
from rlvr.engines.kv_cache import cache_kwarg
from rlvr.engines.static_decode import (STATIC_DECODE_MIN_TRANSFORMERS, DecoderPool, StaticDecoder, static_batch,
                                       static_capacity, static_decode_available)
from rlvr.types import Problem

from conftest import make_model

needs_static = pytest.mark.skipif(
    not static_decode_available(), reason=f"decode='static' needs transformers >= {STATIC_DECODE_MIN_TRANSFORMERS} "
                                          "(the oldest-versions run checks that it is refused instead)")

PROBLEMS = [Problem(id="a", prompt="What is 2 + 3?", answer="5"),
            Problem(id="b", prompt="Compute 17 * 3 please, and be quick.", answer="51"),
            Problem(id="c", prompt="1+1", answer="2")]


def _model(tok, seed=0):
    """A float64 tiny model (so that batch layout cannot change a token) whose EOS is likely enough that some
    rows finish early while others run on: the case the static loop handles differently."""
    model = make_model(tok, seed=seed).double()
    with torch.no_grad():
        model.lm_head.weight[tok.eos_token_id] *= 6.0  # tied: also the EOS embedding; any model will do
    return model.eval()


def _flat(groups):
    return [(s.completion_ids, s.logprobs, s.finish_reason) for g in groups for s in g]


def test_static_batch_and_capacity_rounding():
    assert [static_batch(r, 64) for r in (1, 3, 8, 9, 33, 64)] == [1, 4, 8, 16, 64, 64]
    assert static_batch(70, 64) == 70  # never fewer rows than asked for
    assert static_batch(9, 12) == 12
    assert [static_capacity(p) for p in (1, 128, 129, 300)] == [128, 128, 256, 384]
    assert static_capacity(70, 64) == 128


@needs_static
@pytest.mark.parametrize("temperature, seeds", [(0.0, None), (0.9, None), (0.9, [5, 6, 7])])
def test_static_decode_samples_what_the_dynamic_loop_samples(tiny_tokenizer, temperature, seeds):
    model = _model(tiny_tokenizer)
    params = SamplingParams(n=3, max_new_tokens=14, temperature=temperature, seed=None if seeds else 3, seeds=seeds)
    # batch 16 for 9 rows: the static batch pads 7 rows (copies of row 0)
    ref = _flat(HFEngine(model, tiny_tokenizer, batch_size=16).generate(PROBLEMS, params))
    got = _flat(HFEngine(model, tiny_tokenizer, batch_size=16, decode="static").generate(PROBLEMS, params))
    lengths = [len(ids) for ids, _, _ in ref]
    if temperature:  # the case that matters is exercised: rows finish at different steps
        assert min(lengths) < 14 and max(lengths) == 14 and "stop" in {r for _, _, r in ref}, lengths
    assert [(ids, r) for ids, _, r in got] == [(ids, r) for ids, _, r in ref]
    for (_, lp_got, _), (_, lp_ref, _) in zip(got, ref):
        assert torch.allclose(torch.tensor(lp_got), torch.tensor(lp_ref), atol=1e-9)


@needs_static
def test_static_decode_reuses_one_decoder_across_chunks_and_calls(tiny_tokenizer):
    model = _model(tiny_tokenizer)
    engine = HFEngine(model, tiny_tokenizer, batch_size=4, decode="static")  # one problem x 3 rows per chunk
    params = SamplingParams(n=3, max_new_tokens=6, temperature=1.0, seed=0)
    engine.generate(PROBLEMS, params)
    engine.generate(PROBLEMS[:1], params)
    assert len(engine._decoders) == 1  # batch 4 x capacity 128 for every chunk


@needs_static
def test_static_decoder_refuses_a_prefill_that_does_not_fit(tiny_tokenizer):
    model = _model(tiny_tokenizer)
    dec = StaticDecoder(model, batch=2, capacity=8)
    prefill = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.ones((1, 8), dtype=torch.long), use_cache=True, **{cache_kwarg(model): prefill})
    with pytest.raises(ValueError, match="does not fit"):
        dec.load(prefill, torch.ones((1, 8), dtype=torch.long), n=1)  # no room for a new token
    with pytest.raises(ValueError, match="does not fit"):
        dec.load(prefill, torch.ones((1, 4), dtype=torch.long), n=3)  # 3 rows > batch 2


@needs_static
def test_decoder_pool_keeps_the_most_recent(tiny_tokenizer):
    model = _model(tiny_tokenizer)
    pool = DecoderPool(size=2)
    a = pool.get(model, 2, 16, False)
    assert pool.get(model, 2, 16, False) is a
    pool.get(model, 4, 16, False)
    pool.get(model, 2, 32, False)  # evicts (2, 16)
    assert len(pool) == 2 and pool.get(model, 2, 16, False) is not a


@pytest.mark.skipif(static_decode_available(), reason="this transformers supports decode='static' (tested above)")
def test_static_decode_on_an_older_transformers_is_refused_with_the_reason(tiny_tokenizer):
    engine = HFEngine(_model(tiny_tokenizer), tiny_tokenizer, decode="static")
    with pytest.raises(RuntimeError, match=rf"upgrade transformers \(>= {STATIC_DECODE_MIN_TRANSFORMERS}\) or use "
                                           "decode='dynamic'"):
        engine.generate(PROBLEMS, SamplingParams(n=2, max_new_tokens=4, temperature=0.0))


def test_static_decode_refuses_sliding_window_layers(tiny_tokenizer):
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=4)
    with pytest.raises(ValueError, match="full-attention layers only"):
        StaticDecoder(MistralForCausalLM(cfg), batch=2, capacity=16)


def test_bad_decode_mode_fails_at_construction_and_config_load(tiny_model, tiny_tokenizer):
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ValueError, match="decode must be one of"):
        HFEngine(tiny_model, tiny_tokenizer, decode="graphs")
    with pytest.raises(ConfigError, match="rollout.engine_params.decode"):
        load_config(RunConfig, None, ["rollout.engine_params={decode: graphs}"])
    cfg = load_config(RunConfig, None, ["rollout.engine_params={decode: compiled}"])
    assert cfg.rollout.engine_params == {"decode": "compiled"}


@needs_static
def test_compiled_decode_traces_one_graph_and_samples_what_the_dynamic_loop_samples(tiny_tokenizer):
    """``torch.compile(fullgraph=True)`` of the step: no graph break (the GPU records this trace as a CUDA
    graph), the same tokens, and no recompilation on later steps, chunks or calls of the same shape."""
    torch._dynamo.reset()
    model = _model(tiny_tokenizer, seed=1)
    params = SamplingParams(n=2, max_new_tokens=10, temperature=0.9, seed=11)
    ref = _flat(HFEngine(model, tiny_tokenizer, batch_size=8).generate(PROBLEMS, params))
    engine = HFEngine(model, tiny_tokenizer, batch_size=8, decode="compiled")
    got = _flat(engine.generate(PROBLEMS, params))
    assert [(ids, r) for ids, _, r in got] == [(ids, r) for ids, _, r in ref]
    for (_, lp_got, _), (_, lp_ref, _) in zip(got, ref):
        # inductor fuses RMSNorm's float32 section differently: float32 rounding, not float64
        assert torch.allclose(torch.tensor(lp_got), torch.tensor(lp_ref), atol=1e-5)
    with torch._dynamo.config.patch(error_on_recompile=True):
        again = _flat(engine.generate(PROBLEMS, params))
    assert [ids for ids, _, _ in again] == [ids for ids, _, _ in got]
    assert torch._dynamo.config.recompile_limit >= 64  # later decoders of other shapes still compile


@needs_static
def test_compiled_decode_survives_the_training_loop_without_recompiling(tiny_tokenizer):
    """What a GRPO run does between rollouts: the learner changes the weights, the engine's bf16 copy is
    refilled in place (``sync_weights``), or freed and reallocated around the learner step (``sleep``).
    None of it may recompile the step (on a GPU: re-record a graph every step), and the new weights
    must be the ones sampled from."""
    torch._dynamo.reset()
    policy = make_model(tiny_tokenizer, seed=2).eval()
    engine = HFEngine(policy, tiny_tokenizer, batch_size=4, dtype=torch.bfloat16, decode="compiled")
    params = SamplingParams(n=2, max_new_tokens=6, temperature=0.0)
    first = _flat(engine.generate(PROBLEMS[:2], params))
    with torch.no_grad():  # a "learner step" that changes what greedy decoding picks
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    with torch._dynamo.config.patch(error_on_recompile=True):
        engine.sync_weights(policy)
        synced = _flat(engine.generate(PROBLEMS[:2], params))
        assert engine.sleep()
        engine.sync_weights(policy)
        woke = _flat(engine.generate(PROBLEMS[:2], params))
    fresh = _flat(HFEngine(policy, tiny_tokenizer, batch_size=4, dtype=torch.bfloat16).generate(PROBLEMS[:2], params))
    assert [ids for ids, _, _ in synced] != [ids for ids, _, _ in first]  # the new weights are used
    assert [ids for ids, _, _ in synced] == [ids for ids, _, _ in woke] == [ids for ids, _, _ in fresh]


def test_the_decode_option_reaches_every_place_that_builds_an_hf_engine(tiny_tokenizer):
    """Local runs build the engine from the registry; the FSDP learner and the Ray rollout workers build their own
    HFEngine and take the same option through ``hf_options`` (before, they silently ignored engine_params)."""
    from rlvr.config import load_config
    from rlvr.distributed.ray_backend import EngineSpec, RolloutWorker
    from rlvr.engines.registry import build_engine, hf_options
    from rlvr.recipes.config import RunConfig

    cfg = load_config(RunConfig, None, ["rollout.engine_params={decode: static}"])
    assert hf_options(cfg.rollout.engine, cfg.rollout.engine_params) == {"decode": "static"}
    assert hf_options("hf", load_config(RunConfig, None, []).rollout.engine_params) == {}
    model = make_model(tiny_tokenizer)
    assert build_engine("hf", model, tiny_tokenizer, cfg.engine_context(), **cfg.rollout.engine_params).decode == "static"
    worker = RolloutWorker(EngineSpec(engine="hf", tokenizer=tiny_tokenizer, model_config=model.config,
                                      hf_kwargs=hf_options(cfg.rollout.engine, cfg.rollout.engine_params)))
    assert worker.engine.decode == "static"
