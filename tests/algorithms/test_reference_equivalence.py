"""Every registered advantage estimator and policy loss, driven through the recipe's real wiring, against its
paper's formula written out here.

The path under test is the one ``rlvr train`` runs: a config loaded with overrides -> an
:class:`~rlvr.recipes.rl.RLRecipe` set up on the tiny Llama (its engine, reference, critic) ->
``advantages()`` on hand-built rollouts (one prompt, two groups of four completions of 2 to 6 tokens) ->
``learn()``.  Its optimizer is replaced by plain SGD that records the gradient of every optimizer step.
The reference computes the advantage from the rewards with the paper's formula, the loss from the
same model's log-probs with the loss's formula, and the gradient with autograd; SGD steps on the reference
replay the learner's trajectory when there are several optimizer steps.  Nothing of ``rlvr.algorithms``
is called by the references.

Choices that differ from verl (``verl/trainer/ppo/core_algos.py``) or TRL (``GRPOTrainer``), and why:

* GRPO's std is the sample std plus ``eps = 1e-6`` (verl: the same; TRL: ``1e-4``).  A zero-variance group
  gets exactly 0 (verl and TRL: 0 / (0 + eps) = 0 too).
* The default loss aggregation is DAPO's token mean over the whole batch (TRL's ``loss_type="dapo"``;
  verl's ``token-mean``); Dr. GRPO's ``seq_mean_token_sum_norm`` divides the token sum by
  ``B x rollout.max_new_tokens`` (verl's ``seq-mean-token-sum-norm`` divides it by the response tensor's
  padded length alone, with no ``1/B``; Dr. GRPO's paper leaves the constant open).
* GSPO is aggregated ``seq_mean_token_mean`` unless ``loss_agg`` is set (verl forces it whatever is set).
  Its clip range is its own (3e-4 / 4e-4, the paper's); verl reuses the actor's ``clip_ratio_low/high``.
* Dual clip is a loss of its own (``dual_clip``, c = 3); verl applies it inside every vanilla PPO loss.
* CISPO's bounds are its own options (default: no floor, a cap of 5 on the weight); verl reuses the actor's PPO
  ``clip_ratio_low/high``, TRL caps the weight at ``epsilon_high`` itself.  Its per-token loss is
  ``-sg(w) A (log pi - log pi_old)``: verl's and TRL's ``-sg(w) A log pi`` less a constant, the same gradient.
* SAPO is aggregated ``seq_mean_token_mean`` unless ``loss_agg`` is set (verl forces it whatever is set).
* ``logp_old`` is not recomputed when there is one optimizer step per batch: the first step's ratio is 1
  by construction (TRL does the same, ``old_per_token_logps = per_token_logps.detach()``; verl always runs
  ``compute_log_prob``); with several steps it comes from a pass over the whole batch before the first,
  as verl's.
* REINFORCE++ with ``kl_in_reward`` puts ``-beta k1`` on every token and whitens the returns over every
  completion token (as verl's ``compute_reinforce_plus_plus_outcome_advantage``); REINFORCE++-baseline
  here also sums the KL per token (verl's baseline variant sums the token rewards into one score first).
* pass@k uses the analytic form of Chen et al. (verl's ``grpo_passk`` is a different estimator: only the
  best response of a group gets ``r_max - r_second``).
"""

from __future__ import annotations

import copy
import functools
import itertools
import math

import pytest
import torch

from rl_harness import (RecordingSGD, assert_grads_close, completion_mask, grads_of, learner_logprobs, perturb,
                        recipe, rollouts, samples, tiny, whiten)
from rlvr.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from rlvr.learner.batching import completion_start

G = 4
COMPLETIONS = ["ab", "cdefgh", "ijk", "lmnopq", "rs", "tuvw", "xyz", "0123"]  # 2, 6, 3, 6 | 2, 4, 3, 4 tokens
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # group 2 is all correct: zero variance


# --------------------------------------------------------------------------- reference advantages (the papers)
def _groups(r):
    return r.view(-1, G)


def ref_grpo(r, **_):
    """GRPO (Shao et al. 2024, DeepSeekMath Sec. 4.1.2): A_i = (r_i - mean(r)) / (std(r) + eps)."""
    g = _groups(r)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).reshape(-1)


def ref_drgrpo(r, **_):
    """Dr. GRPO (Liu et al. 2025, Sec. 3.2): A_i = r_i - mean(r), no std."""
    g = _groups(r)
    return (g - g.mean(1, keepdim=True)).reshape(-1)


def ref_rloo(r, **_):
    """RLOO (Ahmadian et al. 2024, Eq. 4): A_i = r_i - 1/(G-1) sum_{j != i} r_j."""
    g = _groups(r)
    return (g - (g.sum(1, keepdim=True) - g) / (G - 1)).reshape(-1)


def ref_reinforce(r, **_):
    """REINFORCE (Williams 1992) with baseline 0: A_i = r_i."""
    return r.clone()


def _returns_whitened(r, m):
    """Outcome reward on the last token, returns-to-go (gamma 1) = r_i on every token, whitened over all tokens."""
    return whiten(r[:, None] * m, m)


def ref_reinforce_pp(r, m, **_):
    """REINFORCE++ (Hu 2025, Sec. 3): r_{i,t} = 1[t = last] r_i (no KL here), G_{i,t} = sum_{s >= t} r_{i,s},
    A = (G - mean) / std over every completion token of the batch."""
    return _returns_whitened(r, m)


def ref_reinforce_pp_baseline(r, m, **_):
    """REINFORCE++-baseline (Hu 2025, Sec. 3.3): r_i - mean(group) before the returns and the batch whitening."""
    g = _groups(r)
    return _returns_whitened((g - g.mean(1, keepdim=True)).reshape(-1), m)


def ref_passk(r, k=2, **_):
    """Pass@k training (Chen et al. 2025, Sec. 4), by its definition: the group is read as every size-k subset S
    of the n responses, rewarded max_{j in S} r_j; subset advantages (R_S - mean_S R) / std_S R (population std
    over subsets); a response's advantage is the mean over the subsets that contain it.  0 when std is 0."""
    out = []
    for g in _groups(r).tolist():
        subsets = list(itertools.combinations(range(G), k))
        rs = torch.tensor([max(g[j] for j in s) for s in subsets])
        mean, std = rs.mean(), rs.std(correction=0)
        for i in range(G):
            inside = [(rs[n] - mean) / std for n, s in enumerate(subsets) if i in s]
            out.append(float(sum(inside) / len(inside)) if std > 0 else 0.0)
    return torch.tensor(out)


