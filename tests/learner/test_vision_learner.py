"""The learner on a vision-language policy: log-probs with the image inputs equal a reference forward pass of each
row alone (padded, chunked over the LM head, packed, with shared prompts), image placeholders are never in the loss
mask, packing keeps every row's images with it, LoRA trains through the images."""

from __future__ import annotations

import pytest
import torch

from conftest import make_vlm, random_images
from rlvr.engines import HFEngine, SamplingParams
from rlvr.learner.batching import (collate, completion_start, pack_rows_shared, packed_logprobs, policy_logprobs,
                                   prompt_keys)
from rlvr.learner.update import sub_batch
from rlvr.types import Problem


def _batch(model, tok, same_text=True):
    """Three image problems (same text, different images) and a text problem, 2 samples each, collated."""
    imgs = random_images(3, seed=11)
    probs = [Problem(f"p{i}", prompt="How many?" if same_text else f"Problem {i}?", answer="1", images=[imgs[i]])
             for i in range(3)] + [Problem("t", prompt="What is 2 + 2?", answer="4")]
    eng = HFEngine(model, tok, batch_size=16)
    samples = [s for g in eng.generate(probs, SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=2))
               for s in g]
    return samples, collate(samples, torch.zeros(len(samples)), eng.pad_id)


def _reference(model, sample):
    """log p of each completion token from one unpadded forward of prompt + completion with the row's images alone
    (full logits, no chunking, the model's own position ids)."""
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    extra = {} if sample.image_inputs is None else dict(sample.image_inputs.tensors)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **extra).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    return lp[len(sample.prompt_ids) - 1:]


def _rows(lp, batch, start):
    m = batch.completion_mask[:, start:].bool()
    return [lp[i][m[i]] for i in range(lp.shape[0])]


@pytest.fixture(scope="module")
def setup():
    model, tok = make_vlm(seed=1)
    samples, batch = _batch(model, tok)
    return model, tok, samples, batch


@pytest.mark.parametrize("how", ["padded", "chunked", "packed", "packed_chunked", "shared", "shared_chunked"])
def test_logprobs_with_images_equal_an_unchunked_reference(setup, how):
    model, tok, samples, batch = setup
    start = completion_start(batch)
    kw = dict(images=batch.image_inputs, chunk_size=3 if how.endswith("chunked") else 0)
    with torch.no_grad():
        if how.startswith("packed"):
            lp, _ = packed_logprobs(model, batch.input_ids, batch.attention_mask, start, **kw)
        elif how.startswith("shared"):
            lp, _ = packed_logprobs(model, batch.input_ids, batch.attention_mask, start, share_prompts=True, **kw)
        else:
            lp, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, start, **kw)
    for got, s in zip(_rows(lp, batch, start), samples):
        torch.testing.assert_close(got, _reference(model, s), atol=2e-5, rtol=0)


def test_chunked_gradients_equal_the_full_path(setup):
    model, tok, samples, batch = setup
    start = completion_start(batch)
    grads = []
    for chunk in (0, 4):
        model.zero_grad()
        lp, _ = packed_logprobs(model, batch.input_ids, batch.attention_mask, start, images=batch.image_inputs,
                                chunk_size=chunk)
        (lp * batch.completion_mask[:, start:]).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    model.zero_grad()
    assert float(grads[0].abs().max()) > 0
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)
    vision = [p for n, p in model.named_parameters() if "vision_tower" in n]
    assert vision  # the loss reaches the vision tower through the placeholders' features


