"""Advantages, KL estimators and policy losses against hand-computed numbers.

Every expected value below was worked out by hand (shown in the comments), not
recomputed with the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import (
    ADVANTAGE_ESTIMATORS,
    aggregate_loss,
    entropy_from_logits,
    get_advantage_estimator,
    group_normalized_advantages,
    group_stats,
    grpo_loss,
    kl_estimate,
    masked_mean,
    masked_sum,
    ppo_clip_loss,
    selective_log_softmax,
)

T = torch.tensor
LN15, LN125, LN05 = math.log(1.5), math.log(1.25), math.log(0.5)


def close(a, b, tol=1e-5):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                               atol=tol, rtol=0)


# --------------------------------------------------------------------------- advantages
def test_grpo_two_groups_of_two():
    # group [1, 0]: mean .5, sample std sqrt((.25 + .25) / 1) = 1/sqrt(2) -> A = +-.5 * sqrt(2) = +-0.7071068
    a = group_normalized_advantages(T([1.0, 0.0, 0.0, 1.0]), 2, eps=0.0)
    close(a, [0.7071068, -0.7071068, -0.7071068, 0.7071068])


def test_grpo_one_group_of_four_uses_sample_std():
    # mean .25; deviations .75, -.25 x3; squares .5625 + 3 * .0625 = .75; / (4 - 1) = .25 -> std .5
    close(group_normalized_advantages(T([1.0, 0.0, 0.0, 0.0]), 4, eps=0.0), [1.5, -0.5, -0.5, -0.5])
    # default eps=1e-6: .75 / .500001 = 1.499997, -.25 / .500001 = -0.4999990
    close(group_normalized_advantages(T([1.0, 0.0, 0.0, 0.0]), 4), [1.499997, -0.499999, -0.499999, -0.499999],
          tol=1e-6)


def test_drgrpo_is_mean_centred_only():
    close(group_normalized_advantages(T([1.0, 0.0, 0.0, 1.0]), 2, scale_by_std=False), [0.5, -0.5, -0.5, 0.5])
    close(get_advantage_estimator("drgrpo")(T([1.0, 0.0, 0.0, 0.0]), 4), [0.75, -0.25, -0.25, -0.25])


def test_zero_variance_groups_get_exactly_zero():
    r = T([0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    a = group_normalized_advantages(r, 3)
    assert torch.equal(a[:6], torch.zeros(6))
    # third group [1, 0, 0]: mean 1/3, deviations 2/3, -1/3, -1/3; var (4/9 + 1/9 + 1/9) / 2 = 1/3
    # std = 0.5773503 -> A = (2/3) / 0.5773503 = 1.1547005, (-1/3) / 0.5773503 = -0.5773503
    close(a[6:], [1.1547005, -0.5773503, -0.5773503], tol=1e-5)
    assert torch.equal(group_normalized_advantages(T([3.0, 3.0]), 2, scale_by_std=False), torch.zeros(2))


def test_advantages_accept_integer_rewards_and_check_shape():
    close(group_normalized_advantages(T([1, 0, 0, 1]), 2, scale_by_std=False), [0.5, -0.5, -0.5, 0.5])
    with pytest.raises(ValueError, match="divisible"):
        group_normalized_advantages(T([1.0, 0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="group_size"):
        group_normalized_advantages(T([1.0, 0.0]), 0)
    with pytest.raises(ValueError, match="1-D"):
        group_normalized_advantages(torch.zeros(2, 2), 2)


def test_group_stats():
    s = group_stats(T([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 2)
    close(s["mean"], [0.5, 1.0, 0.0])
    close(s["std"], [0.7071068, 0.0, 0.0])  # sqrt(.5) for [1, 0]
    assert s["zero_variance"].tolist() == [False, True, True]
    close(s["zero_variance_frac"], 2 / 3)
    with pytest.raises(ValueError):
        group_stats(T([1.0, 0.0, 1.0]), 2)


def test_registry():
    assert {"grpo", "drgrpo", "rloo", "reinforce_pp", "gae", "passk", "nsr", "w_reinforce", "quantile",
            "entropy_guided", "noisy_backward", "noisy_forward"} <= set(ADVANTAGE_ESTIMATORS)
    close(get_advantage_estimator("grpo")(T([1.0, 0.0, 0.0, 0.0]), 4), [1.499997, -0.499999, -0.499999, -0.499999],
          tol=1e-6)
    with pytest.raises(ValueError, match="drgrpo, entropy_guided"):
        get_advantage_estimator("ppo")


# --------------------------------------------------------------------------- KL estimators
def test_kl_estimators_by_hand():
    logp = T([[-2.0, -2.0, -2.0, -2.0]])
    ref = T([[-1.0, -3.0, -2.0, -2.0 + math.log(2.0)]])  # log_ratio = ref - logp = 1, -1, 0, ln 2
    # k1 = -log_ratio
    close(kl_estimate(logp, ref, "k1"), [[-1.0, 1.0, 0.0, -0.6931472]])
    # k2 = .5 log_ratio^2: .5, .5, 0, .5 * 0.4804530
    close(kl_estimate(logp, ref, "k2"), [[0.5, 0.5, 0.0, 0.2402265]])
    # k3 = e^x - 1 - x: e - 2 = 0.7182818; 1/e - 1 + 1 = 0.3678794; 0; 2 - 1 - ln 2 = 0.3068528
    close(kl_estimate(logp, ref, "k3"), [[0.7182818, 0.3678794, 0.0, 0.3068528]])
    close(kl_estimate(logp, ref), [[0.7182818, 0.3678794, 0.0, 0.3068528]])  # k3 is the default


def test_k3_nonnegative_and_mask_and_errors():
    g = torch.Generator().manual_seed(0)
    logp, ref = torch.randn(4, 9, generator=g) * 3, torch.randn(4, 9, generator=g) * 3
    assert (kl_estimate(logp, ref, "k3") >= 0).all()
    assert (kl_estimate(logp, logp, "k3") == 0).all()
    mask = T([[1.0, 0.0]])
    out = kl_estimate(T([[-1.0, -200.0]]), T([[0.0, 0.0]]), "k3", mask=mask)  # exp(200) would be inf
    close(out, [[0.7182818, 0.0]])
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_estimate(logp, ref, "k4")


def test_k3_gradient_is_one_minus_exp_log_ratio():
    # d/dlogp [e^(ref - logp) - 1 - (ref - logp)] = 1 - e^(ref - logp)
    logp = T([-2.0, -2.0, -2.0], requires_grad=True)
    kl_estimate(logp, T([-1.0, -3.0, -2.0]), "k3").sum().backward()
    close(logp.grad, [1 - math.e, 1 - 1 / math.e, 0.0])  # -1.7182818, 0.6321206, 0


# --------------------------------------------------------------------------- masking / aggregation
PER_TOKEN = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = T([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_masked_sum_and_mean():
    close(masked_sum(PER_TOKEN, MASK), 7.0)  # 1 + 2 + 4
    close(masked_sum(PER_TOKEN, MASK, dim=-1), [3.0, 4.0])
    close(masked_mean(PER_TOKEN, MASK), 7.0 / 3)
    close(masked_mean(PER_TOKEN, MASK, dim=-1), [1.5, 4.0])
    close(masked_mean(PER_TOKEN, MASK.bool()), 7.0 / 3)
    close(masked_mean(PER_TOKEN, torch.zeros(2, 3), dim=-1), [0.0, 0.0])  # empty rows give 0, not nan
    # inf / nan at masked-out positions are ignored
    close(masked_sum(T([[1.0, float("inf"), float("nan")]]), T([[1.0, 0.0, 0.0]])), 1.0)


@pytest.mark.parametrize("mode, expected", [
    ("token_mean", 7.0 / 3),                    # (1 + 2 + 4) / 3 tokens
    ("seq_mean_token_mean", 2.75),              # ((1 + 2) / 2 + 4 / 1) / 2
    ("seq_mean_token_sum", 3.5),                # ((1 + 2) + 4) / 2
    ("seq_mean_token_sum_norm", 0.875),         # 7 / (2 rows * max_len 4)
])
def test_aggregation_modes(mode, expected):
    close(aggregate_loss(PER_TOKEN, MASK, mode, max_len=4), expected)


def test_aggregation_errors():
    with pytest.raises(ValueError, match="max_len"):
        aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="token_mean"):
        aggregate_loss(PER_TOKEN, MASK, "sum")


# --------------------------------------------------------------------------- PPO clip
def _ppo_inputs(log_ratios, requires_grad=False):
    old = T([[-1.0] * len(log_ratios)])
    logp = (old + T([log_ratios])).detach().requires_grad_(requires_grad)
    return logp, old, torch.ones_like(old)


def test_ppo_clip_positive_advantage():
    # ratios 1.5, 1, .5 and A = +2, eps .2:
    #   1.5: min(3.0, 1.2 * 2 = 2.4) = 2.4 (clipped high);  1: 2;  .5: min(1.0, .8 * 2 = 1.6) = 1.0 (not clipped)
    logp, old, mask = _ppo_inputs([LN15, 0.0, LN05])
    loss, m = ppo_clip_loss(logp, old, T([2.0]), mask)
    close(loss, -(2.4 + 2.0 + 1.0) / 3)  # -1.8
    close(m["clip_frac"], 1 / 3)
    close(m["clip_frac_high"], 1 / 3)
    close(m["clip_frac_low"], 0.0)
    close(m["ratio_mean"], 1.0)  # (1.5 + 1 + .5) / 3
    # .5 * (ln 1.5^2 + 0 + ln .5^2) / 3 = .5 * (0.1644020 + 0.4804530) / 3
    close(m["approx_kl"], 0.1074758)


def test_ppo_clip_negative_advantage():
    # A = -2:  1.5: min(-3, -2.4) = -3 (not clipped);  1: -2;  .5: min(-1, -1.6) = -1.6 (clipped low)
    logp, old, mask = _ppo_inputs([LN15, 0.0, LN05])
    loss, m = ppo_clip_loss(logp, old, T([-2.0]), mask)
    close(loss, (3.0 + 2.0 + 1.6) / 3)  # 2.2
    close(m["clip_frac"], 1 / 3)
    close(m["clip_frac_low"], 1 / 3)
    close(m["clip_frac_high"], 0.0)


def test_ppo_clip_higher_dapo():
    # ratios 1.5, 1.25, 1 with A = +2
    logp, old, mask = _ppo_inputs([LN15, LN125, 0.0])
    # symmetric .2: 2.4, 2.4 (1.25 > 1.2 clipped), 2
    loss, m = ppo_clip_loss(logp, old, T([2.0]), mask)
    close(loss, -6.8 / 3)
    close(m["clip_frac"], 2 / 3)
    # clip_high .28: 1.28 * 2 = 2.56 (clipped), 2.5 (1.25 < 1.28 not clipped), 2
    loss, m = ppo_clip_loss(logp, old, T([2.0]), mask, clip_low=0.2, clip_high=0.28)
    close(loss, -7.06 / 3)
    close(m["clip_frac"], 1 / 3)


def test_ppo_per_token_advantages():
    # A = [2, -2, 0], ratios 1.5, 1, .5: -2.4, +2, 0 -> mean -0.4 / 3
    logp, old, mask = _ppo_inputs([LN15, 0.0, LN05])
    loss, _ = ppo_clip_loss(logp, old, T([[2.0, -2.0, 0.0]]), mask)
    close(loss, -0.4 / 3)


@pytest.mark.parametrize("adv, expected_grad", [
    # dL/dlogp = -ratio * A / 3 unclipped, 0 clipped (token_mean over 3 tokens)
    (2.0, [0.0, -2.0 / 3, -0.5 * 2.0 / 3]),    # ratio 1.5 clipped; 1 -> -2/3; .5 -> -1/3
    (-2.0, [1.5 * 2.0 / 3, 2.0 / 3, 0.0]),     # 1.5 -> +1; 1 -> +2/3; .5 clipped
])
def test_ppo_clip_gradient_matches_analytic(adv, expected_grad):
    logp, old, mask = _ppo_inputs([LN15, 0.0, LN05], requires_grad=True)
    loss, _ = ppo_clip_loss(logp, old, T([adv]), mask)
    loss.backward()
    close(logp.grad, [expected_grad])


def test_ppo_gradient_with_sequence_mean_aggregation():
    # 2x3, mask [[1,1,0],[1,0,0]], ratio 1 everywhere, A = [1, 3]:
    # seq_mean_token_mean: dL/dlogp = -A_i / (B * n_i) = -1 / 4 for row 0 tokens, -3 / 2 for row 1 token
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    loss, _ = ppo_clip_loss(logp, logp.detach(), T([1.0, 3.0]), MASK, agg="seq_mean_token_mean")
    close(loss, -(1.0 + 3.0) / 2)
    loss.backward()
    close(logp.grad, [[-0.25, -0.25, 0.0], [-1.5, 0.0, 0.0]])


def test_ppo_padding_cannot_leak():
    # a masked-out token with an absurd log-ratio changes neither loss, metrics nor gradients
    logp = T([[-1.0, 500.0]], requires_grad=True)
    old = T([[-1.0, -1.0]])
    loss, m = ppo_clip_loss(logp, old, T([2.0]), T([[1.0, 0.0]]))
    loss.backward()
    close(loss, -2.0)
    close(logp.grad, [[-2.0, 0.0]])
    close(m["ratio_mean"], 1.0)
    assert all(torch.isfinite(v) for v in m.values())


# --------------------------------------------------------------------------- GRPO loss
def test_grpo_loss_kl_term_by_hand():
    # ratio 1, A = 2 -> pg = -2 per token; log_ratio ref - logp = 1, -1, 0
    # k3 = e - 2 = 0.7182818, 1/e = 0.3678794, 0 -> mean 1.0861612 / 3 = 0.3620537
    logp = T([[-1.0, -1.0, -1.0]], requires_grad=True)
    ref = T([[0.0, -2.0, -1.0]])
    loss, m = grpo_loss(logp, logp.detach(), T([2.0]), torch.ones(1, 3), ref_logp=ref, kl_coef=0.1)
    close(loss, -2.0 + 0.1 * 0.3620537)  # -1.9637946
    close(m["pg_loss"], -2.0)
    close(m["kl"], 0.3620537)
    loss.backward()
    # dL/dlogp = (-ratio * A + kl_coef * (1 - e^log_ratio)) / 3
    # = (-2 - 0.1718282) / 3, (-2 + 0.0632121) / 3, -2 / 3
    close(logp.grad, [[-0.7239427, -0.6455960, -0.6666667]])


def test_grpo_loss_without_kl_is_ppo_clip():
    logp, old, mask = _ppo_inputs([LN15, 0.0, LN05])
    loss, m = grpo_loss(logp, old, T([2.0]), mask)
    close(loss, -1.8)
    assert "kl" not in m
    # reference given but kl_coef 0: reported for monitoring, not added to the loss
    loss, m = grpo_loss(logp, old, T([2.0]), mask, ref_logp=old)
    close(loss, -1.8)
    assert float(m["kl"]) > 0
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, T([2.0]), mask, kl_coef=0.1)


def test_grpo_loss_kl_with_token_sum_norm():
    # 2x3, mask [[1,1,0],[1,0,0]], A = 0 -> pg 0; k1 = logp - ref = .5 on counted tokens
    # seq_mean_token_sum_norm, max_len 5: 3 * .5 / (2 * 5) = .15, times kl_coef .2 = .03
    logp = torch.full((2, 3), -1.0)
    loss, m = grpo_loss(logp, logp, T([0.0, 0.0]), MASK, ref_logp=logp - 0.5, kl_coef=0.2, kl_kind="k1",
                        agg="seq_mean_token_sum_norm", max_len=5)
    close(loss, 0.03)
    close(m["kl"], 0.5)


# --------------------------------------------------------------------------- entropy / log-softmax
def test_entropy_uniform_is_log_v():
    logits = torch.full((2, 3, 7), 0.3)
    close(entropy_from_logits(logits), torch.full((2, 3), math.log(7)))
    close(entropy_from_logits(torch.zeros(5)), math.log(5))


def test_entropy_by_hand_and_masked_vocab():
    # logits [0, ln 3] -> p = [.25, .75]; H = .25 ln 4 + .75 ln(4/3) = .3465736 + .2157616
    close(entropy_from_logits(T([[0.0, math.log(3.0)]])), [0.5623351])
    # large logits are stable (shift invariance)
    close(entropy_from_logits(T([[1000.0, 1000.0 + math.log(3.0)]])), [0.5623351], tol=1e-4)
    # -inf logits (masked vocab) contribute nothing, gradients stay finite
    z = T([[0.0, 0.0, float("-inf")]], requires_grad=True)
    h = entropy_from_logits(z)
    close(h, [math.log(2)])
    h.sum().backward()
    assert torch.isfinite(z.grad).all()


def test_entropy_bf16_computed_in_float32():
    out = entropy_from_logits(torch.zeros(2, 3, 8, dtype=torch.bfloat16))
    assert out.dtype == torch.float32
    close(out, torch.full((2, 3), math.log(8)))


def test_selective_log_softmax_matches_reference_and_gradient():
    g = torch.Generator().manual_seed(0)
    full = torch.randn(3, 6, 11, generator=g) * 4
    logits = full[:, :-1, :]  # non-contiguous, as in the learner
    index = torch.randint(0, 11, (3, 5), generator=g)
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    out = selective_log_softmax(a, index)
    ref = torch.log_softmax(b, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out, ref)
    w = torch.randn(3, 5, generator=g)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    # non-contiguous input directly
    torch.testing.assert_close(selective_log_softmax(logits, index), ref.detach())


def test_selective_log_softmax_gradcheck_and_2d():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 5, (2, 3), generator=g)
    assert torch.autograd.gradcheck(selective_log_softmax, (logits, index))
    flat = torch.randn(4, 6, generator=g)
    idx = torch.randint(0, 6, (4,), generator=g)
    torch.testing.assert_close(selective_log_softmax(flat, idx), torch.log_softmax(flat, -1)[torch.arange(4), idx])
    with pytest.raises(ValueError, match="index shape"):
        selective_log_softmax(flat, idx[:2])


def test_selective_log_softmax_by_hand_and_bf16():
    # logits [0, ln 3] -> log p = [ln .25, ln .75] = [-1.3862944, -0.2876821]
    close(selective_log_softmax(T([[[0.0, math.log(3.0)]] * 2]), T([[0, 1]])), [[-1.3862944, -0.2876821]])
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 4, 16, generator=g)
    index = torch.randint(0, 16, (2, 4), generator=g)
    lowp = logits.to(torch.bfloat16).requires_grad_(True)
    out = selective_log_softmax(lowp, index)
    assert out.dtype == torch.float32
    ref = torch.log_softmax(logits.to(torch.bfloat16).float(), -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert lowp.grad.dtype == torch.bfloat16 and torch.isfinite(lowp.grad.float()).all()
