"""CISPO and SAPO: each loss's value and gradient on a hand-worked example, the same through the real wiring
(config -> recipe -> learner on the tiny model), formula mutations that the checks catch, and bad options
refused when the config loads.

CISPO (MiniMax-M1, arXiv 2506.13585, Sec. 3.1), token mean over the N counted tokens::

    L = -1/N sum_t sg(clip(r_t, 1 - eps_low, 1 + eps_high)) A_t (log pi(o_t) - log pi_old(o_t))
    dL/dlogp_t = -clip(r_t, ...) A_t / N                            (every token, clipped or not)

SAPO (Gao et al. 2025, arXiv 2511.20347), sequence mean of token means over the B sequences::

    L = -1/B sum_i 1/|y_i| sum_t 4/tau sigma(tau (r_t - 1)) A_i,      tau = tau_pos if A_i > 0 else tau_neg
    dL/dlogp_t = -4 sigma (1 - sigma) r_t A_i / (B |y_i|)

The expected numbers are worked out here with ``math`` from these formulas; the functions under test are
only called to be checked.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rl_harness import (RecordingSGD, assert_grads_close, completion_mask, grads_of, learner_logprobs, recipe,
                        rollouts, samples, tiny)
from rlvr.algorithms import POLICY_LOSSES, cispo_loss, get_policy_loss, grpo_loss, sapo_loss
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig

T = torch.tensor


def close(a, b, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                               atol=tol, rtol=0)


def differs(a, b, tol=1e-4) -> bool:
    return float((torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max()) > tol


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# Two rows: row 0 has 3 counted tokens with A = 2, row 1 has 2 (and one padding position) with A = -1.
RATIOS = [[1.5, 0.5, 1.0], [2.0, 0.9, 1.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
ADV = [2.0, -1.0]


def _inputs():
    old = T([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    logp = (old + T(RATIOS).log()).requires_grad_(True)
    return logp, old, T(ADV), T(MASK)


def _grad(fn, **kw):
    logp, old, adv, mask = _inputs()
    loss, metrics = fn(logp, old, adv, mask, **kw)
    loss.backward()
    return loss.detach(), logp.grad, metrics


# --------------------------------------------------------------------------- CISPO by hand
def test_cispo_value_and_gradient_by_hand():
    """eps_low = 0.2, eps_high = 0.28: the weight is clip(r, 0.8, 1.28).  Row 0 (A = 2): r = 1.5, 0.5, 1 -> weights
    1.28, 0.8, 1; row 1 (A = -1): r = 2, 0.9 -> 1.28, 0.9.  N = 5.  Every token keeps a gradient -w A / 5:
    row 0: -0.512, -0.32, -0.4; row 1: +0.256, +0.18.  The value: -1/5 sum w A log r."""
    loss, grad, m = _grad(cispo_loss, clip_low=0.2, clip_high=0.28)
    close(grad, [[-1.28 * 2 / 5, -0.8 * 2 / 5, -1.0 * 2 / 5], [1.28 / 5, 0.9 / 5, 0.0]])
    value = -(1.28 * 2 * math.log(1.5) + 0.8 * 2 * math.log(0.5) + 0.0
              + 1.28 * -1 * math.log(2.0) + 0.9 * -1 * math.log(0.9)) / 5
    close(loss, value)
    # weights raised: r = 0.5 (1 of 5); capped: r = 1.5 and r = 2 (2 of 5), whatever the advantage's sign
    close(m["clip_frac_low"], 1 / 5)
    close(m["clip_frac_high"], 2 / 5)
    close(m["clip_frac"], 3 / 5)
    close(m["is_weight_mean"], (1.28 + 0.8 + 1.0 + 1.28 + 0.9) / 5)
    close(m["ratio_mean"], (1.5 + 0.5 + 1.0 + 2.0 + 0.9) / 5)


def test_cispo_defaults_have_no_floor_and_cap_the_weight_at_5():
    """The defaults (clip_low 1, clip_high 4): weight = r on [0, 5].  One token, A = 1: r = 0.01 -> weight 0.01
    (no floor); r = 7 -> 5."""
    for r, w in ((0.01, 0.01), (3.0, 3.0), (7.0, 5.0)):
        logp = T([[math.log(r)]], requires_grad=True)
        loss, _ = cispo_loss(logp, T([[0.0]]), T([1.0]), T([[1.0]]))
        loss.backward()
        close(logp.grad, [[-w]])
        close(loss, -w * math.log(r))


# --------------------------------------------------------------------------- SAPO by hand
def _sapo_by_hand(tau_pos, tau_neg):
    """Value, d loss / d logp and the counted tokens' gradient weights of SAPO on the example, seq_mean_token_mean
    (B = 2, |y_0| = 3, |y_1| = 2)."""
    value, grad, weights = 0.0, [[0.0] * 3 for _ in range(2)], []
    for i, (a, n) in enumerate(zip(ADV, (3, 2))):
        tau = tau_pos if a > 0 else tau_neg
        for t in range(n):
            r = RATIOS[i][t]
            p = sigmoid(tau * (r - 1))
            weights.append(4 * p * (1 - p) * r)
            value += -(4 / tau) * p * a / (2 * n)
            grad[i][t] = -weights[-1] * a / (2 * n)
    return value, grad, weights


def test_sapo_value_and_gradient_by_hand():
    """tau_pos = 2 for row 0 (A = 2), tau_neg = 3 for row 1 (A = -1).  One token worked through: r = 1.5, tau = 2:
    p = sigma(1) = 0.73106, gate 4/2 p = 1.46212, gradient weight 4 p (1 - p) r = 4 x 0.73106 x 0.26894 x 1.5
    = 1.17967, so d loss / d logp = -1.17967 x 2 / (2 x 3) = -0.39322."""
    loss, grad, m = _grad(sapo_loss, tau_pos=2.0, tau_neg=3.0)
    value, want, weights = _sapo_by_hand(2.0, 3.0)
    close(grad, want)
    close(loss, value)
    close(grad[0, 0], -0.39322, tol=1e-5)
    close(m["clip_frac"], 0.0)
    close(m["gate_weight_mean"], sum(weights) / 5)


def test_sapo_on_policy_is_the_policy_gradient_at_any_temperature():
    """r = 1: gate 2 / tau, gradient weight 4 x 1/2 x 1/2 = 1."""
    for tau in (0.5, 1.0, 1.05, 8.0):
        logp = T([[-1.0, -2.0]], requires_grad=True)
        loss, _ = sapo_loss(logp, logp.detach(), T([3.0]), torch.ones(1, 2), tau_pos=tau, tau_neg=tau)
        loss.backward()
        close(logp.grad, [[-3.0 / 2, -3.0 / 2]])
        close(loss, -2 / tau * 3.0)


def test_sapo_defaults_are_the_papers():
    """tau_pos = 1, tau_neg = 1.05 (the paper, verl and TRL), aggregated seq_mean_token_mean."""
    loss, grad, _ = _grad(sapo_loss)
    value, want, _ = _sapo_by_hand(1.0, 1.05)
    close(grad, want)
    close(loss, value)


def test_sapo_is_finite_far_off_policy():
    """r = e^30 (past the cap at e^20) and r = e^-30: the gate is flat, the gradient 0 and finite."""
    logp = T([[30.0, -30.0]], requires_grad=True)
    loss, m = sapo_loss(logp, torch.zeros(1, 2), T([-1.0]), torch.ones(1, 2))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    close(logp.grad, [[0.0, 0.0]], tol=1e-9)


# --------------------------------------------------------------------------- mutations the checks catch
def _cispo_without_stop_gradient(logp, old, adv, mask, clip_low, clip_high):
    lr = (logp - old) * mask
    w = torch.clamp(torch.exp(lr), 1 - clip_low, 1 + clip_high)  # gradient flows through the weight
    return -(w * adv[:, None] * lr * mask).sum() / mask.sum()


def _cispo_bounds_swapped(logp, old, adv, mask, clip_low, clip_high):
    lr = (logp - old) * mask
    w = torch.clamp(torch.exp(lr.detach()), 1 - clip_high, 1 + clip_low)
    return -(w * adv[:, None] * lr * mask).sum() / mask.sum()


def _ppo_clip_instead(logp, old, adv, mask, clip_low, clip_high):
    r = torch.exp((logp - old) * mask)
    a = adv[:, None]
    return -(torch.minimum(r * a, torch.clamp(r, 1 - clip_low, 1 + clip_high) * a) * mask).sum() / mask.sum()


CISPO_MUTANTS = {"no stop-gradient": _cispo_without_stop_gradient, "bounds swapped": _cispo_bounds_swapped,
                 "PPO's clipped update": _ppo_clip_instead}


def _sapo_temperatures_swapped(logp, old, adv, mask, tau_pos, tau_neg):
    return _sapo_reference(logp, old, adv, mask, tau_neg, tau_pos)


def _sapo_reference(logp, old, adv, mask, tau_pos, tau_neg):
    r = torch.exp((logp - old) * mask)
    a = adv[:, None].expand_as(logp)
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    f = torch.sigmoid(tau * (r - 1)) * 4 / tau
    return -((f * a * mask).sum(-1) / mask.sum(-1)).mean()


def _sapo_hard_clip(logp, old, adv, mask, tau_pos, tau_neg):
    r = torch.exp((logp - old) * mask)
    a = adv[:, None]
    obj = torch.minimum(r * a, torch.clamp(r, 0.8, 1.2) * a)
    return -((obj * mask).sum(-1) / mask.sum(-1)).mean()


SAPO_MUTANTS = {"temperatures swapped": _sapo_temperatures_swapped, "PPO's hard clip": _sapo_hard_clip}


@pytest.mark.parametrize("mutant", sorted(CISPO_MUTANTS))
def test_a_mutated_cispo_gives_another_gradient(mutant):
    _, want, _ = _grad(cispo_loss, clip_low=0.2, clip_high=0.28)
    logp, old, adv, mask = _inputs()
    CISPO_MUTANTS[mutant](logp, old, adv, mask, 0.2, 0.28).backward()
    assert differs(logp.grad, want), mutant


@pytest.mark.parametrize("mutant", sorted(SAPO_MUTANTS))
def test_a_mutated_sapo_gives_another_gradient(mutant):
    _, want, _ = _grad(sapo_loss, tau_pos=2.0, tau_neg=3.0)
    logp, old, adv, mask = _inputs()
    SAPO_MUTANTS[mutant](logp, old, adv, mask, 2.0, 3.0).backward()
    assert differs(logp.grad, want), mutant


# --------------------------------------------------------------------------- registry and uniform behaviour
def test_registered_with_their_own_aggregation_and_options():
    from rlvr.algorithms.losses import loss_aggregation

    assert {"cispo", "sapo"} <= set(POLICY_LOSSES.names())
    assert loss_aggregation("cispo") == "token_mean" and loss_aggregation("sapo") == "seq_mean_token_mean"
    assert POLICY_LOSSES.entry("cispo").options() == ["clip_low", "clip_high"]
    assert POLICY_LOSSES.entry("sapo").options() == ["tau_pos", "tau_neg"]
    assert "clip_range" not in POLICY_LOSSES.entry("cispo").tags  # its bounds are its own, not algorithm.clip_*
    # get_policy_loss binds options and checks them
    loss, _ = get_policy_loss("cispo", clip_low=0.2, clip_high=0.28)(*_inputs())
    close(loss, cispo_loss(*_inputs(), clip_low=0.2, clip_high=0.28)[0].detach())


def test_grpo_loss_passes_the_options_through():
    logp, old, adv, mask = _inputs()
    loss, m = grpo_loss(logp, old, adv, mask, policy_loss="sapo", policy_loss_params={"tau_pos": 2.0, "tau_neg": 3.0},
                        agg="seq_mean_token_mean")
    loss.backward()
    close(logp.grad, _sapo_by_hand(2.0, 3.0)[1])
    assert "gate_weight_mean" in m and "pg_loss" in m


def test_is_weights_multiply_the_per_token_loss():
    """A truncated IS weight of 0.5 on row 1 halves its tokens' CISPO gradient."""
    logp, old, adv, mask = _inputs()
    loss, _ = cispo_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, is_weights=T([1.0, 0.5]))
    loss.backward()
    close(logp.grad, [[-1.28 * 2 / 5, -0.8 * 2 / 5, -1.0 * 2 / 5], [0.5 * 1.28 / 5, 0.5 * 0.9 / 5, 0.0]])


