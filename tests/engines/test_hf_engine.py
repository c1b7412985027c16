"""The HF rollout engine and its pre-allocated KV cache, on a tiny random model."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from rlvr.engines import HFEngine, SamplingParams, format_prompt
from rlvr.engines.kv_cache import PreallocatedCache, PrefixCache, cache_kwarg, stack_layers
from rlvr.types import Problem

PROBLEMS = [Problem(id="a", prompt="What is 2 + 3?", answer="5"),
            Problem(id="b", prompt="Compute 17 * 3 please, and be quick.", answer="51"),
            Problem(id="c", prompt="1+1", answer="2")]


def _teacher_forced_logprobs(model, prompt_ids, completion_ids, temperature=1.0):
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    lp = torch.log_softmax(logits[:-1], -1)
    targets = ids[0, 1:]
    return lp.gather(-1, targets[:, None]).squeeze(-1)[len(prompt_ids) - 1:]


def test_preallocated_cache_matches_dynamic_cache(tiny_model):
    torch.manual_seed(0)
    ids = torch.randint(4, 90, (3, 7))
    step = torch.randint(4, 90, (3, 1))
    outs = []
    for cache in (DynamicCache(), PreallocatedCache(tiny_model.config.num_hidden_layers, capacity=9)):
        with torch.no_grad():
            kw = {cache_kwarg(tiny_model): cache}  # past_key_values before transformers renamed it to cache
            out = tiny_model(input_ids=ids, use_cache=True, **kw)
            for _ in range(4):  # goes past capacity 9: exercises growth (the model fills the cache in place)
                out = tiny_model(input_ids=step, use_cache=True, **kw)
        outs.append(out.logits)
    assert torch.allclose(outs[0], outs[1], atol=1e-6)


def test_preallocated_cache_batch_ops(tiny_model):
    torch.manual_seed(1)
    ids = torch.randint(4, 90, (2, 5))
    cache = PreallocatedCache(tiny_model.config.num_hidden_layers, capacity=16)
    with torch.no_grad():
        tiny_model(input_ids=ids, use_cache=True, **{cache_kwarg(tiny_model): cache})
    cache.batch_repeat_interleave(3)
    assert cache.layers[0].keys.shape[0] == 6 and cache.get_seq_length() == 5
    k_before = cache.layers[0].keys.clone()
    cache.batch_select_indices(torch.tensor([0, 4]))
    assert torch.equal(cache.layers[0].keys, k_before[[0, 4]])
    assert torch.equal(k_before[0], k_before[2])  # rows 0..2 are copies of prompt 0


def test_generate_shapes_and_logprobs_match_teacher_forcing(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=4)
    params = SamplingParams(n=3, max_new_tokens=12, temperature=0.8, seed=0)
    groups = engine.generate(PROBLEMS, params)
    assert [len(g) for g in groups] == [3, 3, 3]
    for prob, group in zip(PROBLEMS, groups):
        for g, s in enumerate(group):
            assert s.problem_id == prob.id and s.group_index == g
            assert s.prompt_ids == format_prompt(tiny_tokenizer, prob)
            assert 1 <= len(s.completion_ids) <= 12 and len(s.logprobs) == len(s.completion_ids)
            assert s.finish_reason in ("stop", "length")
            if s.finish_reason == "stop":
                assert s.completion_ids[-1] == tiny_tokenizer.eos_token_id
            else:
                assert len(s.completion_ids) == 12
            # left padding, group sharing of the prefill and row dropping must not change the numbers
            ref = _teacher_forced_logprobs(tiny_model, s.prompt_ids, s.completion_ids, temperature=0.8)
            assert torch.allclose(torch.tensor(s.logprobs), ref, atol=1e-4), (s.logprobs, ref)


def test_greedy_matches_hf_generate(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=8)
    groups = engine.generate(PROBLEMS, SamplingParams(n=1, max_new_tokens=10, temperature=0.0))
    for prob, (s,) in zip(PROBLEMS, groups):
        ids = torch.tensor([s.prompt_ids])
        ref = tiny_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                  eos_token_id=tiny_tokenizer.eos_token_id, pad_token_id=tiny_tokenizer.pad_token_id)
        assert s.completion_ids == ref[0, ids.shape[1]:].tolist()[: len(s.completion_ids)]


def test_seed_reproducible_and_different_seeds_differ(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer)
    a = engine.generate(PROBLEMS, SamplingParams(n=4, max_new_tokens=16, seed=7))
    b = engine.generate(PROBLEMS, SamplingParams(n=4, max_new_tokens=16, seed=7))
    c = engine.generate(PROBLEMS, SamplingParams(n=4, max_new_tokens=16, seed=8))
    ids = lambda gs: [s.completion_ids for g in gs for s in g]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)


def test_per_problem_seeds_draw_what_one_call_per_problem_draws(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=64)
    params = dict(n=4, max_new_tokens=16, temperature=1.0)
    # make a token the random model samples now and then an end of sequence, so rows finish at different steps
    probe = engine.generate(PROBLEMS, SamplingParams(**params, seeds=[11, 12, 13]))
    engine.eos_ids.update(g[0].completion_ids[6] for g in probe)
    batched = engine.generate(PROBLEMS, SamplingParams(**params, seeds=[11, 12, 13]))
    alone = [engine.generate([p], SamplingParams(**params, seed=s))[0] for p, s in zip(PROBLEMS, [11, 12, 13])]
    assert [[s.completion_ids for s in g] for g in batched] == [[s.completion_ids for s in g] for g in alone]
    for gb, ga in zip(batched, alone):  # the batch layout (left padding) only changes float rounding
        for sb, sa in zip(gb, ga):
            assert sb.logprobs == pytest.approx(sa.logprobs, abs=1e-4)
    # a problem's samples do not depend on its batch-mates (nor on the order), and finished rows
    # (EOS before the cap) leave the other problems' draws alone
    swapped = engine.generate([PROBLEMS[2], PROBLEMS[0]], SamplingParams(**params, seeds=[13, 11]))
    assert [s.completion_ids for s in swapped[0]] == [s.completion_ids for s in batched[2]]
    assert [s.completion_ids for s in swapped[1]] == [s.completion_ids for s in batched[0]]
    assert any(s.finish_reason == "stop" for g in batched for s in g)
    assert any(s.finish_reason == "length" for g in batched for s in g)
    with pytest.raises(ValueError, match="2 seeds for 3 problems"):
        engine.generate(PROBLEMS, SamplingParams(n=1, seeds=[1, 2]))


def test_stop_string_cuts_completion(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer)
    free = engine.generate(PROBLEMS[:1], SamplingParams(n=8, max_new_tokens=30, temperature=1.5, seed=3))[0]
    # pick a character the unconstrained samples actually produce, then stop on it
    text = next(s.text for s in free if len(s.text) > 3)
    stop = text[2]
    stopped = engine.generate(PROBLEMS[:1], SamplingParams(n=8, max_new_tokens=30, temperature=1.5, seed=3,
                                                           stop=(stop,)))[0]
    hit = [s for s in stopped if stop in s.text]
    assert hit, "the stop character never appeared"
    for s in hit:
        assert s.finish_reason == "stop" and s.text.endswith(stop) and s.text.count(stop) == 1


def test_sampling_params_validation():
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(n=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)


def test_top_p_keeps_only_the_nucleus(tiny_model, tiny_tokenizer):
    from rlvr.engines.hf import _top_p_filter

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(_top_p_filter(logits, 0.7))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(_top_p_filter(logits, 0.45))
    assert kept.tolist() == [[True, False, False, False]]


def test_sample_categorical_matches_the_distribution():
    from rlvr.engines.hf import sample_categorical

    p = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3, 0.0])
    g = torch.Generator().manual_seed(0)
    draws = sample_categorical(p.repeat(40_000, 1), g)
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    assert freq[[0, 2, 5]].sum() == 0  # zero-mass entries, including the trailing one, never drawn
    # 40k draws: standard error of each frequency < 0.0025, so 0.01 is four sigma
    assert torch.allclose(freq, p, atol=0.01), freq
    # unnormalised rows give the same distribution
    draws2 = sample_categorical(3 * p.repeat(40_000, 1), torch.Generator().manual_seed(0))
    assert torch.equal(draws, draws2)


def test_sample_categorical_never_overruns_when_u_rounds_up(monkeypatch):
    from rlvr.engines import hf

    monkeypatch.setattr(hf.torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    p = torch.tensor([[0.2, 0.8, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0]])
    assert hf.sample_categorical(p).tolist() == [1, 2]


def test_bf16_sampler_copy_follows_the_learner(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, dtype=torch.bfloat16)
    assert engine.model is not tiny_model and next(engine.model.parameters()).dtype == torch.bfloat16
    assert next(tiny_model.parameters()).dtype == torch.float32  # the learner is untouched
    greedy = SamplingParams(n=1, max_new_tokens=6, temperature=0.0)
    before = engine.generate(PROBLEMS, greedy)
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(torch.randn_like(p))
    assert [s.completion_ids for g in engine.generate(PROBLEMS, greedy) for s in g] == \
        [s.completion_ids for g in before for s in g]  # not synced yet: old weights
    engine.sync_weights(tiny_model)
    for dst, src in zip(engine.model.state_dict().values(), tiny_model.state_dict().values()):
        assert torch.equal(dst, src.to(torch.bfloat16))
    # log-probs are the bf16 copy's: close to the fp32 learner's teacher-forced ones
    s = engine.generate(PROBLEMS[:1], greedy)[0][0]
    ref = _teacher_forced_logprobs(tiny_model, s.prompt_ids, s.completion_ids)
    assert torch.allclose(torch.tensor(s.logprobs), ref, atol=0.1)


def test_sleep_frees_the_sampler_copy_and_sync_refills_it_exactly(tiny_model, tiny_tokenizer):
    awake = HFEngine(tiny_model, tiny_tokenizer, dtype=torch.bfloat16)
    sleepy = HFEngine(tiny_model, tiny_tokenizer, dtype=torch.bfloat16)
    nbytes = sum(p.numel() * p.element_size() for p in sleepy.model.parameters())
    assert sleepy.sleep() and sleepy.sleeping
    assert sum(p.numel() * p.element_size() for p in sleepy.model.parameters()) == 0 < nbytes
    with pytest.raises(RuntimeError, match="asleep"):
        sleepy.generate(PROBLEMS, SamplingParams(n=1, max_new_tokens=2))
    with torch.no_grad():  # the learner step
        for p in tiny_model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    awake.sync_weights(tiny_model)
    sleepy.sync_weights(tiny_model)
    assert not sleepy.sleeping
    for a, b in zip(awake.model.state_dict().values(), sleepy.model.state_dict().values()):
        assert torch.equal(a, b)
    params = SamplingParams(n=3, max_new_tokens=6, temperature=1.0, seed=5)
    assert [(s.completion_ids, s.logprobs) for g in awake.generate(PROBLEMS, params) for s in g] == \
        [(s.completion_ids, s.logprobs) for g in sleepy.generate(PROBLEMS, params) for s in g]
    # tied input/output embeddings stay one tensor after the round trip
    emb, head = sleepy.model.get_input_embeddings(), sleepy.model.get_output_embeddings()
    assert (emb.weight is head.weight) == (tiny_model.get_input_embeddings().weight is
                                           tiny_model.get_output_embeddings().weight)
    # sampling from the policy itself: nothing to free
    assert HFEngine(tiny_model, tiny_tokenizer).sleep() is False


def test_sleep_while_learning_needs_the_in_process_hf_engine():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(Exception, match="sleep_while_learning"):
        load_config(RunConfig, None, ["rollout.sleep_while_learning=true", "rollout.engine=vllm"])


def _count_fed_tokens(model):
    """Wrap ``model.forward`` to count the input positions it is fed (padding included)."""
    fed = []
    real = model.forward

    def forward(*a, **kw):
        fed.append(kw["input_ids"].numel())
        return real(*a, **kw)

    model.forward = forward
    return fed


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_prefix_cache_continues_without_recomputing_the_prefix(tiny_model, tiny_tokenizer, temperature):
    """Turn 2 of an episode: the trajectory so far (turn 1 + an observation) is the prefix.  With the cache the
    model is fed only the observation, and the continuation's tokens and log-probs match an uncached run."""
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=8)
    params = SamplingParams(n=2, max_new_tokens=10, temperature=temperature, seed=5)
    obs = tiny_tokenizer.encode(" result 42 ", add_special_tokens=False)
    cache = engine.prefix_cache()
    turn1 = engine.generate(PROBLEMS, params, cache=cache)
    assert cache.nbytes > 0 and len(cache.entries) == sum(len({tuple(s.completion_ids) for s in g}) for g in turn1)
    problems = [p for p, g in zip(PROBLEMS, turn1) for _ in g]
    prefixes = [s.completion_ids + obs for g in turn1 for s in g]
    cont = SamplingParams(n=1, max_new_tokens=6, temperature=temperature, seed=9)
    fed = _count_fed_tokens(tiny_model)
    with_cache = engine.generate(problems, cont, prefixes=prefixes, cache=cache)
    prefill_cached = fed[0]
    fed.clear()
    without = engine.generate(problems, cont, prefixes=prefixes)
    prefill_full = fed[0]
    del tiny_model.forward
    # only the last sampled token of turn 1 and the observation are fed (padded to the longest)
    assert prefill_cached == len(problems) * (len(obs) + 1)
    assert prefill_full >= len(problems) * (len(format_prompt(tiny_tokenizer, PROBLEMS[0])) + len(obs) + 1)
    assert cache.reused_tokens == sum(len(s.prompt_ids) + len(s.completion_ids) - 1 for g in turn1 for s in g)
    for (a,), (b,) in zip(with_cache, without):
        assert a.prompt_ids == b.prompt_ids
        if temperature == 0:
            assert a.completion_ids == b.completion_ids
        if a.completion_ids == b.completion_ids:
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
        ref = _teacher_forced_logprobs(tiny_model, a.prompt_ids, a.completion_ids, temperature=temperature or 1.0)
        if temperature:
            assert torch.allclose(torch.tensor(a.logprobs), ref, atol=1e-4)
    # the consumed entries are gone; the cache now holds this turn's rows only
    assert set(cache.entries) == {tuple(a.prompt_ids + a.completion_ids[:-1]) for (a,) in with_cache}


