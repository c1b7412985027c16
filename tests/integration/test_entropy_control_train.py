"""Entropy control through ``rlvr.train`` on the tiny model: the gradient that reaches each completion token's
log-prob in the real learner is the one the Clip-Cov / KL-Cov formula gives (zero on Clip-Cov's tokens; the KL
penalty's sign term on KL-Cov's once the ratio leaves 1), the selection is the batch's, and the entropy floor's
weight follows its controller, across a resume too; and TIS / MIS, the existing corrections for the bf16
sampler, weight each token's gradient as their formulas say."""

from __future__ import annotations

import pytest
import torch

from conftest import make_model, tiny_run_config
from rlvr.learner import update
from rlvr.recipes.rl import train
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict


def parity_verifier(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _problems(n: int, prefix: str) -> list[Problem]:
    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


def _train(tok, out, *extra):
    return train(tiny_run_config(out, *extra), model=make_model(tok), tokenizer=tok,
                 problems=(_problems(10, "t"), _problems(4, "h")), verifier=parity_verifier)


def _record(monkeypatch):
    """Every learner loss call of the run: its inputs, the gradient that reached ``logp`` and 1 / (the mini-batch's
    completion tokens), the token-mean weight each token's loss has in the optimizer step."""
    calls, step = [], {"n": -1, "scale": None}
    real_loss, real_run, real_micro = update.grpo_loss, update.PolicyUpdate.run, update.PolicyUpdate.micro_batch

    def run(self):
        step["n"] += 1
        return real_run(self)

    def micro_batch(self, epoch, ci, mini):
        step["scale"] = 1.0 / float(mini.tokens)
        return real_micro(self, epoch, ci, mini)

    def loss(logp, old_logp, adv, mask, **kw):
        rec = {"step": step["n"], "scale": step["scale"], "logp": logp.detach().clone(), "old": old_logp.clone(),
               "adv": (adv.unsqueeze(-1) if adv.dim() == 1 else adv).expand_as(logp).clone(), "mask": mask.clone(),
               "select": kw.get("token_select"), "kw": kw}
        if logp.requires_grad:
            logp.register_hook(lambda g: rec.__setitem__("grad", g.detach().clone()))
        calls.append(rec)
        return real_loss(logp, old_logp, adv, mask, **kw)

    monkeypatch.setattr(update.PolicyUpdate, "run", run)
    monkeypatch.setattr(update.PolicyUpdate, "micro_batch", micro_batch)
    monkeypatch.setattr(update, "grpo_loss", loss)
    return calls


PACKED = ("train.micro_batch_tokens=40", "train.share_prompts=true")  # the demo's packed, shared-prompt learner


@pytest.mark.parametrize("packing", [(), PACKED], ids=["padded", "packed"])
def test_clip_cov_detaches_the_selected_tokens_in_the_learner(tmp_path, tiny_tokenizer, monkeypatch, packing):
    calls = _record(monkeypatch)
    _train(tiny_tokenizer, tmp_path, "algorithm.policy_loss=clip_cov",
           "algorithm.policy_loss_params={ratio: 0.3, cov_low: -100, cov_high: 100}", *packing)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    detached_with_signal = 0
    for c in calls:
        sel, m, a = c["select"], c["mask"].bool(), c["adv"]
        assert sel is not None and sel.shape == m.shape and not (sel & ~m).any()
        # ratio 1 (one epoch): dL/dlogp = -A / N_batch, except 0 on the detached tokens
        expect = torch.where(sel | ~m, torch.zeros(()), -a * c["scale"])
        torch.testing.assert_close(c["grad"], expect, atol=1e-7, rtol=0)
        detached_with_signal += int((sel & (a != 0)).sum())
    assert detached_with_signal > 0  # the zeros come from the selection, not from zero advantages
    for r in rows:  # floor(.3 N) of the batch's tokens (every row counts, zero-advantage ones too)
        assert r["cov_candidates"] > 0 and r["cov_selected"] == int(0.3 * r["cov_candidates"] + 1e-9)
    assert all(0 < r["cov_frac"] < 1 for r in rows if r["learner_seqs"])


def test_kl_cov_penalises_the_selected_tokens_once_the_ratio_moves(tmp_path, tiny_tokenizer, monkeypatch):
    calls = _record(monkeypatch)
    beta = 0.7
    _train(tiny_tokenizer, tmp_path, "algorithm.policy_loss=kl_cov",
           f"algorithm.policy_loss_params={{ratio: 0.3, coef: {beta}}}", "algorithm.ppo_epochs=2")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    penalised_moved = 0
    for c in calls:
        sel, m, a = c["select"], c["mask"].bool(), c["adv"]
        delta = torch.where(m, c["logp"] - c["old"], torch.zeros(()))
        # dL/dlogp = (-ratio A + beta sign(logp - logp_old) [selected]) / N_batch
        expect = torch.where(m, -a * delta.exp() + beta * torch.sign(delta) * sel, torch.zeros(())) * c["scale"]
        torch.testing.assert_close(c["grad"], expect, atol=1e-6, rtol=0)
        penalised_moved += int((sel & (delta.abs() > 1e-4)).sum())
    assert penalised_moved > 0  # the second epoch moved the ratio of some selected tokens
    for r in rows:  # each epoch passes every selected token to the loss, zero-advantage rows included
        seen = sum(int(c["select"].sum()) for c in calls if c["step"] == r["step"] - 1)
        assert seen == 2 * r["cov_selected"] > 0


def test_micro_batch_scope_selects_per_micro_batch(tmp_path, tiny_tokenizer, monkeypatch):
    calls = _record(monkeypatch)
    _train(tiny_tokenizer, tmp_path, "train.steps=2", "algorithm.policy_loss=kl_cov",
           "algorithm.policy_loss_params={ratio: 0.25, scope: micro_batch}", "algorithm.ppo_epochs=2")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all(c["select"] is None for c in calls) and "cov_selected" not in rows[0]
    assert all(0 < r["cov_frac"] for r in rows if r["learner_seqs"])


def test_entropy_floor_weight_follows_the_controller_and_survives_resume(tmp_path, tiny_tokenizer, monkeypatch):
    calls = _record(monkeypatch)
    floor = ("algorithm.entropy_floor=100", "algorithm.entropy_floor_delta=0.01",
             "algorithm.entropy_floor_max_coef=0.025", "train.save_every=2")
    _train(tiny_tokenizer, tmp_path / "a", *floor)  # a target above any entropy: always below it
    rows = read_metrics(tmp_path / "a" / "metrics.jsonl")
    assert [r["entropy_floor_coef"] for r in rows] == pytest.approx([0.0, 0.01, 0.02, 0.025])
    for c in calls:  # the learner got that weight, and a differentiable entropy whenever it is on
        coef = rows[c["step"]]["entropy_floor_coef"]
        assert c["kw"]["entropy_coef"] == pytest.approx(coef)
        assert (c["kw"]["entropy"] is not None and c["kw"]["entropy"].requires_grad) == (coef > 0)
    # 2 steps, then resume for 2 more: the controller's state comes back from the checkpoint
    _train(tiny_tokenizer, tmp_path / "b", *floor, "train.steps=2")
    _train(tiny_tokenizer, tmp_path / "b", *floor, "train.resume=true")
    assert [r["entropy_floor_coef"] for r in read_metrics(tmp_path / "b" / "metrics.jsonl")] == \
        pytest.approx([0.0, 0.01, 0.02, 0.025])
    # a target below any entropy never turns the bonus on: the default learner path
    calls.clear()
    _train(tiny_tokenizer, tmp_path / "c", "algorithm.entropy_floor=1e-6", "train.steps=2")
    assert [r["entropy_floor_coef"] for r in read_metrics(tmp_path / "c" / "metrics.jsonl")] == [0.0, 0.0]
    assert all(c["kw"]["entropy_coef"] == 0.0 and c["kw"]["entropy"] is None for c in calls)


@pytest.mark.parametrize("correction, params", [("tis", "{cap: 1.01}"), ("mis", "{lower: 0.99, upper: 1.01}")])
def test_importance_correction_for_the_bf16_sampler_reaches_the_gradient(tmp_path, tiny_tokenizer, monkeypatch,
                                                                         correction, params):
    """With a bf16 sampler and an fp32 learner, TIS / MIS weight each token's gradient by
    w(pi_old / mu): min(r, cap) (TIS) or r * 1[lower <= r <= upper] (MIS), r = exp(learner - sampler)."""
    calls = _record(monkeypatch)
    ratios = []
    real = update.is_correction_weights

    def weights(name, learner_logp, rollout_logp, mask, **kw):
        ratios.append(torch.where(mask.bool(), (learner_logp - rollout_logp).exp(), torch.ones(())))
        return real(name, learner_logp, rollout_logp, mask, **kw)

    monkeypatch.setattr(update, "is_correction_weights", weights)
    _train(tiny_tokenizer, tmp_path, "rollout.dtype=bfloat16", f"algorithm.is_correction={correction}",
           f"algorithm.is_params={params}")
    assert len(ratios) == len(calls)
    changed = 0
    for c, r in zip(calls, ratios):
        m, a = c["mask"].bool(), c["adv"]
        w = r.clamp(max=1.01) if correction == "tis" else torch.where((r >= 0.99) & (r <= 1.01), r, torch.zeros(()))
        torch.testing.assert_close(c["kw"]["is_weights"], torch.where(m, w, torch.ones(())), atol=1e-6, rtol=0)
        torch.testing.assert_close(c["grad"], torch.where(m, -a * w * c["scale"], torch.zeros(())), atol=1e-7,
                                   rtol=0)
        changed += int((m & (a != 0) & ((w - 1).abs() > 1e-3)).sum())
    assert changed > 0  # the bf16 sampler's rounding moved some weights away from 1