@pytest.mark.parametrize("fn, kw", [(cispo_loss, {"clip_low": 1.5}), (cispo_loss, {"clip_high": -0.1}),
                                    (sapo_loss, {"tau_pos": 0.0}), (sapo_loss, {"tau_neg": -1.0})])
def test_bad_options_called_directly_raise(fn, kw):
    with pytest.raises(ValueError):
        fn(*_inputs(), **kw)


# --------------------------------------------------------------------------- the config
@pytest.mark.parametrize("options, match", [
    (["algorithm.policy_loss=cispo", "algorithm.policy_loss_params={clip_low: 1.5}"],
     "policy_loss_params.clip_low: Input should be less than or equal to 1"),
    (["algorithm.policy_loss=cispo", "algorithm.policy_loss_params={clip_high: -0.5}"],
     "policy_loss_params.clip_high: Input should be greater than or equal to 0"),
    (["algorithm.policy_loss=cispo", "algorithm.policy_loss_params={epsilon_high: 5.0}"],
     r"epsilon_high: not an option \(the policy loss 'cispo' accepts: clip_low, clip_high\)"),
    (["algorithm.policy_loss=sapo", "algorithm.policy_loss_params={tau_pos: 0}"],
     "policy_loss_params.tau_pos: Input should be greater than 0"),
    (["algorithm.policy_loss=sapo", "algorithm.policy_loss_params={tau_neg: -1.05}"],
     "policy_loss_params.tau_neg: Input should be greater than 0"),
    (["algorithm.policy_loss=sapo", "algorithm.policy_loss_params={temperature: 1}"],
     r"temperature: not an option \(the policy loss 'sapo' accepts: tau_pos, tau_neg\)"),
    (["algorithm.policy_loss=cispo", "algorithm.clip_high=0.28"],
     "not by cispo: give its own options in algorithm.policy_loss_params"),
])
def test_bad_options_fail_when_the_config_loads(options, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [*options, "algorithm.mini_batches=2"])


