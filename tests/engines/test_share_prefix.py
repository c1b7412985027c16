"""HFEngine(share_prefix=N): a chunk's common prompt prefix is prefilled once, and the samples stay the same.

The models are float64 so that the different padding layout (the rows' pads sit after the
shared prefix instead of before it) cannot change a token; the bf16 case, where it does flip
near-tied greedy tokens, is why the option is off by default.
"""

from __future__ import annotations

import os

import pytest
import torch

from rlvr.engines import HFEngine, SamplingParams, format_prompt
from rlvr.engines.static_decode import static_decode_available
from rlvr.types import Problem

from conftest import make_model

SYSTEM = "You are a careful assistant. Show the working, then put the final answer in a box."
PROBLEMS = [Problem(id="a", prompt="What is 2 + 3?", answer="5"),
            Problem(id="b", prompt="Compute 17 * 3 please, and be quick.", answer="51"),
            Problem(id="c", prompt="1+1", answer="2")]


def _model(tok):
    """Float64, with EOS likely enough that rows finish at different steps."""
    model = make_model(tok).double()
    with torch.no_grad():
        model.lm_head.weight[tok.eos_token_id] *= 6.0
    return model.eval()


def _flat(groups):
    return [(s.prompt_ids, s.completion_ids, s.logprobs, s.finish_reason) for g in groups for s in g]


def _same(got, ref):
    assert [(p, ids, r) for p, ids, _, r in got] == [(p, ids, r) for p, ids, _, r in ref]
    for (_, _, a, _), (_, _, b, _) in zip(got, ref):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-9, rtol=0)


def _count_fed(model):
    """Record the input_ids shape of every forward call (the prefill calls come first)."""
    fed, real = [], model.forward

    def forward(*a, **kw):
        fed.append(tuple(kw["input_ids"].shape))
        return real(*a, **kw)

    model.forward = forward
    return fed


def _prompts(tok, problems=PROBLEMS):
    return [format_prompt(tok, p, SYSTEM) for p in problems]


@pytest.mark.parametrize("temperature, seeds, decode", [(0.0, None, "dynamic"), (0.9, None, "dynamic"),
                                                        (0.9, [5, 6, 7], "dynamic"),
                                                        pytest.param(0.9, None, "static", marks=pytest.mark.skipif(
                                                            not static_decode_available(),
                                                            reason="decode='static' needs a newer transformers"))])
def test_shared_prefix_samples_what_a_full_prefill_samples(tiny_tokenizer, temperature, seeds, decode):
    model = _model(tiny_tokenizer)
    params = SamplingParams(n=3, max_new_tokens=12, temperature=temperature, seed=None if seeds else 3, seeds=seeds)
    ref = _flat(HFEngine(model, tiny_tokenizer, batch_size=16, system_prompt=SYSTEM, decode=decode)
                .generate(PROBLEMS, params))
    fed = _count_fed(model)
    got = _flat(HFEngine(model, tiny_tokenizer, batch_size=16, system_prompt=SYSTEM, decode=decode, share_prefix=4)
                .generate(PROBLEMS, params))
    del model.forward
    prompts = _prompts(tiny_tokenizer)
    shared = len(os.path.commonprefix(prompts))
    assert shared >= 20  # the chat template and the system prompt
    # the prefix once, as one row; then each prompt's own tokens, padded to the longest
    assert fed[:2] == [(1, shared), (3, max(len(p) for p in prompts) - shared)]
    if temperature:
        assert len({len(ids) for _, ids, _, _ in ref}) > 1  # rows finish at different steps
    _same(got, ref)


def test_a_short_common_prefix_a_single_prompt_and_identical_prompts(tiny_tokenizer):
    model = _model(tiny_tokenizer)
    params = SamplingParams(n=2, max_new_tokens=6, temperature=0.9, seed=1)
    prompts = _prompts(tiny_tokenizer)
    shared = len(os.path.commonprefix(prompts))
    longest = max(map(len, prompts))

    def run(problems, share, batch=16):
        fed = _count_fed(model)
        out = _flat(HFEngine(model, tiny_tokenizer, batch_size=batch, system_prompt=SYSTEM, share_prefix=share)
                    .generate(problems, params))
        del model.forward
        return fed, out

    fed, _ = run(PROBLEMS, shared + 1)  # the threshold is not reached: a full prefill
    assert fed[0] == (3, longest)
    fed, _ = run(PROBLEMS, 4, batch=2)  # one prompt per chunk (2 rows of 2 samples): nothing to share
    assert fed[:1] == [(1, len(prompts[0]))]
    # the same prompt twice: all but its last token are shared, which each row still feeds itself
    twice = [PROBLEMS[1], PROBLEMS[1]]
    fed, got = run(twice, 4)
    assert fed[:2] == [(1, len(prompts[1]) - 1), (2, 1)]
    _same(got, run(twice, 0)[1])


