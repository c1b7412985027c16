"""Advantage estimators (group, sign, quantile, pass@k, REINFORCE++, entropy-guided, GAE) against
hand-computed numbers; the arithmetic is in the comments, not recomputed with the code under test."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import (
    ADVANTAGE_ESTIMATORS,
    entropy_guided_advantages,
    gae_advantages,
    get_advantage_estimator,
    kl_in_reward,
    nsr_advantages,
    outcome_token_rewards,
    passk_advantages,
    ppo_gae_advantages,
    psr_advantages,
    quantile_advantages,
    reinforce_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    value_loss,
    w_reinforce_advantages,
)

from conftest import close

T = torch.tensor


# --------------------------------------------------------------------------- RLOO / REINFORCE
def test_rloo_by_hand():
    # [1, 0, 0, 1]: A_1 = 1 - (0 + 0 + 1) / 3 = 2/3; A_2 = 0 - (1 + 0 + 1) / 3 = -2/3
    close(rloo_advantages(T([1.0, 0.0, 0.0, 1.0]), 4), [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # [2, 0, 1]: 2 - (0 + 1)/2 = 1.5;  0 - (2 + 1)/2 = -1.5;  1 - (2 + 0)/2 = 0
    close(rloo_advantages(T([2.0, 0.0, 1.0]), 3), [1.5, -1.5, 0.0])
    # all-equal groups and groups of one give exactly 0
    assert torch.equal(rloo_advantages(T([3.0, 3.0, 0.7, 0.7]), 2), torch.zeros(4))
    assert torch.equal(rloo_advantages(T([1.0, 0.0]), 1), torch.zeros(2))
    assert rloo_advantages(torch.zeros(0), 4).numel() == 0


def test_reinforce_constant_baseline():
    close(reinforce_advantages(T([1.0, 0.0]), 2), [1.0, 0.0])
    close(reinforce_advantages(T([1, 0]), 2, baseline=0.5), [0.5, -0.5])


# --------------------------------------------------------------------------- REINFORCE++
def test_reinforce_pp_sequence_level():
    # [1, 0, 0, 0]: batch mean .25; sample var (.5625 + 3 * .0625) / 3 = .25 -> std .5
    # A = (.75, -.25, -.25, -.25) / .5
    close(reinforce_pp_advantages(T([1.0, 0.0, 0.0, 0.0]), 4), [1.5, -0.5, -0.5, -0.5])
    # baseline=group_mean, G = 2: centred [.5, -.5, 0, 0], batch mean 0, sample var .5 / 3 -> std 0.4082483
    close(reinforce_pp_advantages(T([1.0, 0.0, 0.0, 0.0]), 2, baseline="group_mean"),
          [1.2247449, -1.2247449, 0.0, 0.0])
    assert torch.equal(reinforce_pp_advantages(T([1.0, 1.0]), 2), torch.zeros(2))


def test_reinforce_pp_token_level_with_kl_in_reward():
    # rewards [1, 0]; mask [[1,1,0],[1,1,1]]; kl [[.1,.2,*],[.3,0,.1]]; kl_coef .5
    # token rewards: row 0 [-.05, 1 - .1, 0]; row 1 [-.15, 0, -.05]
    # returns (reverse cumsum): row 0 [.85, .9, -]; row 1 [-.2, -.05, -.05]
    # counted values: .85 .9 -.2 -.05 -.05; mean .29; deviations .56 .61 -.49 -.34 -.34
    # sample var (.3136 + .3721 + .2401 + .1156 + .1156) / 4 = .28925 -> std 0.5378197
    mask = T([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    kl = T([[0.1, 0.2, 9.0], [0.3, 0.0, 0.1]])
    a = reinforce_pp_advantages(T([1.0, 0.0]), 2, mask=mask, kl=kl, kl_coef=0.5)
    s = 0.5378197
    close(a, [[0.56 / s, 0.61 / s, 0.0], [-0.49 / s, -0.34 / s, -0.34 / s]])
    with pytest.raises(ValueError, match="mask"):
        reinforce_pp_advantages(T([1.0, 0.0]), 2, kl=kl, kl_coef=0.5)
    with pytest.raises(ValueError, match="baseline"):
        reinforce_pp_advantages(T([1.0, 0.0]), 2, baseline="median")


def test_outcome_and_kl_in_reward():
    mask = T([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    close(outcome_token_rewards(T([2.0, 3.0, 4.0]), mask), [[0, 2, 0], [0, 0, 3], [0, 0, 0]])
    kl = T([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [1.0, 1.0, 1.0]])
    # r - .5 * kl on counted tokens: [-.05, 2 - .1, 0], [0, -.25, 3 - .3], nothing for the empty row
    close(kl_in_reward(T([2.0, 3.0, 4.0]), mask, kl=kl, kl_coef=0.5), [[-0.05, 1.9, 0], [0, -0.25, 2.7], [0, 0, 0]])
    with pytest.raises(ValueError, match="needs kl"):
        kl_in_reward(T([2.0, 3.0, 4.0]), mask, kl_coef=0.5)


# --------------------------------------------------------------------------- pass@k
def test_passk_by_hand():
    # n = 4, one success (n_neg = 3), k = 2: R = 1 - C(3,2)/C(4,2) = 1 - 3/6 = .5; std = .5
    # A_pos = .5 / .5 = 1; A_neg = (1 - .5 - C(2,1)/C(3,1)) / .5 = (.5 - 2/3) / .5 = -1/3
    close(passk_advantages(T([1.0, 0.0, 0.0, 0.0]), 4, k=2), [1.0, -1 / 3, -1 / 3, -1 / 3])
    # two successes, k = 2: R = 1 - 1/6 = 5/6, std = sqrt(5/36) = 0.3726780
    # A_pos = (1/6) / std = 0.4472136; A_neg = (1/6 - C(1,1)/C(3,1)) / std = (-1/6) / std
    close(passk_advantages(T([1.0, 1.0, 0.0, 0.0]), 4, k=2), [0.4472136, 0.4472136, -0.4472136, -0.4472136])


def test_passk_k1_is_grpo_with_population_std_and_degenerate_groups():
    # k = 1: mean .25, population std sqrt(.1875) = 0.4330127; .75 / std = 1.7320508, -.25 / std = -0.5773503
    close(passk_advantages(T([1.0, 0.0, 0.0, 0.0]), 4, k=1), [1.7320508, -0.5773503, -0.5773503, -0.5773503])
    # one failure < k = 2: every pair passes -> 0; all wrong -> 0; all right -> 0
    assert torch.equal(passk_advantages(T([1.0, 1.0, 1.0, 0.0, 0, 0, 0, 0, 1, 1, 1, 1]), 4, k=2), torch.zeros(12))
    with pytest.raises(ValueError, match="binary"):
        passk_advantages(T([0.5, 0.0]), 2, k=1)
    with pytest.raises(ValueError, match="k <="):
        passk_advantages(T([1.0, 0.0]), 2, k=3)


# --------------------------------------------------------------------------- PSR / NSR / W-REINFORCE
def test_sign_based_estimators():
    r = T([1.0, 0.0, 1.0, 0.0])
    close(psr_advantages(r, 2), [1.0, 0.0, 1.0, 0.0])
    close(nsr_advantages(r, 2), [0.0, -1.0, 0.0, -1.0])
    close(w_reinforce_advantages(r, 2), [0.1, -1.0, 0.1, -1.0])           # lam = .1 (the paper's)
    close(w_reinforce_advantages(r, 2, lam=0.5), [0.5, -1.0, 0.5, -1.0])
    close(nsr_advantages(T([1.0, 1.0]), 2), [0.0, 0.0])                   # all-correct: NSR does nothing
    with pytest.raises(ValueError):
        w_reinforce_advantages(r, 2, lam=-1.0)


# --------------------------------------------------------------------------- quantile baseline
def test_quantile_two_regimes_binary():
    # K = .5, G = 4: baseline = sorted[ceil(2) - 1] = sorted[1]
    # hard group [1,0,0,0] (p = .25 <= 1 - K): b = 0 -> only the success gets signal
    # easy group [1,1,1,0] (p = .75 > 1 - K): b = 1 -> only the failure gets signal
    r = T([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    close(quantile_advantages(r, 4, scale_by_std=False), [1, 0, 0, 0, 0, 0, 0, -1])
    # with std: both groups have sample std .5 -> x2 (eps 1e-6)
    close(quantile_advantages(r, 4), [2, 0, 0, 0, 0, 0, 0, -2], tol=1e-4)
    # K = .25: baseline sorted[0] = min -> [1,1,1,0] gets b = 0
    close(quantile_advantages(r[4:], 4, quantile=0.25, scale_by_std=False), [1, 1, 1, 0])


def test_quantile_continuous_and_edge_cases():
    # [.2, .5, .9], K = .5: sorted[ceil(1.5) - 1] = sorted[1] = .5 -> [-.3, 0, .4]
    close(quantile_advantages(T([0.2, 0.5, 0.9]), 3, scale_by_std=False), [-0.3, 0.0, 0.4])
    assert torch.equal(quantile_advantages(T([1.0, 1.0]), 2), torch.zeros(2))
    with pytest.raises(ValueError):
        quantile_advantages(T([1.0, 0.0]), 2, quantile=0.0)


# --------------------------------------------------------------------------- entropy-guided (RL-ZVP)
def test_entropy_guided_by_hand():
    # groups of 2: [1,1] all correct, [0,0] all wrong, [1,0] mixed (GRPO)
    r = T([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    ent = T([[0.5, 1.0, 7.0], [0.2, 0.2, 0.2], [1.0, 0.5, 0.3], [0.4, 0.1, 0.9], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0]])
    mask = T([[1.0, 1.0, 0.0], [1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    a = entropy_guided_advantages(r, 2, entropy=ent, mask=mask, alpha=0.1)
    # correct: .1 * H -> [.05, .1, -], [.02, .02, .02]
    # wrong: -.1 * (max H - H): row 2 max 1 -> [0, -.05, -.07]; row 3 max .4 (the .9 is masked) -> [0, -.03, -]
    # mixed [1, 0]: GRPO +-.5 / (0.7071068 + 1e-6)
    g = 0.5 / (math.sqrt(0.5) + 1e-6)
    close(a, [[0.05, 0.1, 0.0], [0.02, 0.02, 0.02], [0.0, -0.05, -0.07], [0.0, -0.03, 0.0],
              [g, g, g], [-g, -g, 0.0]])
    with pytest.raises(ValueError, match="entropy"):
        entropy_guided_advantages(r, 2, entropy=ent[:, :2], mask=mask)


# --------------------------------------------------------------------------- GAE / value loss
def test_gae_by_hand():
    rew, v, m = T([[0.0, 0.0, 1.0]]), T([[0.5, 0.6, 0.8]]), torch.ones(1, 3)
    # gamma = lam = 1: A_t = (sum of future rewards) - V_t = 1 - V_t; returns = 1
    a, ret = gae_advantages(rew, v, m)
    close(a, [[0.5, 0.4, 0.2]])
    close(ret, [[1.0, 1.0, 1.0]])
    # gamma .9, lam .5: deltas t2 = 1 - .8 = .2; t1 = .9 * .8 - .6 = .12; t0 = .9 * .6 - .5 = .04
    # A2 = .2; A1 = .12 + .45 * .2 = .21; A0 = .04 + .45 * .21 = .1345; returns = A + V
    a, ret = gae_advantages(rew, v, m, gamma=0.9, lam=0.5)
    close(a, [[0.1345, 0.21, 0.2]])
    close(ret, [[0.6345, 0.81, 1.0]])


def test_gae_skips_masked_positions():
    # hole at t1 (value 9 must be ignored): t2 delta .2; t0 delta = .9 * .8 - .5 = .22; A0 = .22 + .45 * .2 = .31
    a, ret = gae_advantages(T([[0.0, 5.0, 1.0]]), T([[0.5, 9.0, 0.8]]), T([[1.0, 0.0, 1.0]]), gamma=0.9, lam=0.5)
    close(a, [[0.31, 0.0, 0.2]])
    close(ret, [[0.81, 0.0, 1.0]])
    # left padding behaves like a shorter sequence; an empty row is all zeros
    a, _ = gae_advantages(T([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), T([[7.0, 0.6, 0.8], [1.0, 1.0, 1.0]]),
                          T([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    close(a, [[0.0, 0.4, 0.2], [0.0, 0.0, 0.0]])


def test_ppo_gae_advantages_unwhitened_and_whitened():
    mask = torch.ones(2, 2)
    v = T([[0.5, 0.5], [0.0, 0.0]])
    # outcome rewards [1, 0] on the last token, gamma = lam = 1: row 0 [1 - .5, 1 - .5]; row 1 [0, 0]
    a, ret = ppo_gae_advantages(T([1.0, 0.0]), v, mask, whiten=False)
    close(a, [[0.5, 0.5], [0.0, 0.0]])
    close(ret, [[1.0, 1.0], [0.0, 0.0]])
    # whitened: mean .25, sample std sqrt(4 * .0625 / 3) = 0.2886751 -> +-.25 / std = +-0.8660254
    a, _ = ppo_gae_advantages(T([1.0, 0.0]), v, mask)
    close(a, [[0.8660254, 0.8660254], [-0.8660254, -0.8660254]], tol=1e-5)
    est = get_advantage_estimator("gae", whiten=False)
    adv, ret = est(T([1.0, 0.0]), 2, values=v, mask=mask)  # a critic's estimator also gives its targets
    close(adv, [[0.5, 0.5], [0.0, 0.0]])
    close(ret, [[1.0, 1.0], [0.0, 0.0]])


def test_value_loss_by_hand_and_gradient():
    # token 0: V - V_old = 0 -> V_clip = 1; (1 - 0)^2 both -> .5;  grad (V - R) = 1
    # token 1: V - V_old = .5 -> clamp .2 -> V_clip = 1.7; (2 - 3)^2 = 1 < (1.7 - 3)^2 = 1.69 -> .845, grad 0
    v = T([[1.0, 2.0]], requires_grad=True)
    loss, m = value_loss(v, T([[1.0, 1.5]]), T([[0.0, 3.0]]), torch.ones(1, 2), clip_range=0.2)
    close(loss, (0.5 + 0.845) / 2)
    close(m["vf_clip_frac"], 0.5)
    loss.backward()
    close(v.grad, [[0.5, 0.0]])  # token-mean over 2 tokens
    v2 = T([[1.0, 2.0]], requires_grad=True)
    loss, _ = value_loss(v2, T([[1.0, 1.5]]), T([[0.0, 3.0]]), torch.ones(1, 2), clip_range=None)
    close(loss, (0.5 + 0.5) / 2)
    loss.backward()
    close(v2.grad, [[0.5, -0.5]])


# --------------------------------------------------------------------------- registry
def test_registry_names_extra_inputs_and_binding():
    assert ADVANTAGE_ESTIMATORS.entry("entropy_guided").needs == {"entropy", "mask"}
    assert ADVANTAGE_ESTIMATORS.entry("gae").needs == {"values", "mask"}
    assert ADVANTAGE_ESTIMATORS.entry("reinforce_pp").inputs == {"mask", "kl", "kl_coef"}
    r = T([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    needs_params = {"noisy_backward": dict(rho0=0.1, rho1=0.2), "noisy_forward": dict(rho1=0.2)}
    for name in ADVANTAGE_ESTIMATORS:
        if ADVANTAGE_ESTIMATORS.entry(name).needs:
            continue
        a = get_advantage_estimator(name, **needs_params.get(name, {}))(r, 4)
        assert a.shape == (8,) and torch.isfinite(a).all(), name
    close(get_advantage_estimator("passk", k=2)(T([1.0, 0.0, 0.0, 0.0]), 4), [1.0, -1 / 3, -1 / 3, -1 / 3])
    # backward-corrected REINFORCE: (r - .1) / .7
    close(get_advantage_estimator("noisy_backward", rho0=0.1, rho1=0.2)(T([1.0, 0.0]), 2), [0.9 / 0.7, -0.1 / 0.7])
    # with GRPO as the base the affine correction cancels exactly
    close(get_advantage_estimator("noisy_backward", rho0=0.1, rho1=0.2, base="grpo")(T([1.0, 0.0, 0.0, 1.0]), 2),
          get_advantage_estimator("grpo")(T([1.0, 0.0, 0.0, 1.0]), 2))
    close(get_advantage_estimator("noisy_forward", rho1=0.2)(T([1.0, 0.0]), 2), [0.2, -0.8])