@pytest.mark.parametrize("loss", ["cispo", "sapo"])
def test_refused_with_one_optimizer_step_accepted_with_two(loss):
    """At ratio 1 CISPO's clip and SAPO's gate cannot act (both weights are 1): refused, naming why."""
    with pytest.raises(ConfigError, match=f"algorithm.policy_loss={loss}") as e:
        load_config(RunConfig, None, [f"algorithm.policy_loss={loss}"])
    assert "one optimizer step per rollout batch" in str(e.value)
    cfg = load_config(RunConfig, None, [f"algorithm.policy_loss={loss}", "algorithm.mini_batches=2"])
    assert cfg.algorithm.loss_agg == {"cispo": "token_mean", "sapo": "seq_mean_token_mean"}[loss]
    assert cfg.learner_settings().policy_loss == loss


# --------------------------------------------------------------------------- the real wiring
G = 4
# the second group repeats two completions of the first with the other verdict: the first optimizer step moved their
# log-probs, so in the second step their ratios are away from 1 (as in test_reference_equivalence)
COMPLETIONS = ["ab", "cdefgh", "ijk", "lmnopq", "ab", "tuvw", "cdefgh", "0123"]
REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]


def _grpo(rewards):
    """GRPO advantages (Shao et al. 2024): (r - group mean) / (group sample std + 1e-6)."""
    g = torch.tensor(rewards).view(-1, G)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).reshape(-1)


