"""``train.update_fraction``: a fixed random subset of each weight tensor trains, the rest stays bit-identical."""

from __future__ import annotations

import pytest
import torch

from conftest import make_model, make_tokenizer
from rl_harness import Recorder, LOOP_PROBLEMS, last_digit
from rlvr.config import ConfigError, load_config
from rlvr.learner.optim import sparse_update_masks
from rlvr.recipes.config import RunConfig


def test_masks_keep_the_share_of_each_tensor_and_are_seeded():
    tok = make_tokenizer()
    model = make_model(tok, seed=0)
    masks = sparse_update_masks(model, 0.1, seed=7)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert list(masks) == names
    for name, p in model.named_parameters():
        assert masks[name].shape == p.shape and int(masks[name].sum()) == max(1, round(0.1 * p.numel()))
    again = sparse_update_masks(make_model(tok, seed=0), 0.1, seed=7)
    other = sparse_update_masks(make_model(tok, seed=0), 0.1, seed=8)
    assert all(torch.equal(masks[n], again[n]) for n in names)
    assert any(not torch.equal(masks[n], other[n]) for n in names)


def test_a_gradient_step_moves_only_the_masked_entries():
    tok = make_tokenizer()
    model = make_model(tok, seed=0)
    masks = sparse_update_masks(model, 0.25, seed=1)
    ids = torch.tensor([tok.encode("12+7=19", add_special_tokens=False)])
    model(input_ids=ids, labels=ids).loss.backward()
    for name, p in model.named_parameters():
        assert torch.all(p.grad[~masks[name]] == 0)  # the hook zeroed the frozen entries' gradient
        assert p.grad[masks[name]].abs().sum() > 0 or p.grad.abs().sum() == 0


def test_through_the_recipe_frozen_entries_stay_bit_identical_with_adamw(tmp_path):
    tok = make_tokenizer()
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={tmp_path}", "train.steps=3", "train.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=0", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", "train.update_fraction=0.05"])
    model = make_model(tok, seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    r = Recorder(cfg, model=model, tokenizer=tok, problems=LOOP_PROBLEMS, verifier=last_digit)
    r.train()
    moved = 0
    for name, p in r.model.named_parameters():
        m = r.update_masks[name]
        assert torch.equal(p.detach()[~m], before[name][~m]), name  # AdamW never touched a frozen entry
        moved += int((p.detach()[m] != before[name][m]).sum())
    assert moved > 0  # and the chosen entries trained


def test_weight_decay_or_fsdp_with_sparse_updates_is_refused():
    with pytest.raises(ConfigError, match="set train.weight_decay=0"):
        load_config(RunConfig, None, ["train.update_fraction=0.01", "train.weight_decay=0.1"])
    with pytest.raises(ConfigError, match="train.update_fraction"):
        load_config(RunConfig, None, ["train.update_fraction=0.01", "distributed.fsdp=true"])
    with pytest.raises(ConfigError, match="train.update_fraction"):
        load_config(RunConfig, None, ["train.update_fraction=0"])