def ref_maxk(r, k=2, **_):
    """max@k (PKPO, Walder and Karkhanis 2025; The Best of N Worlds, Bagirov et al. 2025), by its definition:
    s_i = mean over the size-k subsets S of the group of 1[i in S] max_S r; b_i = (k / n) x the mean max over the
    size-k subsets of the other n - 1; A_i = (n / k) (s_i - b_i)."""
    out = []
    for g in _groups(r).tolist():
        subsets = list(itertools.combinations(range(G), k))
        for i in range(G):
            s = sum(max(g[j] for j in S) for S in subsets if i in S) / len(subsets)
            others = [x for j, x in enumerate(g) if j != i]
            sub_o = list(itertools.combinations(range(G - 1), k))
            b = k / G * sum(max(others[j] for j in S) for S in sub_o) / len(sub_o)
            out.append(G / k * (s - b))
    return torch.tensor(out)


def ref_dgpo(r, temperature=2.0, **_):
    """DGPO (Dai et al. 2026, MathForge release): A = G (r - mean) / (sum |r - mean| + 1e-4) per group (DGAE), times
    M softmax(-mean / temperature) over the M groups with a spread (DQW); 0 for groups without one."""
    groups = _groups(r).tolist()
    spread = [len(set(g)) > 1 for g in groups]
    means = [sum(g) / G for g in groups]
    z = [math.exp(-m / temperature) for m, s in zip(means, spread) if s]
    out = []
    for g, m, s in zip(groups, means, spread):
        w = sum(spread) * math.exp(-m / temperature) / sum(z) if s else 1.0
        ext = sum(abs(x - m) for x in g)
        out += [w * G * (x - m) / (ext + 1e-4) if s else 0.0 for x in g]
    return torch.tensor(out)


