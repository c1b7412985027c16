"""Each policy loss is aggregated as its paper defines it when ``algorithm.loss_agg`` is not set, through the
learner's micro-batch weights: GSPO's sequence mean of length-normalised terms, TOPR's sequence sums.

The hand case: a 2-token completion with A = +1 and a 6-token completion with A = -1, one row per
micro-batch.  GSPO (Zheng et al. 2025, Eq. 5, ``1/G sum_i s_i A_i`` with s_i the length-normalised sequence
ratio; verl's ``compute_policy_loss_gspo`` forces seq-mean-token-mean) gives each sequence's mean log-prob
the weight ``-A_i / G``: -0.5 and +0.5.  The token mean that ``learner/update.py`` used whatever the loss
gives each token ``-A_i / 8``: -0.25 and +0.75 per sequence.  TOPR (Le Roux et al. 2025, Eq. 7: ``sum_i A_i
grad log pi(y_i)``, here averaged over the G sequences) gives each sequence's summed log-prob ``-A_i / G``.
"""

from __future__ import annotations

import pytest
import torch

from rl_harness import assert_grads_close, batch, completion_mask, current_grads, grads_of, learner_logprobs, tiny
from rlvr.config import load_config
from rlvr.learner.update import update_policy
from rlvr.recipes.config import RunConfig

COMPLETIONS, ADV = ["ab", "cdefgh"], [1.0, -1.0]


def _learner_grads(model, b, *overrides):
    cfg = load_config(RunConfig, None, ["train.micro_batch_size=1", "train.max_grad_norm=0", *overrides])
    model.zero_grad(set_to_none=True)
    out = update_policy(model, torch.optim.SGD(model.parameters(), lr=0.0), b, cfg.learner_settings())
    return current_grads(model), out, cfg


@pytest.mark.parametrize("loss, per_sequence, reduce", [
    ("gspo", [-0.5, 0.5], "mean"),   # weight of each sequence's mean log-prob
    ("topr", [-0.5, 0.5], "sum"),    # weight of each sequence's summed log-prob
])
def test_gspo_and_topr_use_their_own_aggregation(loss, per_sequence, reduce):
    tok, model = tiny()
    b = batch(tok, COMPLETIONS, ADV, model=model)
    # TOPR is refused with one optimizer step per batch (its truncation could not act): two epochs at lr 0, whose
    # last gradient is the one the test reads, taken at unchanged weights
    got, out, cfg = _learner_grads(model, b, f"algorithm.policy_loss={loss}", "algorithm.ppo_epochs=2")
    assert cfg.algorithm.loss_agg == {"gspo": "seq_mean_token_mean", "topr": "seq_mean_token_sum"}[loss]
    logp, m = learner_logprobs(model, b), completion_mask(b)
    seq = logp.sum(-1) / (m.sum(-1) if reduce == "mean" else 1.0)
    want = grads_of((torch.tensor(per_sequence) * seq).sum(), model)
    assert_grads_close(got, want)


def test_an_explicit_loss_agg_is_honoured():
    """``algorithm.loss_agg=token_mean`` with GSPO: every token weighs ``-A_i / 8`` (the -0.25 / +0.75 split)."""
    tok, model = tiny()
    b = batch(tok, COMPLETIONS, ADV, model=model)
    got, _, cfg = _learner_grads(model, b, "algorithm.policy_loss=gspo", "algorithm.loss_agg=token_mean")
    assert cfg.algorithm.loss_agg == "token_mean"
    logp = learner_logprobs(model, b)
    want = grads_of((torch.tensor([-0.25 / 2, 0.75 / 6]) * logp.sum(-1)).sum(), model)
    assert_grads_close(got, want)


def test_the_default_loss_keeps_the_token_mean():
    cfg = load_config(RunConfig, None, [])
    assert cfg.algorithm.loss_agg == "token_mean" and "loss_agg" not in cfg.algorithm.model_fields_set
