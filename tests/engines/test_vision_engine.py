"""Sampling a vision-language policy: images reach the prefill, per-problem seeds, no sampled placeholders, vLLM's
multimodal inputs (with the stand-in of test_vllm_engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import make_tokenizer, make_vlm, random_images
from rlvr.engines import HFEngine, SamplingParams, format_prompt
from rlvr.models.vision import render_prompt
from rlvr.types import Problem

PARAMS = SamplingParams(n=2, max_new_tokens=6, temperature=1.0)


def _problems(k=3, seed=0):
    imgs = random_images(k, seed=seed)
    return [Problem(f"p{i}", prompt="How many?", answer="3", images=[imgs[i]]) for i in range(k)]


def test_image_problems_sample_with_their_images():
    model, tok = make_vlm()
    eng = HFEngine(model, tok, batch_size=16)
    probs = _problems() + [Problem("t", prompt="What is 2 + 2?", answer="4")]
    groups = eng.generate(probs, SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=1))
    image_id = tok.convert_tokens_to_ids("<image>")
    for p, g in zip(probs, groups):
        for s in g:
            if p.images:
                ids, inputs = render_prompt(tok, p)
                assert s.prompt_ids == ids and s.image_inputs is g[0].image_inputs  # one object per group
                assert s.image_inputs.key == inputs.key and s.prompt_ids.count(image_id) == 16
            else:
                assert s.prompt_ids == format_prompt(tok, p) and s.image_inputs is None
    # the image reaches the model: another image, same text -> another next-token distribution
    greedy = SamplingParams(n=1, max_new_tokens=1, temperature=0.0)
    a = eng.generate(_problems(1, seed=0), greedy)[0][0]
    b = eng.generate(_problems(1, seed=5), greedy)[0][0]
    assert (a.completion_ids, a.logprobs) != (b.completion_ids, b.logprobs)


def test_per_problem_seeds_draw_the_same_in_any_batch():
    model, tok = make_vlm()
    eng = HFEngine(model, tok, batch_size=16)
    probs = _problems(3)
    together = eng.generate(probs, SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seeds=[7, 8, 9]))
    alone = [eng.generate([p], SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seeds=[s]))[0]
             for p, s in zip(probs, [7, 8, 9])]
    for g1, g2 in zip(together, alone):
        assert [s.completion_ids for s in g1] == [s.completion_ids for s in g2]
        for s1, s2 in zip(g1, g2):
            torch.testing.assert_close(torch.tensor(s1.logprobs), torch.tensor(s2.logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_sampler_never_emits_an_image_placeholder(temperature):
    """With the placeholder made the most likely token, it is still never sampled; the recorded log-probs stay the
    model's full distribution's (what the learner recomputes)."""
    model, tok = make_vlm()
    image_id = tok.convert_tokens_to_ids("<image>")
    with torch.no_grad():
        model.lm_head.weight[image_id] = model.lm_head.weight[image_id] * 0 + 3.0  # dominant logit
    eng = HFEngine(model, tok, batch_size=16)
    groups = eng.generate(_problems(2) + [Problem("t", prompt="Hi", answer="x")],
                          SamplingParams(n=3, max_new_tokens=5, temperature=temperature, seed=0))
    from rlvr.learner.batching import collate, completion_start, policy_logprobs

    samples = [s for g in groups for s in g]
    assert all(image_id not in s.completion_ids for s in samples)
    b = collate(samples, torch.zeros(len(samples)), eng.pad_id)
    start = completion_start(b)
    with torch.no_grad():
        lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, start, images=b.image_inputs)
    m = b.completion_mask[:, start:]
    assert float(((lp - b.sampler_logprobs[:, start:]) * m).abs().max()) < 1e-4
    assert float((lp * m).sum()) < -1.0  # the placeholder's mass is missing from what was sampled


def test_a_text_policy_refuses_image_problems_and_text_is_unchanged_on_a_vlm():
    from conftest import make_model

    tok = make_tokenizer()
    eng = HFEngine(make_model(tok), tok)
    with pytest.raises(ValueError, match="no image processor"):
        eng.generate(_problems(1), PARAMS)
    assert eng._banned is None  # text policies take the old sampling path


def test_multi_turn_continuation_keeps_the_images():
    """A later turn continues the trajectory (prompt with placeholders + the policy's and environment's tokens)
    with the problem's images in the prefill: the same log-probs as one forward pass over it all."""
    model, tok = make_vlm()
    eng = HFEngine(model, tok, batch_size=16)
    p = _problems(1)[0]
    first = eng.generate([p], SamplingParams(n=1, max_new_tokens=4, temperature=1.0, seed=0))[0][0]
    feedback = tok.encode("\nTry again.\n", add_special_tokens=False)
    prefix = first.completion_ids + feedback
    cache = eng.prefix_cache()
    second = eng.generate([p], SamplingParams(n=1, max_new_tokens=4, temperature=1.0, seed=1), prefixes=[prefix],
                          cache=cache)[0][0]
    assert second.prompt_ids == first.prompt_ids + prefix and second.image_inputs.key == first.image_inputs.key
    assert cache.reused_tokens == 0  # image rows never reuse cached keys
    from rlvr.learner.batching import collate, completion_start, policy_logprobs

    b = collate([second], torch.zeros(1), eng.pad_id)
    start = completion_start(b)
    with torch.no_grad():
        lp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, start, images=b.image_inputs)
    torch.testing.assert_close(lp[0], torch.tensor(second.logprobs), atol=1e-4, rtol=0)


# ----------------------------------------------------------------- vLLM (stand-in)
def test_vllm_gets_images_as_multi_modal_data():
    from test_vllm_engine import FakeLLM
    from rlvr.engines.vllm import VLLMEngine

    model, tok = make_vlm()
    eng = VLLMEngine(tokenizer=tok, llm=FakeLLM(), sampling_params_cls=SimpleNamespace)
    probs = _problems(2) + [Problem("t", prompt="What is 2 + 2?", answer="4")]
    groups = eng.generate(probs, SamplingParams(n=2, max_new_tokens=4, temperature=1.0, seed=0))
    requests, _ = eng.llm.calls[0]
    for p, r, g in zip(probs, requests, groups):
        if p.images:
            ids, inputs = render_prompt(tok, p)
            assert r["prompt_token_ids"] == ids  # the learner's ids, placeholders expanded
            [im] = r["multi_modal_data"]["image"]
            assert im.size == (40, 40) and im.mode == "RGB"
            assert all(s.image_inputs.key == inputs.key and s.prompt_ids == ids for s in g)
        else:
            assert r == {"prompt_token_ids": format_prompt(tok, p)} and g[0].image_inputs is None