def ref_ucas(r, m=None, certainty=None, token_logits=None, beta_pos=0.25, beta_neg=0.35, coef=0.05, **_):
    """UCAS (Xie et al. 2025; the authors' compute_ucas_advantage): A_i GRPO's advantage, c_i = sum_t KL(U || p_t)
    z-scored in its group; A'_i = A_i exp(-beta_pos c_i) if A_i > 0 else A_i exp(beta_neg c_i); per token
    A'_i - coef * minmax(logit of the token over the batch's tokens), floored at 0 where A'_i > 0."""
    out = torch.zeros_like(m)
    flat = [float(token_logits[i, t]) for i in range(len(r)) for t in range(m.shape[1]) if m[i, t] > 0]
    lo, hi = min(flat), max(flat)
    for g in range(len(r) // G):
        rows = range(g * G, g * G + G)
        rs = [float(r[i]) for i in rows]
        cs = [float((certainty[i] * m[i]).sum()) for i in rows]
        mr, mc = sum(rs) / G, sum(cs) / G
        sr = math.sqrt(sum((x - mr) ** 2 for x in rs) / (G - 1))
        sc = math.sqrt(sum((x - mc) ** 2 for x in cs) / (G - 1))
        for k, i in enumerate(rows):
            a = (rs[k] - mr) / (sr + 1e-6)
            z = (cs[k] - mc) / (sc + 1e-6)
            scaled = a * (math.exp(-beta_pos * z) if a > 0 else math.exp(beta_neg * z))
            for t in range(m.shape[1]):
                if m[i, t] > 0:
                    raw = scaled - coef * (float(token_logits[i, t]) - lo) / (hi - lo + 1e-6)
                    out[i, t] = max(raw, 0.0) if scaled > 0 else raw
    return out


def ref_online_dpo(r, m=None, logratio=None, beta=0.1, **_):
    """Online DPO (Rafailov et al. 2023, Eq. 7, on pairs of each group's best vs worst samples): the gradient of
    -1/P sum log sigmoid(beta [(lp_w - lpref_w) - (lp_l - lpref_l)]) as per-sequence weights for
    -1/B sum_i A_i sum_t log pi: A_w += B/P beta (1 - sigmoid(z)), A_l -= the same."""
    seq = [float((logratio[i] * m[i]).sum()) for i in range(len(r))]
    pairs = []
    for g in range(len(r) // G):
        rs = [float(x) for x in r[g * G:(g + 1) * G]]
        if max(rs) > min(rs):
            pairs += [(g * G + i, g * G + j) for i in range(G) for j in range(G)
                      if rs[i] == max(rs) and rs[j] == min(rs)]
    out = [0.0] * len(r)
    for w, l_ in pairs:
        z = beta * (seq[w] - seq[l_])
        gw = beta * (1 - 1 / (1 + math.exp(-z))) * len(r) / len(pairs)
        out[w] += gw
        out[l_] -= gw
    return torch.tensor(out)


def reference_logratio(model, ref_model, b):
    """log pi(y_t) - log pi_ref(y_t) per completion token."""
    start = completion_start(b)
    pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def lp(mod):
        with torch.no_grad():
            z = mod(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos).logits[:, start - 1:-1]
        return torch.log_softmax(z.float(), -1).gather(-1, b.input_ids[:, start:, None]).squeeze(-1)

    return (lp(model) - lp(ref_model)) * completion_mask(b)


def ref_tree(r, m=None, **_):
    """Rollout-tree credit on groups without branches (the hand-built rollouts have none): every token of sample i
    gets r_i - V(root), the group's mean reward (the fork-free case of the tree; test_tree_credit.py has forks)."""
    g = _groups(r)
    return (g - g.mean(-1, keepdim=True)).reshape(-1)[:, None] * m


def ref_disco(r, **_):
    """DisCO-b (Li et al. 2025): +1/n+ on each correct answer, -1/n- on each wrong one, per group; 0 without both."""
    out = []
    for g in _groups(r).tolist():
        pos = [x > 0.5 for x in g]
        npos, nneg = sum(pos), len(g) - sum(pos)
        out += [(1 / npos if p else -1 / nneg) if npos and nneg else 0.0 for p in pos]
    return torch.tensor(out)


def ucas_inputs(model, b):
    """KL(U || p_t) = logsumexp(z) - mean(z) - log V and the generated token's raw logit z_{y_t}, per completion
    token."""
    start = completion_start(b)
    pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        z = model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos).logits[:, start - 1:-1]
    z = z.float()
    cert = torch.logsumexp(z, -1) - z.mean(-1) - math.log(z.shape[-1])
    tok = z.gather(-1, b.input_ids[:, start:, None]).squeeze(-1)
    m = completion_mask(b)
    return cert * m, tok * m


def ref_psr(r, **_):
    """PSR (Zhu et al. 2025, Eq. 4): A_i = 1[correct]."""
    return (r > 0.5).float()


def ref_nsr(r, **_):
    """NSR (Zhu et al. 2025, Eq. 5): A_i = -1[wrong]."""
    return -(r <= 0.5).float()


def ref_w_reinforce(r, lam=0.1, **_):
    """W-REINFORCE (Zhu et al. 2025, Eq. 6: lam L_PSR + L_NSR): A_i = lam if correct else -1."""
    return torch.where(r > 0.5, torch.tensor(lam), torch.tensor(-1.0))


def ref_quantile(r, K=0.5, **_):
    """QAE (Wu et al. 2025, Eq. 6): b = min{x in group : #{r_j <= x} / G >= K}; A_i = (r_i - b) / (std + eps)."""
    out = []
    for g in _groups(r):
        b = min(x for x in g.tolist() if float((g <= x).float().mean()) >= K)
        std = float(g.std())
        out += [0.0 if std == 0 else (x - b) / (std + 1e-6) for x in g.tolist()]
    return torch.tensor(out)


def ref_entropy_guided(r, m, entropy, alpha=0.1, **_):
    """RL-ZVP (Le et al. 2025, Eq. 7): groups with reward variance keep GRPO's advantage; in a zero-variance group
    A_{i,t} = alpha H_{i,t} (all correct) or -alpha (max_s H_{i,s} - H_{i,t}) (all wrong)."""
    a = ref_grpo(r)[:, None] * m
    for grp, g in enumerate(_groups(r)):
        if bool((g == g[0]).all()):
            for i in range(grp * G, grp * G + G):
                h = entropy[i] * m[i]
                hmax = h[m[i].bool()].max()
                a[i] = (alpha * h if r[i] > 0.5 else -alpha * (hmax - h)) * m[i]
    return a


def ref_noisy_backward(r, rho0=0.1, rho1=0.2, **_):
    """Backward correction (Cai et al. 2025, Sec. 3; Natarajan et al. 2013): r^ = (r - rho0) / (1 - rho0 - rho1),
    then REINFORCE (baseline 0)."""
    return (r - rho0) / (1 - rho0 - rho1)


def ref_noisy_forward(r, rho1=0.2, **_):
    """Forward correction (Cai et al. 2025, Sec. 3, PGFC): w = r - (1 - rho1) used as the advantage."""
    return r - (1 - rho1)


def ref_gae(r, m, values, lam=0.95, gamma=1.0, **_):
    """PPO's GAE (Schulman et al. 2016, Eq. 16), outcome reward on the last token: delta_t = r_t + gamma V_{t+1}
    - V_t (V after the last token = 0), A_t = delta_t + gamma lam A_{t+1}; returns R = A + V; A whitened over
    the batch's tokens (Ouyang et al. 2022's PPO)."""
    adv, ret = torch.zeros_like(values), torch.zeros_like(values)
    for i in range(len(r)):
        n = int(m[i].sum())
        nxt_v, nxt_a = 0.0, 0.0
        for t in reversed(range(n)):
            reward = float(r[i]) if t == n - 1 else 0.0
            delta = reward + gamma * nxt_v - float(values[i, t])
            nxt_a = delta + gamma * lam * nxt_a
            adv[i, t], ret[i, t] = nxt_a, nxt_a + float(values[i, t])
            nxt_v = float(values[i, t])
    return whiten(adv, m), ret


ESTIMATORS = {  # name -> (config overrides, reference)
    "grpo": ([], ref_grpo),
    "drgrpo": ([], ref_drgrpo),
    "rloo": ([], ref_rloo),
    "reinforce": ([], ref_reinforce),
    "reinforce_pp": ([], ref_reinforce_pp),
    "reinforce_pp_baseline": ([], ref_reinforce_pp_baseline),
    "passk": (["algorithm.advantage_params={k: 2}"], ref_passk),
    "maxk": (["algorithm.advantage_params={k: 2}"], ref_maxk),
    "dgpo": ([], ref_dgpo),
    "ucas": ([], ref_ucas),
    "disco": ([], ref_disco),
    "tree": (["rollout.branches=1"], ref_tree),
    "online_dpo": (["algorithm.loss_agg=seq_mean_token_sum", "algorithm.advantage_params={beta: 0.5}"],
                   functools.partial(ref_online_dpo, beta=0.5)),
    "psr": ([], ref_psr),
    "nsr": ([], ref_nsr),
    "w_reinforce": ([], ref_w_reinforce),
    "quantile": ([], ref_quantile),
    "entropy_guided": ([], ref_entropy_guided),
    "noisy_backward": (["algorithm.advantage_params={rho0: 0.1, rho1: 0.2}"], ref_noisy_backward),
    "noisy_forward": (["algorithm.advantage_params={rho1: 0.2}"], ref_noisy_forward),
    "gae": (["algorithm.advantage_params={lam: 0.95}"], ref_gae),
}


# --------------------------------------------------------------------------- the recipe, instrumented
def run(tmp_path, *overrides, lr=0.5, prepare=None, rewards=REWARDS, completions=COMPLETIONS, sampler=None,
        off_policy=()):
    """Set a recipe up, give it recording SGD, score the rollouts and learn; returns what the reference needs.
    ``prepare(recipe)`` runs before (e.g. moves the reference away from the policy), ``sampler(samples)`` may change
    the samples' sampler log-probs (the model's own by default)."""
    tok, model = tiny()
    r = recipe(tmp_path, tok, model, f"rollout.group_size={G}", f"train.prompts_per_step={len(rewards) // G}",
               "train.max_grad_norm=0", *overrides)
    if prepare is not None:
        prepare(r)
    r.optimizer = RecordingSGD([p for p in model.parameters() if p.requires_grad], lr)
    if r.critic is not None:
        r.critic_optimizer = RecordingSGD(list(r.critic.parameters()), lr)
    sample_list = samples(tok, completions, model=model, off_policy=off_policy)
    if sampler is not None:
        sampler(sample_list)
    scored = r.advantages(rollouts(sample_list, rewards))
    before = copy.deepcopy(model), (copy.deepcopy(r.critic) if r.critic is not None else None)
    out = r.learn(0, scored)
    return r, scored, out, before


def token_advantages(scored):
    b = scored.batch
    a = scored.advantages
    return a[:, completion_start(b):] if a.dim() == 2 else a


def ppo_clip_token_mean(logp, old, adv, m, eps_low=0.2, eps_high=0.2):
    """PPO (Schulman et al. 2017, Eq. 7) with DAPO's token-level mean (Yu et al. 2025, Eq. 12):
    -1/N sum_t min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t), r_t = exp(logp_t - logp_old_t)."""
    ratio = torch.exp((logp - old) * m)
    a = adv if adv.dim() == 2 else adv[:, None].expand_as(logp)
    obj = torch.minimum(ratio * a, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * a)
    return -(obj * m).sum() / m.sum()


def entropy_reference(model, b, grad=False):
    """H_t = -sum_v p_v log p_v of the policy at every completion token (temperature 1); with ``grad``, with the
    autograd graph."""
    start = completion_start(b)
    pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos).logits
    logp = torch.log_softmax(logits[:, start - 1:-1].float(), -1)
    return -(logp.exp() * logp).sum(-1) * completion_mask(b)


