"""Tests of rlvr.verifiers: answer extraction, number parsing, the numeric verifier and the registry."""

from __future__ import annotations

import time

import pytest

from rlvr.tasks import load_gsm8k
from rlvr.types import Verdict
from rlvr.verifiers import (
    extract_final_answer,
    get_verifier,
    list_verifiers,
    numeric_verifier,
    parse_number,
    register_verifier,
    safe_verify,
)

# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize("text, expected", [
    ("so the answer is \\boxed{42}.", "42"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),                      # nested braces
    ("\\boxed{\\sqrt{\\frac{a}{b}} + {c}}", "\\sqrt{\\frac{a}{b}} + {c}"),
    ("first \\boxed{3}, then corrected: \\boxed{5}", "5"),          # last boxed wins
    ("\\boxed{7} and later 99", "7"),                                # boxed beats a later number
    ("\\boxed { 12 }", "12"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),                            # escaped braces are not structure
    ("\\boxed{4} then \\boxed{5", "4"),                               # an unclosed last box is skipped
    ("\\boxed{} but 8 is it", "8"),                                   # an empty box is no answer
    ("3 apples and 4 pears, 7 fruits", "7"),                         # last number
    ("The temperature is -5 degrees.", "-5"),
    ("It costs $1,234,567 in total.", "1,234,567"),
    ("half: 3/4 of it", "3/4"),
    ("so x = \\frac{3}{4}", "\\frac{3}{4}"),
    ("pi is about 3.14159.", "3.14159"),
    ("5-3 leaves 2", "2"),
    ("then 5-3", "3"),                                               # a minus between digits is not a sign
    ("1, 2, 3", "3"),                                                # a list is not a thousands group
])
def test_extract_boxed_or_last_number(text, expected):
    assert extract_final_answer(text) == expected


def test_extract_modes():
    assert extract_final_answer("the answer is 12", mode="boxed") is None
    assert extract_final_answer("the answer is \\boxed{12}", mode="boxed") == "12"
    assert extract_final_answer("no digits here") is None
    with pytest.raises(ValueError, match="mode"):
        extract_final_answer("1", mode="first_number")


@pytest.mark.parametrize("junk", [None, 42, 3.5, b"\\boxed{1}", ["1"], {}, ""])
def test_extract_non_strings(junk):
    assert extract_final_answer(junk) is None


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize("text, value", [
    ("42", 42.0), ("-3", -3.0), ("+7", 7.0), ("5.0", 5.0), (".5", 0.5),
    ("1,234", 1234.0), ("1,234,567.5", 1234567.5),
    ("$5", 5.0), ("\\$5", 5.0), ("$\\frac{1}{4}$", 0.25),
    ("3/4", 0.75), ("-3/4", -0.75), ("\\frac{3}{4}", 0.75), ("\\dfrac{3}{4}", 0.75), ("-\\frac{3}{4}", -0.75),
    ("\\frac34", 0.75),
    ("50%", 50.0), ("50\\%", 50.0),                                  # percent kept as its number
    ("42.", 42.0), (" 18 ", 18.0), ("{5}", 5.0), ("\\text{7}", 7.0),
    ("x = 5", 5.0), ("90^\\circ", 90.0), ("1e3", 1000.0),
    (7, 7.0), (2.5, 2.5),
])
def test_parse_number(text, value):
    assert parse_number(text) == pytest.approx(value)


@pytest.mark.parametrize("text", [
    None, "", "abc", "1,2", "1,23", "1/0", "\\frac{1}{0}", "nan", "inf", "1_000", "3 4", "1e999",
    "\\sqrt{2}", "(1, 2)", True, [1], 10 ** 400,
])
def test_parse_number_rejects(text):
    assert parse_number(text) is None


# ---------------------------------------------------------------- numeric verifier


def test_numeric_verifier_scores_and_reasons():
    verify = numeric_verifier()
    ok = verify("12 + 35 = \\boxed{47}", "47")
    assert ok == Verdict(1.0, "47", "match") and ok.correct

    wrong = verify("I think it is \\boxed{51}", "47")
    assert wrong.score == 0.0 and wrong.extracted == "51" and wrong.reason == "mismatch: 51 != 47"

    none = verify("I don't know", "47")
    assert none == Verdict(0.0, None, "no answer found")

    bad = verify("\\boxed{forty-seven}", "47")
    assert bad.score == 0.0 and bad.reason.startswith("unparseable answer")

    assert verify("\\boxed{1,234}", "1234").correct
    assert verify("\\boxed{0.75}", "\\frac{3}{4}").correct
    assert verify("So she makes $18.", "18").correct
    assert verify("\\boxed{47.0000001}", "47").correct              # within the relative tolerance
    assert not verify("\\boxed{47.01}", "47").correct
    assert verify("\\boxed{-2}", "-2").correct
    assert verify("\\boxed{5}", "x").reason.startswith("unparseable reference")


