"""PPO with a learned critic and GAE in the recipe (algorithm.advantage=gae, rlvr.models.value_head)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.models.value_head import build_critic, critic_values
from rlvr.learner.batching import collate, completion_start, policy_logprobs
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.config import RunConfig
from rlvr.learner.update import critic_value_pass as _critic_values, update_policy
from rlvr.recipes.rl import TrainingInterrupted, train
from rlvr.trackers import read_metrics
from rlvr.types import Sample

from conftest import make_model
from test_train import _cfg, _problems, _run, parity_verifier

CPU = torch.device("cpu")


def _samples() -> list[Sample]:
    return [Sample("a", [5, 6, 7], [8, 9], [0.0, 0.0], "", "stop"),
            Sample("b", [5], [10, 11, 12, 13], [0.0] * 4, "", "length"),
            Sample("c", [5, 6], [14], [0.0], "", "stop")]


def _random_head(critic, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        critic.head.weight.copy_(torch.randn(critic.head.weight.shape, generator=g))
        critic.head.bias.fill_(0.3)


@pytest.mark.parametrize("layout", ["separate", "shared"])
def test_values_are_read_at_the_position_before_each_token(tiny_tokenizer, layout):
    """V_t = w . h_{t-1} + b, h from an unpadded forward of each sample alone; padding does not move it."""
    model = make_model(tiny_tokenizer).eval()
    critic = build_critic(model, layout)
    _random_head(critic)
    samples = _samples()
    batch = collate(samples, torch.zeros(3), pad_id=0)
    cfg = _cfg(Path("/tmp"), "train.micro_batch_size=2")
    values = _critic_values(critic, model, batch, cfg.learner_settings(), CPU)
    assert values.shape == batch.input_ids.shape
    assert torch.all(values[batch.completion_mask == 0] == 0)
    w, b = critic.head.weight[0], critic.head.bias[0]
    for i, s in enumerate(samples):
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            h = model.model(input_ids=ids).last_hidden_state[0]
        want = h[len(s.prompt_ids) - 1:-1] @ w + b
        got = values[i][batch.completion_mask[i].bool()]
        assert torch.allclose(got, want, atol=1e-4), (i, got, want)


def test_hidden_states_of_the_policy_forward_match_the_values_pass(tiny_tokenizer):
    """The shared head reads the LM head's input during the update; it must equal the pre-advantage pass."""
    model = make_model(tiny_tokenizer).eval()
    critic = build_critic(model, "shared")
    _random_head(critic, 1)
    batch = collate(_samples(), torch.zeros(3), pad_id=0)
    start = completion_start(batch)
    with torch.no_grad():
        logp, _, hidden = policy_logprobs(model, batch.input_ids, batch.attention_mask, start, return_hidden=True)
        plain, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, start)
        direct = critic_values(critic, model, batch.input_ids, batch.attention_mask, start)
    assert torch.equal(logp, plain)  # the hook changes nothing
    assert hidden.shape[:2] == logp.shape
    assert torch.allclose(critic.values_from_hidden(hidden), direct, atol=1e-5)


def _ppo_batch(critic, model, cfg, rewards=(1.0, 0.0, 1.0), advantages=None):
    from rlvr.algorithms import ppo_gae_advantages

    batch = collate(_samples(), torch.zeros(3), pad_id=0)
    start = completion_start(batch)
    with torch.no_grad():  # on-policy old log-probs, so the first epoch has ratio 1
        logp, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, start)
    batch.sampler_logprobs[:, start:] = logp * batch.completion_mask[:, start:]
    batch.values = _critic_values(critic, model, batch, cfg.learner_settings(), CPU)
    adv, batch.returns = ppo_gae_advantages(torch.tensor(rewards), batch.values, batch.completion_mask, lam=0.9)
    batch.advantages = adv if advantages is None else advantages
    return batch


