"""policy_logprobs with train.logprob_chunk_size against the full-logits path on the tiny Llama."""

from __future__ import annotations

import warnings

import pytest
import torch

from rlvr.learner.batching import chunked_head, policy_logprobs
from conftest import make_model


def _batch(tok, B=3, P=6, C=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, len(tok), (B, P + C), generator=g)
    am = torch.ones(B, P + C, dtype=torch.long)
    am[0, :2] = 0  # left padding in the prompt
    am[1, P + 5:] = 0  # a shorter completion (right padding)
    ids[am == 0] = tok.pad_token_id
    return ids, am, P


def _run(model, ids, am, start, chunk, temperature, entropy_grad=True, return_hidden=False):
    model.zero_grad(set_to_none=True)
    out = policy_logprobs(model, ids, am, start, temperature, with_entropy=True, entropy_grad=entropy_grad,
                          return_hidden=return_hidden, chunk_size=chunk)
    logp, ent = out[0], out[1]
    mask = am[:, start:].float()
    loss = (logp * mask).sum() * 0.7 + ((ent * mask).sum() * -0.3 if entropy_grad else 0.0)
    if return_hidden:
        loss = loss + out[2].pow(2).mean()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


@pytest.mark.parametrize("chunk", [1, 5, 7, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_chunked_equals_full_values_and_gradients(tiny_tokenizer, chunk, temperature):
    model = make_model(tiny_tokenizer)
    ids, am, start = _batch(tiny_tokenizer)
    full, g_full = _run(model, ids, am, start, 0, temperature)
    chunked, g_chunk = _run(model, ids, am, start, chunk, temperature)
    for a, b in zip(full, chunked):
        torch.testing.assert_close(a.detach(), b.detach(), atol=1e-5, rtol=1e-5)
    assert set(g_full) == set(g_chunk) and "model.embed_tokens.weight" in g_full  # tied head + embedding
    for n in g_full:
        torch.testing.assert_close(g_full[n], g_chunk[n], atol=1e-5, rtol=1e-4, msg=n)


def test_chunked_return_hidden_and_detached_entropy(tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    ids, am, start = _batch(tiny_tokenizer, seed=3)
    full, g_full = _run(model, ids, am, start, 0, 1.0, entropy_grad=False, return_hidden=True)
    chunked, g_chunk = _run(model, ids, am, start, 4, 1.0, entropy_grad=False, return_hidden=True)
    assert not chunked[1].requires_grad
    for a, b in zip(full, chunked):
        torch.testing.assert_close(a.detach(), b.detach(), atol=1e-5, rtol=1e-5)
    for n in g_full:
        torch.testing.assert_close(g_full[n], g_chunk[n], atol=1e-5, rtol=1e-4, msg=n)


def test_no_grad_pass_matches(tiny_tokenizer):
    model = make_model(tiny_tokenizer).eval()
    ids, am, start = _batch(tiny_tokenizer, seed=4)
    with torch.no_grad():
        a = policy_logprobs(model, ids, am, start, 1.0, with_entropy=True)
        b = policy_logprobs(model, ids, am, start, 1.0, with_entropy=True, chunk_size=3)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_head_with_bias_or_softcap_falls_back_with_a_warning(tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    model.config.tie_word_embeddings = False
    model.lm_head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    assert "bias" in chunked_head(model)
    ids, am, start = _batch(tiny_tokenizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            a = policy_logprobs(model, ids, am, start, chunk_size=4)[0]
    assert any("full logits" in str(w.message) for w in caught)
    with torch.no_grad():
        torch.testing.assert_close(a, policy_logprobs(model, ids, am, start)[0])
    soft = make_model(tiny_tokenizer)
    soft.config.final_logit_softcapping = 30.0
    assert "softcapping" in chunked_head(soft)


def test_lora_model_matches(tiny_tokenizer):
    pytest.importorskip("peft")
    from rlvr.models.lora import LoraSettings, apply_lora

    model = apply_lora(make_model(tiny_tokenizer), LoraSettings(enabled=True, r=4))
    with torch.no_grad():  # non-zero adapters, so they matter
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    assert not isinstance(chunked_head(model), str)
    ids, am, start = _batch(tiny_tokenizer, seed=5)
    full, g_full = _run(model, ids, am, start, 0, 1.0)
    chunked, g_chunk = _run(model, ids, am, start, 6, 1.0)
    torch.testing.assert_close(full[0].detach(), chunked[0].detach(), atol=1e-5, rtol=1e-5)
    assert g_full and set(g_full) == set(g_chunk)
    for n in g_full:
        torch.testing.assert_close(g_full[n], g_chunk[n], atol=1e-5, rtol=1e-4, msg=n)


def test_config_field_validated():
    from rlvr.recipes.config import TrainConfig

    assert TrainConfig().logprob_chunk_size == 0 and TrainConfig().micro_batch_tokens == 0
    with pytest.raises(ValueError, match="logprob_chunk_size"):
        TrainConfig(logprob_chunk_size=-1)


def test_fsdp_refuses_the_learner_memory_options():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    for key in ("train.logprob_chunk_size=8", "train.micro_batch_tokens=64", "train.activation_checkpointing=true"):
        with pytest.raises(Exception, match="does not support: " + key.split("=")[0]):
            load_config(RunConfig, None, ["distributed.fsdp=true", key])
