"""Mini-batch updates: several optimizer steps per rollout batch, so that the importance ratio moves and the
clip options act.

The reference is written out here, not taken from the learner: ``logp_old`` is the policy's log-prob of
every row *before the first optimizer step* (verl computes ``old_log_prob`` for the whole batch, then
splits it into ``ppo_mini_batch_size`` mini-batches); each mini-batch is one SGD step on its own
normalised loss.  The clipped surrogate is PPO's (Schulman et al. 2017, Eq. 7) with DAPO's decoupled
range (Yu et al. 2025, Eq. 10) and DAPO's token-level mean (Eq. 12)::

    r_t = exp(logp_t - logp_old_t)
    L   = -1/N sum_t min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)      (N: tokens of the mini-batch)

Capturing ``logp_old`` as each micro-batch is first seen (what the learner did before) would take the
second mini-batch's ``logp_old`` *after* the first step: ratio 1 again, and no clip ever acts.
"""

from __future__ import annotations

import copy

import pytest
import torch

from rl_harness import (RecordingSGD, assert_grads_close, batch, completion_mask, grads_of, learner_logprobs, recipe,
                        rollouts, samples, tiny)
from rlvr.config import ConfigError, load_config
from rlvr.learner.update import update_policy
from rlvr.recipes.config import RunConfig

COMPLETIONS = ["ab", "cdefgh", "ijk", "lmnopq", "rs", "tuvw"]
ADV = [1.0, -1.0, 0.5, -0.5, 1.0, -1.0]


def ppo_clip_reference(logp, old, adv, mask, eps_low=0.2, eps_high=0.28, is_w=None):
    """PPO / DAPO clipped surrogate, token mean over ``mask`` (see the module docstring)."""
    r = torch.exp((logp - old) * mask)
    a = adv[:, None].expand_as(logp)
    obj = torch.minimum(r * a, torch.clamp(r, 1 - eps_low, 1 + eps_high) * a)
    if is_w is not None:
        obj = obj * is_w
    return -(obj * mask).sum() / mask.sum()


def reference_sgd(model, b, minis, lr, epochs=1, loss=ppo_clip_reference, **kw):
    """SGD mini-batch by mini-batch on ``loss``; ``logp_old`` from the weights before the first step.
    Returns ``(gradient of every step, clip fraction of every step)``."""
    mask = completion_mask(b)
    adv = b.advantages
    with torch.no_grad():
        old = learner_logprobs(model, b)
    params = [p for p in model.parameters() if p.requires_grad]
    grads, fracs = [], []
    for _ in range(epochs):
        for rows in minis:
            logp = learner_logprobs(model, b)
            m = mask[rows]
            L = loss(logp[rows], old[rows], adv[rows], m, **kw)
            g = grads_of(L, model)
            with torch.no_grad():
                r = torch.exp(logp[rows] - old[rows])
                clipped = ((adv[rows, None] > 0) & (r > 1.28)) | ((adv[rows, None] < 0) & (r < 0.8))
                fracs.append(float((clipped * m).sum() / m.sum()))
                for p, gi in zip(params, g):
                    p.sub_(lr * gi)
            grads.append(g)
    return grads, fracs


def _cfg(*extra):
    return load_config(RunConfig, None, ["train.max_grad_norm=0", "algorithm.clip_high=0.28", *extra])


@pytest.mark.parametrize("learner", [
    ("train.micro_batch_size=2",),                                            # padded micro-batches
    ("train.micro_batch_tokens=40", "train.share_prompts=true"),              # the demo's packed rows
    ("train.micro_batch_size=1", "algorithm.ppo_epochs=2"),                   # 2 epochs x 2 mini-batches
])
def test_two_mini_batches_take_logp_old_before_the_first_step_and_the_clip_acts(learner):
    tok, model = tiny()
    b = batch(tok, COMPLETIONS, ADV, model=model)
    ref_model = copy.deepcopy(model)
    cfg = _cfg("algorithm.mini_batches=2", *learner)
    opt = RecordingSGD(model.parameters(), lr=0.5)
    out = update_policy(model, opt, b, cfg.learner_settings())
    want, fracs = reference_sgd(ref_model, b, [[0, 1, 2], [3, 4, 5]], lr=0.5, epochs=cfg.algorithm.ppo_epochs)
    assert len(opt.seen) == len(want) == 2 * cfg.algorithm.ppo_epochs
    assert fracs[0] == 0 and 0 < fracs[1] < 1  # step 1 at ratio 1; at step 2 the clip acts on some tokens only
    for got, ref in zip(opt.seen, want):
        assert_grads_close(got, ref, rtol=2e-4, atol=2e-6)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)
    assert out["clip_frac"] > 0 and out["learner_seqs"] == 6


def test_mini_batch_normalisers_count_skipped_rows_and_an_empty_mini_batch_takes_no_step():
    """Token mean over each mini-batch's tokens, zero-advantage rows included (skipping them changes no number);
    a mini-batch whose advantages are all 0 has no pass: its optimizer step has no gradient."""
    tok, model = tiny()
    adv = [1.0, 0.0, -1.0, 0.0, 0.0, 0.0]
    b = batch(tok, COMPLETIONS, adv, model=model)
    ref_model = copy.deepcopy(model)
    opt = RecordingSGD(model.parameters(), lr=0.5)
    out = update_policy(model, opt, b, _cfg("algorithm.mini_batches=2", "train.micro_batch_size=4").learner_settings())
    want, _ = reference_sgd(ref_model, b, [[0, 1, 2], [3, 4, 5]], lr=0.5)
    assert_grads_close(opt.seen[0], want[0])
    assert all(float(g.abs().max()) == 0 for g in opt.seen[1])
    assert out["learner_seqs"] == 2


