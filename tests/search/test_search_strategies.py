"""Best-of-N, majority and weighted majority on hand-made sample sets (ties included)."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr.search.strategies import (
    best_of_n,
    evaluate_strategy,
    majority_vote,
    subset_indices,
    weighted_majority,
)


def test_best_of_n_picks_highest_and_earliest_on_ties():
    assert best_of_n([0.1, 0.9, 0.3]) == 1
    assert best_of_n([0.5, 0.7, 0.7, 0.2]) == 1  # tie between 1 and 2: earliest
    assert best_of_n([]) == -1
    with pytest.raises(ValueError, match="NaN"):
        best_of_n([0.1, float("nan")])


def test_majority_vote_counts_and_ties():
    assert majority_vote(["3", "4", "4", "3", "4"]) == 1  # "4" wins 3-2, first "4" is index 1
    assert majority_vote(["7", "5", "5", "7"]) == 0  # 2-2 tie: "7" appeared first
    assert majority_vote([None, None, "2"]) == 2  # None never votes
    assert majority_vote([None, None]) == -1


def test_weighted_majority_sums_scores_and_ties():
    answers = ["a", "b", "b", "a", "c"]
    # a: 0.9 + 0.1 = 1.0 ; b: 0.3 + 0.3 = 0.6 ; c: 0.95 -> a (plain majority would tie a/b and pick a too)
    assert weighted_majority(answers, [0.9, 0.3, 0.3, 0.1, 0.95]) == 0
    # c's single high score beats two weak b votes: c = 0.9 > b = 0.4 > a = 0.2
    assert weighted_majority(["a", "b", "b", "c"], [0.2, 0.2, 0.2, 0.9]) == 3
    # exact tie of totals: earliest first occurrence ("b" at index 0)
    assert weighted_majority(["b", "a", "b", "a"], [0.25, 0.5, 0.25, 0.0]) == 0
    assert weighted_majority([None, "x"], [1.0, 0.0]) == 1  # all-zero totals still pick the only answer
    with pytest.raises(ValueError, match=">= 0"):
        weighted_majority(["a"], [-1.0])


# Hand-made set: 3 problems x 4 samples.
ANSWERS = [
    ["5", "6", "6", "5"],   # reference 5: majority ties 2-2 -> "5" (first), correct
    ["1", "2", "2", None],  # reference 1: majority "2" (wrong); best score on sample 0 (right)
    [None, None, "9", "8"], # reference 8: majority ties "9"/"8" -> "9" (wrong); weighted favours "8"
]
REFS = ["5", "1", "8"]
CORRECT = np.array([[a == r for a in row] for row, r in zip(ANSWERS, REFS)])
SCORES = np.array([[0.2, 0.9, 0.1, 0.3],
                   [0.8, 0.3, 0.3, 0.0],
                   [0.0, 0.0, 0.4, 0.7]])
TOKENS = np.array([[10, 20, 30, 40], [1, 1, 1, 1], [5, 5, 5, 5]])


def test_evaluate_strategies_on_hand_made_set():
    maj = evaluate_strategy("majority", 4, correct=CORRECT, answers=ANSWERS, num_tokens=TOKENS)
    assert maj.chosen == [0, 1, 2]
    np.testing.assert_array_equal(maj.per_problem, [1, 0, 0])
    assert maj.accuracy == pytest.approx(1 / 3)
    assert maj.mean_tokens == pytest.approx((100 + 4 + 20) / 3)
    bon = evaluate_strategy("best_of_n", 4, correct=CORRECT, scores=SCORES, num_tokens=TOKENS)
    assert bon.chosen == [1, 0, 3]
    np.testing.assert_array_equal(bon.per_problem, [0, 1, 1])
    wm = evaluate_strategy("weighted_majority", 4, correct=CORRECT, answers=ANSWERS, scores=SCORES)
    # p0: 5 -> 0.5, 6 -> 1.0 => "6" (wrong); p1: 1 -> 0.8, 2 -> 0.6 => right; p2: 9 -> 0.4, 8 -> 0.7 => right
    assert wm.chosen == [1, 0, 3]
    assert wm.accuracy == pytest.approx(2 / 3)
    # N = 2: only the first two samples
    maj2 = evaluate_strategy("majority", 2, correct=CORRECT, answers=ANSWERS, num_tokens=TOKENS)
    assert maj2.chosen == [0, 0, -1]  # p0 tie 5/6 -> "5"; p1 tie 1/2 -> "1"; p2 no answer at all
    np.testing.assert_array_equal(maj2.per_problem, [1, 1, 0])
    assert maj2.mean_tokens == pytest.approx((30 + 2 + 10) / 3)


def test_random_subsets_average_over_draws():
    idx = subset_indices(4, 2, subsets="random", draws=50, seed=0, num_problems=3)
    assert idx.shape == (50, 3, 2)
    assert all(len(set(row)) == 2 for row in idx.reshape(-1, 2))  # without replacement
    # one correct sample in 4: P(a random 2-subset contains it) = 1/2 -> oracle best-of-2 accuracy ~ 0.5
    correct = np.zeros((200, 4), dtype=bool)
    correct[:, 2] = True
    res = evaluate_strategy("best_of_n", 2, correct=correct, scores=correct.astype(float), subsets="random",
                            draws=20, seed=1)
    assert 0.45 < res.accuracy < 0.55
    full = evaluate_strategy("best_of_n", 4, correct=correct, scores=correct.astype(float), subsets="random",
                             draws=3, seed=1)
    assert full.accuracy == 1.0
    with pytest.raises(ValueError, match="n must be in"):
        evaluate_strategy("majority", 5, correct=correct, answers=[["1"] * 4] * 200)


def test_strategy_input_checks():
    with pytest.raises(ValueError, match="unknown strategy"):
        evaluate_strategy("nope", 1, correct=CORRECT)
    with pytest.raises(ValueError, match="needs scorer scores"):
        evaluate_strategy("best_of_n", 1, correct=CORRECT)
    with pytest.raises(ValueError, match="needs the extracted answers"):
        evaluate_strategy("majority", 1, correct=CORRECT)
