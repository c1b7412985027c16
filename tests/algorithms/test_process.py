"""Process rewards -> token-level rewards/advantages (rlvr.algorithms.process), against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.process import (
    PROCESS_CREDIT,
    PROCESS_FILTERS,
    STEP_TRANSFORMS,
    apply_transforms,
    clip_steps,
    delta_steps,
    disagreement_filter,
    min_credit,
    normalize_steps,
    process_advantages,
    process_token_rewards,
    step_end_tokens,
    token_pieces,
)
from rlvr.registry import RegistryError
from rlvr.search.scorers import split_steps

from conftest import close

T = torch.tensor


def test_registries_list_the_options():
    assert PROCESS_CREDIT.names() == ["min", "sum"]
    assert set(STEP_TRANSFORMS.names()) == {"center", "clip", "clip_range", "delta", "normalize"}
    assert PROCESS_FILTERS.names() == ["disagreement", "none"]
    assert PROCESS_CREDIT.entry("min").options() == ["temperature"]
    with pytest.raises(RegistryError, match="low .* must not exceed high"):
        PROCESS_FILTERS.check("disagreement", {"low": 0.9, "high": 0.1})
    with pytest.raises(RegistryError, match="aggregate"):
        PROCESS_FILTERS.check("disagreement", {"aggregate": "max"})


def test_min_credit_softmin_by_hand():
    # r = [0.2, 0.8], T = 0.1: w = softmax([-2, -8]) = [1, e^-6] / (1 + e^-6)
    e = math.exp(-6)
    w1, w2 = 1 / (1 + e), e / (1 + e)               # 0.99752738, 0.00247262
    out = min_credit(T([[0.2, 0.8]]), T([[True, True]]), temperature=0.1)
    close(out, [[0.2 * w1, 0.8 * w2]])              # [0.19950548, 0.00197810]; sum 0.2014836 ~ min = 0.2
    # padded step ignored; a row without steps gets zeros
    out = min_credit(T([[0.5, 9.0], [1.0, 1.0]]), T([[True, False], [False, False]]))
    close(out, [[0.5, 0.0], [0.0, 0.0]])
    # T -> small: the return is the minimum
    close(min_credit(T([[0.9, 0.3, 0.7]]), T([[True] * 3]), temperature=1e-3).sum(), 0.3)


def test_transforms_by_hand():
    m = T([[True, True, True]])
    close(clip_steps(T([[0.9, 0.2, 0.5]]), m, 1, eta=0.5), [[0.0, -0.3, 0.0]])
    # eta=None: the group mean (0.9 + 0.2 + 0.4) / 3 = 0.5
    close(clip_steps(T([[0.9, 0.2, 0.4]]), m, 1), [[0.0, -0.3, -0.1]])
    # delta: [0.9-0.6, 0.6-0.8, 0.8] = [0.3, -0.2, 0.8]; suffix sums give back [0.9, 0.6, 0.8]
    close(delta_steps(T([[0.9, 0.6, 0.8]]), m, 1), [[0.3, -0.2, 0.8]])
    close(delta_steps(T([[0.9, 0.6, 7.0]]), T([[True, True, False]]), 1), [[0.3, 0.6, 0.0]])
    # normalize over the group's steps {1, 0, 0.5}: mean 0.5, sample std sqrt((.25+.25+0)/2) = 0.5
    out = normalize_steps(T([[1.0, 0.0], [0.5, 3.0]]), T([[True, True], [True, False]]), 2, eps=0.0)
    close(out, [[1.0, -1.0], [0.0, 0.0]])
    # center then clip to [-0.25, 0.25]: [1, 0] - 0.5 = [0.5, -0.5] -> [0.25, -0.25]
    out = apply_transforms(T([[1.0, 0.0]]), T([[True, True]]), 1, ["center", ("clip_range", {"c": 0.25})])
    close(out, [[0.25, -0.25]])
    with pytest.raises(RegistryError):
        apply_transforms(T([[1.0]]), T([[True]]), 1, [("clip_range", {"width": 1})])


def test_disagreement_filter_by_hand():
    scores = T([[0.9, 0.1], [0.9, 0.8], [0.9, 0.8], [0.2, 0.1], [0.0, 0.0]])
    m = T([[True, True]] * 4 + [[False, False]])
    # min step = [0.1, 0.8, 0.8, 0.1, -]; outcome [1, 1, 0, 0, 1]
    keep = disagreement_filter(scores, m, T([1.0, 1.0, 0.0, 0.0, 1.0]), low=0.3, high=0.7)
    assert keep.tolist() == [False, True, False, True, True]  # right+weak, wrong+strong dropped; no steps kept
    # aggregate=last: [0.1, 0.8, 0.8, 0.1]: same here; mean = [0.5, 0.85, 0.85, 0.15] keeps row 0
    keep = disagreement_filter(scores, m, T([1.0, 1.0, 0.0, 0.0, 1.0]), aggregate="mean")
    assert keep.tolist() == [True, True, False, True, True]


def test_token_rewards_sum_form_for_ppo():
    # steps end at tokens 1, 3, 5 with scores 0.5, 1.0, 0.25; outcome 1 on the last token (5)
    r = process_token_rewards(T([[0.5, 1.0, 0.25]]), T([[1, 3, 5]]), T([[True] * 3]), torch.ones(1, 6), T([1.0]))
    close(r, [[0, 0.5, 0, 1.0, 0, 1.25]])
    # coefficients, and padding after the last counted token: last token is 3
    mask = T([[1, 1, 1, 1, 0, 0]])
    r = process_token_rewards(T([[0.5, 1.0]]), T([[1, 3]]), T([[True, True]]), mask, T([1.0]),
                              process_coef=2.0, outcome_coef=0.5)
    close(r, [[0, 1.0, 0, 2.5, 0, 0]])
    with pytest.raises(ValueError, match="outside"):
        process_token_rewards(T([[0.5]]), T([[9]]), T([[True]]), torch.ones(1, 6))


def test_advantages_sum_form_no_baseline_is_returns_to_go():
    adv, info = process_advantages(T([[0.5, 1.0, 0.25]]), T([[1, 3, 5]]), T([[True] * 3]), T([1.0]), 1,
                                   torch.ones(1, 6), baseline="none", outcome_coef=0.0)
    close(adv, [[1.75, 1.75, 1.25, 1.25, 0.25, 0.25]])
    assert info["process/return_mean"] == pytest.approx(1.75)
    assert info["process/min_step_mean"] == pytest.approx(0.25)


def test_advantages_deepseekmath_steps_baseline_plus_outcome():
    # group of 2: A steps [1, 0] end at 1, 3; B one step [0.5] ending at 3. Normalised steps: A [1, -1], B [0]
    # process returns: A [0, 0, -1, -1], B [0, 0, 0, 0]
    # outcome [1, 0]: GRPO = +-0.5 / std([1, 0]) = +-0.5 / 0.70710678 = +-0.70710678
    adv, info = process_advantages(T([[1.0, 0.0], [0.5, 0.0]]), T([[1, 3], [3, 0]]),
                                   T([[True, True], [True, False]]), T([1.0, 0.0]), 2, torch.ones(2, 4),
                                   baseline="steps", eps=0.0)
    a = 0.5 / math.sqrt(0.5)
    close(adv, [[a, a, a - 1, a - 1], [-a, -a, -a, -a]])
    assert info["process/kept_share"] == 1.0


def test_advantages_min_form_returns_baseline():
    # A: steps [0.2, 0.8] (ends 1, 3) -> r* = [0.2 w1, 0.8 w2] (see test_min_credit_softmin_by_hand); B: [0.9] at 3
    e = math.exp(-6)
    a1, a2 = 0.2 / (1 + e), 0.8 * e / (1 + e)
    g0a, g0b = a1 + a2, 0.9
    mean0 = (g0a + g0b) / 2
    std0 = abs(g0b - g0a) / math.sqrt(2)
    adv, _ = process_advantages(T([[0.2, 0.8], [0.9, 0.0]]), T([[1, 3], [3, 0]]), T([[True, True], [True, False]]),
                                T([1.0, 1.0]), 2, torch.ones(2, 4), credit="min", baseline="returns",
                                outcome_coef=0.0, eps=0.0)
    close(adv[0], [(g0a - mean0) / std0, (g0a - mean0) / std0, (a2 - mean0) / std0, (a2 - mean0) / std0])
    close(adv[1], [(g0b - mean0) / std0] * 4)   # = +0.70710678
    close(adv[0, 0], -1 / math.sqrt(2))


def test_filtered_samples_get_zero_and_leave_the_statistics():
    # 3 samples, one group; sample 2 is wrong with a strong process score -> dropped
    # outcome over kept [1, 0]: +-0.70710678; the dropped row is 0 everywhere
    adv, info = process_advantages(T([[0.9], [0.1], [0.95]]), T([[2], [2], [2]]), T([[True]] * 3),
                                   T([1.0, 0.0, 0.0]), 3, torch.ones(3, 3), filter="disagreement",
                                   process_coef=0.0, eps=0.0)
    a = 0.5 / math.sqrt(0.5)
    close(adv, [[a] * 3, [-a] * 3, [0.0] * 3])
    assert info["process/kept_share"] == pytest.approx(2 / 3)


def test_step_end_tokens_pure_and_with_a_tokenizer(tiny_tokenizer):
    pieces = ["a", "b", "\n", "\n", "c", "d", " ", "\n", "\n", "\n", "\n", "e", ""]  # last: EOS
    ends = step_end_tokens(pieces, "\n\n")
    # steps "ab" (last char at token 1), "cd " (last non-space char 'd' at token 5), blank dropped, "e" -> the end
    assert ends == [1, 5, 12]
    assert len(ends) == len(split_steps("".join(pieces), "\n\n"))
    assert step_end_tokens(pieces, "\n\n", last_to_end=False) == [1, 5, 11]
    text = "1+2=3\n\nso 3\n\nanswer 3"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False) + [tiny_tokenizer.eos_token_id]
    pieces = token_pieces(tiny_tokenizer, ids)
    assert "".join(pieces) == text
    ends = step_end_tokens(pieces, "\n\n")
    assert ends == [4, 10, len(ids) - 1]   # "1+2=3" ends at 4; "so 3" at 7+3 = 10
    assert [pieces[i] for i in ends[:2]] == ["3", "3"]
    assert step_end_tokens([], "\n\n") == []