def test_prefix_cache_cap_and_ended_rows(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=8, cache_bytes=1)
    params = SamplingParams(n=1, max_new_tokens=4, temperature=0.0)
    cache = engine.prefix_cache()
    turn1 = engine.generate(PROBLEMS, params, cache=cache)
    assert cache.entries == {} and cache.skipped == len(PROBLEMS)  # nothing fits: the next turn is fed in full
    again = engine.generate(PROBLEMS, params, prefixes=[g[0].completion_ids for g in turn1], cache=cache)
    assert cache.reused_tokens == 0 and all(len(g[0].completion_ids) >= 1 for g in again)
    # rows the next call does not continue (ended episodes) are dropped at its end
    big = HFEngine(tiny_model, tiny_tokenizer, batch_size=8)
    cache = big.prefix_cache()
    turn1 = big.generate(PROBLEMS, params, cache=cache)
    big.generate(PROBLEMS[:1], params, prefixes=[turn1[0][0].completion_ids], cache=cache)
    assert len(cache.entries) == 1 and next(iter(cache.entries))[: len(turn1[0][0].prompt_ids)] == tuple(
        turn1[0][0].prompt_ids)


def test_stack_layers_is_one_allocation_per_row():
    """A stored row is one block (its own mapping when large), holding exactly the masked positions."""
    g = torch.Generator().manual_seed(0)
    layers = [(torch.randn(3, 2, 7, 4, generator=g), torch.randn(3, 2, 7, 4, generator=g)) for _ in range(5)]
    keep = torch.tensor([0, 0, 1, 1, 0, 1, 1], dtype=torch.bool)
    kv = stack_layers(layers, 1, keep.nonzero().squeeze(-1))
    assert len(kv) == 5 and {k.untyped_storage().data_ptr() for pair in kv for k in pair} == {
        kv[0][0].untyped_storage().data_ptr()}
    for (k, v), (sk, sv) in zip(layers, kv):
        assert torch.equal(sk, k[1][:, keep]) and torch.equal(sv, v[1][:, keep])
    assert PrefixCache._size(kv) == 5 * 2 * 2 * 4 * 4 * 4  # layers x (k, v) x heads x positions x dim x 4 bytes


