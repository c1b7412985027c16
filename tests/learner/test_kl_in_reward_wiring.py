"""The recipe's advantages() with the KL in the reward, and REINFORCE++ as its paper defines it.

* REINFORCE++ (Hu 2025, "REINFORCE++", Sec. 3; verl ``compute_reinforce_plus_plus_outcome_advantage``):
  the outcome reward sits on the last token, the KL penalty on every token, returns are summed to the end
  (gamma = 1) and normalised over *every completion token of the batch*; the recipe used to pass the
  estimator nothing but the rewards, so it whitened one number per sequence and ignored any KL.
* The KL in the reward is ``log pi_old - log pi_ref`` with ``pi_old`` the learner before the update (verl's
  ``apply_kl_penalty`` on the actor's ``old_log_probs``), not the sampler's log-probs.
* A LUFFY demonstration has no sampler log-probs (they are stored as 0); its "KL" was the reference's whole
  negative log-likelihood.  A demonstration is not drawn from the policy: it carries no KL term.
"""

from __future__ import annotations

import pytest
import torch

from rl_harness import perturb, recipe, rollouts, samples, tiny, whiten
from rlvr.config import ConfigError, load_config
from rlvr.learner.batching import completion_start, policy_logprobs
from rlvr.recipes.config import RunConfig

COMPLETIONS = ["ab", "cdefgh", "ijk", "lmnopq"]
REWARDS = [1.0, 0.0, 1.0, 0.0]


def _logp(model, b):
    start = completion_start(b)
    with torch.no_grad():
        return policy_logprobs(model, b.input_ids, b.attention_mask, start)[0] * b.completion_mask[:, start:]


def _reverse_cumsum(x):
    return x.flip(-1).cumsum(-1).flip(-1)


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_reinforce_pp_whitens_every_token_with_the_kl_on_every_token(tmp_path, kl_coef):
    tok, model = tiny()
    extra = [f"algorithm.kl_coef={kl_coef}", "algorithm.kl_in_reward=true"] if kl_coef else []
    r = recipe(tmp_path, tok, model, "algorithm.advantage=reinforce_pp", "rollout.group_size=4", *extra)
    if kl_coef:
        perturb(r.ref_model)  # a reference the policy has moved away from
    sc = r.advantages(rollouts(samples(tok, COMPLETIONS, model=model), REWARDS))
    b = sc.batch
    start = completion_start(b)
    m = b.completion_mask[:, start:]
    # REINFORCE++: r_{i,t} = 1[t = last_i] r_i - beta (log pi_old - log pi_ref)_{i,t};  G = sum_{s >= t} r_{i,s}
    last = torch.zeros_like(m)
    last[torch.arange(4), m.sum(-1).long() - 1] = 1.0
    k1 = (_logp(model, b) - _logp(r.ref_model, b)) * m if kl_coef else torch.zeros_like(m)
    token_r = last * torch.tensor(REWARDS)[:, None] - kl_coef * k1
    want = whiten(_reverse_cumsum(token_r) * m, m)  # mean and sample std over the 17 completion tokens
    assert sc.advantages.shape == b.input_ids.shape
    torch.testing.assert_close(sc.advantages[:, start:], want, rtol=1e-5, atol=1e-6)
    assert sc.rewards.tolist() == REWARDS  # the KL is in the per-token returns, not subtracted from r_i


def test_reinforce_pp_kl_coef_in_advantage_params_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="algorithm.advantage_params.kl_coef: .*algorithm.kl_in_reward"):
        load_config(RunConfig, None, ["algorithm.advantage=reinforce_pp", "algorithm.advantage_params.kl_coef=0.1"])


def _grpo_kl_in_reward(tmp_path, demo: tuple[int, ...], sampler_shift: float):
    tok, model = tiny()
    r = recipe(tmp_path, tok, model, "algorithm.kl_coef=0.05", "algorithm.kl_in_reward=true",
               "rollout.group_size=4", *(["guidance.demonstrations=true"] if demo else []))
    perturb(r.ref_model)
    ss = samples(tok, COMPLETIONS, model=model, off_policy=demo)
    for i, s in enumerate(ss):
        if i not in demo:
            s.logprobs[:] = [x + sampler_shift for x in s.logprobs]
    sc = r.advantages(rollouts(ss, REWARDS))
    b = sc.batch
    m = b.completion_mask[:, completion_start(b):]
    return sc, ((_logp(model, b) - _logp(r.ref_model, b)) * m).sum(-1), _logp(r.ref_model, b)


def _check_grpo(sc, seq_kl, beta=0.05):
    torch.testing.assert_close(sc.seq_kl, seq_kl, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sc.rewards, torch.tensor(REWARDS) - beta * seq_kl, rtol=1e-5, atol=1e-6)
    g = sc.rewards  # GRPO (Shao et al. 2024) on the penalised rewards
    torch.testing.assert_close(sc.advantages, (g - g.mean()) / (g.std() + 1e-6), rtol=1e-5, atol=1e-6)


def test_kl_in_reward_uses_the_learner_log_probs_not_the_samplers(tmp_path):
    """Sequence-level estimators (GRPO): ``r_i - beta sum_t (log pi_old - log pi_ref)``.  The sampler's
    log-probs are shifted by 0.3 per token (a low-precision or stale sampler): the penalty must not see them."""
    sc, k1, _ = _grpo_kl_in_reward(tmp_path, demo=(), sampler_shift=0.3)
    assert float(k1.abs().max()) > 1e-3
    _check_grpo(sc, k1)


def test_a_demonstration_carries_no_kl_in_its_reward(tmp_path):
    """The demonstration (row 3) stores sampler log-probs of 0; its reference log-likelihood is about -3 per
    token here, which entered its reward as a "KL" of that size (and could flip its advantage)."""
    sc, k1, ref_logp = _grpo_kl_in_reward(tmp_path, demo=(3,), sampler_shift=0.0)
    assert float(ref_logp[3].sum()) < -5
    _check_grpo(sc, torch.cat([k1[:3], torch.zeros(1)]))
