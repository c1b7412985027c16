"""The drawn visual task: disjoint splits by construction, difficulty, answers computed from the scene, and the
universal-answer property of the verifiers on its golds (one answer never matches two different golds)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.tasks.registry import TASKS
from rlvr.tasks.visual import KINDS, make_visual_problem
from rlvr.verifiers import get_verifier

visual = TASKS.get("visual")


@pytest.mark.parametrize("kind", KINDS)
def test_splits_are_disjoint_and_reproducible(kind):
    train, held = visual(kind=kind, difficulty=3, num_train=150, num_heldout=40, image_size=64)
    assert (len(train), len(held)) == (150, 40)
    scenes = [p.metadata["scene"] for p in train + held]
    assert len(set(scenes)) == len(scenes)  # no scene twice, so none in both splits
    assert len({p.id for p in train + held}) == 190
    train2, held2 = visual(kind=kind, difficulty=3, num_train=20, num_heldout=40, image_size=64)
    assert [p.metadata["scene"] for p in held2] == [p.metadata["scene"] for p in held]  # held-out does not move
    assert [(p.prompt, p.answer) for p in train2] == [(p.prompt, p.answer) for p in train[:20]]
    p = held[0]
    assert p.images[0].size == (64, 64) and p.metadata["kind"] == kind and p.metadata["difficulty"] == 3


def test_difficulty_changes_what_is_drawn():
    def mean(kind, d, f):
        return sum(f(p) for p in visual(kind=kind, difficulty=d, num_train=0, num_heldout=60)[1]) / 60

    assert mean("bars", 5, lambda p: len(p.metadata["heights"])) > mean("bars", 1, lambda p: len(p.metadata["heights"]))
    assert all(p.metadata["time"].endswith(":00") for p in visual(kind="clock", difficulty=1, num_train=0,
                                                                  num_heldout=40)[1])
    assert any(not p.metadata["time"].endswith(("00", "15", "30", "45")) for p in visual(
        kind="clock", difficulty=5, num_train=0, num_heldout=40)[1])
    assert mean("count", 5, lambda p: len(eval(p.metadata["scene"])[3])) > \
        mean("count", 1, lambda p: len(eval(p.metadata["scene"])[3]))


def test_answers_follow_from_the_scene():
    rng = random.Random(0)
    for _ in range(50):
        key, p = make_visual_problem("count", 4, rng, 96)
        _, shape, colour, objects = key
        assert int(p.answer) == sum(1 for s, c, _ in objects if (s, c) == (shape, colour))
        key, p = make_visual_problem("clock", 5, rng, 96)
        assert int(p.answer) == 60 * key[1] + key[2] and 0 <= int(p.answer) < 720
        key, p = make_visual_problem("bars", 3, rng, 96)
        heights, i, j = key[1], key[2], key[3]
        assert int(p.answer) == heights[i] - heights[j] >= 0
    for d in range(1, 6):
        for p in visual(kind="geometry", difficulty=d, num_train=0, num_heldout=30)[1]:
            m = p.metadata
            if m["figure"] == "right triangle":
                a, b, c = m["sides"]["bottom"], m["sides"]["left"], m["sides"]["hyp"]
                assert a * a + b * b == c * c and int(p.answer) == m["sides"][m["unknown"]]
            elif m["figure"] == "triangle":
                assert int(p.answer) == 180 - sum(m["angles"]) > 0
            elif m["figure"] == "trapezoid":
                assert int(p.answer) * 2 == sum(m["parallel"]) * m["height"]


def test_locate_golds_pass_the_grounding_verifier_and_the_whole_image_does_not():
    verify = get_verifier("grounding")
    for p in visual(kind="locate", difficulty=4, num_train=0, num_heldout=30, image_size=96)[1]:
        gold = json.loads(p.answer)
        assert verify(f"\\boxed{{{gold['box']}}}", p.answer).score == 1.0
        assert verify("\\boxed{[0, 0, 96, 96]}", p.answer).score == 0.0


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="difficulty"):
        visual(difficulty=6)
    with pytest.raises(ValueError, match="too few distinct scenes|image_size"):
        visual(kind="clock", difficulty=1, image_size=20)


GOLDS = sorted({p.answer for kind in ("count", "bars", "clock", "geometry") for d in (1, 3, 5)
                for p in visual(kind=kind, difficulty=d, num_train=0, num_heldout=25, image_size=64)[1]}, key=int)
_HACKS = ["\\boxed{x}", "\\boxed{0=0}", "\\boxed{n}", "\\boxed{}", "\\boxed{\\infty}", "\\boxed{[0, 720]}",
          "\\boxed{(0, 1000)}", "\\boxed{\\mathbb{N}}", "\\boxed{\\text{any}}", "\\boxed{a \\le 720}"]


@pytest.mark.parametrize("name", ["numeric", "math"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidate=st.one_of(
    st.sampled_from(_HACKS),
    st.lists(st.sampled_from(GOLDS), min_size=2, max_size=4).map(lambda xs: "\\boxed{" + ", ".join(xs) + "}"),
    st.lists(st.sampled_from(GOLDS), min_size=2, max_size=3).map(lambda xs: " or ".join(f"\\boxed{{{x}}}" for x in xs)),
    st.integers(-5, 800).map(lambda n: f"\\boxed{{{n}}}"),
    st.sampled_from(GOLDS).map(lambda g: f"\\boxed{{{g}.0}}"),
))
def test_one_answer_never_matches_two_golds(name, candidate):
    """No answer earns reward against a gold it is not equal to: over the visual task's golds, every candidate
    (numbers, lists of golds, hedges, symbols) matches at most one gold value."""
    verify = get_verifier(name)
    matched = {g for g in GOLDS if verify(candidate, g).score > 0}
    assert len(matched) <= 1, (candidate, matched)
