"""``algorithm.entropy_bonus_fraction``: SIREN's peak-entropy mask on the entropy bonus, by hand and through the
recipe."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import close
from rl_harness import train_recorded
from rlvr.algorithms.losses import grpo_loss
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig


def test_the_bonus_counts_only_the_selected_tokens_by_hand():
    # two rows, three counted tokens each (the last of row 1 is padding); advantage 0: the loss is the bonus alone
    mask = torch.tensor([[1., 1., 1.], [1., 1., 0.]])
    logp = torch.zeros(2, 3)
    entropy = torch.tensor([[0.5, 2.0, 1.0], [3.0, 0.1, 9.0]], requires_grad=True)
    select = torch.tensor([[0., 1., 0.], [1., 0., 0.]])  # the two highest counted entropies: 2.0 and 3.0
    loss, m = grpo_loss(logp, logp, torch.zeros(2), mask, entropy=entropy, entropy_coef=0.1,
                        entropy_select=select)
    # token_mean over the 5 counted tokens: -0.1 * (2.0 + 3.0) / 5
    close(loss, -0.1 * 5.0 / 5)
    (g,) = torch.autograd.grad(loss, entropy)
    close(g, -0.1 * select / 5)  # unselected and padding tokens get no push
    close(m["entropy"], (0.5 + 2.0 + 1.0 + 3.0 + 0.1) / 5)  # the logged entropy is still every token's
    full, _ = grpo_loss(logp, logp, torch.zeros(2), mask, entropy=entropy, entropy_coef=0.1)
    close(full, -0.1 * 6.6 / 5)  # without the mask: the plain bonus


def test_through_the_recipe_the_learner_gets_the_top_share_of_the_batch(tmp_path, monkeypatch):
    import rlvr.learner.update as update

    seen = []
    real = update.grpo_loss

    def spy(*a, entropy_select=None, **kw):
        seen.append(entropy_select)
        return real(*a, entropy_select=entropy_select, **kw)

    monkeypatch.setattr(update, "grpo_loss", spy)
    r = train_recorded(tmp_path, "algorithm.entropy_coef=0.01", "algorithm.entropy_bonus_fraction=0.25",
                       "algorithm.skip_zero_advantage=false")
    assert seen and all(s is not None for s in seen)
    for _, scored in r.seen:
        b = scored.batch
        n = int(b.completion_mask.sum())
        sel = b.entropy_select
        assert int(sel.sum()) == math.ceil(0.25 * n)
        assert float((sel * (1 - b.completion_mask)).sum()) == 0  # only completion tokens
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(row["entropy_bonus_threshold"]) for row in rows if "loss" in row)


@pytest.mark.parametrize("options, match", [
    (["algorithm.entropy_bonus_fraction=0.2"], "no entropy bonus to restrict"),
    (["algorithm.entropy_bonus_fraction=0", "algorithm.entropy_coef=0.01"], "entropy_bonus_fraction"),
    (["algorithm.entropy_bonus_fraction=0.2", "algorithm.entropy_coef=0.01", "distributed.fsdp=true"],
     "algorithm.entropy_bonus_fraction"),
])
def test_bad_or_inert_fractions_are_refused_at_load(options, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, options)