def test_shared_prefix_with_a_prefix_cache(tiny_tokenizer):
    """Turn 1 of multi-turn episodes shares the system prompt (nothing is stored yet); turn 2 continues the
    stored rows as before. Both turns sample what an engine without sharing samples."""
    model = _model(tiny_tokenizer)
    params = SamplingParams(n=2, max_new_tokens=8, temperature=0.9, seed=4)
    obs = tiny_tokenizer.encode(" result 42 ", add_special_tokens=False)
    turns = {}
    for share in (0, 4):
        engine = HFEngine(model, tiny_tokenizer, batch_size=8, system_prompt=SYSTEM, share_prefix=share)
        cache = engine.prefix_cache()
        first = engine.generate(PROBLEMS, params, cache=cache)
        fed_first, reused_first = cache.fed_tokens, cache.reused_tokens
        problems = [p for p, g in zip(PROBLEMS, first) for _ in g]
        prefixes = [s.completion_ids + obs for g in first for s in g]
        second = engine.generate(problems, SamplingParams(n=1, max_new_tokens=5, temperature=0.9, seed=8),
                                 prefixes=prefixes, cache=cache)
        turns[share] = (_flat(first), _flat(second), fed_first, reused_first, cache.reused_tokens)
    prompts = _prompts(tiny_tokenizer)
    shared = len(os.path.commonprefix(prompts))
    assert turns[0][2] == sum(map(len, prompts)) and turns[4][2] == shared + sum(len(p) - shared for p in prompts)
    assert turns[0][3] == turns[4][3] == 0  # the shared prefix is not counted as reused from the cache
    assert turns[0][4] == turns[4][4] > 0  # turn 2 reuses the stored rows either way
    _same(turns[4][0], turns[0][0])
    _same(turns[4][1], turns[0][1])


def test_the_share_prefix_option_is_checked_and_reaches_every_engine_builder(tiny_tokenizer):
    from rlvr.config import ConfigError, load_config
    from rlvr.distributed.ray_backend import EngineSpec, RolloutWorker
    from rlvr.engines.registry import build_engine, hf_options
    from rlvr.recipes.config import RunConfig

    model = make_model(tiny_tokenizer)
    with pytest.raises(ValueError, match="share_prefix must be >= 0"):
        HFEngine(model, tiny_tokenizer, share_prefix=-1)
    with pytest.raises(ConfigError, match="rollout.engine_params.share_prefix"):
        load_config(RunConfig, None, ["rollout.engine_params={share_prefix: -1}"])
    cfg = load_config(RunConfig, None, ["rollout.engine_params={share_prefix: 16}"])
    assert hf_options(cfg.rollout.engine, cfg.rollout.engine_params) == {"share_prefix": 16}
    assert build_engine("hf", model, tiny_tokenizer, cfg.engine_context(), **cfg.rollout.engine_params).share_prefix == 16
    worker = RolloutWorker(EngineSpec(engine="hf", tokenizer=tiny_tokenizer, model_config=model.config,
                                      hf_kwargs=hf_options(cfg.rollout.engine, cfg.rollout.engine_params)))
    assert worker.engine.share_prefix == 16


def test_the_cache_mb_option_caps_the_multi_turn_cache_through_every_builder(tiny_tokenizer):
    """``rollout.engine_params={cache_mb: N}`` reaches the engine as a ``cache_bytes`` of N MiB, from the registry
    and from ``hf_options`` (the FSDP learner, Ray workers); a negative value fails at config load."""
    from rlvr.config import ConfigError, load_config
    from rlvr.engines.registry import build_engine, hf_options
    from rlvr.recipes.config import RunConfig

    model = make_model(tiny_tokenizer)
    with pytest.raises(ConfigError, match="rollout.engine_params.cache_mb"):
        load_config(RunConfig, None, ["rollout.engine_params={cache_mb: -1}"])
    cfg = load_config(RunConfig, None, ["rollout.engine_params={cache_mb: 256}"])
    assert hf_options(cfg.rollout.engine, cfg.rollout.engine_params) == {"cache_bytes": 256 << 20}
    engine = build_engine("hf", model, tiny_tokenizer, cfg.engine_context(), **cfg.rollout.engine_params)
    assert engine.cache_bytes == 256 << 20 and engine.prefix_cache().max_bytes == 256 << 20
    assert build_engine("hf", model, tiny_tokenizer, cfg.engine_context()).cache_bytes == 1 << 30  # the default
