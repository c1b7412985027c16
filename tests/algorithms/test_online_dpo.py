"""Online DPO as per-sequence weights: the learner's gradient equals the DPO loss's own gradient."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import close
from rl_harness import assert_grads_close, completion_mask, grads_of, perturb
from rlvr.algorithms.dpo import dpo_pairs, online_dpo_advantages
from rlvr.config import ConfigError, load_config
from rlvr.learner.batching import completion_start
from rlvr.recipes.config import RunConfig
from test_reference_equivalence import G, REWARDS, run


def test_pairs_and_weights_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    assert dpo_pairs(r, 4) == [(0, 1), (0, 2), (3, 1), (3, 2)]  # the second group has no spread
    # sequence log-ratios (sums over the mask): rows 0..3 = 1, 0, 2, 0 ; beta 1
    lr = torch.tensor([[1.0], [0.0], [2.0], [0.0], [0.0], [0.0], [0.0], [0.0]])
    a = online_dpo_advantages(r, 4, logratio=lr, mask=torch.ones(8, 1), beta=1.0)
    s = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    g01, g02, g31, g32 = (1 - s(1)), (1 - s(-1)), (1 - s(0)), (1 - s(-2))
    k = 8 / 4  # B / P
    close(a, [k * (g01 + g02), -k * (g01 + g31), -k * (g02 + g32), k * (g31 + g32), 0, 0, 0, 0])


def test_the_learners_gradient_is_the_dpo_losss(tmp_path):
    """Through the recipe (config -> advantages -> learn), against -1/P sum log sigmoid(beta [...]) by autograd."""
    beta = 0.5
    r, scored, out, (model0, _) = run(tmp_path, "algorithm.advantage=online_dpo", "algorithm.skip_zero_advantage=false",
                                      "train.micro_batch_size=16", "algorithm.loss_agg=seq_mean_token_sum",
                                      f"algorithm.advantage_params={{beta: {beta}}}",
                                      prepare=lambda rec: perturb(rec.ref_model))
    b = scored.batch
    start = completion_start(b)
    m = completion_mask(b)
    pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def seq_logp(mod, grad):
        with torch.set_grad_enabled(grad):
            z = mod(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos).logits[:, start - 1:-1]
            lp = torch.log_softmax(z.float(), -1).gather(-1, b.input_ids[:, start:, None]).squeeze(-1)
        return (lp * m).sum(-1)

    pi, ref = seq_logp(model0, True), seq_logp(r.ref_model, False)
    pairs = dpo_pairs(torch.tensor(REWARDS), G)
    assert pairs  # the batch has preference pairs
    loss = -sum(torch.nn.functional.logsigmoid(beta * ((pi[w] - ref[w]) - (pi[l] - ref[l]))) for w, l in pairs)
    loss = loss / len(pairs)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


@pytest.mark.parametrize("options, match", [
    (["algorithm.advantage=online_dpo"], "loss_agg=seq_mean_token_sum"),
    (["algorithm.advantage=online_dpo", "algorithm.loss_agg=seq_mean_token_sum", "algorithm.mini_batches=2"],
     "one optimizer step"),
    (["algorithm.advantage=online_dpo", "algorithm.loss_agg=seq_mean_token_sum", "algorithm.kl_coef=0.1"],
     "set algorithm.kl_coef=0"),
])
def test_configs_where_it_would_not_be_dpo_are_refused(options, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, options)