def test_first_value_loss_is_the_hand_computed_clipped_mse(tiny_tokenizer):
    """Epoch 0: V = V_old, so the clip is inactive and L = 0.5 * token-mean (V_old - R)^2."""
    model = make_model(tiny_tokenizer)
    critic = build_critic(model, "separate")
    _random_head(critic, 2)
    cfg = _cfg(Path("/tmp"), "algorithm.advantage=gae", "train.micro_batch_size=3")
    batch = _ppo_batch(critic, model, cfg)
    m = batch.completion_mask.bool()
    want = 0.5 * ((batch.values - batch.returns)[m] ** 2).mean()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    copt = torch.optim.SGD(critic.parameters(), lr=0.0)
    out = update_policy(model, opt, batch, cfg.learner_settings(), critic=critic, critic_optimizer=copt)
    assert out["value_loss"] == pytest.approx(float(want), rel=1e-5)
    assert out["vf_clip_frac"] == 0.0 and out["critic_grad_norm"] > 0


def test_critic_fits_the_returns_while_the_policy_is_frozen(tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    critic = build_critic(model, "separate")
    cfg = _cfg(Path("/tmp"), "algorithm.advantage=gae", "algorithm.value.clip=null")
    batch = _ppo_batch(critic, model, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    copt = torch.optim.AdamW(critic.parameters(), lr=1e-2)
    losses = [update_policy(model, opt, batch, cfg.learner_settings(), critic=critic, critic_optimizer=copt,
                            train_policy=False)["value_loss"] for _ in range(40)]
    assert losses[-1] < 0.05 * losses[0], losses
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # warm-up: policy untouched


@pytest.mark.parametrize("layout,trunk_moves", [("separate", False), ("shared", True)])
def test_value_gradients_reach_the_policy_trunk_only_when_shared(tiny_tokenizer, layout, trunk_moves):
    """Zero advantages: the policy loss has no gradient, so any change of the policy comes from the value loss."""
    model = make_model(tiny_tokenizer)
    critic = build_critic(model, layout)
    _random_head(critic, 3)  # a zero head would pass no gradient to the trunk
    cfg = _cfg(Path("/tmp"), "algorithm.advantage=gae", "train.max_grad_norm=0")
    batch = _ppo_batch(critic, model, cfg, advantages=torch.zeros(3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    head_before = critic.head.weight.clone()
    opt = torch.optim.SGD(model.parameters(), lr=1e-1)
    copt = torch.optim.SGD(critic.parameters(), lr=1e-1)
    update_policy(model, opt, batch, cfg.learner_settings(), critic=critic, critic_optimizer=copt)
    moved = [k for k, v in model.state_dict().items() if not torch.equal(before[k], v)]
    assert bool(moved) == trunk_moves, moved
    assert not torch.equal(head_before, critic.head.weight)
    if layout == "separate":  # its own copy of the trunk, not the policy's tensors
        policy_ptrs = {p.data_ptr() for p in model.parameters()}
        assert not policy_ptrs & {p.data_ptr() for p in critic.parameters()}


@pytest.mark.parametrize("layout", ["separate", "shared"])
def test_ppo_trains_end_to_end_and_logs_critic_diagnostics(tmp_path, tiny_tokenizer, layout):
    model0 = make_model(tiny_tokenizer)
    model, summary = _run(tiny_tokenizer, tmp_path, "algorithm.advantage=gae", f"algorithm.value.critic={layout}",
                          "algorithm.value.lr=1e-2", "algorithm.value.warmup_steps=1",
                          "algorithm.advantage_params={lam: 0.95}")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in ("value_loss", "vf_clip_frac", "value_explained_var", "value_pred_mean", "return_mean",
                "critic_grad_norm"):
        assert all(key in r for r in rows), key
    assert rows[0]["grad_norm"] == 0.0 and rows[0]["critic_grad_norm"] > 0  # warm-up step: critic only
    assert rows[0]["value_pred_mean"] == 0.0  # the head starts at zero
    assert any(r["value_pred_mean"] != 0.0 for r in rows[1:])  # ... and learns
    assert all(r["learner_seqs"] == 8 for r in rows)  # no row is skipped: the critic learns from all
    changed = any(not torch.equal(a, b.cpu()) for a, b in zip(model0.state_dict().values(),
                                                               model.state_dict().values()))
    assert changed
    assert (latest_checkpoint(tmp_path) / "critic.safetensors").is_file()


def test_ppo_resume_matches_uninterrupted_run(tmp_path, tiny_tokenizer):
    """The critic, its optimizer and its LR schedule are checkpointed: resuming gives the same run."""
    extra = ("algorithm.advantage=gae", "algorithm.value.lr=1e-2", "algorithm.value.critic=separate")
    full_model, _ = _run(tiny_tokenizer, tmp_path / "full", *extra)

    def interrupt_after_two(row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        _run(tiny_tokenizer, tmp_path / "split", *extra, on_step=interrupt_after_two)
    resumed_model, _ = _run(tiny_tokenizer, tmp_path / "split", *extra, "train.resume=true")
    for (k, a), b in zip(full_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), k
    full = read_metrics(tmp_path / "full" / "metrics.jsonl")
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    assert [r["step"] for r in split] == [1, 2, 3, 4]
    for a, b in zip(full, split):  # step 3 and 4 values come from the restored critic
        assert a["value_pred_mean"] == pytest.approx(b["value_pred_mean"], abs=1e-6)
        assert a["value_loss"] == pytest.approx(b["value_loss"], abs=1e-6)
    from safetensors.torch import load_file

    fa = load_file(latest_checkpoint(tmp_path / "full") / "critic.safetensors")
    fb = load_file(latest_checkpoint(tmp_path / "split") / "critic.safetensors")
    assert fa.keys() == fb.keys() and all(torch.allclose(fa[k], fb[k], atol=1e-6) for k in fa)


def test_resuming_a_grpo_checkpoint_as_ppo_names_the_missing_critic(tmp_path, tiny_tokenizer):
    from rlvr.recipes.rundir import RunDirectoryError

    _run(tiny_tokenizer, tmp_path, "train.steps=2")
    with pytest.raises(RunDirectoryError, match="algorithm.advantage: grpo -> gae"):  # refused as a changed run
        _run(tiny_tokenizer, tmp_path, "train.steps=3", "train.resume=true", "algorithm.advantage=gae")
    with pytest.raises(RuntimeError, match="critic.safetensors"):  # told it is intended: the critic is missing
        _run(tiny_tokenizer, tmp_path, "train.steps=3", "train.resume=true", "algorithm.advantage=gae",
             "train.resume_changes=[algorithm]")


def test_resuming_with_a_damaged_or_mismatched_critic_names_the_file(tmp_path, tiny_tokenizer):
    from rlvr.recipes.rundir import RunDirectoryError

    _run(tiny_tokenizer, tmp_path, "train.steps=2", "algorithm.advantage=gae", "algorithm.value.critic=separate")
    with pytest.raises(RuntimeError, match="critic.safetensors.*algorithm.value.critic"):  # a head-only critic
        _run(tiny_tokenizer, tmp_path, "train.steps=3", "train.resume=true", "algorithm.advantage=gae",
             "algorithm.value.critic=shared", "train.resume_changes=[algorithm.value.critic]")
    (latest_checkpoint(tmp_path) / "critic.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(RunDirectoryError, match="every checkpoint .* damaged .*critic.safetensors has 8 bytes"):
        _run(tiny_tokenizer, tmp_path, "train.steps=3", "train.resume=true", "algorithm.advantage=gae")
    assert latest_checkpoint(tmp_path).name == "step-000002"  # nothing was overwritten or renamed


def test_kl_in_reward_is_subtracted_per_token_under_ppo(tmp_path, tiny_tokenizer):
    _run(tiny_tokenizer, tmp_path, "train.steps=2", "algorithm.advantage=gae", "algorithm.kl_coef=0.1",
         "algorithm.kl_in_reward=true")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all("kl_in_reward" in r and "value_loss" in r for r in rows)
    assert "kl" not in rows[0]  # no KL loss term: it is in the reward


def test_config_accepts_ppo_and_refuses_bad_critic_settings(tmp_path):
    def cfg(*extra):
        return load_config(RunConfig, None, [f"train.output_dir={tmp_path}", *extra])

    cfg("algorithm.advantage=gae", "rollout.group_size=1").check()  # PPO needs no groups
    for bad in ("algorithm.value.coef=0", "algorithm.value.lr=-1", "algorithm.value.clip=0",
                "algorithm.value.warmup_steps=-1"):
        with pytest.raises(ValueError, match="algorithm.value"):
            cfg("algorithm.advantage=gae", bad).check()
    with pytest.raises(ValueError, match="'gae' accepts: gamma, lam, whiten"):
        cfg("algorithm.advantage=gae", "algorithm.advantage_params={k: 4}").check()
    with pytest.raises(ValueError, match="gae"):
        cfg("algorithm.advantage=gae", "distributed.fsdp=true").check()
    with pytest.raises(ValueError):
        cfg("algorithm.advantage=gae", "algorithm.value.critic=both")


@pytest.mark.parametrize("layout", ["separate", "shared"])
def test_ppo_with_a_lora_policy(tmp_path, tiny_tokenizer, layout):
    """A separate critic copies the trunk before the adapters go in (it trains all of its weights);
    a shared head reads the peft model's hidden states."""
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    import importlib.util

    spec = importlib.util.spec_from_file_location(  # tests/models/test_lora.py, whichever tests are collected
        "_lora_tests", Path(__file__).resolve().parents[1] / "models" / "test_lora.py")
    lora_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lora_tests)
    _train = lora_tests._train

    _train(tiny_tokenizer, tmp_path, "algorithm.advantage=gae", f"algorithm.value.critic={layout}",
           "algorithm.value.lr=1e-2")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all(r["critic_grad_norm"] > 0 for r in rows)
    assert rows[0]["value_pred_mean"] == 0.0 and rows[-1]["value_pred_mean"] != 0.0
    keys = set(load_file(latest_checkpoint(tmp_path) / "critic.safetensors"))
    assert not any("lora_" in k for k in keys)
    if layout == "shared":
        assert keys == {"head.weight", "head.bias"}
    else:
        assert "head.weight" in keys and any(k.startswith("backbone.layers.0.") for k in keys)


def test_explained_variance_is_nan_when_returns_are_constant():
    """All-wrong batch: GAE's returns are 0 up to rounding; 1 - Var(R - V)/Var(R) must not explode."""
    from rlvr.algorithms import ppo_gae_advantages
    from rlvr.learner.update import value_diagnostics as _value_diagnostics

    batch = collate(_samples(), torch.zeros(3), pad_id=0)
    batch.values = torch.rand(batch.input_ids.shape, generator=torch.Generator().manual_seed(0)) \
        * batch.completion_mask
    _, batch.returns = ppo_gae_advantages(torch.zeros(3), batch.values, batch.completion_mask)
    assert batch.returns.abs().max() < 1e-6  # 0, up to rounding
    batch.returns = batch.returns + 1e-7 * torch.randn(batch.values.shape) * batch.completion_mask  # as seen in a run
    d = _value_diagnostics(batch)
    assert d["value_explained_var"] != d["value_explained_var"]  # NaN
    batch.returns = batch.values + torch.randn(batch.values.shape, generator=torch.Generator().manual_seed(1)) \
        * batch.completion_mask
    d = _value_diagnostics(batch)  # V explains nothing of R - V: about 0 or below, finite
    assert -10 < d["value_explained_var"] < 1