def cispo_reference(logp, old, adv, mask, clip_low, clip_high):
    """CISPO as in the module docstring: token mean of -sg(clip(r)) A (logp - logp_old)."""
    lr = (logp - old) * mask
    w = torch.clamp(torch.exp(lr.detach()), 1 - clip_low, 1 + clip_high)
    return -(w * adv[:, None] * lr * mask).sum() / mask.sum()


WIRING = {  # loss -> (options, reference, mutants, the reference's parameters)
    "cispo": ("{clip_low: 0.05, clip_high: 0.1}", cispo_reference, CISPO_MUTANTS, (0.05, 0.1)),
    "sapo": ("{tau_pos: 2.0, tau_neg: 3.0}", _sapo_reference, SAPO_MUTANTS, (2.0, 3.0)),
}


@pytest.mark.parametrize("micro_batch_size", [2, 16])
@pytest.mark.parametrize("name", sorted(WIRING))
def test_through_the_config_recipe_and_learner(tmp_path, name, micro_batch_size):
    """``algorithm.policy_loss=<name>`` with its options, two mini-batches, on the tiny model: the learner's gradient at
    each optimizer step is the hand formula's on the reference's own SGD trajectory (``logp_old`` from before the
    first step), whether a mini-batch is one micro-batch or two; at the second step, where the ratios have moved,
    each mutated formula gives a gradient the learner's is not.  With one micro-batch per mini-batch the reported
    loss is the token-weighted mean of the two steps' losses (with several it is that of the micro-batches'
    own losses, a diagnostic)."""
    options, reference, mutants, params = WIRING[name]
    lr = 2.0
    tok, model = tiny()
    r = recipe(tmp_path, tok, model, f"rollout.group_size={G}", f"train.prompts_per_step={len(REWARDS) // G}",
               "train.max_grad_norm=0", f"train.micro_batch_size={micro_batch_size}", f"algorithm.policy_loss={name}",
               f"algorithm.policy_loss_params={options}", "algorithm.mini_batches=2")
    assert r.cfg.algorithm.policy_loss_params == dict(zip(POLICY_LOSSES.entry(name).options(), params))
    r.optimizer = RecordingSGD([p for p in model.parameters() if p.requires_grad], lr)
    scored = r.advantages(rollouts(samples(tok, COMPLETIONS, model=model), REWARDS))
    model0 = copy.deepcopy(model)
    out = r.learn(0, scored)

    b, adv = scored.batch, _grpo(REWARDS)
    m = completion_mask(b)
    torch.testing.assert_close(scored.advantages, adv)
    with torch.no_grad():
        old = learner_logprobs(model0, b)
    weights = [p for p in model0.parameters() if p.requires_grad]
    losses = []
    assert len(r.optimizer.seen) == 2
    for step, rows in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        logp = learner_logprobs(model0, b)
        loss = reference(logp[rows], old[rows], adv[rows], m[rows], *params)
        want = grads_of(loss, model0)
        got = r.optimizer.seen[step]
        assert_grads_close(got, want, rtol=5e-4, atol=5e-6)
        losses.append(float(loss.detach()))
        if step == 1:
            ratio = torch.exp(logp - old).detach()[rows][m[rows].bool()]
            assert float((ratio - 1).abs().max()) > 0.1, ratio  # the weights act
            for mutant, fn in mutants.items():
                logp = learner_logprobs(model0, b)
                wrong = grads_of(fn(logp[rows], old[rows], adv[rows], m[rows], *params), model0)
                assert any(differs(g, w, tol=1e-3 * float(g.abs().max()) + 1e-6) for g, w in zip(got, wrong)), \
                    mutant
        with torch.no_grad():
            for p, g in zip(weights, want):
                p.sub_(lr * g)
    n = m.sum(-1).tolist()
    # the logged loss is the batch's objective: the two steps' losses weighted by tokens for CISPO's token mean, by
    # sequences (4 and 4) for SAPO's sequence mean
    w = (sum(n[:4]), sum(n[4:])) if name == "cispo" else (4, 4)
    if micro_batch_size >= 4:
        assert out["loss"] == pytest.approx((losses[0] * w[0] + losses[1] * w[1]) / sum(w), rel=1e-4)
    assert math.isfinite(out["grad_norm"])