def test_numeric_verifier_options():
    loose = numeric_verifier(tolerance=0.01)
    assert loose("\\boxed{100.5}", "100").correct
    assert not loose("\\boxed{102}", "100").correct
    boxed_only = numeric_verifier(mode="boxed")
    assert boxed_only("the answer is 5", "5").reason == "no answer found"
    assert boxed_only("the answer is \\boxed{5}", "5").correct
    with pytest.raises(ValueError):
        numeric_verifier(tolerance=-1)
    with pytest.raises(ValueError):
        numeric_verifier(mode="nope")


@pytest.mark.parametrize("junk", [
    None, 12, 3.5, b"bytes", ["\\boxed{1}"], object(), "", "   ", "\x00\uffff",
    "\\boxed{" * 1000, "}" * 1000 + "{" * 1000, "\\boxed{\\boxed{\\boxed{", "$$$%%%///,,,...",
])
def test_junk_never_raises(junk):
    verify = get_verifier("numeric")
    for reference in ("1", None, "", 7):
        v = verify(junk, reference)
        assert isinstance(v, Verdict) and v.score in (0.0, 1.0)


def test_megabyte_inputs_are_fast():
    verify = get_verifier("numeric")
    inputs = [
        "1" * 1_000_000,
        "1," * 500_000,
        " " * 1_000_000 + "7",
        "\\boxed{" * 200_000,
        "{" * 500_000 + "}" * 500_000,
        "\\frac{" + " " * 1_000_000,
        "\\boxed{" + "9" * 1_000_000 + "}",
        "-" * 1_000_000,
    ]
    start = time.perf_counter()
    for text in inputs:
        assert isinstance(verify(text, "7"), Verdict)
    assert verify(" " * 1_000_000 + "7", "7").correct
    # linear time: well under a second each on a laptop; a quadratic scan of a megabyte would take hours, so this
    # bound (far above the expected time, for loaded machines) still catches one
    assert time.perf_counter() - start < 120


# ---------------------------------------------------------------- registry and safety


def test_registry():
    assert "numeric" in list_verifiers()
    verify = get_verifier("numeric", tolerance=0.5)
    assert verify("\\boxed{10.4}", "10").correct
    with pytest.raises(ValueError) as err:
        get_verifier("does-not-exist")
    assert "does-not-exist" in str(err.value) and "numeric" in str(err.value)
    with pytest.raises(ValueError, match="bogus_option: not an option .*'numeric' accepts: tolerance, mode"):
        get_verifier("numeric", bogus_option=1)


def test_register_custom_verifier_and_name_clash():
    @register_verifier("test-exact")
    def exact_factory(strip: bool = True):
        def verify(completion, reference):
            c = completion.strip() if strip else completion
            return Verdict(float(c == reference), c, "")
        return verify

    assert "test-exact" in list_verifiers()
    assert get_verifier("test-exact")(" a ", "a").correct
    assert not get_verifier("test-exact", strip=False)(" a ", "a").correct
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("numeric")(lambda: None)


def test_safe_verify():
    def broken(completion, reference):
        raise ZeroDivisionError("oops")

    v = safe_verify(broken, "x", "1")
    assert v.score == 0.0 and v.extracted is None
    assert v.reason.startswith("verifier error: ") and "oops" in v.reason
    assert safe_verify(get_verifier("numeric"), "\\boxed{3}", "3").correct


def test_safe_verify_refuses_a_wrong_return_type_naming_the_verifier():
    """A verifier returning a bool (or a Verdict without a numeric score) is a bug, not a wrong answer: it fails at
    its first call with a message naming it, instead of scoring every sample 0 in silence."""
    from rlvr.types import ComponentError, Verdict

    def says_bool(completion, reference):
        return completion == reference

    with pytest.raises(ComponentError, match=r"verifier says_bool .*returned bool True.*Verdict"):
        safe_verify(says_bool, "1", "1")
    with pytest.raises(ComponentError, match="score is str '1'"):
        safe_verify(lambda c, r: Verdict("1"), "x", "1")
    verify = get_verifier("numeric")
    assert getattr(verify, "rlvr_name", None) == "numeric"  # messages name the registry entry


# ---------------------------------------------------------------- real data


def test_every_gsm8k_test_solution_verifies_against_its_answer():
    problems = load_gsm8k(split="test")  # the data shipped with the package (or $RLVR_DATA_DIR)
    assert len(problems) == 1319
    verify = get_verifier("numeric", mode="boxed_or_last_number")
    failures = [(p.id, p.answer) for p in problems if not verify(p.metadata["solution"], p.answer).correct]
    assert failures == []
    # and a wrong reference is caught
    assert not verify(problems[0].metadata["solution"], "19").correct
