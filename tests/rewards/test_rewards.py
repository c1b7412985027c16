"""Noisy-verifier corrections (exact and Monte Carlo unbiasedness), noise injection, the online rate
estimator, and length shaping, against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.rewards import (
    NoiseRateEstimator,
    backward_correction,
    flip_rewards,
    forward_correction_weights,
    laser_reward,
    soft_overlong_punishment,
)

from conftest import close

T = torch.tensor


# --------------------------------------------------------------------------- backward correction
def test_backward_correction_by_hand_and_exact_unbiasedness():
    rho0, rho1 = 0.1, 0.2
    # 1 -> (1 - .1) / .7 = 1.2857143; 0 -> -.1 / .7 = -0.1428571
    close(backward_correction(T([1, 0]), rho0, rho1), [1.2857143, -0.1428571])
    hi, lo = backward_correction(T([1.0, 0.0]), rho0, rho1).tolist()
    # exact enumeration over the channel: E[R^ | R = 1] = .8 hi + .2 lo = 1; E[R^ | R = 0] = .1 hi + .9 lo = 0
    close((1 - rho1) * hi + rho1 * lo, 1.0)
    close(rho0 * hi + (1 - rho0) * lo, 0.0)
    with pytest.raises(ValueError, match="rho0 \\+ rho1"):
        backward_correction(T([1.0]), 0.5, 0.5)


@pytest.mark.parametrize("rho0, rho1", [(0.2, 0.2), (0.4, 0.4), (0.1, 0.3)])
def test_backward_correction_monte_carlo(rho0, rho1):
    g = torch.Generator().manual_seed(0)
    n = 200_000
    clean = (torch.rand(n, generator=g) < 0.3).float()
    corrected = backward_correction(flip_rewards(clean, rho0, rho1, g), rho0, rho1)
    # E[R^] = E[R] = clean mean; tolerance 4 sigma of the sample mean
    sigma = float(corrected.std()) / math.sqrt(n)
    assert abs(float(corrected.mean()) - float(clean.mean())) < 4 * sigma
    # the uncorrected noisy mean is biased: rho0 + (1 - rho0 - rho1) p
    noisy_mean = rho0 + (1 - rho0 - rho1) * float(clean.mean())
    assert abs(noisy_mean - float(clean.mean())) > 4 * sigma


# --------------------------------------------------------------------------- forward correction
def test_forward_weights_by_hand_and_conditional_expectations():
    rho0, rho1 = 0.1, 0.2
    close(forward_correction_weights(T([1, 0]), rho1), [0.2, -0.8])  # w1 = rho1, w0 = rho1 - 1
    w1, w0 = 0.2, -0.8
    close((1 - rho1) * w1 + rho1 * w0, 0.0)                          # E[w | R = 1]
    close(rho0 * w1 + (1 - rho0) * w0, -(1 - rho0 - rho1))           # E[w | R = 0] = -.7


def test_forward_correction_expected_gradient_is_clean_direction():
    # 4-armed bandit, softmax policy; arms 0 and 2 are correct.  Exact expectation over the policy and the
    # channel: E[w grad log pi] = (1 - rho0 - rho1) E[R grad log pi] (E[grad log pi] = 0).
    rho0, rho1 = 0.3, 0.25
    clean = T([1.0, 0.0, 1.0, 0.0])
    theta = T([0.3, -0.2, 0.1, 0.5], requires_grad=True)
    logpi = torch.log_softmax(theta, -1)
    p = logpi.exp().detach()
    w1, w0 = forward_correction_weights(T([1.0, 0.0]), rho1).tolist()
    p_obs1 = torch.where(clean == 1, 1 - rho1, rho0)                   # P(R~ = 1 | arm)
    expected_w = p_obs1 * w1 + (1 - p_obs1) * w0
    (g_fwd,) = torch.autograd.grad((p * expected_w * logpi).sum(), theta, retain_graph=True)
    (g_clean,) = torch.autograd.grad((p * clean * logpi).sum(), theta)
    close(g_fwd, (1 - rho0 - rho1) * g_clean, tol=1e-6)
    # the uncorrected noisy reward has the same property only up to its mean shift; backward correction is exact
    hi, lo = (T([1.0, 0.0]) - rho0) / (1 - rho0 - rho1)
    expected_bc = p_obs1 * hi + (1 - p_obs1) * lo
    (g_bc,) = torch.autograd.grad((p * expected_bc * torch.log_softmax(theta, -1)).sum(), theta)
    close(g_bc, g_clean, tol=1e-6)


# --------------------------------------------------------------------------- flip_rewards
def test_flip_rewards_rates_and_reproducibility():
    n = 100_000
    clean = torch.cat([torch.zeros(n), torch.ones(n)])
    noisy = flip_rewards(clean, 0.2, 0.4, torch.Generator().manual_seed(1))
    fp, fn = float(noisy[:n].mean()), float(1 - noisy[n:].mean())
    assert abs(fp - 0.2) < 4 * math.sqrt(0.2 * 0.8 / n)
    assert abs(fn - 0.4) < 4 * math.sqrt(0.4 * 0.6 / n)
    again = flip_rewards(clean, 0.2, 0.4, torch.Generator().manual_seed(1))
    assert torch.equal(noisy, again) and noisy.dtype == clean.dtype
    assert torch.equal(flip_rewards(T([0, 1, 1]), 0.0, 0.0), T([0, 1, 1]))
    assert torch.equal(flip_rewards(T([0.0, 1.0]), 1.0, 1.0), T([1.0, 0.0]))
    assert flip_rewards(torch.zeros(0), 0.2, 0.2).numel() == 0
    with pytest.raises(ValueError, match="binary"):
        flip_rewards(T([0.5]), 0.1, 0.1)


# --------------------------------------------------------------------------- online rate estimator
def test_noise_rate_estimator_by_hand():
    est = NoiseRateEstimator(prior_rho0=0.1, prior_rho1=0.2, prior_strength=10)
    assert est.rates == (0.1, 0.2)                                     # prior only
    est.update(T([1, 0, 0, 1, 1]), T([1, 1, 0, 0, 0]))
    # true 1: 2 pairs, 1 observed 0 -> rho1 = (1 + 10 * .2) / (2 + 10) = .25
    # true 0: 3 pairs, 2 observed 1 -> rho0 = (2 + 10 * .1) / (3 + 10) = 3/13
    close(est.rho1, 0.25)
    close(est.rho0, 3 / 13)
    other = NoiseRateEstimator(prior_rho0=0.1, prior_rho1=0.2, prior_strength=10)
    other.load_state_dict(est.state_dict())
    assert other.rates == est.rates


def test_noise_rate_estimator_decay_clamp_and_convergence():
    est = NoiseRateEstimator(prior_strength=0.0, decay=0.5)
    est.update(T([0, 0]), T([1, 1]))          # fn 2 of 2
    est.update(T([1, 1]), T([1, 1]))          # counts halve: fn 1, n_pos 1; then + 0 of 2 -> 1 / 3
    close(est.rho1, 1 / 3)
    clamped = NoiseRateEstimator(prior_rho0=0.6, prior_rho1=0.6)
    close(sum(clamped.rates), 0.95)           # rho0 + rho1 kept below 1
    g = torch.Generator().manual_seed(2)
    true = (torch.rand(50_000, generator=g) < 0.5).float()
    big = NoiseRateEstimator(prior_rho0=0.5, prior_rho1=0.0, prior_strength=5)
    big.update(flip_rewards(true, 0.15, 0.3, g), true)
    assert abs(big.rho0 - 0.15) < 0.01 and abs(big.rho1 - 0.3) < 0.01
    with pytest.raises(ValueError, match="binary"):
        big.update(T([0.5]), T([1.0]))


# --------------------------------------------------------------------------- shaping
def test_soft_overlong_punishment_by_hand():
    # L_max 100, L_cache 20 -> ramp from 80: 50 -> 0; 80 -> 0; 90 -> (80 - 90) / 20 = -.5; 100 -> -1; 101 -> -1
    close(soft_overlong_punishment([50, 80, 90, 100, 101], max_len=100, cache_len=20), [0, 0, -0.5, -1, -1])
    assert soft_overlong_punishment([], 10, 5).numel() == 0
    with pytest.raises(ValueError):
        soft_overlong_punishment([1], max_len=10, cache_len=0)


def test_laser_reward_by_hand():
    correct, lengths = T([1, 1, 0, 0]), T([50, 150, 50, 150])
    # target 100, alpha .5: correct & short -> 1.5; correct & long -> 1; wrong -> 0 either way
    close(laser_reward(correct, lengths, 100), [1.5, 1.0, 0.0, 0.0])
    # per-sample targets (LASER-D style): 50 > 40 -> no bonus; 150 <= 200 -> bonus
    close(laser_reward(correct, lengths, T([40, 200, 100, 100])), [1.0, 1.5, 0.0, 0.0])
    close(laser_reward(correct, lengths, 100, alpha=0.2, wrong_reward=-1.0), [1.2, 1.0, -1.0, -1.0])
    with pytest.raises(ValueError, match="target_length"):
        laser_reward(correct, lengths, T([1, 2]))