def critic_reference_values(critic, b):
    """The critic's value of the state before each completion token: its trunk, then its linear head."""
    start = completion_start(b)
    pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = critic.backbone(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos,
                             use_cache=False).last_hidden_state[:, start - 1:-1]
    return critic.head(hidden).squeeze(-1) * completion_mask(b)


def _perturb_critic_head(r):
    with torch.no_grad():
        r.critic.head.weight.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(5))
        r.critic.head.bias.fill_(0.2)


def test_every_registered_estimator_and_loss_has_a_reference():
    assert set(ESTIMATORS) == set(ADVANTAGE_ESTIMATORS.names())
    assert set(LOSSES) | set(COV_LOSSES) == set(POLICY_LOSSES.names())


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimator_through_the_recipe_matches_its_paper(tmp_path, name):
    """One optimizer step of the default loss (ppo_clip, token mean, ratio 1) on the estimator's advantages:
    advantages, reported loss and every parameter's gradient against the reference."""
    overrides, ref = ESTIMATORS[name]
    critic = name == "gae"
    prepare = _perturb_critic_head if critic else (lambda r: perturb(r.ref_model)) if name == "online_dpo" else None
    r, scored, out, (model0, critic0) = run(
        tmp_path, f"algorithm.advantage={name}", "algorithm.skip_zero_advantage=false", "train.micro_batch_size=16",
        *overrides, prepare=prepare)
    b = scored.batch
    m = completion_mask(b)
    rewards = torch.tensor(REWARDS)
    kw = {}
    if name == "entropy_guided":
        kw["entropy"] = entropy_reference(model0, b)
    if name == "ucas":
        kw["certainty"], kw["token_logits"] = ucas_inputs(model0, b)
    if name == "online_dpo":
        kw["logratio"] = reference_logratio(model0, r.ref_model, b)
    if critic:
        with torch.no_grad():
            values = critic_reference_values(critic0, b)
        want_adv, returns = ref_gae(rewards, m, values)
    else:
        want_adv = ref(rewards, m=m, **kw)
    got_adv = token_advantages(scored)
    if got_adv.dim() == 1 and want_adv.dim() == 2:
        got_adv = got_adv[:, None] * m
    torch.testing.assert_close(got_adv.float(), want_adv.float(), rtol=1e-5, atol=2e-6)
    assert float(want_adv.abs().max()) > 0

    logp = learner_logprobs(model0, b)
    loss = ppo_clip_token_mean(logp, logp.detach(), want_adv.float(), m)
    if name == "online_dpo":  # seq_mean_token_sum at ratio 1: -1/B sum_i A_i sum_t ratio_it
        loss = -(want_adv.float()[:, None] * torch.exp(logp - logp.detach()) * m).sum() / len(rewards)
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-6)
    assert len(r.optimizer.seen) == 1
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))
    if critic:  # the clipped value loss (OpenAI baselines PPO2) x value.coef; at the first step V = V_old
        v = critic_reference_values(critic0, b)
        vloss = 0.5 * (0.5 * (v - returns).square() * m).sum() / m.sum()
        assert out["value_loss"] == pytest.approx(float(vloss / 0.5), rel=1e-5, abs=1e-7)
        assert_grads_close(r.critic_optimizer.seen[0], grads_of(vloss, critic0))


def test_grpo_by_hand(tmp_path):
    """One group of four, rewards 1 0 0 0, completions of 2, 1, 1 and 2 tokens (N = 6).  GRPO: mean 1/4, sample
    std 1/2, so A = (3/2, -1/2, -1/2, -1/2) (x 0.5 / (0.5 + 1e-6)).  Token mean at ratio 1: the loss is
    -(3/2 x 2 - 1/2 - 1/2 - 1/2 x 2) / 6 = -1/6, and d loss / d logp_t = -A_i / 6: -1/4 on the first
    completion's tokens, +1/12 on the others'."""
    r, scored, out, (model0, _) = run(tmp_path, "algorithm.skip_zero_advantage=false", rewards=[1.0, 0.0, 0.0, 0.0],
                                      completions=["ab", "c", "d", "ef"])
    shrink = 0.5 / (0.5 + 1e-6)
    torch.testing.assert_close(scored.advantages, torch.tensor([1.5, -0.5, -0.5, -0.5]) * shrink)
    assert out["loss"] == pytest.approx(-1 / 6 * shrink, rel=1e-6)
    logp = learner_logprobs(model0, scored.batch)
    weights = torch.tensor([-1 / 4, 1 / 12, 1 / 12, 1 / 12]) * shrink
    assert_grads_close(r.optimizer.seen[0], grads_of((weights[:, None] * logp).sum(), model0))


