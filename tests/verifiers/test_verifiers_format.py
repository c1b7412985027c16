"""Format verifier (think/answer/boxed) and IFEval-style instruction constraints."""

from __future__ import annotations

import json

import pytest

from rlvr.verifiers import get_verifier
from rlvr.verifiers.instruction import CHECKS, check_constraint

GOOD = "<think>2 + 2 is 4</think>\n<answer>\\boxed{4}</answer>"


def test_format_accepts_well_formed():
    v = get_verifier("format", boxed=True)(GOOD, None)
    assert v.correct and v.extracted == "\\boxed{4}" and v.reason == "format ok"


@pytest.mark.parametrize("text, why", [
    ("<answer>4</answer>", "<think>"),
    ("<think>x</think>", "<answer>"),
    ("<think></think><answer>4</answer>", "empty or malformed"),
    ("<think>a</think><think>b</think><answer>4</answer>", "<think>"),
    ("<answer>4</answer><think>why</think>", "before <answer>"),
    ("<think>why</think><answer>4</answer> and more", "text after"),
    ("<think>why</think><answer> </answer>", "empty <answer>"),
    ("<think>why</think><answer>4</answer><answer>5</answer>", "one <answer>"),
    ("<think>why</think><answer>4", "one <answer>"),
])
def test_format_rejects(text, why):
    v = get_verifier("format")(text, None)
    assert not v.correct and why in v.reason, v.reason


def test_format_options():
    assert get_verifier("format", think=False)("<answer>4</answer>", "").correct
    assert get_verifier("format", strict=False)("<think>a</think><answer>4</answer> bye", "").correct
    assert get_verifier("format", think_open_optional=True)("reasoning</think><answer>4</answer>", "").correct
    boxed_only = get_verifier("format", think=False, answer=False, boxed=True)
    assert boxed_only("so \\boxed{12}", "").extracted == "12"
    assert not boxed_only("so \\boxed{}", "").correct
    assert "boxed" in get_verifier("format", boxed=True)("<think>a</think><answer>4</answer>", "").reason
    with pytest.raises(ValueError):
        get_verifier("format", think=False, answer=False, boxed=False)


@pytest.mark.parametrize("bad", [None, 12, b"<answer>4</answer>", "", "\x00\xff" * 100, "<think>" * 200_000])
def test_format_bad_input(bad):
    v = get_verifier("format")(bad, None)
    assert not v.correct and v.reason


# ----------------------------------------------------------------------------- instruction

def ref(*constraints):
    return json.dumps(list(constraints))


@pytest.mark.parametrize("text, constraint, ok", [
    ("one two three", {"type": "words", "min": 3, "max": 3}, True),
    ("one two three four", {"type": "words", "max": 3}, False),
    ("First. Second! Third?", {"type": "sentences", "min": 3}, True),
    ("First. Second", {"type": "sentences", "min": 3}, False),
    ("I like Python and Rust", {"type": "include_keywords", "keywords": ["python", "rust"]}, True),
    ("I like Python", {"type": "include_keywords", "keywords": ["python", "rust"]}, False),
    ("a cat sat", {"type": "exclude_keywords", "keywords": ["dog"]}, True),
    ("a Dog sat", {"type": "exclude_keywords", "keywords": ["dog"]}, False),
    ("yes no yes", {"type": "keyword_frequency", "keyword": "yes", "min": 2, "max": 2}, True),
    ("yes", {"type": "keyword_frequency", "keyword": "yes", "min": 2}, False),
    ('{"a": [1, 2]}', {"type": "json"}, True),
    ('```json\n{"a": 1}\n```', {"type": "json"}, True),
    ('{"a": 1', {"type": "json"}, False),
    ("all quiet here", {"type": "lowercase"}, True),
    ("Not quiet", {"type": "lowercase"}, False),
    ("LOUD 123", {"type": "uppercase"}, True),
    ("LOUd", {"type": "uppercase"}, False),
    ("Section 1\nintro\nSection 2\nbody", {"type": "sections", "count": 2}, True),
    ("SECTION 1 only", {"type": "sections", "count": 2, "splitter": "SECTION"}, False),
    ("* a\n* b\n- c", {"type": "bullets", "count": 3}, True),
    ("* a\n* b", {"type": "bullets", "count": 3}, False),
    ("no commas here", {"type": "no_commas"}, True),
    ("a, b", {"type": "no_commas"}, False),
    ("That is all. Any other questions?", {"type": "ends_with", "phrase": "Any other questions?"}, True),
    ("Any other questions? No.", {"type": "ends_with", "phrase": "Any other questions?"}, False),
])
def test_each_constraint(text, constraint, ok):
    assert check_constraint(text, constraint)[0] is ok
    v = get_verifier("instruction")(text, ref(constraint))
    assert v.correct is ok


def test_every_check_is_exercised():
    marks = test_each_constraint.pytestmark[0].args[1]
    assert {c["type"] for _, c, _ in marks} == set(CHECKS)


def test_instruction_all_or_partial():
    r = ref({"type": "lowercase"}, {"type": "words", "max": 2}, {"type": "no_commas"})
    v = get_verifier("instruction")("just three words", r)
    assert not v.correct and "2/3" in v.reason and "words" in v.reason
    assert get_verifier("instruction", partial=True)("just three words", r).score == pytest.approx(2 / 3)
    assert get_verifier("instruction")("two words", json.dumps({"constraints": json.loads(r)})).correct


@pytest.mark.parametrize("reference", ["not json", "[]", '[{"type": "nope"}]', '[{"type": "words"}]',
                                       '[{"type": "include_keywords", "keywords": []}]', None, "{}"])
def test_instruction_bad_reference(reference):
    v = get_verifier("instruction")("some text", reference)
    assert not v.correct and "bad reference" in v.reason


@pytest.mark.parametrize("bad", [None, 3.5, "", "   ", "x" * 1_000_001, bytes(range(256)).decode("latin-1")])
def test_instruction_bad_completion(bad):
    v = get_verifier("instruction")(bad, ref({"type": "json"}))
    assert not v.correct and v.reason