def test_masks_exclude_image_tokens(setup):
    model, tok, samples, batch = setup
    image_id = tok.convert_tokens_to_ids("<image>")
    placeholders = batch.input_ids == image_id
    assert int(placeholders.sum()) == 6 * 16  # 3 problems x 2 samples x 16 placeholders
    assert float(batch.completion_mask[placeholders].abs().sum()) == 0.0
    assert float(batch.sampler_logprobs[placeholders].abs().sum()) == 0.0
    # a multi-turn episode's mask too: only the policy's sampled tokens count
    from rlvr.envs.base import Environment, Reply
    from rlvr.rollout.episodes import run_episodes
    from rlvr.types import Verdict

    class Twice(Environment):
        def step(self, state, text):
            if state.turn == 0:
                return Reply(observation="Look again.", role="user")
            return Reply(done=True, reward=1.0, verdict=Verdict(1.0))

    Twice.limits = type(Twice.limits)(max_turns=2)
    eng = HFEngine(model, tok, batch_size=16)
    p = Problem("m", prompt="How many?", images=random_images(1, seed=3))
    [[ep]] = run_episodes(eng, Twice(), [p], SamplingParams(n=1, max_new_tokens=4, temperature=1.0, seed=0))
    assert ep.info["turns"] == 2 and ep.image_inputs is not None
    b = collate([ep], torch.zeros(1), eng.pad_id)
    assert float(b.completion_mask[b.input_ids == image_id].sum()) == 0.0
    assert int(b.completion_mask.sum()) == sum(ep.mask) < len(ep.completion_ids)


def test_packing_keeps_images_with_their_rows(setup):
    """Rows with the same text but different images never share a prompt; selecting rows keeps their images; a
    packed micro-batch with the images swapped between two rows gives those rows each other's log-probs."""
    model, tok, samples, batch = setup
    start = completion_start(batch)
    keys, _ = prompt_keys(batch.input_ids, batch.attention_mask, start, batch.image_inputs)
    plain, _ = prompt_keys(batch.input_ids, batch.attention_mask, start)
    assert len(set(plain[:6])) == 1 and len(set(keys[:6])) == 3  # same ids, three images
    ids, *_ = pack_rows_shared(batch.input_ids, batch.attention_mask, start, batch.image_inputs)
    image_id = tok.convert_tokens_to_ids("<image>")
    assert int((ids == image_id).sum()) == 3 * 16  # each problem's prompt (and image) once
    rows = torch.tensor([5, 0, 6])
    mb, mstart = sub_batch(batch, rows)
    assert [x.key if x else None for x in mb.image_inputs] == [batch.image_inputs[r].key if batch.image_inputs[r]
                                                               else None for r in rows.tolist()]
    with torch.no_grad():
        lp, _ = packed_logprobs(model, mb.input_ids, mb.attention_mask, mstart, images=mb.image_inputs)
    for got, r in zip(_rows(lp, mb, mstart), rows.tolist()):
        torch.testing.assert_close(got, _reference(model, samples[r]), atol=2e-5, rtol=0)
    swapped = [mb.image_inputs[1], mb.image_inputs[0], None]  # rows 5 and 0 have the same text, other images
    with torch.no_grad():
        lp2, _ = packed_logprobs(model, mb.input_ids, mb.attention_mask, mstart, images=swapped)
    assert not torch.allclose(_rows(lp2, mb, mstart)[0], _rows(lp, mb, mstart)[0])


def test_lora_trains_through_the_images():
    pytest.importorskip("peft")
    from rlvr.models.lora import LoraSettings, apply_lora

    model, tok = make_vlm(seed=2)
    samples, batch = _batch(model, tok, same_text=False)
    lora = apply_lora(model, LoraSettings(enabled=True, r=4, target_modules=["q_proj", "v_proj"]))
    start = completion_start(batch)
    lp, _ = packed_logprobs(lora, batch.input_ids, batch.attention_mask, start, images=batch.image_inputs,
                            chunk_size=4, share_prompts=True)
    for got, s in zip(_rows(lp.detach(), batch, start), samples):
        torch.testing.assert_close(got, _reference(model, s), atol=2e-5, rtol=0)  # B = 0 at init: the base model
    (lp * batch.completion_mask[:, start:]).sum().backward()
    trained = {n for n, p in lora.named_parameters() if p.grad is not None and float(p.grad.abs().sum()) > 0}
    assert trained and all("lora_" in n for n in trained)
    assert any("vision_tower" in n for n in trained) and any("language_model" in n for n in trained)
    eng = HFEngine(lora, tok, batch_size=16)  # samples from a merged plain copy, images included
    out = eng.generate([Problem("x", prompt="Hi?", images=random_images(1))], SamplingParams(n=2, max_new_tokens=3))
    assert out[0][0].image_inputs is not None