# --------------------------------------------------------------------------- reference losses (the papers)
def loss_ppo_clip(logp, old, adv, m):
    """PPO-clip with DAPO's clip-higher (Yu et al. 2025, Eq. 10; eps_low 0.2, eps_high 0.28), token mean."""
    return ppo_clip_token_mean(logp, old, adv, m, 0.2, 0.28), _clip_acts(logp, old, adv, m, 0.2, 0.28)


def _clip_acts(logp, old, adv, m, lo, hi):
    ratio = torch.exp(logp - old).detach()
    a = adv[:, None]
    return bool(((((a > 0) & (ratio > 1 + hi)) | ((a < 0) & (ratio < 1 - lo))) & m.bool()).any())


def loss_dual_clip(logp, old, adv, m, c=1.05):
    """Dual-clip PPO (Ye et al. 2020, Eq. 5): for A < 0 the objective is max(min(r A, clip(r) A), c A)."""
    ratio = torch.exp((logp - old) * m)
    a = adv[:, None].expand_as(logp)
    obj = torch.minimum(ratio * a, torch.clamp(ratio, 0.8, 1.2) * a)
    obj = torch.where(a < 0, torch.maximum(obj, c * a), obj)
    acts = bool(((a < 0) & (ratio.detach() > c) & m.bool()).any())
    return -(obj * m).sum() / m.sum(), acts


def loss_gspo(logp, old, adv, m, lo=3e-4, hi=4e-4):
    """GSPO (Zheng et al. 2025, Eq. 5 and its GSPO-token form Eq. 13): s_i = exp(mean_t (logp - logp_old)),
    s_{i,t} = sg[s_i] pi / sg[pi]; L = -1/B sum_i 1/|y_i| sum_t min(s_{i,t} A_i, clip(s_{i,t}, 1 - lo, 1 + hi) A_i)."""
    n = m.sum(-1)
    s_seq = torch.exp(((logp - old) * m).sum(-1) / n).detach()
    s = s_seq[:, None] * torch.exp(logp - logp.detach())
    a = adv[:, None]
    obj = torch.minimum(s * a, torch.clamp(s, 1 - lo, 1 + hi) * a)
    acts = bool((((adv > 0) & (s_seq > 1 + hi)) | ((adv < 0) & (s_seq < 1 - lo))).any())
    return -((obj * m).sum(-1) / n).mean(), acts


def loss_topr(logp, old, adv, m):
    """TOPR (Le Roux et al. 2025, Eq. 7): grad = sum_{A >= 0} A grad log pi(y) + sum_{A < 0} sg[min(pi(y) / mu(y),
    1)] A grad log pi(y), pi(y) / mu(y) the sequence ratio; surrogate -w_i A_i (log pi(y) - log mu(y)), mean over
    the B sequences (of sums over tokens)."""
    seq_lr = ((logp - old) * m).sum(-1)
    w = torch.where(adv >= 0, torch.ones_like(adv), torch.exp(seq_lr.detach().clamp(max=0.0)))
    acts = bool(((adv < 0) & (seq_lr.detach() > 0)).any())
    return -(w * adv * seq_lr).mean(), acts


def loss_cispo(logp, old, adv, m, lo=0.05, hi=0.1):
    """CISPO (MiniMax-M1, arXiv 2506.13585, Sec. 3.1): -1/N sum_t sg(clip(r_t, 1 - lo, 1 + hi)) A_t log pi(o_t), token
    mean; written with log pi - log pi_old (the same gradient, value 0 on-policy).  Every token keeps its gradient;
    the clip acts where a weight is clipped."""
    lr = (logp - old) * m
    r = torch.exp(lr.detach())
    w = torch.clamp(r, 1 - lo, 1 + hi)
    acts = bool(((w != r) & m.bool()).any())
    return -(w * adv[:, None] * lr * m).sum() / m.sum(), acts


def loss_sapo(logp, old, adv, m, tau_pos=2.0, tau_neg=3.0):
    """SAPO (Gao et al. 2025, arXiv 2511.20347): -1/B sum_i 1/|y_i| sum_t 4/tau sigma(tau (r_t - 1)) A_i, tau = tau_pos
    if A_i > 0 else tau_neg.  The gate acts where its gradient weight 4 sigma (1 - sigma) is no longer 1."""
    r = torch.exp((logp - old) * m)
    a = adv[:, None].expand_as(logp)
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    p = torch.sigmoid(tau * (r - 1))
    acts = bool((((4 * p * (1 - p)).detach() < 1 - 1e-3) & (a != 0) & m.bool()).any())
    return -((p * 4 / tau * a * m).sum(-1) / m.sum(-1)).mean(), acts


LOSSES = {  # name -> (config overrides, reference)
    "ppo_clip": (["algorithm.clip_high=0.28"], loss_ppo_clip),
    "dual_clip": (["algorithm.policy_loss_params={clip_ratio_c: 1.05}"], loss_dual_clip),
    "gspo": ([], loss_gspo),
    "topr": ([], loss_topr),
    "cispo": (["algorithm.policy_loss_params={clip_low: 0.05, clip_high: 0.1}"], loss_cispo),
    "sapo": (["algorithm.policy_loss_params={tau_pos: 2.0, tau_neg: 3.0}"], loss_sapo),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_policy_loss_through_the_recipe_with_mini_batches_matches_its_paper(tmp_path, name):
    """GRPO advantages, two mini-batches (one group each), recording SGD: each optimizer step's gradient against
    the paper's loss on the reference's own SGD trajectory, ``logp_old`` from before the first step.  At the
    second step the ratio is no longer 1 and the loss's clip or truncation acts on some token or sequence."""
    overrides, ref = LOSSES[name]
    lr = 0.2 if name == "topr" else 2.0  # TOPR's token sums take larger steps
    # the second group repeats two completions of the first with the other verdict: the first step pushed "ab" up,
    # so as a wrong answer in the second step its ratio is above 1 (dual clip, TOPR's truncation)
    completions = ["ab", "cdefgh", "ijk", "lmnopq", "ab", "tuvw", "cdefgh", "0123"]
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    r, scored, out, (model0, _) = run(tmp_path, f"algorithm.policy_loss={name}", "algorithm.mini_batches=2",
                                      "train.micro_batch_size=16", *overrides, lr=lr, rewards=rewards,
                                      completions=completions)
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(rewards))
    torch.testing.assert_close(scored.advantages, adv)
    with torch.no_grad():
        old = learner_logprobs(model0, b)
    params = [p for p in model0.parameters() if p.requires_grad]
    acted, losses = [], []
    for step, rows in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        logp = learner_logprobs(model0, b)
        loss, acts = ref(logp[rows], old[rows], adv[rows], m[rows])
        want = grads_of(loss, model0)
        assert_grads_close(r.optimizer.seen[step], want, rtol=5e-4, atol=5e-6)
        acted.append(acts)
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for p, g in zip(params, want):
                p.sub_(lr * g)
    assert acted == [False, True], (acted, losses)
    assert len(r.optimizer.seen) == 2
    # the reported loss is the batch's objective: the token-weighted mean of the two steps' losses for a token mean,
    # the sequence-weighted one (4 and 4 sequences) for the sequence means of GSPO, TOPR and SAPO
    n = m.sum(-1).tolist()
    w = (sum(n[:4]), sum(n[4:])) if name in ("ppo_clip", "dual_clip", "cispo") else (4, 4)
    assert out["loss"] == pytest.approx((losses[0] * w[0] + losses[1] * w[1]) / sum(w), rel=1e-4)
    assert math.isfinite(out["grad_norm"])


