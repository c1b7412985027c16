"""LUFFY's policy shaping of off-policy (demonstration) tokens: hand-computed values and gradients, and the
mixed on-/off-policy loss of every registered policy loss."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import POLICY_LOSSES, grpo_loss, off_policy_shaped_loss, policy_shaping


def close(a, b, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                               atol=tol, rtol=0)


def test_policy_shaping_is_p_over_p_plus_gamma():
    close(policy_shaping(torch.tensor([0.5, 0.1, 1.0]), 0.1), [0.5 / 0.6, 0.5, 1 / 1.1])
    close(policy_shaping(torch.tensor(0.3), 0.3), 0.5)
    with pytest.raises(ValueError, match="gamma"):
        policy_shaping(torch.tensor(0.5), 0.0)


def test_shaped_loss_and_gradient_of_one_demonstration_token_by_hand():
    # p = 0.5, A = 2, gamma = 0.1:  L = -A p / (p + gamma) = -2 * 0.5 / 0.6 = -5/3
    # dL/dlogp = -A * gamma * p / (p + gamma)^2 = -2 * 0.1 * 0.5 / 0.36 = -0.2777...
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    loss = off_policy_shaped_loss(logp, torch.tensor([2.0]), torch.ones(1, 1), gamma=0.1)
    close(loss, -5 / 3)
    loss.backward()
    close(logp.grad, [[-0.1 / 0.36]])


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES.names()))
def test_mixed_batch_every_loss_gives_the_demo_token_the_shaped_gradient(name):
    """Row 0 on-policy (2 tokens, ratio 1, A = -1); row 1 a demonstration (1 counted token, p = 0.5, A = 2).
    token_mean over the 3 tokens: each on-policy token's gradient is -A * 1 / 3 = 1/3 for every loss at ratio 1
    (ppo_clip / dual_clip: -ratio A; gspo: -s A; topr, cispo: -w A with w = 1; sapo: -4 sigma (1 - sigma) A with
    sigma = 1/2), the demo token's -2 * 0.1 * 0.5 / 0.36 / 3, unclipped, whatever its "old" log-prob."""
    logp = torch.tensor([[-1.0, -2.0], [math.log(0.5), -3.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0], [-9.0, -9.0]])  # the demo row's old log-probs are never read
    adv, mask = torch.tensor([-1.0, 2.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, m = grpo_loss(logp, old, adv, mask, policy_loss=name, off_policy=torch.tensor([False, True]),
                        shaping_gamma=0.1)
    loss.backward()
    close(logp.grad, [[1 / 3, 1 / 3], [-0.1 / 0.36 / 3, 0.0]])
    # TOPR's and CISPO's surrogate -w A (logp - old) is 0 at ratio 1; SAPO's gate is 2 / tau_neg (A < 0)
    on_value = {"topr": 0.0, "cispo": 0.0, "sapo": 2 / 1.05}.get(name, 1.0)
    close(loss, (on_value * 2 - 5 / 3) / 3)
    close(m["ratio_mean"], 1.0)  # the policy loss's metrics are the on-policy tokens'


def test_sequence_aggregation_shares_the_normaliser_B():
    # seq_mean_token_mean, B = 2: on-policy tokens -A / (2 tokens * B) = 0.25; demo token -0.2777... / B
    logp = torch.tensor([[-1.0, -2.0], [math.log(0.5), -3.0]], requires_grad=True)
    loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([-1.0, 2.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
                        agg="seq_mean_token_mean", off_policy=torch.tensor([False, True]))
    loss.backward()
    close(logp.grad, [[0.25, 0.25], [-0.1 / 0.36 / 2, 0.0]])


def test_no_off_policy_row_is_the_plain_loss():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    args = (logp, logp.detach() + 0.1, torch.tensor([-1.0, 2.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    a, ma = grpo_loss(*args)
    b, mb = grpo_loss(*args, off_policy=torch.tensor([False, False]), shaping_gamma=0.5)
    assert torch.equal(a, b) and ma.keys() == mb.keys()
