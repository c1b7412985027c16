"""Policy losses (dual-clip, GSPO, TOPR, IS weights), KL / entropy terms, importance weights,
mismatch diagnostics and step diagnostics: hand-computed values and autograd gradients vs formulas."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import (
    POLICY_LOSSES,
    ReferenceResetSchedule,
    dual_clip_loss,
    entropy_bonus,
    entropy_from_logits,
    get_policy_loss,
    grpo_loss,
    gspo_loss,
    is_correction_weights,
    kl_loss,
    logprob_mismatch,
    masked_is_weights,
    ppo_clip_loss,
    step_diagnostics,
    topr_loss,
    truncated_is_weights,
)

T = torch.tensor
LN15, LN05 = math.log(1.5), math.log(0.5)


def close(a, b, tol=1e-5):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                               atol=tol, rtol=0)


def _inputs(log_ratios, requires_grad=True):
    old = torch.full((1, len(log_ratios)), -1.0)
    logp = (old + T([log_ratios])).detach().requires_grad_(requires_grad)
    return logp, old, torch.ones_like(old)


# --------------------------------------------------------------------------- dual clip
def test_dual_clip_by_hand_and_gradient():
    # A = -1, ratios 4, 1.5, .5, eps .2, c = 3:
    #   4:   min(-4, -1.2) = -4; max(-4, -3) = -3 -> loss 3, dual clip active, grad 0
    #   1.5: min(-1.5, -1.2) = -1.5; max(-1.5, -3) = -1.5 -> 1.5, grad d(-ratio A)/dlogp = ratio = 1.5
    #   .5:  min(-.5, -.8) = -.8 -> .8 (clipped low, grad 0)
    logp, old, mask = _inputs([math.log(4.0), LN15, LN05])
    loss, m = dual_clip_loss(logp, old, T([-1.0]), mask, clip_ratio_c=3.0)
    close(loss, (3.0 + 1.5 + 0.8) / 3)
    close(m["clip_frac_dual"], 1 / 3)
    close(m["clip_frac_low"], 1 / 3)
    loss.backward()
    close(logp.grad, [[0.0, 1.5 / 3, 0.0]])
    # positive advantages: identical to PPO-clip
    logp2, old2, _ = _inputs([math.log(4.0), LN15, LN05])
    a, _ = dual_clip_loss(logp2, old2, T([1.0]), mask)
    b, _ = ppo_clip_loss(logp2, old2, T([1.0]), mask)
    close(a, b)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(logp2, old2, T([1.0]), mask, dual_clip=0.5)


# --------------------------------------------------------------------------- IS weights in the loss
def test_ppo_with_is_weights():
    # ratios 1.5, 1, .5 with A = 2 (per-token objective 2.4 clipped, 2, 1) weighted by .5, 1, 2
    logp, old, mask = _inputs([LN15, 0.0, LN05])
    loss, _ = ppo_clip_loss(logp, old, T([2.0]), mask, is_weights=T([[0.5, 1.0, 2.0]]))
    close(loss, -(2.4 * 0.5 + 2.0 + 1.0 * 2.0) / 3)
    loss.backward()
    # dL/dlogp = -w * ratio * A / 3 where unclipped: 0, -1 * 1 * 2 / 3, -2 * .5 * 2 / 3
    close(logp.grad, [[0.0, -2 / 3, -2 / 3]])


# --------------------------------------------------------------------------- GSPO
def test_gspo_by_hand_and_gradient():
    # row 0: log-ratios .1, .3 -> s0 = e^.2 = 1.2214028, A = +1
    # row 1: -.1 (one token) -> s1 = e^-.1 = 0.9048374, A = -1
    old = T([[-1.0, -1.0], [-1.0, -1.0]])
    logp = (old + T([[0.1, 0.3], [-0.1, 0.0]])).requires_grad_(True)
    mask = T([[1.0, 1.0], [1.0, 0.0]])
    # clip (.2, .3): s0 < 1.3 not clipped -> per-token -1.2214028; row 1: .9048 in range -> +.9048374
    # seq_mean_token_mean: (-1.2214028 + .9048374) / 2
    loss, m = gspo_loss(logp, old, T([1.0, -1.0]), mask, clip_low=0.2, clip_high=0.3)
    close(loss, (-1.2214028 + 0.9048374) / 2)
    loss.backward()
    # dL/dlogp_{i,t} = -s_i A_i / (B |y_i|): row 0: -1.2214028 / 4; row 1: .9048374 / 2
    close(logp.grad, [[-1.2214028 / 4, -1.2214028 / 4], [0.9048374 / 2, 0.0]])
    close(m["seq_ratio_max"], 1.2214028)
    # default tiny clip (3e-4, 4e-4): row 0 is clipped high (zero grad), row 1 clipped low (A < 0, s < 1 - 3e-4)
    logp.grad = None
    loss, m = gspo_loss(logp, old, T([1.0, -1.0]), mask)
    loss.backward()
    close(logp.grad, torch.zeros(2, 2))
    close(m["clip_frac"], 1.0)
    close(m["clip_frac_high"], 2 / 3)  # token-weighted: 2 of 3 counted tokens


def test_gspo_matches_sequence_level_objective():
    # GSPO-token with [B] advantages == 1/B sum_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t log-ratio)
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=g) - 2
    delta = torch.randn(3, 5, generator=g) * 0.05
    mask = T([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    adv = T([1.0, -0.5, 2.0])
    a = (old + delta).requires_grad_(True)
    b = (old + delta).requires_grad_(True)
    loss_a, _ = gspo_loss(a, old, adv, mask, clip_low=0.02, clip_high=0.03)
    s = torch.exp(((b - old) * mask).sum(-1) / mask.sum(-1))
    loss_b = -torch.minimum(s * adv, s.clamp(0.98, 1.03) * adv).mean()
    close(loss_a, loss_b)
    loss_a.backward()
    loss_b.backward()
    close(a.grad, b.grad)


# --------------------------------------------------------------------------- TOPR
def test_topr_by_hand_and_gradient():
    # row 0: A = +1, log-ratios .5, .2 -> weight 1: per-token -1 * 1 * lr = -.5, -.2 (sum -.7)
    # row 1: A = -1, log-ratios -.3, -.4 -> sequence ratio e^-.7 = 0.4965853 < 1 kept as weight:
    #        per-token -w * (-1) * lr = .4965853 * (-.3), .4965853 * (-.4) (sum -.3476097)
    # seq_mean_token_sum: (-.7 - .3476097) / 2
    old = torch.full((2, 2), -1.0)
    logp = (old + T([[0.5, 0.2], [-0.3, -0.4]])).requires_grad_(True)
    mask = torch.ones(2, 2)
    loss, m = topr_loss(logp, old, T([1.0, -1.0]), mask)
    close(loss, (-0.7 - 0.3476097) / 2)
    loss.backward()
    # dL/dlogp = -w A / B: row 0 -1/2; row 1 .4965853 / 2
    close(logp.grad, [[-0.5, -0.5], [0.2482927, 0.2482927]])
    close(m["clip_frac"], 0.0)
    # token level: row 1 weights e^-.3 = 0.7408182, e^-.4 = 0.6703200
    logp.grad = None
    loss, _ = topr_loss(logp, old, T([1.0, -1.0]), mask, level="token")
    loss.backward()
    close(logp.grad, [[-0.5, -0.5], [0.7408182 / 2, 0.6703200 / 2]])


def test_topr_truncates_negative_ratios_above_one():
    # A = -1, sequence log-ratio .7 > 0 -> weight min(e^.7, 1) = 1; truncation reported
    old = torch.full((1, 2), -1.0)
    logp = (old + T([[0.3, 0.4]])).requires_grad_(True)
    loss, m = topr_loss(logp, old, T([-1.0]), torch.ones(1, 2))
    close(loss, 0.7)
    loss.backward()
    close(logp.grad, [[1.0, 1.0]])
    close(m["clip_frac"], 1.0)


# --------------------------------------------------------------------------- registry, uniform behaviour
def test_all_policy_losses_on_policy_have_reinforce_gradient():
    # on-policy (ratio 1) with token_mean every loss has dL/dlogp_t = -A_t / n_tokens
    mask = T([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = T([2.0, -1.0])
    for name in POLICY_LOSSES:
        logp = torch.full((2, 3), -1.0, requires_grad=True)
        loss, m = get_policy_loss(name)(logp, logp.detach(), adv, mask, agg="token_mean")
        loss.backward()
        close(logp.grad, [[-2 / 5, -2 / 5, 0.0], [1 / 5, 1 / 5, 1 / 5]])
        assert {"clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "approx_kl"} <= set(m), name
        assert all(torch.isfinite(v) for v in m.values()), name
    with pytest.raises(ValueError, match="cispo, clip_cov, dual_clip, gspo, kl_cov, ppo_clip, sapo, topr"):
        get_policy_loss("a2c")


def test_policy_losses_ignore_padding():
    for name in POLICY_LOSSES:
        logp = T([[-1.0, 500.0]], requires_grad=True)
        loss, m = get_policy_loss(name)(logp, T([[-1.0, -1.0]]), T([2.0]), T([[1.0, 0.0]]))
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0, name
        assert all(torch.isfinite(v) for v in m.values()), name


# --------------------------------------------------------------------------- KL / entropy terms
def test_kl_loss_gradients():
    logp = T([[-1.0, -1.0]], requires_grad=True)
    ref = T([[0.0, -2.0]])  # x = ref - logp = 1, -1
    # k1 = logp - ref = -1, 1 -> mean 0; grad 1 / 2 each
    loss = kl_loss(logp, ref, torch.ones(1, 2), kind="k1")
    close(loss, 0.0)
    loss.backward()
    close(logp.grad, [[0.5, 0.5]])
    # k2 = .5 x^2 = .5, .5 -> mean .5; grad -x / 2 = -.5, .5
    logp.grad = None
    loss = kl_loss(logp, ref, torch.ones(1, 2), kind="k2")
    close(loss, 0.5)
    loss.backward()
    close(logp.grad, [[-0.5, 0.5]])


def test_entropy_bonus_and_entropy_gradient():
    ent = T([[1.0, 2.0], [3.0, 0.0]], requires_grad=True)
    mask = T([[1.0, 1.0], [1.0, 0.0]])
    b = entropy_bonus(ent, mask, coef=0.1)
    close(b, -0.1 * 6 / 3)
    b.backward()
    close(ent.grad, [[-0.1 / 3, -0.1 / 3], [-0.1 / 3, 0.0]])
    # dH/dz_j = -p_j (log p_j + H): z = [0, ln 3], p = [.25, .75], H = 0.5623351
    # -.25 (-1.3862944 + .5623351) = 0.2059898; -.75 (-0.2876821 + .5623351) = -0.2059898
    z = T([[0.0, math.log(3.0)]], requires_grad=True)
    entropy_from_logits(z).sum().backward()
    close(z.grad, [[0.2059898, -0.2059898]])


def test_grpo_loss_options_pass_through():
    logp, old, mask = _inputs([LN15, 0.0, LN05])
    ent = T([[1.0, 2.0, 3.0]], requires_grad=True)
    loss, m = grpo_loss(logp, old, T([2.0]), mask, entropy=ent, entropy_coef=0.1)
    close(loss, -1.8 - 0.1 * 2.0)  # PPO-clip -1.8 (test_algorithms), minus .1 * mean entropy 2
    close(m["entropy"], 2.0)
    loss.backward()
    close(ent.grad, [[-0.1 / 3] * 3])
    # dual clip selected by name; clip_low / clip_high forwarded
    logp2, old2, _ = _inputs([math.log(4.0), LN15, LN05])
    loss, m = grpo_loss(logp2, old2, T([-1.0]), mask, policy_loss="dual_clip")
    close(loss, (3.0 + 1.5 + 0.8) / 3)
    # GSPO keeps its own clip defaults (clip_low / clip_high not forwarded)
    loss, m = grpo_loss(logp2, old2, T([-1.0]), mask, policy_loss="gspo")
    assert "seq_ratio_max" in m
    with pytest.raises(ValueError, match="entropy"):
        grpo_loss(logp2, old2, T([-1.0]), mask, entropy_coef=0.1)


# --------------------------------------------------------------------------- reference reset (ProRL)
def test_reference_reset_schedule():
    s = ReferenceResetSchedule(every=3)
    assert [s.should_reset(t) for t in (1, 2, 3)] == [False, False, True]
    s.mark_reset(3)
    assert [s.should_reset(t) for t in (5, 6)] == [False, True]
    k = ReferenceResetSchedule(kl_threshold=0.1, min_interval=2)
    assert not k.should_reset(1, kl=0.5)       # too soon
    assert k.should_reset(2, kl=0.5)
    assert not k.should_reset(2, kl=0.05)
    assert not ReferenceResetSchedule().should_reset(10**6, kl=100.0)
    k2 = ReferenceResetSchedule(every=3)
    k2.load_state_dict(s.state_dict())
    assert k2.last_reset == 3 and not k2.should_reset(5)


# --------------------------------------------------------------------------- importance weights
LEARNER = T([[-1.0, -1.0, -1.0]])
ROLLOUT = T([[-1.0 - math.log(4.0), -1.0 + math.log(2.0), -1.0]])  # d = ln 4, -ln 2, 0 -> ratios 4, .5, 1


def test_truncated_is_weights():
    ones = torch.ones(1, 3)
    close(truncated_is_weights(LEARNER, ROLLOUT, ones, cap=2.0), [[2.0, 0.5, 1.0]])
    # sequence: sum d = ln 2 -> ratio 2 for every token; cap 1.5 truncates
    close(truncated_is_weights(LEARNER, ROLLOUT, ones, cap=2.0, level="sequence"), [[2.0, 2.0, 2.0]])
    close(truncated_is_weights(LEARNER, ROLLOUT, ones, cap=1.5, level="sequence"), [[1.5, 1.5, 1.5]])
    # geometric: exp(ln 2 / 3) = 2^(1/3) = 1.2599210
    close(truncated_is_weights(LEARNER, ROLLOUT, ones, level="geometric"), [[1.2599210] * 3])
    # masked positions get 1 and never overflow
    close(truncated_is_weights(LEARNER, T([[-1.0, -1e4, -1.0]]), T([[1.0, 0.0, 1.0]]), level="sequence"),
          [[1.0, 1.0, 1.0]])


def test_masked_is_weights_and_registry():
    ones = torch.ones(1, 3)
    # band [.6, 2]: 4 out, .5 out, 1 in
    close(masked_is_weights(LEARNER, ROLLOUT, ones, lower=0.6, upper=2.0), [[0.0, 0.0, 1.0]])
    close(masked_is_weights(LEARNER, ROLLOUT, ones, lower=0.0, upper=2.0), [[0.0, 0.5, 1.0]])
    close(masked_is_weights(LEARNER, ROLLOUT, ones, lower=0.0, upper=2.0, keep_ratio=False), [[0.0, 1.0, 1.0]])
    # sequence ratio 2 is inside [0, 2]
    close(masked_is_weights(LEARNER, ROLLOUT, ones, level="sequence"), [[2.0, 2.0, 2.0]])
    assert is_correction_weights("none", LEARNER, ROLLOUT, ones) is None
    close(is_correction_weights("tis", LEARNER, ROLLOUT, ones, cap=2.0), [[2.0, 0.5, 1.0]])
    with pytest.raises(ValueError, match="unknown IS"):
        is_correction_weights("vtrace", LEARNER, ROLLOUT, ones)


def test_logprob_mismatch_by_hand():
    m = logprob_mismatch(LEARNER, ROLLOUT, torch.ones(1, 3), cap=2.0)
    close(m["mismatch_abs_mean"], (1.3862944 + 0.6931472) / 3)
    close(m["mismatch_abs_max"], 1.3862944)
    close(m["mismatch_kl_k1"], -(1.3862944 - 0.6931472) / 3)
    # k3: (4 - 1 - ln 4) = 1.6137056; (.5 - 1 + ln 2) = 0.1931472; 0 -> mean 0.6022843
    close(m["mismatch_kl_k3"], 0.6022843)
    close(m["mismatch_ratio_max"], 4.0)
    close(m["mismatch_ratio_min"], 0.5)
    close(m["mismatch_frac_over_cap"], 1 / 3)
    close(m["mismatch_seq_log_ratio_abs_max"], 0.6931472)
    assert set(logprob_mismatch(LEARNER, ROLLOUT, torch.zeros(1, 3)).values()) == {0.0}


# --------------------------------------------------------------------------- step diagnostics
def test_step_diagnostics_by_hand():
    logp, old, mask = _inputs([LN15, 0.0, LN05], requires_grad=False)
    d = step_diagnostics(logp=logp, old_logp=old, advantages=T([2.0]), mask=mask, rewards=T([1.0, 1.0, 0.0, 1.0]),
                         group_size=2, entropy=T([[1.0, 2.0, 3.0]]), rollout_logp=old, ref_logp=old)
    close(d["clip_frac_high"], 1 / 3)   # ratio 1.5 > 1.2 with A > 0
    close(d["clip_frac_low"], 0.0)
    close(d["clip_frac"], 1 / 3)
    close(d["approx_kl_k2"], 0.1074758)  # as in test_algorithms
    # k3 with x = old - logp: e^-x - 1 + x... per token (1/1.5 - 1 + ln 1.5) = 0.0721318, 0, (2 - 1 - ln 2) = 0.3068528
    close(d["approx_kl_k3"], (0.0721318 + 0.3068528) / 3)
    close(d["ratio_mean"], 1.0)
    close(d["ratio_max"], 1.5)
    close(d["entropy"], 2.0)
    close(d["zero_variance_frac"], 0.5)
    close(d["reward_mean"], 0.75)
    close(d["reward_std"], 0.4330127)
    assert (d["adv_mean"], d["adv_std"], d["adv_zero_frac"]) == (2.0, 0.0, 0.0)
    close(d["mismatch_abs_mean"], 0.0)
    assert all(isinstance(v, float) and math.isfinite(v) for v in d.values())


def test_step_diagnostics_empty_mask_and_token_advantages():
    logp = T([[-1.0, float("nan")]])
    d = step_diagnostics(logp=logp, old_logp=T([[-1.0, -1.0]]), advantages=T([[0.0, 5.0]]), mask=T([[1.0, 0.0]]))
    assert d["adv_zero_frac"] == 1.0 and d["adv_max"] == 0.0   # only the counted token
    d = step_diagnostics(logp=torch.zeros(1, 2), old_logp=torch.zeros(1, 2), advantages=T([1.0]),
                         mask=torch.zeros(1, 2))
    assert d["clip_frac"] == 0.0 and d["ratio_max"] == 0.0 and all(math.isfinite(v) for v in d.values())
