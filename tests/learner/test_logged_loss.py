"""The logged ``loss`` is the objective of ``algorithm.loss_agg`` whatever the micro- and mini-batch split.

Four completions of 1, 3, 2 and 4 tokens with advantages 1, -1, 2, 0.5; the sampler's log-probs are the learner's
own and the optimizer's learning rate is 0, so every ratio is 1 and each token's loss is ``-A_i``.  By hand
(``n_i`` tokens, ``B = 4`` sequences, ``L = rollout.max_new_tokens = 8``)::

    token_mean               -(sum_i A_i n_i) / (sum_i n_i)  = -(1 - 3 + 4 + 2) / 10 = -0.4
    seq_mean_token_mean      -(sum_i A_i) / B                = -(1 - 1 + 2 + 0.5) / 4 = -0.625
    seq_mean_token_sum       -(sum_i A_i n_i) / B            = -4 / 4                 = -1.0
    seq_mean_token_sum_norm  -(sum_i A_i n_i) / (B L)        = -4 / 32                = -0.125

A micro-batch's loss is its own rows' objective; averaging those by tokens (what every other diagnostic is) gives
-0.4 for every aggregation, which is the objective of the token mean only.
"""

from __future__ import annotations

import pytest
import torch

from rl_harness import batch, tiny
from rlvr.config import load_config
from rlvr.learner.update import update_policy
from rlvr.recipes.config import RunConfig

COMPLETIONS = ["a", "bcd", "ef", "ghij"]
ADVANTAGES = [1.0, -1.0, 2.0, 0.5]
BY_HAND = {"token_mean": -0.4, "seq_mean_token_mean": -0.625, "seq_mean_token_sum": -1.0,
           "seq_mean_token_sum_norm": -0.125}


@pytest.mark.parametrize("split", [["train.micro_batch_size=1"], ["train.micro_batch_size=3"],
                                   ["train.micro_batch_size=1", "algorithm.mini_batches=2"],
                                   ["train.micro_batch_size=1", "algorithm.ppo_epochs=2"]])
@pytest.mark.parametrize("agg", sorted(BY_HAND))
def test_logged_loss_is_the_objective_for_every_aggregation_and_split(agg, split):
    tok, model = tiny()
    b = batch(tok, COMPLETIONS, ADVANTAGES, model=model)
    cfg = load_config(RunConfig, None, [f"algorithm.loss_agg={agg}", "rollout.max_new_tokens=8", *split])
    out = update_policy(model, torch.optim.SGD(model.parameters(), lr=0.0), b, cfg.learner_settings())
    assert out["loss"] == pytest.approx(BY_HAND[agg], abs=1e-6)
    assert out["pg_loss"] == pytest.approx(BY_HAND[agg], abs=1e-6)
    assert out["learner_tokens"] == 10 * cfg.algorithm.ppo_epochs
