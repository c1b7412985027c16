"""model.matmul=onednn: float32 CPU products through oneDNN, forward and backward, the same values to rounding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rlvr.models.matmul as mm
from rlvr.models.matmul import matmul_backend, onednn_available, onednn_mm

from conftest import make_model, tiny_run_config

pytestmark = pytest.mark.skipif(onednn_available() is not None, reason=f"oneDNN: {onednn_available()}")


@pytest.fixture
def count_calls(monkeypatch):
    calls = []
    real = mm._linear

    def spy(a, b):
        if (a.shape, b.shape) != ((2, 3), (2, 3)):  # not onednn_available's own check
            calls.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b)

    monkeypatch.setattr(mm, "_linear", spy)
    return calls


def test_a_hand_computed_product_and_its_gradients():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = torch.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]], requires_grad=True)
    out = onednn_mm(a, b)
    assert out.tolist() == [[21.0, 24.0, 27.0], [47.0, 54.0, 61.0]]
    out.backward(torch.ones_like(out))
    assert a.grad.tolist() == [[18.0, 27.0], [18.0, 27.0]]  # ones @ b.T
    assert b.grad.tolist() == [[4.0, 4.0, 4.0], [6.0, 6.0, 6.0]]  # a.T @ ones


def test_linear_matmul_and_their_gradients_match_aten(count_calls):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    w2 = torch.randn(40, 64, requires_grad=True)
    x = torch.randn(3, 7, 64, requires_grad=True)

    def loss():
        h = F.gelu(lin(x))  # F.linear with a bias, 3-D input
        return h.square().mean() + (x.reshape(-1, 64) @ w2.t()).sin().sum() + torch.mm(x[0], w2.t()).sum()

    params = (x, w2, lin.weight, lin.bias)
    ref_loss = loss()
    ref = torch.autograd.grad(ref_loss, params)
    assert not count_calls
    with matmul_backend("onednn"):
        got_loss = loss()
        got = torch.autograd.grad(got_loss, params)
    assert len(count_calls) == 9  # three products, each forward + two gradients
    torch.testing.assert_close(got_loss, ref_loss, rtol=1e-5, atol=1e-5)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_what_is_left_alone(count_calls):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with matmul_backend("onednn"):
        a.double() @ b.double()  # other dtypes
        torch.randn(2, 4, 8) @ torch.randn(2, 8, 3)  # batched products (attention)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast already picks oneDNN's bf16 kernels
            F.linear(a, b.t())
        torch.matmul(a, b)  # ... but this one is ours
    assert count_calls == [((4, 8), (3, 8))]
    a @ b
    assert len(count_calls) == 1  # the mode ends with the block


def test_a_training_run_uses_it_and_learns_the_same(tmp_path, tiny_tokenizer, count_calls):
    """A short GRPO run on the tiny model: every step's products go through oneDNN, and the metrics agree with the
    aten run to float32 rounding (a float64 check would not exercise the kernels)."""
    from rlvr.recipes.rl import train
    from rlvr.tasks import ArithmeticSpec, arithmetic_split
    from rlvr.trackers import read_metrics
    from rlvr.types import Verdict

    def parity(completion, reference):  # a reward the untrained tiny model gets half the time
        return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")

    problems = arithmetic_split(ArithmeticSpec(), 8, 0, seed=0)[0]
    runs = {}
    for backend in ("aten", "onednn"):
        out = tmp_path / backend
        cfg = tiny_run_config(out, "train.steps=2", f"model.matmul={backend}")
        train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(problems, []),
              verifier=parity)
        runs[backend] = read_metrics(out / "metrics.jsonl")
        if backend == "aten":
            assert not count_calls
    assert len(count_calls) > 100
    assert [len(r) for r in runs.values()] == [2, 2]
    assert runs["aten"][0]["grad_norm"] > 0  # there was something to learn
    for a, b in zip(runs["aten"], runs["onednn"]):
        if a["response_length"] == b["response_length"]:  # the same samples (T = 1: a near-tie may flip one)
            for key in ("reward_mean", "grad_norm", "adv_abs_mean"):
                assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-6), key


def test_bad_names_and_config():
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ValueError, match="matmul backend must be one of aten, onednn"):
        with matmul_backend("blas"):
            pass
    with pytest.raises(ConfigError, match="model.matmul"):
        load_config(RunConfig, None, ["model.matmul=blas"])
    assert load_config(RunConfig, None, ["model.matmul=onednn"]).model.matmul == "onednn"


def test_an_unavailable_kernel_is_a_clear_error(monkeypatch):
    def broken(a, b):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(mm, "_linear", broken)
    assert "unavailable" in onednn_available()
    with pytest.raises(RuntimeError, match="model.matmul=onednn: .*unavailable.*use model.matmul=aten"):
        with matmul_backend("onednn"):
            pass


def test_activation_checkpointing_recomputes_with_the_same_backend(tiny_tokenizer, count_calls):
    """The autograd engine does not carry torch function modes into the backward pass: a checkpointed layer used
    to be recomputed with aten after a oneDNN forward, and checkpoint's saved-tensor check failed (the demo with
    model.matmul=onednn stopped at its first step). The recompute now runs under the forward's backend."""
    from rlvr.learner.update import enable_activation_checkpointing

    ids = torch.randint(0, 50, (2, 9))
    ref_model = make_model(tiny_tokenizer).train()
    ref = ref_model(input_ids=ids).logits.square().mean()
    ref.backward()
    model = make_model(tiny_tokenizer).train()
    enable_activation_checkpointing(model)
    with matmul_backend("onednn"):
        loss = model(input_ids=ids).logits.square().mean()
        forward_calls = len(count_calls)
        loss.backward()
    layers = model.config.num_hidden_layers
    # forward: 7 products per layer + the LM head; backward: each layer's 7 again (the recompute), 2 per product
    assert forward_calls == 7 * layers + 1
    assert len(count_calls) == forward_calls + 7 * layers + 2 * forward_calls
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
