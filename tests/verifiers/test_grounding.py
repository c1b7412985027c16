"""The grounding verifier against hand-computed boxes, its refusals, and properties over random boxes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.verifiers import get_verifier, list_verifiers
from rlvr.verifiers.grounding import box_iou, parse_boxes, parse_reference

REF = json.dumps({"box": [0, 0, 10, 10], "image_size": [100, 100]})


def test_registered():
    assert "grounding" in list_verifiers()


@pytest.mark.parametrize("a, b, iou", [
    ((0, 0, 10, 10), (0, 0, 10, 10), 1.0),
    ((0, 0, 10, 10), (5, 5, 15, 15), 25 / 175),  # 5 x 5 overlap, 100 + 100 - 25 union
    ((0, 0, 10, 10), (0, 0, 10, 5), 50 / 100),
    ((0, 0, 10, 10), (10, 0, 20, 10), 0.0),  # touching edges
    ((0, 0, 4, 2), (1, 1, 3, 5), 2 / 14),  # overlap [1,3]x[1,2] = 2; 8 + 8 - 2
])
def test_iou_by_hand(a, b, iou):
    assert box_iou(a, b) == pytest.approx(iou)
    assert box_iou(b, a) == pytest.approx(iou)


def test_binary_and_continuous_scores():
    binary, cont = get_verifier("grounding"), get_verifier("grounding", continuous=True)
    assert binary("The box is \\boxed{[0, 0, 10, 5]}.", REF).score == 1.0  # IoU exactly 0.5
    assert binary("\\boxed{[0, 0, 10, 4]}", REF).score == 0.0  # IoU 0.4
    assert get_verifier("grounding", threshold=0.3)("\\boxed{[0, 0, 10, 4]}", REF).score == 1.0
    # continuous: (IoU - IoU_whole) / (1 - IoU_whole), IoU_whole = 100 / 10000
    v = cont("\\boxed{(5, 5, 15, 15)}", REF)
    assert v.score == pytest.approx((25 / 175 - 0.01) / 0.99) and v.extracted == "[5, 5, 15, 15]"
    assert cont("\\boxed{[0, 0, 10, 10]}", REF).score == 1.0
    assert cont("\\boxed{[50, 50, 60, 60]}", REF).score == 0.0
    assert binary("[0, 0, 10, 10]", "[0, 0, 10, 10]").score == 1.0  # a bare box reference, unboxed answer
    assert binary("I think \\boxed{[0.0, 0, 1e1, 10.]}", REF).score == 1.0


@pytest.mark.parametrize("completion, reason", [
    ("no box here", "no box"),
    ("\\boxed{[0, 0, 100, 100]}", "no better than the whole image"),
    ("\\boxed{[0, 0, 10, 10], [20, 20, 30, 30]}", "2 boxes given"),
    ("[0, 0, 10, 10] or maybe [1, 1, 10, 10]", "2 boxes given"),
    ("\\boxed{[nan, 0, 10, 10]}", "not finite"),
    ("\\boxed{[0, 0, inf, 10]}", "not finite"),
    ("\\boxed{[10, 10, 0, 0]}", "out of order"),
    ("\\boxed{[5, 0, 5, 10]}", "zero-size"),
    ("\\boxed{[-5, 0, 10, 10]}", "outside the 100 x 100 image"),
    ("\\boxed{[0, 0, 10, 10, 3]}", "no box"),
])
def test_refusals_name_the_reason(completion, reason):
    v = get_verifier("grounding", threshold=0.01)(completion, REF)
    assert v.score == 0.0 and reason in v.reason, v


def test_options_and_bad_references():
    assert get_verifier("grounding", allow_swapped=True)("\\boxed{[10, 10, 0, 0]}", REF).score == 1.0
    assert get_verifier("grounding", max_boxes=2)("\\boxed{[20, 20, 30, 30], [0, 0, 10, 10]}", REF).score == 1.0  # the last
    for bad in ("[1, 2, 3]", "hello", json.dumps({"box": [5, 5, 1, 1]}), json.dumps({"box": [0, 0, 1, 1],
                                                                                      "image_size": [0, 5]})):
        v = get_verifier("grounding")("\\boxed{[0, 0, 1, 1]}", bad)
        assert v.score == 0.0 and v.reason.startswith("bad reference")
    with pytest.raises(ValueError, match="threshold"):
        get_verifier("grounding", threshold=0)
    assert parse_reference("[1, 2, 3, 4]") == ((1.0, 2.0, 3.0, 4.0), None)
    assert parse_boxes("(1,2,3,4) and [5, 6, 7, 8]") == [(1, 2, 3, 4), (5, 6, 7, 8)]


coord = st.integers(0, 100)


@st.composite
def boxes(draw):
    x1, x2 = sorted(draw(st.lists(coord, min_size=2, max_size=2, unique=True)))
    y1, y2 = sorted(draw(st.lists(coord, min_size=2, max_size=2, unique=True)))
    return (x1, y1, x2, y2)


@settings(max_examples=200, deadline=None)
@given(gold=boxes(), pred=boxes())
def test_properties(gold, pred):
    """Scores stay in [0, 1]; the gold itself scores 1; the whole image never earns more than 0 unless it is the
    gold; binary success is exactly IoU >= threshold for any box strictly better than the whole image."""
    ref = json.dumps({"box": list(gold), "image_size": [100, 100]})
    cont, binary = get_verifier("grounding", continuous=True), get_verifier("grounding")
    s = cont(f"\\boxed{{{list(pred)}}}", ref).score
    assert 0.0 <= s <= 1.0
    assert cont(f"\\boxed{{{list(gold)}}}", ref).score == 1.0 == binary(f"\\boxed{{{list(gold)}}}", ref).score
    whole = binary("\\boxed{[0, 0, 100, 100]}", ref).score, cont("\\boxed{[0, 0, 100, 100]}", ref).score
    assert whole == ((1.0, 1.0) if gold == (0, 0, 100, 100) else (0.0, 0.0))
    iou, base = box_iou(pred, gold), box_iou((0, 0, 100, 100), gold)
    if iou > base:
        assert binary(f"\\boxed{{{list(pred)}}}", ref).score == float(iou >= 0.5)
