"""Reasoning-model output: a ``<think>`` block is never the answer, a self-correction is
judged on its final answer, a hedge (several answers offered at once) is refused, and
a list of guesses separated by "wait" (the answer changing more than once) earns nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify")
pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlvr.verifiers import get_verifier  # noqa: E402
from rlvr.verifiers.math import extract_answer  # noqa: E402
from rlvr.verifiers.math.extract import answer_region  # noqa: E402


@pytest.fixture(scope="module")
def verify():
    return get_verifier("math")


# ----------------------------------------------------------------------------- <think> blocks

@pytest.mark.parametrize("completion", [
    "<think>Maybe it is \\boxed{3}? Let me check: 2+2=4.</think>\nThe answer is $\\boxed{4}$.",
    "Maybe \\boxed{3}? No: 2+2=4.</think>\nThe answer is $\\boxed{4}$.",  # the template opened the block
    "<think>\\boxed{3} or \\boxed{5}</think> So the answer is 4.",
    "<think>first \\boxed{3}</think><think>then \\boxed{5}</think>\n\\boxed{4}",
    "<THINK>\\boxed{3}</THINK> \\boxed{4}",
    "<thinking>\\boxed{3}</thinking>\n$\\boxed{4}$",
    "<think>\\boxed{3}</think>\n<answer>4</answer>",
    "<think>\\boxed{3}</think>\n<answer>The answer is $\\boxed{4}$.</answer>",
])
def test_final_answer_after_the_reasoning_counts(verify, completion):
    v = verify(completion, "4")
    assert v.correct, v


@pytest.mark.parametrize("completion, reason", [
    ("<think>2+2 = 4, so \\boxed{4}</think>", "no answer found"),  # nothing after the reasoning
    ("<think>2+2 = 4, so \\boxed{4}", "unfinished <think>"),  # cut off while thinking
    ("2+2 = 4 so \\boxed{4}</think>\n<think>more", "unfinished <think>"),
    ("<think>the answer is \\boxed{4}</think>\nThe answer is $\\boxed{3}$.", "mismatch"),
    ("<think>\\boxed{4}</think><answer>3</answer>", "mismatch"),
])
def test_an_answer_inside_the_reasoning_never_counts(verify, completion, reason):
    v = verify(completion, "4")
    assert not v.correct and reason in v.reason, v


def test_answer_region():
    assert answer_region("no tags") == (0, 7)
    text = "<think>a</think>b"
    assert text[slice(*answer_region(text))] == "b"
    assert answer_region("<think>a") is None
    text = "x</think><answer> 5 </answer> trailing"
    assert text[slice(*answer_region(text))] == " 5 "
    assert extract_answer("<think>\\boxed{1}</think> \\boxed{2}").answer == "2"
    assert extract_answer("<think>\\boxed{1}</think> \\boxed{2}").others == ()


# ----------------------------------------------------------------------------- self-correction vs hedge

@pytest.mark.parametrize("completion", [
    "So the answer is \\boxed{3}. Hmm, that doesn't look right. Let me recompute: 2+2=4. The answer is \\boxed{4}.",
    "So the answer is \\boxed{3}. Actually, I was wrong: 2+2=4, so \\boxed{4}.",
    "So the answer is \\boxed{3}.\n\nCorrection: 2+2=4, so the answer is \\boxed{4}.",
    "So the answer is \\boxed{3}.\n\nWait, let me double-check. 2+2=4. So the answer is \\boxed{4}.",
    "First attempt: \\boxed{3}. That was a mistake; redoing it gives \\boxed{4}.",
    "\\boxed{3}. On second thought, it is \\boxed{4}.",
    "\\boxed{3}\nWait, no. Recomputing: 2+2=4, so \\boxed{4}.",
    "\\boxed{2} and \\boxed{3}? Wait, that's wrong: \\boxed{4}.",  # everything before the marker is discarded
])
def test_a_self_correction_is_judged_on_its_final_answer(verify, completion):
    assert verify(completion, "4").correct, verify(completion, "4")
    v = verify(completion, "3")
    assert not v.correct, v  # the retracted first attempt earns nothing


@pytest.mark.parametrize("completion", [
    "It is \\boxed{3} or \\boxed{4}.",
    "\\boxed{3}, \\boxed{4}",
    "\\boxed{3}\n\\boxed{4}",
    "The answer is \\boxed{4}. Also possible: \\boxed{3}.",
    "Wait, it is \\boxed{3} or \\boxed{4}.",  # a marker before both boxes retracts neither
    "\\boxed{1}. Actually, \\boxed{3} or \\boxed{4}.",  # the final attempt itself hedges
    "The answer is $\\boxed{3 \\text{ or } 4}$.",
    "The answer is \\boxed{4}. Wait, that's wrong.",  # retracted, nothing after it
    "\\boxed{4}. Hmm, no, I made a mistake above.",
])
def test_a_hedge_or_a_bare_retraction_is_refused(verify, completion):
    verdicts = [verify(completion, gold) for gold in ("3", "4")]
    assert not any(v.correct for v in verdicts), verdicts
    assert any("hedged" in v.reason or "retracted" in v.reason for v in verdicts), verdicts  # not a plain mismatch


def test_several_boxes_of_one_value_and_list_references_still_pass(verify):
    assert verify("$\\boxed{15\\frac{39}{40}}$, or $\\boxed{\\frac{639}{40}}$ inches.", "\\frac{639}{40}").correct
    assert verify("\\boxed{2} and \\boxed{3}", "2, 3").correct
    assert verify("We get \\boxed{4}. Let me double-check: 2+2 = 4. Yes.", "4").correct


_MARKERS = ["Wait, ", "Actually, ", "Hmm, that's wrong. ", "Correction: ", "On second thought, ", "Let me recheck. ",
            "Oops, I made a mistake. ", "Hold on. "]
_PLAIN = [" or ", ", ", " and ", "\n", " maybe "]


@settings(max_examples=150, derandomize=True, deadline=None, database=None)
@given(values=st.lists(st.integers(0, 9), min_size=2, max_size=6),
       seps=st.lists(st.one_of(st.sampled_from(_MARKERS), st.sampled_from(_PLAIN)), min_size=5, max_size=5),
       gold=st.integers(0, 9))
def test_a_list_of_guesses_earns_what_its_final_attempt_earns(values, seps, gold):
    """Boxes joined by markers or plain separators: the reward is 1 exactly when the final
    attempt (the boxes after the last marker) holds the gold and nothing else, and the answer
    changed at most once from one attempt to the next (one correction; more is a list of guesses)."""
    verify = get_verifier("math")
    text = f"\\boxed{{{values[0]}}}"
    attempts = [[values[0]]]
    for value, sep in zip(values[1:], seps):
        text += sep + f"\\boxed{{{value}}}"
        if sep in _MARKERS:
            attempts.append([value])
        else:
            attempts[-1].append(value)
    sets = [set(a) for a in attempts]
    changes = sum(a != b for a, b in zip(sets, sets[1:]))
    v = verify(text, str(gold))
    assert v.correct == (sets[-1] == {gold} and changes <= 1), (text, gold, v)