def test_prefix_cache_cap_counts_consumed_entries_until_released():
    """Consumed entries stay in memory until their chunk is prefilled: the cap covers them too."""
    row = [(torch.zeros(1, 4, 2), torch.zeros(1, 4, 2))]  # 64 bytes
    cache = PrefixCache(max_bytes=128)
    cache.begin_call()
    assert cache.store([1, 2, 3, 4], row) and cache.store([5, 6, 7, 8], row) and not cache.store([9, 9, 9, 9], row)
    cache.end_call()
    cache.begin_call()
    n, kv = cache.lookup([1, 2, 3, 4, 10])
    assert n == 4 and kv is row and cache.nbytes == 128
    assert not cache.store([7, 7, 7, 7], row)  # the consumed row still holds its 64 bytes
    cache.release()
    assert cache.nbytes == 64 and cache.store([7, 7, 7, 7], row) and cache.nbytes == 128
    assert cache.lookup([1, 2, 3, 4, 10]) == (0, None)  # released: a later row with that prefix is fed in full


def test_engine_stores_rows_as_single_blocks_and_releases_each_chunk(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=2)
    params = SamplingParams(n=1, max_new_tokens=4, temperature=0.0)
    cache = engine.prefix_cache()
    turn1 = engine.generate(PROBLEMS, params, cache=cache)
    for kv in cache.entries.values():
        assert len({t.untyped_storage().data_ptr() for pair in kv for t in pair}) == 1
    stored = cache.nbytes
    releases = []
    original = cache.release
    cache.release = lambda: (releases.append(cache.nbytes), original())[1]
    engine.generate(PROBLEMS, params, prefixes=[g[0].completion_ids for g in turn1], cache=cache)
    chunks = -(-len(PROBLEMS) // 2)
    assert len(releases) == chunks + 1  # after each chunk's prefill, and at the end of the call
    assert releases[0] == stored  # the first chunk's consumed rows were still counted when it was prefilled
    assert cache.reused_tokens > 0 and not cache._taken


def test_rows_with_and_without_a_stored_prefix_are_chunked_apart(tiny_model, tiny_tokenizer):
    """A chunk mixing continued and fresh rows would hold the longest prefix and the longest whole prompt."""
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=2)
    params = SamplingParams(n=1, max_new_tokens=4, temperature=0.0)
    cache = engine.prefix_cache()
    turn1 = engine.generate(PROBLEMS, params, cache=cache)
    middle = tuple(turn1[1][0].prompt_ids + turn1[1][0].completion_ids[:-1])
    cache._drop(middle)  # the middle problem's row did not fit: problems 0 and 2 continue, 1 starts afresh
    found_per_chunk: list[list[int]] = []
    lookup = cache.lookup

    def recording(ids):
        n, kv = lookup(ids)
        found_per_chunk[-1].append(n)
        return n, kv

    cache.lookup = recording
    prefill = engine._prefill
    engine._prefill = lambda *a, **k: (found_per_chunk.append([]), prefill(*a, **k))[1]
    prefixes = [g[0].completion_ids for g in turn1]
    out = engine.generate(PROBLEMS, params, prefixes=prefixes, cache=cache)
    assert [len(f) for f in found_per_chunk] == [2, 1]
    assert all(found_per_chunk[0]) and not any(found_per_chunk[1])
    plain = HFEngine(tiny_model, tiny_tokenizer, batch_size=2).generate(PROBLEMS, params, prefixes=prefixes)
    assert [g[0].completion_ids for g in out] == [g[0].completion_ids for g in plain]  # results in problem order
    assert [g[0].problem_id for g in out] == [p.id for p in PROBLEMS]


def test_seeds_must_be_one_per_problem(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer)
    with pytest.raises(ValueError, match="holds 2 seeds for 3 problems"):
        engine.generate(PROBLEMS, SamplingParams(n=1, max_new_tokens=2, seeds=[1, 2]))
