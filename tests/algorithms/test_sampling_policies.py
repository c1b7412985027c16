"""DAPO dynamic sampling and online difficulty filtering."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms import DifficultyFilter, DynamicSamplingBuffer, dynamic_sampling_filter, informative_groups

T = torch.tensor


def test_dynamic_sampling_filter():
    keep_g, keep_s = dynamic_sampling_filter(T([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.2]), 2)
    assert keep_g.tolist() == [True, False, False, True]
    assert keep_s.tolist() == [True, True, False, False, False, False, True, True]
    assert informative_groups(torch.zeros(0), 3).numel() == 0


def test_dynamic_sampling_buffer_refills_and_tops_up():
    buf = DynamicSamplingBuffer(target_groups=2, group_size=2, max_rounds=3)
    buf.start_round()  # round 1: [1,0] kept, [1,1] and [0,0] dropped
    assert [buf.add(g, T(r)) for g, r in (("ab", [1.0, 0.0]), ("cd", [1.0, 1.0]), ("ef", [0.0, 0.0]))] == \
        [True, False, False]
    assert buf.needed == 1 and not buf.full and not buf.exhausted and buf.generated == 6
    buf.start_round()  # round 2: both informative; the surplus group is not taken
    buf.add("gh", T([0.0, 1.0]))
    buf.add("ij", T([1.0, 0.0]))
    assert buf.full and buf.rounds == 2 and buf.generated == 10
    assert buf.take() == ["ab", "gh"]


def test_dynamic_sampling_buffer_exhaustion_tops_up_with_dropped_groups():
    buf = DynamicSamplingBuffer(target_groups=2, group_size=2, max_rounds=1)
    buf.start_round()
    buf.add("ab", T([1.0, 1.0]))
    buf.add("cd", T([1.0, 0.0]))
    assert buf.exhausted and not buf.full
    assert buf.take() == ["cd", "ab"]  # kept first, then dropped (zero advantage, statistics only)
    with pytest.raises(ValueError, match="2 rewards"):
        buf.add("a", T([1.0]))
    plain = DynamicSamplingBuffer(target_groups=1, group_size=2, drop_uninformative=False)
    plain.start_round()
    assert plain.add("xy", T([0.0, 0.0])) and plain.full  # without filtering every group is kept


def test_difficulty_filter_ema():
    f = DifficultyFilter(low=0.25, high=0.75, mode="ema", alpha=0.5)
    assert f.keep("new")                                       # unseen prompts are kept
    f.update(["p1", "p2"], T([1.0, 1.0, 0.0, 1.0]), 2)         # p1 1.0, p2 .5
    assert f.pass_rate("p1") == 1.0 and f.pass_rate("p2") == 0.5
    assert f.filter(["p1", "p2", "p3"]) == [False, True, True]
    f.update(["p1"], T([0.0, 0.0]), 2)                         # .5 * 1 + .5 * 0 = .5
    assert f.pass_rate("p1") == 0.5 and f.keep("p1")
    g = DifficultyFilter(low=0.25, high=0.75, mode="ema", alpha=0.5)
    g.load_state_dict(f.state_dict())
    assert g.pass_rate("p1") == 0.5 and len(g) == 2
    assert not DifficultyFilter(keep_unseen=False).keep("x")


def test_difficulty_filter_window_and_resume():
    f = DifficultyFilter(low=0.0, high=0.5, mode="window", window=2)
    for r in ([1.0, 1.0], [0.0, 0.0], [0.0, 1.0]):
        f.update([7], T(r), 2)
    # last two group means: 0 and .5 -> .25
    assert f.pass_rate(7) == 0.25 and f.keep(7)
    g = DifficultyFilter(low=0.0, high=0.5, mode="window", window=2)
    g.load_state_dict(f.state_dict())
    g.update([7], T([1.0, 1.0]), 2)                             # window now .5, 1 -> .75
    assert g.pass_rate(7) == 0.75 and not g.keep(7)
    with pytest.raises(ValueError, match="mode"):
        DifficultyFilter(mode="ema").load_state_dict(f.state_dict())
    with pytest.raises(ValueError, match="prompt ids"):
        f.update([1, 2], T([1.0, 0.0]), 2)
