"""Entropy control: Clip-Cov and KL-Cov (covariance, selection, losses and gradients with ratios away from 1,
hand-computed), the batch-wide selection, config validation, and the adaptive entropy floor."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms import POLICY_LOSSES, EntropyFloor, batch_token_selection, clip_cov_loss, grpo_loss, \
    kl_cov_loss, ppo_clip_loss, token_covariance
from rlvr.algorithms.entropy_control import clip_cov_selection, kl_cov_selection

T = torch.tensor
LN15, LN05 = math.log(1.5), math.log(0.5)

# two rows, the second with one padding position; A = +1 / -1
LOGP = T([[-0.1, -2.0, -0.5], [-3.0, -0.2, -7.0]])
MASK = T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = T([1.0, -1.0])
# mean logp over the 5 counted tokens = -5.8 / 5 = -1.16, mean A = (3 - 2) / 5 = 0.2:
#   (-0.1 + 1.16) * 0.8 = 0.848   (-2.0 + 1.16) * 0.8 = -0.672   (-0.5 + 1.16) * 0.8 = 0.528
#   (-3.0 + 1.16) * -1.2 = 2.208  (-0.2 + 1.16) * -1.2 = -1.152   padding: 0
COV = [[0.848, -0.672, 0.528], [2.208, -1.152, 0.0]]


def close(a, b, tol=1e-5):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                               atol=tol, rtol=0)


def test_token_covariance_by_hand():
    close(token_covariance(LOGP, ADV, MASK), COV)
    close(token_covariance(LOGP, ADV.unsqueeze(-1).expand(2, 3), MASK), COV)  # per-token advantages agree
    # the padding's log-prob (-7) takes no part in the means
    close(token_covariance(LOGP.clone().index_put_((T([1]), T([2])), T(-99.0)), ADV, MASK), COV)


def test_clip_cov_selection_draws_inside_the_band():
    cov = T(COV)
    # band [0.5, 1]: candidates 0.848 (0, 0) and 0.528 (0, 2); 2.208 is above it
    both = clip_cov_selection(cov, MASK, ratio=0.4, cov_low=0.5, cov_high=1.0)  # floor(.4 * 5) = 2
    assert both.tolist() == [[True, False, True], [False, False, False]]
    many = clip_cov_selection(cov, MASK, ratio=1.0, cov_low=0.5, cov_high=1.0)  # budget 5, only 2 qualify
    assert many.equal(both)
    picks = set()
    for seed in range(40):  # floor(.2 * 5) = 1 token, uniformly one of the two candidates
        one = clip_cov_selection(cov, MASK, ratio=0.2, cov_low=0.5, cov_high=1.0,
                                 generator=torch.Generator().manual_seed(seed))
        assert int(one.sum()) == 1 and bool((one & ~both).sum() == 0)
        picks.add(tuple(one.nonzero()[0].tolist()))
    assert picks == {(0, 0), (0, 2)}
    assert not clip_cov_selection(cov, MASK, ratio=0.19, cov_low=0.5, cov_high=1.0).any()  # floor(.95) = 0
    # bounds are inclusive; a masked-out position is never a candidate even when its 0 is in the band
    edge = clip_cov_selection(cov, MASK, ratio=1.0, cov_low=0.0, cov_high=0.848)
    assert edge.tolist() == [[True, False, True], [False, False, False]]


def test_kl_cov_selection_takes_the_top_share():
    cov = T(COV)
    assert kl_cov_selection(cov, MASK, ratio=0.4).tolist() == [[True, False, False], [True, False, False]]
    assert kl_cov_selection(cov, MASK, ratio=0.2).tolist() == [[False, False, False], [True, False, False]]
    assert not kl_cov_selection(cov, MASK, ratio=0.1).any()  # floor(.5) = 0
    assert kl_cov_selection(cov, MASK, ratio=1.0).equal(MASK.bool())  # never the padding


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.floats(0.01, 1.0), st.floats(-2, 2), st.floats(0, 3),
       st.integers(0, 2**31 - 1))
def test_selection_properties(B, T_, ratio, low, width, seed):
    """Clip-Cov picks min(floor(r N), #in band) counted tokens, all inside the band; KL-Cov picks floor(k N)
    counted tokens, none with a smaller covariance than a counted token left out."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T_, generator=g) * 4
    adv = torch.randn(B, generator=g)
    mask = (torch.rand(B, T_, generator=g) < 0.8).float()
    cov = token_covariance(logp, adv, mask)
    n = int(mask.sum())
    band = mask.bool() & (cov >= low) & (cov <= low + width)
    sel = clip_cov_selection(cov, mask, ratio=ratio, cov_low=low, cov_high=low + width, generator=g)
    assert int(sel.sum()) == min(math.floor(ratio * n + 1e-9), int(band.sum()))
    assert not (sel & ~band).any()
    top = kl_cov_selection(cov, mask, ratio=ratio)
    assert int(top.sum()) == math.floor(ratio * n + 1e-9) and not (top & ~mask.bool()).any()
    rest = mask.bool() & ~top
    if top.any() and rest.any():
        assert cov[top].min() >= cov[rest].max()


# --------------------------------------------------------------------------- the losses, ratios != 1
def _ratios():
    """logp with log-ratios [[ln 1.5, 0, ln .5], [ln .5, ln 1.5, (pad)]] against old log-probs of -1."""
    old = torch.full((2, 3), -1.0)
    logp = (old + T([[LN15, 0.0, LN05], [LN05, LN15, 0.0]])).requires_grad_(True)
    return logp, old


def test_clip_cov_loss_by_hand():
    # PPO eps .2, token mean over 5 tokens; -min(r A, clip(r) A) per token:
    #   (0,0) A=1 r=1.5: -1.2 clipped high (grad 0)   (0,1) A=1 r=1: -1 (grad -1/5)   (0,2) A=1 r=.5: -.5 (grad -.1)
    #   (1,0) A=-1 r=.5: .8 clipped low (grad 0)      (1,1) A=-1 r=1.5: 1.5 (grad +.3)
    logp, old = _ratios()
    ref, _ = ppo_clip_loss(logp, old, ADV, MASK)
    ref.backward()
    close(ref, -0.4 / 5)
    close(logp.grad, [[0.0, -0.2, -0.1], [0.0, 0.3, 0.0]])
    # Clip-Cov detaching (0, 1) and (1, 1): same value, their gradients 0, the others PPO's
    logp, old = _ratios()
    sel = T([[False, True, False], [False, True, False]])
    loss, m = clip_cov_loss(logp, old, ADV, MASK, token_select=sel)
    loss.backward()
    close(loss, -0.4 / 5)
    close(logp.grad, [[0.0, 0.0, -0.1], [0.0, 0.0, 0.0]])
    close(m["cov_frac"], 2 / 5)
    close(m["clip_frac"], 2 / 5)
    close(m["clip_frac_high"], 1 / 5)
    # importance weights scale the per-token loss, detached tokens stay at 0
    logp, old = _ratios()
    w = T([[1.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
    clip_cov_loss(logp, old, ADV, MASK, token_select=sel, is_weights=w)[0].backward()
    close(logp.grad, [[0.0, 0.0, -0.3], [0.0, 0.0, 0.0]])


def test_clip_cov_without_a_given_set_selects_from_the_current_logp():
    logp, old = _ratios()
    loss, m = clip_cov_loss(logp, old, ADV, MASK, ratio=0.4, cov_low=-100.0, cov_high=100.0,
                            generator=torch.Generator().manual_seed(7))
    loss.backward()
    expect = clip_cov_selection(token_covariance(logp, ADV, MASK), MASK, ratio=0.4, cov_low=-100.0, cov_high=100.0,
                                generator=torch.Generator().manual_seed(7))
    ppo = torch.tensor([[0.0, -0.2, -0.1], [0.0, 0.3, 0.0]])
    close(logp.grad, torch.where(expect, torch.zeros(()), ppo))
    close(m["cov_frac"], 2 / 5)


def test_kl_cov_loss_by_hand():
    # no clip: -r A per token = -1.5, -1, -.5 | .5, 1.5; beta .5 |log r| on (0, 0) and (1, 1): .5 ln 1.5 each
    logp, old = _ratios()
    sel = T([[True, False, False], [False, True, False]])
    loss, m = kl_cov_loss(logp, old, ADV, MASK, coef=0.5, token_select=sel)
    close(loss, (-1.0 + LN15) / 5)
    loss.backward()
    # dL/dlogp = -r A + beta sign(log r) [selected]:  (-1.5 + .5), -1, -.5 | .5, (1.5 + .5); / 5
    close(logp.grad, [[-0.2, -0.2, -0.1], [0.1, 0.4, 0.0]])
    close(m["cov_frac"], 2 / 5)
    close(m["kl_cov_abs"], LN15)
    assert float(m["clip_frac"]) == 0.0  # nothing is clipped without clip
    # clip=True: PPO's clipped surrogate (0,0) and (1,0) lose their surrogate gradient, the penalty stays
    logp, old = _ratios()
    kl_cov_loss(logp, old, ADV, MASK, coef=0.5, clip=True, token_select=sel)[0].backward()
    close(logp.grad, [[0.1, -0.2, -0.1], [0.0, 0.4, 0.0]])


def test_kl_cov_is_plain_policy_gradient_at_ratio_one():
    """At the first optimizer step on a batch (logp == old_logp) the penalty and its gradient are 0, even with
    every token selected."""
    logp = LOGP.clone().requires_grad_(True)
    loss, m = kl_cov_loss(logp, logp.detach(), ADV, MASK, ratio=1.0, coef=10.0)
    loss.backward()
    close(logp.grad, [[-0.2, -0.2, -0.2], [0.2, 0.2, 0.0]])
    close(m["cov_frac"], 1.0)


def test_grpo_loss_passes_the_selection_through():
    logp, old = _ratios()
    sel = T([[False, True, False], [False, True, False]])
    loss, m = grpo_loss(logp, old, ADV, MASK, policy_loss="clip_cov", token_select=sel)
    loss.backward()
    close(logp.grad, [[0.0, 0.0, -0.1], [0.0, 0.0, 0.0]])
    close(m["cov_frac"], 2 / 5)
    with pytest.raises(TypeError):  # a loss without a selection refuses one
        grpo_loss(logp, old, ADV, MASK, policy_loss="ppo_clip", token_select=sel)


# --------------------------------------------------------------------------- batch-wide selection, config
def test_batch_token_selection():
    assert batch_token_selection("ppo_clip", {}, LOGP, ADV, MASK) is None
    assert batch_token_selection("kl_cov", {"scope": "micro_batch"}, LOGP, ADV, MASK) is None
    sel, stats, keep_rows = batch_token_selection("kl_cov", {"ratio": 0.4}, LOGP, ADV, MASK)
    assert sel.tolist() == [[True, False, False], [True, False, False]] and keep_rows
    close(stats["cov_mean"], 1.76 / 5)  # sum of COV / 5: the batch covariance of log-prob and advantage
    assert stats["cov_selected"] == 2
    sel, stats, keep_rows = batch_token_selection("clip_cov", {"ratio": 0.4, "cov_low": 0.5, "cov_high": 1.0},
                                                  LOGP, ADV, MASK)
    assert sel.tolist() == [[True, False, True], [False, False, False]] and not keep_rows
    assert stats["cov_candidates"] == 2 and stats["cov_selected"] == 2


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.policy_loss=clip_cov", "algorithm.policy_loss_params={ratio: 0}"], "policy_loss_params.ratio"),
    (["algorithm.policy_loss=clip_cov", "algorithm.policy_loss_params={cov_low: 5, cov_high: 1}"],
     "cov_low <= cov_high"),
    (["algorithm.policy_loss=kl_cov", "algorithm.mini_batches=2", "algorithm.policy_loss_params={coef: -1}"],
     "policy_loss_params.coef"),
    (["algorithm.policy_loss=kl_cov", "algorithm.ppo_epochs=2", "algorithm.policy_loss_params={scope: rows}"],
     "policy_loss_params.scope"),
    (["algorithm.policy_loss=kl_cov", "algorithm.ppo_epochs=2", "algorithm.policy_loss_params={omega: 1}"],
     "omega: not an option"),
    # KL-Cov cannot act with one optimizer step per batch (ratio 1: penalty and gradient 0), nor a clip range
    (["algorithm.policy_loss=kl_cov"], "kl_cov .*penalty.*cannot act with one optimizer step"),
    (["algorithm.policy_loss=clip_cov", "algorithm.policy_loss_params={clip_low: 1, clip_high: 1}"],
     "clip_low / clip_high of clip_cov.*cannot act"),
    (["algorithm.entropy_floor=-0.1"], "algorithm.entropy_floor"),
    (["algorithm.entropy_floor=0.3", "algorithm.entropy_floor_max_coef=0"], "entropy_floor_max_coef"),
])
def test_bad_options_fail_at_load(overrides, message):
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ConfigError, match=message):
        load_config(RunConfig, None, overrides)


def test_options_are_registered_and_default_off():
    from rlvr.recipes.config import AlgorithmConfig

    assert {"clip_cov", "kl_cov"} <= set(POLICY_LOSSES)
    assert "token_select" in POLICY_LOSSES.entry("clip_cov").inputs
    assert POLICY_LOSSES.entry("kl_cov").options() == ["ratio", "coef", "clip", "scope", "clip_low", "clip_high"]
    a = AlgorithmConfig()
    assert a.policy_loss == "ppo_clip" and a.entropy_floor == 0.0


# --------------------------------------------------------------------------- entropy floor
def test_entropy_floor_controller_by_hand():
    f = EntropyFloor(target=0.3, delta=0.01, max_coef=0.025)
    assert f.coef == 0.0  # nothing measured yet
    seq = []
    for e in [0.5, 0.2, 0.2, 0.2, 0.25, 0.35, 0.1, None, 0.4, 0.4, 0.4]:
        seq.append(round(f.update(e), 6))
    # 0.5: above, c = max(0 - .01, 0) = 0, off | .2: c=.01 on | .02 | .025 (cap) | .025 | .35: c=.015 but off
    # | .1: c=.025 on | None: unchanged | .4: .015 off | .005 off | 0 off
    assert seq == [0.0, 0.01, 0.02, 0.025, 0.025, 0.0, 0.025, 0.025, 0.0, 0.0, 0.0]
    assert f.value == 0.0
    g = EntropyFloor(0.3, 0.01, 0.025)
    g.update(0.1)
    h = EntropyFloor(0.3, 0.01, 0.025)
    h.load_state_dict(g.state_dict())
    assert h.coef == g.coef == 0.01
    with pytest.raises(ValueError):
        EntropyFloor(0.3, 0.0, 0.01)