# --------------------------------------------------------------------------- entropy control (Cui et al. 2025)
def ref_covariance(old, adv, m):
    """Cov_i = (log pi(y_i) - mean_j log pi(y_j)) (A_i - mean_j A_j) over the batch's N counted tokens (Cui et al.
    2025, "The Entropy Mechanism of RL for Reasoning LMs", Sec. 5); log pi before the update (here the sampler's,
    which is the model's own)."""
    a = adv[:, None].expand_as(old)
    n = m.sum()
    return (old - (old * m).sum() / n) * (a - (a * m).sum() / n) * m


def loss_clip_cov(logp, old, adv, m, sel):
    """Clip-Cov: PPO-clip token mean with the tokens of I_clip detached (their loss has no gradient)."""
    ratio = torch.exp((logp - old) * m)
    a = adv[:, None].expand_as(logp)
    per_token = -torch.minimum(ratio * a, torch.clamp(ratio, 0.8, 1.2) * a)
    per_token = torch.where(sel, per_token.detach(), per_token)
    return (per_token * m).sum() / m.sum(), bool((sel & (a != 0)).any())


def loss_kl_cov(logp, old, adv, m, sel, beta=1.0):
    """KL-Cov: token mean of -r A + beta |log pi - log pi_old| [i in I_KL], no clip."""
    lr = (logp - old) * m
    a = adv[:, None].expand_as(logp)
    per_token = -torch.exp(lr) * a + beta * lr.abs() * sel
    return (per_token * m).sum() / m.sum(), bool((sel & (lr.detach().abs() > 1e-6)).any())


COV_LOSSES = {  # name -> (options, the selection from the batch's covariance, reference)
    # every token with Cov >= 0.3 (the budget r N = N is never the limit): a deterministic draw
    "clip_cov": ("{ratio: 1.0, cov_low: 0.3, cov_high: 100}", lambda cov, m: (cov >= 0.3) & m.bool(), loss_clip_cov),
    # the floor(N / 4) tokens of largest covariance
    "kl_cov": ("{ratio: 0.25, coef: 1.0}",
               lambda cov, m: torch.zeros(cov.numel(), dtype=torch.bool).index_fill_(
                   0, torch.topk(torch.where(m.bool(), cov, torch.tensor(-math.inf)).flatten(),
                                 int(m.sum()) // 4).indices, True).view_as(cov), loss_kl_cov),
}


@pytest.mark.parametrize("name", sorted(COV_LOSSES))
def test_entropy_control_loss_through_the_recipe_with_mini_batches_matches_its_paper(tmp_path, name):
    """Clip-Cov / KL-Cov, two mini-batches: the token set is chosen once from the whole batch's covariance and
    each optimizer step's gradient is the paper's loss on its mini-batch with that set.  Clip-Cov's detachment
    acts at the first step; KL-Cov's penalty only once the ratio has moved, at the second."""
    options, select, ref = COV_LOSSES[name]
    lr = 2.0
    completions = ["ab", "cdefgh", "ijk", "lmnopq", "ab", "tuvw", "cdefgh", "0123"]
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    r, scored, out, (model0, _) = run(tmp_path, f"algorithm.policy_loss={name}",
                                      f"algorithm.policy_loss_params={options}", "algorithm.mini_batches=2", "train.micro_batch_size=3", lr=lr,
                                      rewards=rewards, completions=completions)
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(rewards))
    with torch.no_grad():
        old = learner_logprobs(model0, b)
    sel = select(ref_covariance(old, adv, m), m)
    assert out["cov_selected"] == int(sel.sum()) > 0
    params = [p for p in model0.parameters() if p.requires_grad]
    acted = []
    for step, rows in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        logp = learner_logprobs(model0, b)
        loss, acts = ref(logp[rows], old[rows], adv[rows], m[rows], sel[rows])
        want = grads_of(loss, model0)
        assert_grads_close(r.optimizer.seen[step], want, rtol=5e-4, atol=5e-6)
        acted.append(acts)
        with torch.no_grad():
            for p, g in zip(params, want):
                p.sub_(lr * g)
    assert acted[0] if name == "clip_cov" else acted == [False, True]


# --------------------------------------------------------------------------- the terms beside the policy loss
def aggregate(per_token, m, agg, max_len=None):
    """The four loss aggregations, written out: DAPO's token mean (Yu et al. 2025, Eq. 12); GRPO's mean over
    sequences of token means (Shao et al. 2024, Eq. 3); the mean over sequences of token sums; Dr. GRPO's token sum
    over the constant B x max_new_tokens (Liu et al. 2025, Sec. 3.2)."""
    B = per_token.shape[0]
    if agg == "token_mean":
        return (per_token * m).sum() / m.sum()
    if agg == "seq_mean_token_mean":
        return ((per_token * m).sum(-1) / m.sum(-1)).sum() / B
    if agg == "seq_mean_token_sum":
        return (per_token * m).sum() / B
    assert agg == "seq_mean_token_sum_norm"
    return (per_token * m).sum() / (B * max_len)


def pg_at_ratio_one(logp, adv, m, agg, max_len=None):
    """The PPO surrogate at the first optimizer step (ratio exp(logp - sg[logp]) = 1, nothing clipped), aggregated."""
    ratio = torch.exp(logp - logp.detach())
    a = adv if adv.dim() == 2 else adv[:, None].expand_as(logp)
    return aggregate(-ratio * a, m, agg, max_len)


def kl_reference(logp, ref_logp, kind):
    """Schulman (2020), "Approximating KL divergence", with x = log pi_ref(y_t) - log pi(y_t) on tokens drawn from
    pi: k1 = -x, k2 = x^2 / 2, k3 = e^x - 1 - x (GRPO's, Shao et al. 2024, Eq. 4)."""
    x = ref_logp - logp
    return {"k1": -x, "k2": 0.5 * x ** 2, "k3": torch.exp(x) - 1 - x}[kind]


def _reference_away(r):
    """Move the reference off the policy, so the KL (and its gradient) is not 0 at the first step."""
    perturb(r.ref_model, scale=0.1, seed=2)


@pytest.mark.parametrize("agg, kind", [("token_mean", "k3"), ("seq_mean_token_mean", "k3"),
                                       ("seq_mean_token_sum", "k2"), ("seq_mean_token_sum_norm", "k1")])
def test_kl_loss_term_through_the_recipe_matches_grpo(tmp_path, agg, kind):
    """GRPO's KL term (Shao et al. 2024, Eq. 3): loss = policy term + beta agg(KL_t), the KL estimate of every
    completion token aggregated like the policy term (``algorithm.loss_agg``), the reference moved off the policy;
    micro-batches of 3: the logged loss is still the objective."""
    beta, L = 0.5, 8
    r, scored, out, (model0, _) = run(tmp_path, "algorithm.skip_zero_advantage=false", "train.micro_batch_size=3",
                                      f"algorithm.loss_agg={agg}", f"algorithm.kl_coef={beta}",
                                      f"algorithm.kl_estimator={kind}", f"rollout.max_new_tokens={L}",
                                      prepare=_reference_away)
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(REWARDS))
    logp = learner_logprobs(model0, b)
    with torch.no_grad():
        ref_logp = learner_logprobs(r.ref_model, b)
    kl_term = aggregate(kl_reference(logp, ref_logp, kind) * m, m, agg, L)
    assert abs(float(kl_term)) > 1e-3
    loss = pg_at_ratio_one(logp, adv, m, agg, L) + beta * kl_term
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-6)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


