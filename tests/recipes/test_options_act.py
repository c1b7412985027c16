"""An option set to a value other than its default that cannot act in its config is refused when the config loads,
naming the key and why (``rlvr.recipes.rules.options_act``); defaults, and options set to their default (as every
saved config.yaml sets them), never are."""

from __future__ import annotations

import pytest

from rlvr.config import ConfigError, load_config, save_config
from rlvr.recipes.config import RunConfig

KL = ["algorithm.kl_coef=0.1", "algorithm.kl_in_reward=true"]


def _load(*overrides):
    return load_config(RunConfig, None, list(overrides))


@pytest.mark.parametrize("overrides, key, why", [
    # the reward's KL penalty is k1 whatever the estimator says; without kl_coef there is no KL term
    (KL + ["algorithm.kl_estimator=k3"], "algorithm.kl_estimator", "always k1"),
    (KL + ["algorithm.kl_estimator=k2"], "algorithm.kl_estimator", "always k1"),
    (["algorithm.kl_estimator=k2"], "algorithm.kl_estimator", "kl_coef=0: there is no KL term"),
    (["algorithm.kl_estimator=k1"], "algorithm.kl_estimator", "kl_coef=0"),
    # the critic's options with an estimator that has no critic
    (["algorithm.value.coef=1"], "algorithm.value.coef", "advantage=grpo learns without a critic"),
    (["algorithm.advantage=rloo", "algorithm.value.lr=1e-3", "algorithm.value.critic=shared"], "algorithm.value",
     "advantage=rloo learns without a critic"),
    # options of a sampling policy that is off
    (["algorithm.max_sampling_rounds=2"], "algorithm.max_sampling_rounds", "dynamic_sampling=false"),
    (["algorithm.difficulty_low=0.1"], "algorithm.difficulty_low", "difficulty_filter=false"),
    (["algorithm.difficulty_high=0.5"], "algorithm.difficulty_high", "difficulty_filter=false"),
    (["algorithm.difficulty_alpha=0.1"], "algorithm.difficulty_alpha", "difficulty_filter=false"),
    (["algorithm.entropy_floor_delta=0.01"], "algorithm.entropy_floor_delta", "entropy_floor=0"),
    (["algorithm.entropy_floor_max_coef=0.1"], "algorithm.entropy_floor_max_coef", "entropy_floor=0"),
    (["algorithm.ref_reset_optimizer=false"], "algorithm.ref_reset_optimizer", "never reset"),
    (["guidance.hint_fractions=[0.5]"], "guidance.hint_fractions", "hints are off"),
    (["guidance.shaping_gamma=0.5"], "guidance.shaping_gamma", "no off-policy rows are added"),
    (["guidance.replay_capacity=10"], "guidance.replay_capacity", "replay is off"),
    (["guidance.regenerate_samples=4"], "guidance.regenerate_samples", "regeneration is off"),
    (["guidance.synthesize_share=0.2"], "guidance.synthesize_share", "problem synthesis is off"),
    (["algorithm.entropy_bonus_fraction=0.2"], "algorithm.entropy_bonus_fraction", "no entropy bonus to restrict"),
])
def test_an_option_that_cannot_act_is_refused_naming_it(overrides, key, why):
    with pytest.raises(ConfigError) as e:
        _load(*overrides)
    msg = str(e.value)
    assert key in msg and why in msg and "cannot act" in msg, msg


@pytest.mark.parametrize("overrides", [
    [],
    # set to the default: nothing to refuse (a saved config.yaml sets every field)
    ["algorithm.kl_estimator=k3", "algorithm.max_sampling_rounds=4", "algorithm.difficulty_low=0.0",
     "algorithm.value.coef=0.5", "algorithm.ref_reset_optimizer=true", "guidance.shaping_gamma=0.1"],
    # each where it acts
    KL,
    KL + ["algorithm.kl_estimator=k1"],
    ["algorithm.kl_coef=0.1", "algorithm.kl_estimator=k2"],
    ["algorithm.advantage=gae", "algorithm.value.coef=1", "algorithm.value.lr=1e-3"],
    ["algorithm.dynamic_sampling=true", "algorithm.max_sampling_rounds=2"],
    ["algorithm.difficulty_filter=true", "algorithm.difficulty_low=0.1", "algorithm.difficulty_alpha=0.2"],
    ["algorithm.entropy_floor=0.3", "algorithm.entropy_floor_delta=0.01"],
    ["algorithm.kl_coef=0.1", "algorithm.ref_reset_every=5", "algorithm.ref_reset_optimizer=false"],
    ["guidance.hints=true", "guidance.hint_fractions=[0.5]"],
    ["guidance.demonstrations=true", "guidance.shaping_gamma=0.5"],
])
def test_defaults_and_options_that_act_load_and_their_saved_config_loads_back(tmp_path, overrides):
    cfg = _load(*overrides)
    save_config(cfg, tmp_path / "config.yaml")  # every field set, to its value
    assert load_config(RunConfig, tmp_path / "config.yaml") == cfg


def test_the_reward_kl_records_the_estimator_that_acts():
    """Left unset with kl_in_reward, the estimator is k1 (what the penalty computes), so the saved config says so
    and loads back; without kl_in_reward the loss term's default k3 stays."""
    assert _load(*KL).algorithm.kl_estimator == "k1"
    assert _load("algorithm.kl_coef=0.1").algorithm.kl_estimator == "k3"
    assert _load(*KL).learner_settings().kl_estimator == "k1"
