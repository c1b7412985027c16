"""Turn-level credit (rlvr.credit.turns): each piece by hand, the leave-one-out per-turn baseline unbiased by
simulation on a toy MDP whose episodes have different numbers of turns (and the per-turn group mean that includes
the episode itself biased on the same MDP), GiGPO's step groups by hand, RLOO recovered with one turn, and the
advantages through the real wiring (config -> recipe -> credit stage -> learner batch) of a multi-turn run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import close, make_model, make_tokenizer, tiny_run_config
from rl_harness import Recorder
from rlvr.algorithms import get_advantage_estimator
from rlvr.config import ConfigError, load_config
from rlvr.credit.turns import (anchor_keys, discounted_turn_returns, gigpo_turn_advantages, loo_turn_advantages,
                               loo_turn_baseline, spread_over_turns, turn_of_token, turn_rewards)
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import advantage_row
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Sample, Verdict


def _episode(turn_ends, turn_rewards_, mask=None, ids=None, reward=None):
    n = turn_ends[-1]
    ids = ids or list(range(10, 10 + n))
    s = Sample("p", [1, 2], ids, [0.0] * n, "t", "stop", 0, mask=mask,
               info={"turn_ends": list(turn_ends), "turn_rewards": list(turn_rewards_)})
    s.env_return = sum(turn_rewards_) if reward is None else reward
    return s


# --------------------------------------------------------------------------- by hand
def test_turn_rewards_fold_the_close_reward_and_the_reward_stage_into_the_last_turn():
    a = _episode([2, 5, 7], [0.0, 0.5, 1.0])  # three turns
    b = _episode([3], [0.2, -0.1])  # one turn, then a close reward (the runner ended it)
    r, alive = turn_rewards([a, b], torch.tensor([1.5 + 0.25, 0.1]))  # a's rubric added 0.25 to its return
    close(r, [[0.0, 0.5, 1.25], [0.1, 0.0, 0.0]])
    assert alive.tolist() == [[True, True, True], [True, False, False]]
    close(r.sum(1), [1.75, 0.1])


def test_discounted_returns_and_the_leave_one_out_baseline_by_hand():
    r = torch.tensor([[0.0, 0.5, 1.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.5, 0.0, 0.0]], dtype=torch.float64)
    alive = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    G = discounted_turn_returns(r, alive, gamma=0.5)
    # G_k = r_k + 0.5 G_{k+1}: a: [0 + 0.5 (0.5 + 0.5), 0.5 + 0.5, 1] = [0.5, 1, 1]; c: [0 + 0.5 * 2, 2]
    close(G, [[0.5, 1.0, 1.0], [1.0, 0, 0], [1.0, 2.0, 0], [0.5, 0, 0]])
    b = loo_turn_baseline(G, alive, group_size=4)
    # turn 0, all four alive: mean of the other three; turn 1: a and c alive, each the other's; turn 2: a alone -> 0
    close(b[:, 0], [(1 + 1 + 0.5) / 3, (0.5 + 1 + 0.5) / 3, (0.5 + 1 + 0.5) / 3, (0.5 + 1 + 1) / 3])
    close(b[:, 1], [2.0, 0.0, 1.0, 0.0])
    close(b[:, 2], [0.0, 0.0, 0.0, 0.0])
    close(loo_turn_advantages(G, alive, 4), (G - b) * alive)


def test_one_turn_loo_credit_is_rloo():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.0, 0.0, 1.0, 1.0])
    samples = [_episode([3], [float(x)]) for x in rewards]
    r, alive = turn_rewards(samples, rewards)
    A = loo_turn_advantages(discounted_turn_returns(r, alive), alive, 4)
    close(A[:, 0], get_advantage_estimator("rloo")(rewards, 4), tol=1e-6)


def test_gigpo_step_groups_by_hand():
    # a group of 3: every first turn shares the prompt's state; a's and b's second turns follow the same
    # observation (token 7), c's a different one (token 8): a singleton step group, step advantage 0
    keys = [[("turn", 0), (7,)], [("turn", 0), (7,)], [("turn", 0), (8,)]]
    G = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    alive = torch.ones(3, 2, dtype=torch.bool)
    R = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    A = gigpo_turn_advantages(R, G, alive, keys, 3, step_weight=0.5, scale_by_std=False)
    ep = R - R.mean()  # mean normalisation: [0.5, -0.5, 0]
    step0 = G[:, 0] - G[:, 0].mean()  # the prompt's step group: all three
    step1 = torch.tensor([0.5, -0.5, 0.0])  # {a, b}: mean 0.5; c alone: 0
    close(A[:, 0], ep + 0.5 * step0)
    close(A[:, 1], ep + 0.5 * step1)


def test_anchor_keys_are_the_observation_before_each_turn():
    # policy tokens 10 11 | env 7 7 | policy 12 | env 9 | policy 13
    s = _episode([2, 5, 7], [0, 0, 1], mask=[1, 1, 0, 0, 1, 0, 1], ids=[10, 11, 7, 7, 12, 9, 13])
    assert anchor_keys([s]) == [[("turn", 0), (7, 7), (9,)]]


def test_turn_advantages_spread_over_each_turns_policy_tokens():
    s = _episode([2, 5, 7], [0, 0, 1], mask=[1, 1, 0, 0, 1, 0, 1])
    idx = turn_of_token([s], start=3, width=10)
    assert idx.tolist() == [[-1, -1, -1, 0, 0, 1, 1, 1, 2, 2]]
    mask = torch.tensor([[0, 0, 0, 1, 1, 0, 0, 1, 0, 1]], dtype=torch.float32)
    out = spread_over_turns(torch.tensor([[1.0, 2.0, 3.0]]), idx, mask)
    assert out.tolist() == [[0, 0, 0, 1, 1, 0, 0, 2, 0, 3]]


# --------------------------------------------------------------------------- unbiasedness by simulation
def _toy_mdp(theta: torch.Tensor, groups: int, group_size: int, gen: torch.Generator):
    """Episodes of at most H = len(theta) turns; at turn k the action is 1 with probability sigmoid(theta_k);
    action 1 earns 1 and continues with probability 0.8, action 0 earns 0.3 and continues with probability 0.4:
    the number of turns depends on the actions.  Returns actions, rewards and alive masks [M*G, H]."""
    H = len(theta)
    B = groups * group_size
    p = torch.sigmoid(theta).to(torch.float64)
    a = (torch.rand(B, H, generator=gen, dtype=torch.float64) < p).to(torch.float64)
    cont = torch.rand(B, H, generator=gen, dtype=torch.float64) < torch.where(a > 0, 0.8, 0.4)
    alive = torch.ones(B, H, dtype=torch.bool)
    for k in range(1, H):
        alive[:, k] = alive[:, k - 1] & cont[:, k - 1]
    r = torch.where(a > 0, 1.0, 0.3).to(torch.float64) * alive
    return a, r, alive, p


def _true_gradient(theta: torch.Tensor) -> torch.Tensor:
    """d J / d theta by dynamic programming: V_k = p_k (1 + 0.8 V_{k+1}) + (1 - p_k)(0.3 + 0.4 V_{k+1})."""
    th = theta.clone().to(torch.float64).requires_grad_(True)
    p = torch.sigmoid(th)
    V = torch.zeros((), dtype=torch.float64)
    for k in range(len(theta) - 1, -1, -1):
        V = p[k] * (1 + 0.8 * V) + (1 - p[k]) * (0.3 + 0.4 * V)
    (g,) = torch.autograd.grad(V, th)
    return g


def _estimated_gradients(theta, baseline: str, groups: int, group_size: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    a, r, alive, p = _toy_mdp(theta, groups, group_size, gen)
    G = discounted_turn_returns(r, alive, 1.0)
    if baseline == "loo":
        adv = loo_turn_advantages(G, alive, group_size)
    else:  # the per-turn group mean including the episode itself
        g = G.reshape(-1, group_size, G.shape[1])
        al = alive.reshape(-1, group_size, G.shape[1]).to(G.dtype)
        mean = (g * al).sum(1, keepdim=True) / al.sum(1, keepdim=True).clamp_min(1)
        adv = ((g - mean) * al).reshape(G.shape)
    score = (a - p) * alive  # d log pi(a_k) / d theta_k for a Bernoulli(sigmoid(theta_k)) action
    per_episode = score * adv  # [B, H]: each episode's gradient estimate
    return per_episode.mean(0), per_episode.std(0) / per_episode.shape[0] ** 0.5


def test_the_leave_one_out_per_turn_baseline_is_unbiased_with_variable_horizons():
    theta = torch.tensor([0.3, -0.5, 0.8, 0.0])
    true = _true_gradient(theta)
    mean, se = _estimated_gradients(theta, "loo", groups=60_000, group_size=4, seed=0)
    z = (mean - true) / se
    assert z.abs().max() < 4.5, f"mean {mean.tolist()} vs true {true.tolist()} (z {z.tolist()})"


def test_the_per_turn_group_mean_including_the_episode_is_biased_on_the_same_mdp():
    """The check above can fail: the usual per-turn group mean misses the true gradient by many standard errors
    (it shrinks turn k by 1 - 1/n_k, and n_k falls with k)."""
    theta = torch.tensor([0.3, -0.5, 0.8, 0.0])
    true = _true_gradient(theta)
    mean, se = _estimated_gradients(theta, "self", groups=60_000, group_size=4, seed=0)
    z = (mean - true) / se
    assert z.abs().max() > 10


# --------------------------------------------------------------------------- through the real wiring
def _parity(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


PROBS = ([Problem(f"t{i}", prompt=f"{i}*3", answer=str(3 * i)) for i in range(8)],
         [Problem(f"h{i}", prompt=f"{i}*7", answer=str(7 * i)) for i in range(3)])


@pytest.mark.parametrize("credit,estimator", [("loo", "rloo"), ("gigpo", "grpo")])
def test_turn_credit_through_the_recipe_equals_the_hand_computed_per_turn_advantages(tmp_path, credit, estimator):
    tok = make_tokenizer()
    cfg = tiny_run_config(tmp_path, "rollout.max_new_tokens=6", "env.name=retry", "env.params={attempts: 3}",
                          "train.steps=2", "train.seed=4", f"algorithm.advantage={estimator}",
                          f"algorithm.turn_credit={credit}", "algorithm.turn_credit_params={gamma: 0.9}")
    r = Recorder(cfg, model=make_model(tok), tokenizer=tok, problems=PROBS, verifier=_parity)
    r.train()
    multi = 0
    for ro, scored in r.seen:
        samples, rewards = ro.samples, scored.rewards
        Rm, alive = turn_rewards(samples, rewards)
        G = discounted_turn_returns(Rm, alive, 0.9)
        if credit == "loo":
            A = loo_turn_advantages(G, alive, 4)
        else:
            A = gigpo_turn_advantages(rewards.to(G.dtype), G, alive, anchor_keys(samples), 4, step_weight=1.0)
        P = max(len(s.prompt_ids) for s in samples)
        adv = scored.advantages
        assert adv.shape == scored.batch.completion_mask.shape
        for i, s in enumerate(samples):
            ends = s.info["turn_ends"]
            multi += len(ends) > 1
            mask = s.mask or [1] * len(s.completion_ids)
            for t, m in enumerate(mask):
                k = sum(e <= t for e in ends)
                want = float(A[i, min(k, len(ends) - 1)]) if m else 0.0
                assert float(adv[i, P + t]) == pytest.approx(want, abs=1e-6)
    assert multi > 0  # some episodes took more than one turn: the per-turn path was exercised
    # the logged advantage statistics are over the trained (completion, policy) tokens, not the padded batch
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == len(r.seen)
    for row, (_, scored) in zip(rows, r.seen):
        vals = scored.advantages[scored.batch.completion_mask.bool()].double()
        assert row["adv_abs_mean"] == pytest.approx(float(vals.abs().mean()), rel=1e-6)
        assert row["adv_mean"] == pytest.approx(float(vals.mean()), rel=1e-6, abs=1e-9)
        assert row["adv_abs_mean"] > float(scored.advantages.abs().mean())  # what the padded mean logged before


@pytest.mark.parametrize("extra,match", [
    (("algorithm.turn_credit=loo",), "set algorithm.advantage=rloo"),
    (("algorithm.turn_credit=lo", "algorithm.advantage=rloo"), "unknown turn credit 'lo'"),
    (("algorithm.turn_credit=loo", "algorithm.advantage=rloo", "env.name=single_turn"), "one turn per episode"),
    (("algorithm.turn_credit=loo", "algorithm.advantage=rloo", "env.name=retry",
      "algorithm.turn_credit_params={gamma: 2}"), "gamma"),
    (("algorithm.turn_credit_params={gamma: 0.9}",), "algorithm.turn_credit=none"),
])
def test_turn_credit_refusals_at_load(tmp_path, extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", *extra])


def test_advantage_row_by_hand():
    """Per-token advantages: statistics over the completion tokens only; per-sequence advantages as they are."""
    adv = torch.tensor([[0.0, 0.5, -1.0, 0.0], [0.0, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    row = advantage_row(adv, mask)  # values 0.5, -1, 2
    assert row["adv_mean"] == pytest.approx(0.5)
    assert row["adv_abs_mean"] == pytest.approx(3.5 / 3)
    assert row["adv_std"] == pytest.approx(1.5)  # deviations 0, -1.5, 1.5: unbiased variance 4.5 / 2
    seq = advantage_row(torch.tensor([1.0, -1.0]), mask)
    assert seq == pytest.approx({"adv_mean": 0.0, "adv_std": 2 ** 0.5, "adv_abs_mean": 1.0})
    assert advantage_row(adv, torch.zeros_like(mask)) == {"adv_mean": 0.0, "adv_std": 0.0, "adv_abs_mean": 0.0}