def test_drgrpo_loss_through_the_recipe_matches_its_paper(tmp_path):
    """Dr. GRPO (Liu et al. 2025, Sec. 3.2): advantages r_i - mean(r), and the loss's token sum divided by a constant,
    B x rollout.max_new_tokens (= 8 x 12), not by the tokens or the lengths; micro-batches of 3."""
    L = 12
    r, scored, out, (model0, _) = run(tmp_path, "algorithm.advantage=drgrpo", "algorithm.skip_zero_advantage=false",
                                      "algorithm.loss_agg=seq_mean_token_sum_norm", f"rollout.max_new_tokens={L}",
                                      "train.micro_batch_size=3")
    b = scored.batch
    m = completion_mask(b)
    adv = ref_drgrpo(torch.tensor(REWARDS))
    torch.testing.assert_close(scored.advantages, adv)
    logp = learner_logprobs(model0, b)
    loss = -(torch.exp(logp - logp.detach()) * adv[:, None] * m).sum() / (len(REWARDS) * L)
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-7)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


@pytest.mark.parametrize("name", ["grpo", "reinforce_pp"])
def test_kl_in_reward_through_the_recipe_matches_its_paper(tmp_path, name):
    """The KL penalty in the reward (Ouyang et al. 2022, Eq. 2; REINFORCE++, Hu 2025, Sec. 3), reference moved off
    the policy: k1_t = log pi_old(y_t) - log pi_ref(y_t) with pi_old the learner before the step.  GRPO: the
    advantage of r_i - beta sum_t k1_t; REINFORCE++: the whitened returns of r_{i,t} = 1[t = last] r_i - beta k1_t."""
    beta = 0.5
    r, scored, out, (model0, _) = run(tmp_path, f"algorithm.advantage={name}", "algorithm.kl_in_reward=true",
                                      f"algorithm.kl_coef={beta}", "algorithm.skip_zero_advantage=false",
                                      "train.micro_batch_size=16", prepare=_reference_away)
    b = scored.batch
    m = completion_mask(b)
    with torch.no_grad():
        k1 = (learner_logprobs(model0, b) - learner_logprobs(r.ref_model, b)) * m
    assert float(k1.sum(-1).abs().min()) > 1e-3
    rewards = torch.tensor(REWARDS)
    if name == "grpo":
        want = ref_grpo(rewards - beta * k1.sum(-1))
    else:
        last = (m.cumsum(-1) == m.sum(-1, keepdim=True)) & m.bool()
        returns = (rewards[:, None] * last - beta * k1).flip(-1).cumsum(-1).flip(-1) * m
        want = whiten(returns, m)
    got = token_advantages(scored)
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-4, atol=1e-5)
    logp = learner_logprobs(model0, b)
    loss = ppo_clip_token_mean(logp, logp.detach(), want.float(), m)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_entropy_bonus_through_the_recipe_matches_its_paper(tmp_path, agg):
    """The entropy bonus (Williams & Peng 1991; Mnih et al. 2016, Eq. 5 with its sign for a loss): loss = policy term
    - c agg(H_t), H_t the policy's entropy at each completion token, so the step raises the entropy."""
    c = 0.05
    r, scored, out, (model0, _) = run(tmp_path, f"algorithm.entropy_coef={c}", f"algorithm.loss_agg={agg}",
                                      "train.micro_batch_size=3")
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(REWARDS))
    logp = learner_logprobs(model0, b)
    loss = pg_at_ratio_one(logp, adv, m, agg) - c * aggregate(entropy_reference(model0, b, grad=True), m, agg)
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-6)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


