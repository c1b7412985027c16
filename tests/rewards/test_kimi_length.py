"""Kimi k1.5's length reward (Sec. 2.3.3) by hand and through the recipe."""

from __future__ import annotations

from pathlib import Path

import torch

from conftest import close
from rl_harness import LOOP_PROBLEMS, train_recorded
from rlvr.rewards.pipeline import GroupScores
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardFunctionSpec
from rlvr.types import Problem, Sample, Verdict

PROBLEM = Problem("p", prompt="What is 1 + 1?", answer="2")


def _group(correct, lengths) -> GroupScores:
    samples = [Sample("p", [1], [5] * n, [0.0] * n, f"s{i}", "stop", i, verdict=Verdict(float(c), None, "hand"),
                      env_return=float(c)) for i, (c, n) in enumerate(zip(correct, lengths))]
    return GroupScores.of(PROBLEM, samples, max_new_tokens=16)


def test_by_hand():
    # lengths 2, 4, 10, 6: min 2, max 10 -> lambda = 0.5 - (len - 2) / 8 = 0.5, 0.25, -0.5, 0.0
    g = _group([1, 0, 1, 0], [2, 4, 10, 6])
    r = Rubric.from_specs([RewardFunctionSpec(kind="verifier"), RewardFunctionSpec(kind="kimi_length", weight=0.5)])
    out = r.score(g)
    close(out.parts["kimi_length"], [0.5, 0.0, -0.5, 0.0])  # the short wrong answer gets min(0, 0.25) = 0
    close(out.reward, [1.25, 0.0, 0.75, 0.0])
    same = _group([1, 0], [3, 3])
    close(r.score(same).parts["kimi_length"], [0.0, 0.0])


def test_through_the_recipe(tmp_path: Path):
    r = train_recorded(tmp_path, "reward.functions=[verifier, {kind: kimi_length, weight: 0.5}]")
    G, moved = 4, 0
    for ro, scored in r.seen:
        want = []
        for start in range(0, len(ro.samples), G):
            lens = [s.num_tokens for s in ro.samples[start:start + G]]
            cs = [float(v.correct) for v in ro.verdicts[start:start + G]]
            for n, c in zip(lens, cs):
                lam = 0.0 if max(lens) == min(lens) else 0.5 - (n - min(lens)) / (max(lens) - min(lens))
                term = lam if c > 0 else min(0.0, lam)
                moved += int(term != 0)
                want.append(c + 0.5 * term)
        close(scored.rewards, torch.tensor(want))
    assert moved > 0
