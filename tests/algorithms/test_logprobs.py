"""Chunked log-probs and entropy through the LM head (rlvr.algorithms.logprobs) against the eager path."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms import entropy_from_logits, selective_log_softmax
from rlvr.algorithms.logprobs import chunked_linear_logprobs, fused_linear_logprobs, liger_available


def eager(h, w, t, temperature, with_entropy=True):
    z = (h @ w.T).float()
    if temperature not in (0.0, 1.0):
        z = z / temperature
    return selective_log_softmax(z, t), entropy_from_logits(z) if with_entropy else None


def test_hand_sized_example_values():
    # two tokens, vocabulary of 3, identity-like head: logits are the hidden states themselves
    w = torch.eye(3)
    h = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    t = torch.tensor([1, 2])
    logp, ent = chunked_linear_logprobs(h, w, t, chunk_size=1, with_entropy=True)
    lse = torch.log(torch.exp(torch.tensor([1.0, 2.0, 3.0])).sum())
    torch.testing.assert_close(logp, torch.stack([torch.log(torch.tensor(1 / 3)), 3 - lse]))
    p = torch.softmax(torch.tensor([1.0, 2.0, 3.0]), -1)
    torch.testing.assert_close(ent, torch.stack([torch.log(torch.tensor(3.0)), -(p * p.log()).sum()]))


@pytest.mark.parametrize("chunk", [1, 4, 7, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_match_eager(chunk, temperature):
    g = torch.Generator().manual_seed(0)
    N, H, V = 23, 16, 97  # chunk sizes 4 and 7 do not divide N
    h0 = torch.randn(N, H, generator=g)
    w0 = torch.randn(V, H, generator=g) * 0.3
    t = torch.randint(0, V, (N,), generator=g)
    up_lp, up_ent = torch.randn(N, generator=g), torch.randn(N, generator=g)
    grads = []
    for fn in (eager, lambda h, w, t, tau: chunked_linear_logprobs(h, w, t, tau, chunk, with_entropy=True)):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        lp, ent = fn(h, w, t, temperature)
        ((lp * up_lp).sum() + (ent * up_ent).sum()).backward()
        grads.append((lp.detach(), ent.detach(), h.grad, w.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


def test_logp_only_gradient_and_float64_exactness():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(10, 8, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(30, 8, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 30, (10,), generator=g)
    lp, ent = chunked_linear_logprobs(h, w, t, chunk_size=3)
    assert ent is None
    gh, gw = torch.autograd.grad(lp.sum(), (h, w))
    z = h @ w.T
    ref = z.log_softmax(-1).gather(-1, t[:, None]).squeeze(-1)
    rh, rw = torch.autograd.grad(ref.sum(), (h, w))
    torch.testing.assert_close(lp, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(gh, rh, atol=1e-12, rtol=0)
    torch.testing.assert_close(gw, rw, atol=1e-12, rtol=0)


def test_tied_weight_receives_gradient_through_embedding_and_head():
    emb = torch.nn.Embedding(11, 6)
    ids = torch.tensor([1, 4, 7, 2])
    h = emb(ids) * 2
    lp, _ = chunked_linear_logprobs(h, emb.weight, torch.tensor([4, 7, 2, 9]), chunk_size=3)
    lp.sum().backward()
    g_chunked = emb.weight.grad.clone()
    emb.weight.grad = None
    z = emb(ids) * 2 @ emb.weight.T
    z.log_softmax(-1).gather(-1, torch.tensor([[4], [7], [2], [9]])).sum().backward()
    torch.testing.assert_close(g_chunked, emb.weight.grad)


def test_bfloat16_autocast_matches_eager_autocast():
    g = torch.Generator().manual_seed(2)
    h0, w0 = torch.randn(9, 16, generator=g), torch.randn(40, 16, generator=g)
    t = torch.randint(0, 40, (9,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = selective_log_softmax(torch.nn.functional.linear(h0, w0).float(), t)
        lp, _ = chunked_linear_logprobs(h0, w0, t, chunk_size=4)
    torch.testing.assert_close(lp, ref, atol=1e-5, rtol=0)


def test_bad_shapes_and_chunk_size_refused():
    with pytest.raises(ValueError, match="hidden"):
        chunked_linear_logprobs(torch.zeros(3, 4), torch.zeros(5, 3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_linear_logprobs(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3, dtype=torch.long), chunk_size=0)


def test_liger_backend_refused_without_cuda():
    assert not liger_available("cpu")
    with pytest.raises(RuntimeError, match="liger"):
        fused_linear_logprobs(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3, dtype=torch.long), backend="liger")


@pytest.mark.skipif(not (torch.cuda.is_available() and liger_available("cuda")), reason="needs CUDA and liger-kernel")
def test_liger_matches_torch_path_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(300, 64, device="cuda", generator=g)
    w = torch.randn(1000, 64, device="cuda", generator=g) * 0.2
    t = torch.randint(0, 1000, (300,), device="cuda", generator=g)
    with torch.no_grad():
        ref, _ = fused_linear_logprobs(h, w, t, 0.8, 64, backend="torch")
        got, _ = fused_linear_logprobs(h, w, t, 0.8, 64, backend="liger")
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
