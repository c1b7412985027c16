"""MoPPS prompt selection (Qu et al. 2025): the posterior update and Top-B Thompson selection by hand, resume,
and the selection through the real wiring (config -> recipe -> collect)."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms import MoPPSSelector
from rlvr.types import Problem

T = torch.tensor


class _Seq:
    """A sampler: prompts p0, p1, ... in order."""

    def __init__(self, n):
        self.problems, self.position = [Problem(f"p{i}", prompt=str(i)) for i in range(n)], 0

    def next(self, k):
        out = [self.problems[(self.position + i) % len(self.problems)] for i in range(k)]
        self.position += k
        return out


def test_posterior_update_by_hand():
    # alpha <- lam * alpha + (1 - lam) * alpha0 + s * k ; beta <- lam * beta + (1 - lam) * beta0 + (1 - s) * k
    m = MoPPSSelector(decay=0.5, prior=(1.0, 2.0))
    m.update(["a"], T([1.0, 0.0, 1.0, 1.0]), 4)  # s = 0.75, k = 4 from the prior (1, 2)
    assert m.posterior("a") == pytest.approx((0.5 * 1 + 0.5 * 1 + 3.0, 0.5 * 2 + 0.5 * 2 + 1.0))  # (4, 3)
    m.update(["a"], T([0.0, 0.0, 0.0, 0.0]), 4)  # s = 0
    assert m.posterior("a") == pytest.approx((0.5 * 4 + 0.5 * 1 + 0.0, 0.5 * 3 + 0.5 * 2 + 4.0))  # (2.5, 6.5)
    assert m.pass_rate("a") == pytest.approx(2.5 / 9.0) and m.pass_rate("b") is None
    # lambda = 1 (the paper's default) counts every sample: Beta(1 + successes, 1 + failures)
    m1 = MoPPSSelector()
    m1.update(["x", "y"], T([1.0, 1.0, 0.0, 1.0]), 2)  # two groups of 2
    m1.update(["x"], T([0.0, 1.0]), 2)
    assert m1.posterior("x") == (4.0, 2.0) and m1.posterior("y") == (2.0, 2.0) and len(m1) == 2
    with pytest.raises(ValueError, match="prompt ids"):
        m1.update(["x"], T([1.0, 0.0, 1.0, 0.0]), 2)


def test_choose_keeps_the_candidates_whose_sample_is_nearest_the_target():
    # posteriors so concentrated that every Thompson sample is its mean to 2 decimals
    m = MoPPSSelector(candidates=3, target=0.5)
    rates = [0.1, 0.45, 0.9, 0.6, 0.0, 1.0]
    for i, p in enumerate(rates):
        m.alpha[f"p{i}"], m.beta[f"p{i}"] = 1e6 * p + 1, 1e6 * (1 - p) + 1
    sampler = _Seq(6)
    assert [p.id for p in m.choose(sampler, 2)] == ["p1", "p3"]  # |0.45 - .5|, |0.6 - .5| smallest of all 6
    assert sampler.position == 6 and m.draws == 1
    m.target = 0.95
    assert [p.id for p in m.choose(_Seq(6), 1)] == ["p2"]
    m.target = 0.0  # 9 candidates from 6 prompts: each prompt is a candidate once
    assert [p.id for p in m.choose(_Seq(6), 3)] == ["p0", "p1", "p4"]  # in the order drawn


def test_unseen_prompts_are_thompson_draws_from_the_prior_and_resume_is_exact():
    m = MoPPSSelector(candidates=4, seed=7)
    m.update(["p0"], T([1.0] * 8), 8)
    first = [p.id for p in m.choose(_Seq(8), 2)]
    saved = m.state_dict()
    after = [[p.id for p in m.choose(_Seq(8), 2)] for _ in range(5)]
    r = MoPPSSelector(candidates=4, seed=7)
    r.load_state_dict(saved)
    assert [[p.id for p in r.choose(_Seq(8), 2)] for _ in range(5)] == after  # same draws after a resume
    assert "p0" not in first  # Beta(9, 1) draws near 1, far from 0.5: never among the 2 of 8 nearest
    assert len({tuple(a) for a in after}) > 1  # the draws differ from call to call
    with pytest.raises(ValueError, match="MoPPS"):
        r.load_state_dict({"mode": "ema", "ema": {}, "hist": {}})


def test_mopps_through_the_recipe(tmp_path, tiny_tokenizer, monkeypatch):
    """algorithm.mopps=true: each step draws mopps_candidates x prompts_per_step prompts and trains on the
    chosen ones; prompts always solved or never solved stop being chosen once seen; the posteriors are in the
    checkpoint and a resumed run chooses what an uninterrupted one did."""
    from conftest import make_model, tiny_run_config
    from rlvr.recipes.rl import train
    import rlvr.recipes.rl as recipe
    from rlvr.types import Verdict

    problems = [Problem(f"t{i}", prompt=f"{i}+{i}", answer=str(i)) for i in range(8)]
    solved, unsolved = {"0", "1", "2"}, {"3", "4", "5"}

    def verifier(completion, reference):
        if reference in solved or reference in unsolved:
            return Verdict(float(reference in solved), None, "")
        return Verdict(float(len(completion) % 2 == 0), None, "")  # t6, t7: about half

    orig = recipe.collect_rollouts

    def run(out, steps, *extra, resume=False):
        seen: list[list[str]] = []

        def spy(engine, sampler, env, params, settings, step, dfilter=None, **kw):
            out_ = orig(engine, sampler, env, params, settings, step, dfilter, **kw)
            seen.append([s.problem_id for s in out_.samples[:: params.n]])
            return out_

        monkeypatch.setattr(recipe, "collect_rollouts", spy)
        cfg = tiny_run_config(out, f"train.steps={steps}", "algorithm.mopps=true", "algorithm.mopps_candidates=4",
                              "train.save_every=2", *(["train.resume=true"] if resume else []), *extra)
        train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(problems, []),
              verifier=verifier)
        return seen

    seen = run(tmp_path / "a", 6)
    assert [len(s) for s in seen] == [2] * 6
    # after the first epoch (8 prompts drawn as 4 x 2 per step) every prompt was seen once at most; from then
    # on a solved or unsolved prompt (posterior Beta(5, 1) or Beta(1, 5) after one group of 4) is chosen only
    # when its Thompson draw beats those of t6 / t7 (near 0.5): rarely
    later = [p for s in seen[2:] for p in s]
    assert sum(p in ("t6", "t7") for p in later) >= len(later) // 2
    resumed = run(tmp_path / "b", 4) + run(tmp_path / "b", 6, resume=True)
    assert resumed == seen
