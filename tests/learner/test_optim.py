"""AdamW with bfloat16 moments (``train.optimizer=adamw_bf16``): hand-computed step, unbiased rounding, resume."""

from __future__ import annotations

import pytest
import torch

from rlvr.learner.optim import AdamWBF16State, fp32_to_bf16_stochastic, make_optimizer


def test_first_step_hand_computed():
    # p = 1, g = 0.5, lr = 0.1, betas (0.9, 0.99), eps = 0, wd = 0.1:
    # decay: p = 1 - 0.1 * 0.1 * 1 = 0.99; m = 0.05, v = 0.0025; m_hat = 0.5, v_hat = 0.25;
    # update = 0.5 / sqrt(0.25) = 1  ->  p = 0.99 - 0.1 * 1 = 0.89
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = AdamWBF16State([p], lr=0.1, betas=(0.9, 0.99), eps=0.0, weight_decay=0.1)
    p.grad = torch.tensor([0.5])
    opt.step()
    assert p.item() == pytest.approx(0.89, abs=1e-7)
    st = opt.state[p]
    assert st["exp_avg"].dtype == torch.bfloat16 and st["exp_avg_sq"].dtype == torch.bfloat16
    # stored moments are one of the two bf16 neighbours of the exact values
    assert abs(st["exp_avg"].float().item() - 0.05) < 0.05 * 2 ** -7
    assert abs(st["exp_avg_sq"].float().item() - 0.0025) < 0.0025 * 2 ** -7


def test_stochastic_rounding_is_unbiased_and_exact_on_representable_values():
    g = torch.Generator().manual_seed(0)
    x = torch.full((200_000,), 1.0 + 2 ** -10)  # 1/8 of the way from bf16 1.0 to 1.0078125
    r = fp32_to_bf16_stochastic(x, g).float()
    assert set(r.unique().tolist()) == {1.0, 1.0078125}
    assert r.mean().item() == pytest.approx(1.0 + 2 ** -10, abs=2e-5)
    assert (r == 1.0078125).float().mean().item() == pytest.approx(0.125, abs=0.005)
    neg = fp32_to_bf16_stochastic(-x, g).float()
    assert neg.mean().item() == pytest.approx(-(1.0 + 2 ** -10), abs=2e-5)
    exact = torch.tensor([0.0, 1.0, -2.5, 0.15625, 2.0 ** 100])
    assert torch.equal(fp32_to_bf16_stochastic(exact, g).float(), exact)


def test_round_to_nearest_stalls_where_stochastic_rounding_tracks_the_average():
    # v <- 0.99 v + 0.01 * 1.3 from v = 1: each change (0.003) is under half a bf16 spacing at 1.0 (0.0039),
    # so round-to-nearest never moves; fp32 reaches 1.3 - 0.3 * 0.99^300 = 1.285.
    exact = 1.3 - 0.3 * 0.99 ** 300
    nearest = torch.tensor(1.0, dtype=torch.bfloat16)
    sr = torch.tensor(1.0, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        nearest = nearest.float().lerp(torch.tensor(1.3), 0.01).to(torch.bfloat16)
        sr = fp32_to_bf16_stochastic(sr.float().lerp(torch.tensor(1.3), 0.01).reshape(1), g)[0]
    assert nearest.item() == 1.0
    assert sr.float().item() == pytest.approx(exact, abs=0.03)


def _train(opt_name, steps=30, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = make_optimizer(model.parameters(), opt_name, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
    x, y = torch.randn(128, 64), torch.randn(128, 1)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, opt, losses


def test_tracks_torch_adamw_and_halves_the_state():
    m32, o32, l32 = _train("adamw")
    m16, o16, l16 = _train("adamw_bf16")
    assert l16[-1] < 0.5 * l16[0]  # it optimises
    for a, b in zip(l32, l16):
        assert b == pytest.approx(a, rel=0.02)
    for a, b in zip(m32.parameters(), m16.parameters()):
        assert torch.allclose(a, b, atol=5e-3)

    def state_bytes(opt):
        return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                   if torch.is_tensor(t) and t.dim() > 0)
    assert state_bytes(o16) * 2 == state_bytes(o32)


def test_resume_continues_exactly():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4096))
    grads = [torch.randn(4096) for _ in range(6)]

    def run(opt, gs):
        for gr in gs:
            w.grad = gr.clone()
            opt.step()

    start = w.detach().clone()
    opt = AdamWBF16State([w], lr=1e-2, betas=(0.9, 0.99), seed=3)
    run(opt, grads)
    straight = w.detach().clone()

    with torch.no_grad():
        w.copy_(start)
    opt = AdamWBF16State([w], lr=1e-2, betas=(0.9, 0.99), seed=3)
    run(opt, grads[:3])
    saved = opt.state_dict()
    opt2 = AdamWBF16State([w], lr=1e-2, betas=(0.9, 0.99), seed=99)  # seed overwritten by the saved RNG state
    opt2.load_state_dict(saved)
    assert opt2.state[w]["exp_avg"].dtype == torch.bfloat16  # torch's load casts to fp32; we store bf16 again
    run(opt2, grads[3:])
    assert torch.equal(w.detach(), straight)


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        make_optimizer([torch.nn.Parameter(torch.zeros(1))], "sgd", lr=1e-3, betas=(0.9, 0.99), weight_decay=0)


def test_config_names_the_key_on_a_bad_value():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(Exception, match="optimizer"):
        load_config(RunConfig, None, ["train.optimizer=lion"])
    assert load_config(RunConfig, None, ["train.optimizer=adamw_bf16"]).train.optimizer == "adamw_bf16"


def test_malloc_mmap_threshold_is_applied_on_glibc():
    import platform

    from rlvr.utils.accounting import set_malloc_mmap_threshold

    ok = set_malloc_mmap_threshold(1 << 20)
    assert ok == (platform.libc_ver()[0] == "glibc")
    set_malloc_mmap_threshold(128 * 1024)  # glibc's initial default: leave the test process as it was


def test_chunked_update_equals_whole_tensor_update_on_the_first_step():
    # the first step's update uses the unrounded moments, so slicing changes nothing but the rounding draws
    torch.manual_seed(0)
    init, grad = torch.randn(64, 100), torch.randn(64, 100)
    out = []
    for chunk in (1 << 20, 999):
        w = torch.nn.Parameter(init.clone())
        w.grad = grad.clone()
        AdamWBF16State([w], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, chunk=chunk).step()
        out.append(w.detach())
    assert torch.equal(out[0], out[1]) and not torch.equal(out[0], init)


def test_bf16_moments_are_refused_with_fsdp():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(Exception, match="adamw_bf16 is not supported with distributed.fsdp"):
        load_config(RunConfig, None, ["train.optimizer=adamw_bf16", "distributed.fsdp=true"])