def test_importance_weights_come_from_the_pass_before_the_first_step():
    """TIS (Yao et al. 2025): ``w_t = min(pi_old / mu, C)`` with ``pi_old`` before any step and ``mu`` the sampler's
    log-probs (here shifted by -0.4 per token, so ``pi_old / mu = e^0.4 > 1.2``: every weight is the cap)."""
    tok, model = tiny()
    b = batch(tok, COMPLETIONS, ADV, model=model)
    b.sampler_logprobs = (b.sampler_logprobs - 0.4) * b.completion_mask
    ref_model = copy.deepcopy(model)
    opt = RecordingSGD(model.parameters(), lr=0.5)
    update_policy(model, opt, b, _cfg("algorithm.mini_batches=2", "algorithm.is_correction=tis",
                                     "algorithm.is_params={cap: 1.2}").learner_settings())
    want, _ = reference_sgd(ref_model, b, [[0, 1, 2], [3, 4, 5]], lr=0.5, is_w=1.2)
    for got, ref in zip(opt.seen, want):
        assert_grads_close(got, ref, rtol=2e-4, atol=2e-6)


def test_the_learning_rate_schedule_steps_once_per_rollout_batch(tmp_path):
    tok, model = tiny()
    r = recipe(tmp_path, tok, model, "algorithm.mini_batches=3", "rollout.group_size=6", "train.warmup_steps=4",
               "train.lr=1e-3")
    r.learn(0, r.advantages(rollouts(samples(tok, COMPLETIONS, model=model), [1.0, 0, 1, 0, 0, 1])))
    assert r.scheduler.last_epoch == 1 and r.scheduler.get_last_lr()[0] == pytest.approx(2e-3 / 4)
    assert all(int(s["step"]) == 3 for s in r.optimizer.state.values())  # three AdamW steps


def test_ppo_critic_steps_with_every_mini_batch(tmp_path):
    tok, model = tiny()
    r = recipe(tmp_path, tok, model, "algorithm.advantage=gae", "algorithm.mini_batches=2", "rollout.group_size=6",
               "train.lr=1e-3")
    out = r.learn(0, r.advantages(rollouts(samples(tok, COMPLETIONS, model=model), [1.0, 0, 1, 0, 0, 1])))
    assert all(int(s["step"]) == 2 for s in r.critic_optimizer.state.values())
    assert out["learner_seqs"] == 6 and out["critic_grad_norm"] > 0


# --------------------------------------------------------------------------- what the config refuses
@pytest.mark.parametrize("options, match", [
    (["algorithm.clip_high=0.28"], "DAPO's clip-higher"),
    (["algorithm.clip_low=0.1", "algorithm.clip_high=0.1"], "algorithm.clip_low / clip_high = 0.1 / 0.1"),
    (["algorithm.policy_loss=dual_clip"], "algorithm.policy_loss=dual_clip"),
    (["algorithm.policy_loss_params={dual_clip: 3.0}"], "the dual clip"),
    (["algorithm.policy_loss=topr"], "algorithm.policy_loss=topr"),
    (["algorithm.policy_loss=cispo"], "algorithm.policy_loss=cispo"),
    (["algorithm.policy_loss=sapo", "algorithm.policy_loss_params={tau_neg: 2}"], "algorithm.policy_loss=sapo"),
    (["algorithm.policy_loss=gspo", "algorithm.policy_loss_params={clip_high: 0.001}"], "clip_low / clip_high of gspo"),
    (["algorithm.advantage=gae", "algorithm.value.clip=0.5"], "algorithm.value.clip=0.5"),
])
def test_options_that_cannot_act_with_one_optimizer_step_are_refused_naming_why(options, match):
    with pytest.raises(ConfigError, match=match) as e:
        load_config(RunConfig, None, options)
    assert "one optimizer step per rollout batch" in str(e.value) and "algorithm.mini_batches > 1" in str(e.value)
    for more in ("algorithm.mini_batches=2", "algorithm.ppo_epochs=2"):  # several steps: accepted
        load_config(RunConfig, None, [*options, more])


def test_the_default_config_and_the_demo_are_never_refused():
    load_config(RunConfig, None, [])
    load_config(RunConfig, "configs/arithmetic_grpo.yaml", [])
    load_config(RunConfig, None, ["algorithm.advantage=gae"])  # the default value clip is inert, not refused
    load_config(RunConfig, None, ["algorithm.policy_loss=gspo"])  # its sequence-mean objective acts at ratio 1


@pytest.mark.parametrize("options, match", [
    (["algorithm.policy_loss=gspo", "algorithm.clip_high=0.3", "algorithm.mini_batches=2"],
     "not by gspo: give its own options in algorithm.policy_loss_params"),
    (["algorithm.mini_batches=0"], r"algorithm.mini_batches: must be >= 1, got 0"),
    (["algorithm.ppo_epochs=0"], r"algorithm.ppo_epochs: must be >= 1, got 0"),
    (["algorithm.mini_batches=65"], "algorithm.mini_batches=65 splits a batch of .* 64 sequences"),
])
def test_mini_batch_and_clip_settings_out_of_range_are_refused(options, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, options)
