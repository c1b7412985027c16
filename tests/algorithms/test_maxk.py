"""max@k advantages (PKPO; The Best of N Worlds): by hand, by subset enumeration, and unbiased by exact expectation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.maxk import maxk_advantages, maxk_estimate, maxk_gradient_weights
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig


def test_by_hand():
    # rewards 0.2, 1.0, 0.5, 0.0 with k = 2: the six pairs' maxima are {0,1} 1.0, {0,2} .5, {0,3} .2, {1,2} 1.0,
    # {1,3} 1.0, {2,3} .5, so s = (1.7, 3, 2, 1.7) / 6; the baselines are k/n x the mean pair maximum of the other
    # three: (2.5/3, 1.2/3, 2.2/3, 2.5/3) / 2; A = (n/k) (s - b)
    r = torch.tensor([0.2, 1.0, 0.5, 0.0])
    torch.testing.assert_close(maxk_gradient_weights(r, 2), torch.tensor([1.7, 3, 2, 1.7], dtype=torch.float64) / 6)
    assert maxk_estimate(r, 2) == pytest.approx((1.0 + 0.5 + 0.2 + 1.0 + 1.0 + 0.5) / 6)
    want = [2 * (1.7 / 6 - 1.25 / 3), 2 * (0.5 - 0.2), 2 * (2 / 6 - 1.1 / 3), 2 * (1.7 / 6 - 1.25 / 3)]
    torch.testing.assert_close(maxk_advantages(r, 4, k=2), torch.tensor(want))


def test_k1_is_rloo_and_binary_rewards_give_pkpo_weights():
    r = torch.tensor([1.0, 0.0, 0.3, 0.9, 0.0, 0.0, 0.0, 1.0])
    g = r.view(2, 4)
    rloo = (g - (g.sum(1, keepdim=True) - g) / 3).reshape(-1)
    torch.testing.assert_close(maxk_advantages(r, 4, k=1), rloo)
    # PKPO, binary: s = k/n for a correct sample, k/n * rho(n-1, c, k-1) for a wrong one, rho = 1 - C(n-c,k)/C(n,k)
    n, k, c = 6, 3, 2
    b = torch.tensor([1.0, 0, 0, 1, 0, 0])
    rho = 1 - math.comb(n - 1 - c, k - 1) / math.comb(n - 1, k - 1)
    want = torch.tensor([k / n if x else k / n * rho for x in b.tolist()], dtype=torch.float64)
    torch.testing.assert_close(maxk_gradient_weights(b, k), want)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0]), min_size=3, max_size=7),
       k=st.integers(1, 6))
def test_weights_and_estimate_equal_their_subset_definitions(values, k):
    n = len(values)
    k = min(k, n - 1)
    subsets = list(itertools.combinations(range(n), k))
    s = [sum(max(values[j] for j in S) for S in subsets if i in S) / len(subsets) for i in range(n)]
    torch.testing.assert_close(maxk_gradient_weights(torch.tensor(values), k), torch.tensor(s, dtype=torch.float64))
    assert maxk_estimate(torch.tensor(values), k) == pytest.approx(
        sum(max(values[j] for j in S) for S in subsets) / len(subsets))


@pytest.mark.parametrize("n,k", [(4, 2), (4, 3), (3, 1)])
def test_the_estimate_is_unbiased_for_the_gradient_of_max_at_k(n, k):
    """A policy over three outcomes with rewards 0, 0.3, 1: E over every n-tuple of sum_i A_i grad log p(x_i)
    equals (n / k) grad max@k, computed exactly by autograd from max@k = sum over k-tuples p(tuple) max."""
    rewards = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    theta = torch.tensor([0.2, -0.4, 0.1], dtype=torch.float64, requires_grad=True)
    p = torch.softmax(theta, 0)
    maxk = sum(torch.prod(p[list(t)]) * rewards[list(t)].max() for t in itertools.product(range(3), repeat=k))
    (want,) = torch.autograd.grad(maxk, theta)
    logp_grads = torch.eye(3, dtype=torch.float64) - p.detach()[None, :]  # d log p_x / d theta
    got = torch.zeros(3, dtype=torch.float64)
    for t in itertools.product(range(3), repeat=n):
        adv = maxk_advantages(rewards[list(t)], n, k=k).double()
        prob = float(torch.prod(p.detach()[list(t)]))
        got += prob * sum(adv[i] * logp_grads[x] for i, x in enumerate(t))
    torch.testing.assert_close(got, (n / k) * want)


@pytest.mark.parametrize("k", [4, 0])
def test_a_k_the_group_cannot_serve_is_refused_at_load(tmp_path, k):
    with pytest.raises(ConfigError, match="k"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", "rollout.group_size=4",
                                      "algorithm.advantage=maxk", f"algorithm.advantage_params={{k: {k}}}"])
