"""Demonstration rows in the learner: the off-policy flag survives micro-batching, the loss of a demonstration
row is LUFFY's shaped term on the learner's own probabilities, and its (absent) sampler log-probs stay out of
logprob_mismatch."""

from __future__ import annotations

import torch

from conftest import make_model, make_tokenizer
from rlvr.config import load_config
from rlvr.learner.batching import collate, policy_logprobs
from rlvr.learner.update import sub_batch, update_policy
from rlvr.recipes.config import RunConfig
from rlvr.types import Sample


def _batch(tok, model):
    prompt = tok.encode("What is 2+2?", add_special_tokens=False)
    own = tok.encode("5", add_special_tokens=False) + [tok.eos_token_id]
    demo = tok.encode("4", add_special_tokens=False) + [tok.eos_token_id]
    samples = [Sample("p", prompt, own, [0.0] * len(own), "5", "stop", 0),
               Sample("p", prompt, demo, [0.0] * len(demo), "4", "stop", 1, info={"off_policy": True})]
    batch = collate(samples, torch.tensor([-1.0, 1.0]), tok.pad_token_id)
    start = len(prompt)  # both prompts have this length: completions start at this column
    with torch.no_grad():  # the on-policy row's sampler log-probs are the learner's own (no mismatch)
        logp, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, start)
    batch.sampler_logprobs[0, start:] = logp[0] * batch.completion_mask[0, start:]
    return batch, start, logp


def test_flag_survives_sub_batch():
    tok = make_tokenizer()
    batch, *_ = _batch(tok, make_model(tok))
    assert batch.off_policy.tolist() == [False, True]
    sub, _ = sub_batch(batch, torch.tensor([1]))
    assert sub.off_policy.tolist() == [True]
    assert collate([Sample("p", [1], [2], [0.0], "", "stop", 0)], torch.zeros(1), 0).off_policy is None


def test_learner_loss_on_a_demonstration_row_is_the_shaped_term():
    tok = make_tokenizer()
    model = make_model(tok)
    batch, start, logp = _batch(tok, model)
    cfg = load_config(RunConfig, None, ["train.micro_batch_size=4", "guidance.demonstrations=true",
                                        "guidance.shaping_gamma=0.2"])
    out = update_policy(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg.learner_settings())
    mask = batch.completion_mask[:, start:]
    p = logp[1].exp()
    # token mean over all 4 counted tokens: on-policy row -A * ratio = 1 per token, demo row -A * p / (p + 0.2)
    expected = (mask[0].sum() * 1.0 - (p / (p + 0.2) * mask[1]).sum()) / mask.sum()
    torch.testing.assert_close(torch.tensor(out["loss"]), expected.float(), atol=1e-5, rtol=0)
    assert out["logprob_mismatch"] < 1e-5  # the demo row's 0 "sampler" log-probs are not compared
    assert abs(out["ratio_mean"] - 1.0) < 1e-6


def test_a_demonstration_row_has_no_kl_loss_term():
    """The KL(pi || pi_ref) estimators hold on tokens sampled from pi; a demonstration's were not, so its tokens get
    no KL loss term (as they get no KL in the reward, tests/learner/test_kl_in_reward_wiring.py).  The KL term is
    ``kl_coef x sum of k3 over the on-policy row's tokens / every counted token``; the ``kl`` metric is the on-policy
    tokens' mean."""
    from rl_harness import perturb

    tok = make_tokenizer()
    model = make_model(tok)
    ref = make_model(tok)
    perturb(ref, scale=0.2)
    batch, start, logp = _batch(tok, model)
    cfg = load_config(RunConfig, None, ["train.micro_batch_size=4", "guidance.demonstrations=true",
                                        "guidance.shaping_gamma=0.2", "algorithm.kl_coef=0.5"])
    with torch.no_grad():
        ref_logp, _ = policy_logprobs(ref, batch.input_ids, batch.attention_mask, start)
    mask = batch.completion_mask[:, start:]
    x = (ref_logp - logp) * mask
    k3 = (torch.expm1(x) - x) * mask
    assert float(k3[1].sum()) > 0.1 and float(k3[0].sum()) > 0.1  # the demonstration's "KL" would move the term
    out = update_policy(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg.learner_settings(),
                        ref_model=ref)
    p = logp[1].exp()
    policy = (mask[0].sum() * 1.0 - (p / (p + 0.2) * mask[1]).sum()) / mask.sum()
    expected = policy + 0.5 * k3[0].sum() / mask.sum()
    torch.testing.assert_close(torch.tensor(out["loss"]), expected.float(), atol=1e-5, rtol=0)
    # the kl metric: the on-policy row's token mean (one micro-batch here)
    torch.testing.assert_close(torch.tensor(out["kl"]), (k3[0].sum() / mask[0].sum()).float(), atol=1e-5, rtol=0)
