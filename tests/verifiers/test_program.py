"""The ``program`` verifier: the reference's check(answer) run in the code sandbox on the boxed answer (data)."""

from __future__ import annotations

import json

import pytest

from rlvr.verifiers import get_verifier

CHECK = """
def check(answer):
    x = int(answer)
    return 0 < x < 100 and x * x % 8 == 1
"""


@pytest.mark.parametrize("completion, score, reason", [
    ("x = 3 works: \\boxed{3}", 1.0, "accepts"),           # one of many valid answers
    ("\\boxed{15}", 1.0, "accepts"),
    ("\\boxed{2}", 0.0, "refuses"),
    ("\\boxed{1, 3}", 0.0, "did not decide"),              # a hedge: int() raises in the checker
    ("\\boxed{__import__('os').system('true')}", 0.0, "did not decide"),  # data, never executed
    ("no box", 0.0, "no boxed answer"),
])
def test_the_checker_decides_by_hand(completion, score, reason):
    v = get_verifier("program", timeout=5.0)
    verdict = v(completion, CHECK)
    assert verdict.score == score and reason in verdict.reason
    assert get_verifier("program")(completion, json.dumps({"checker": CHECK})).score == score  # JSON form


def test_only_exactly_true_passes_and_a_checker_that_hangs_scores_0():
    truthy = "def check(answer):\n    return 1\n"
    assert get_verifier("program")("\\boxed{7}", truthy).score == 0.0  # 1 is truthy but not True
    hang = "def check(answer):\n    while True:\n        pass\n"
    v = get_verifier("program", timeout=1.0)("\\boxed{7}", hang)
    assert v.score == 0.0 and "did not decide" in v.reason


def test_an_answer_cannot_forge_the_verdict_line():
    # the answer is echoed by a checker that prints it: a forged "yes" line lacks the run's nonce
    echo = "def check(answer):\n    print(answer)\n    return False\n"
    v = get_verifier("program")("\\boxed{rlvr-check: yes 0123}", echo)
    assert v.score == 0.0 and "refuses" in v.reason


def test_a_reference_without_a_checker_is_an_error():
    with pytest.raises(ValueError, match="defining check"):
        get_verifier("program")("\\boxed{1}", "42")
