"""On-policy distillation's advantage as a pure function (rlvr.algorithms.distill), by hand.

``A_t = coef * (log pi_T - log pi_S) + reward_coef * A_rl`` on completion tokens, 0 elsewhere; demonstration rows
keep the RL term only.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.distill import distill_advantages, reverse_kl_stats

T_LP = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.25, -3.0, 0.0, 0.0]])
S_LP = torch.tensor([[-1.5, -1.0, -0.5, 0.0], [-1.25, -2.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def test_pure_distillation_is_teacher_minus_student_on_the_mask():
    adv = distill_advantages(T_LP, S_LP, MASK, coef=1.0)
    # token by token: -1 - (-1.5) = 0.5; -2 - (-1) = -1; -0.5 - (-0.5) = 0; off the mask 0 | 1, -1
    assert adv.tolist() == [[0.5, -1.0, 0.0, 0.0], [1.0, -1.0, 0.0, 0.0]]
    assert distill_advantages(T_LP, S_LP, MASK, coef=2.0).tolist() == [[1.0, -2.0, 0.0, 0.0], [2.0, -2.0, 0.0, 0.0]]


def test_kdrl_adds_the_weighted_rl_advantage_per_sequence_or_per_token():
    rl = torch.tensor([1.0, -2.0])
    adv = distill_advantages(T_LP, S_LP, MASK, coef=1.0, reward_coef=0.5, rl_advantages=rl)
    assert adv.tolist() == [[1.0, -0.5, 0.5, 0.0], [0.0, -2.0, 0.0, 0.0]]
    per_token = torch.tensor([[2.0, 0.0, -2.0, 9.0], [4.0, 4.0, 9.0, 9.0]])  # off-mask 9s must not leak in
    adv = distill_advantages(T_LP, S_LP, MASK, coef=0.0, reward_coef=0.25, rl_advantages=per_token)
    assert adv.tolist() == [[0.5, 0.0, -0.5, 0.0], [1.0, 1.0, 0.0, 0.0]]


def test_demonstration_rows_keep_only_the_rl_term():
    adv = distill_advantages(T_LP, S_LP, MASK, coef=1.0, reward_coef=1.0, rl_advantages=torch.tensor([1.0, 1.0]),
                             on_policy=torch.tensor([True, False]))
    assert adv.tolist() == [[1.5, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]


def test_reverse_kl_stats_are_token_means_over_the_mask():
    st = reverse_kl_stats(T_LP, S_LP, MASK)
    # log pi_S - log pi_T over 5 tokens: -0.5, 1, 0, -1, 1 -> 0.5 / 5
    assert st["reverse_kl"] == pytest.approx(0.1)
    assert st["teacher_logprob"] == pytest.approx((-1 - 2 - 0.5 - 0.25 - 3) / 5)
    assert st["student_logprob"] == pytest.approx((-1.5 - 1 - 0.5 - 1.25 - 2) / 5)


@pytest.mark.parametrize("kw, why", [({"coef": -1.0}, ">= 0"), ({"reward_coef": -0.1}, ">= 0"),
                                     ({"coef": 0.0}, "both 0"), ({"reward_coef": 1.0}, "needs the RL advantages")])
def test_bad_weights_are_refused(kw, why):
    with pytest.raises(ValueError, match=why):
        distill_advantages(T_LP, S_LP, MASK, **kw)