def test_ppo_clip_higher_through_the_recipe_with_mini_batches_matches_its_paper(tmp_path):
    """DAPO's decoupled clip (Yu et al. 2025, Eq. 10) with eps_low = 0.2, eps_high = 1: two mini-batches; the second
    repeats a correct completion of the first (its ratio has risen past 1 + eps_low, below 1 + eps_high: not clipped)
    and a wrong one (its ratio has fallen below 1 - eps_low: clipped)."""
    lo, hi, lr = 0.2, 1.0, 4.0
    completions = ["ab", "cdefgh", "ijk", "lmnopq", "ab", "tuvw", "ijk", "0123"]
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    r, scored, out, (model0, _) = run(tmp_path, "algorithm.mini_batches=2", f"algorithm.clip_high={hi}",
                                      "train.micro_batch_size=16", lr=lr, rewards=rewards, completions=completions)
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(rewards))
    with torch.no_grad():
        old = learner_logprobs(model0, b)
    params = [p for p in model0.parameters() if p.requires_grad]
    for step, rows in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        logp = learner_logprobs(model0, b)
        loss = ppo_clip_token_mean(logp[rows], old[rows], adv[rows], m[rows], lo, hi)
        want = grads_of(loss, model0)
        assert_grads_close(r.optimizer.seen[step], want, rtol=5e-4, atol=5e-6)
        with torch.no_grad():
            for p, g in zip(params, want):
                p.sub_(lr * g)
    ratio = torch.exp(logp[rows] - old[rows]).detach()
    a, counted = adv[rows][:, None], m[rows].bool()
    assert bool(((a > 0) & (ratio > 1 + lo) & (ratio < 1 + hi) & counted).any())  # clip-higher lets it through
    assert bool(((a < 0) & (ratio < 1 - lo) & counted).any())  # the lower clip stops it


def test_importance_weights_through_the_recipe_match_tis(tmp_path):
    """TIS (Yao et al. 2025): the per-token loss times w_t = min(pi_old(y_t) / mu(y_t), C), mu the sampler, C = 1.5.
    Samples 0, 2, 4, 6 were drawn with log-probs 1 below the learner's (w = min(e, 1.5) = 1.5: truncated), the others
    with log-probs 0.3 above (w = e^-0.3)."""
    shift = [-1.0 if i % 2 == 0 else 0.3 for i in range(len(REWARDS))]

    def sampler(sample_list):
        for s, d in zip(sample_list, shift):
            s.logprobs[:] = [lp + d for lp in s.logprobs]

    r, scored, out, (model0, _) = run(tmp_path, "algorithm.is_correction=tis", "algorithm.is_params={cap: 1.5}",
                                      "algorithm.skip_zero_advantage=false", sampler=sampler)
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(REWARDS))
    w = torch.tensor([min(math.exp(-d), 1.5) for d in shift])[:, None]
    logp = learner_logprobs(model0, b)
    loss = -(w * torch.exp(logp - logp.detach()) * adv[:, None] * m).sum() / m.sum()
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-6)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


def test_luffy_demonstration_with_a_kl_term_through_the_recipe_matches_its_paper(tmp_path):
    """LUFFY's mixed-policy loss (Yan et al. 2025, Eq. 6 with the shaping of Eq. 8) beside GRPO's KL term: sample 3 is
    a demonstration (off-policy: no sampler, behaviour probability 1).  Token mean over every counted token of
    -r_t A_i + beta k3_t on the policy's own tokens and -f(p_t) A_i, f(p) = p / (p + 0.1), on the demonstration's:
    a demonstration was not sampled from pi, so the KL estimator does not apply to it and it has no KL term."""
    beta = 0.5
    r, scored, out, (model0, _) = run(tmp_path, "guidance.demonstrations=true", f"algorithm.kl_coef={beta}",
                                      "algorithm.skip_zero_advantage=false", "train.micro_batch_size=3",
                                      prepare=_reference_away, off_policy=(3,))
    b = scored.batch
    m = completion_mask(b)
    adv = ref_grpo(torch.tensor(REWARDS))[:, None]
    logp = learner_logprobs(model0, b)
    with torch.no_grad():
        ref_logp = learner_logprobs(r.ref_model, b)
    demo = torch.zeros(len(REWARDS), 1, dtype=torch.bool)
    demo[3] = True
    p = logp.exp()
    on = -torch.exp(logp - logp.detach()) * adv + beta * kl_reference(logp, ref_logp, "k3")
    per_token = torch.where(demo, -p / (p + 0.1) * adv, on)
    loss = (per_token * m).sum() / m.sum()
    assert float((kl_reference(logp, ref_logp, "k3") * m)[3].sum()) > 1e-3  # a KL on the demo would move the loss
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-6)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))


def test_entropy_token_gate_through_the_recipe_matches_its_paper(tmp_path):
    """Beyond the 80/20 Rule (Wang et al. 2025, Sec. 5): GRPO's advantage kept on the top rho = 30% of the batch's
    completion tokens by the policy's entropy, 0 on the rest; loss and gradients of ppo_clip on that."""
    r, scored, out, (model0, _) = run(tmp_path, "algorithm.entropy_token_fraction=0.3",
                                      "algorithm.skip_zero_advantage=false", "train.micro_batch_size=16")
    b = scored.batch
    m = completion_mask(b)
    ent = entropy_reference(model0, b)
    tokens = sorted(((float(ent[i, t]), i, t) for i, t in m.nonzero().tolist()), key=lambda x: -x[0])
    kept = tokens[:math.ceil(0.3 * len(tokens))]
    assert kept[-1][0] > tokens[len(kept)][0]  # no tie at the threshold: the reference's choice is unique
    gate = torch.zeros_like(m)
    for _, i, t in kept:
        gate[i, t] = 1.0
    adv = ref_grpo(torch.tensor(REWARDS), m=m)
    want = (adv[:, None] if adv.dim() == 1 else adv) * m * gate
    got = token_advantages(scored)
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-5, atol=2e-6)
    assert 0 < int((got != 0).sum()) < int((adv[:, None] * m != 0).sum())  # the gate dropped some tokens
    logp = learner_logprobs(model0, b)
    loss = ppo_clip_token_mean(logp, logp.detach(), want.float(), m)
    assert out["loss"] == pytest.approx(float(loss), rel=1e-5, abs=1e-6)
    assert_grads_close(r.optimizer.seen[0], grads_of(loss, model0))
