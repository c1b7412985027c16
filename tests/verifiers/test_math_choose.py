"""How a response's final answer is chosen (``rlvr.verifiers.math.choose``, docs/rewards.md):
thought blocks of every family, corrections and lists of guesses, alternatives and hedges,
truncation, scale and unit words, unicode, the cost of a 20,000-box response; then the
properties over every shipped gold: several distinct candidate values earn nothing against
any of them, a correction after the box is judged on the correction, and scale and unit
words never vanish."""

from __future__ import annotations

import gzip
import json
import re
import time
from fractions import Fraction
from functools import lru_cache

import pytest

pytest.importorskip("math_verify")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlvr.tasks.arithmetic import ArithmeticSpec, arithmetic_split  # noqa: E402
from rlvr.tasks.benchmarks import PACKAGED_DATA_DIR, load_benchmark  # noqa: E402
from rlvr.verifiers import get_verifier  # noqa: E402
from rlvr.verifiers.math.choose import choose_answer, has_variables, is_finished, split_alternatives  # noqa: E402
from rlvr.verifiers.math.extract import THOUGHT_BLOCKS, answer_region, outermost  # noqa: E402
from rlvr.verifiers.math.normalize import clean, to_number  # noqa: E402
from rlvr.verifiers.math.units import exact_text, split_trailing, unicode_to_latex  # noqa: E402

PROPERTY = settings(max_examples=100, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LONG = "We work through the problem one step at a time, checking each step. " * 6  # > SHORT_RESPONSE


@pytest.fixture(scope="module")
def verify():
    return get_verifier("math")


def box(s: str) -> str:
    return f"So the final answer is $\\boxed{{{s}}}$."


# ----------------------------------------------------------------------------- thought blocks

@pytest.mark.parametrize("open_, close", [b[:2] for b in THOUGHT_BLOCKS])
def test_no_thought_block_family_is_ever_the_answer(verify, open_, close):
    assert verify(f"{open_}It is \\boxed{{3}}.{close}\nThe answer is $\\boxed{{4}}$.", "4").correct
    assert not verify(f"{open_}It is \\boxed{{4}}.{close}\nThe answer is $\\boxed{{3}}$.", "4").correct
    assert not verify(f"{open_}It is \\boxed{{4}}.{close}\nI am not sure.", "4").correct
    cut = verify(f"{open_}So far it is \\boxed{{4}}, and then", "4")  # truncated while thinking
    assert not cut.correct and "unfinished" in cut.reason, cut


def test_harmony_end_tag_counts_only_after_an_analysis_channel(verify):
    final = "<|start|>assistant<|channel|>final<|message|>The answer is $\\boxed{4}$.<|end|>"
    assert verify(final, "4").correct  # an <|end|> closing the final message blanks nothing
    both = "<|channel|>analysis<|message|>maybe \\boxed{3}<|end|>" + final
    assert verify(both, "4").correct and not verify(both, "3").correct


def test_template_opened_blocks_leave_only_the_closing_tag(verify):
    for close in ("</think>", "<|end_of_thought|>", "\u25c1/think\u25b7", "</Thought>"):
        assert verify(f"maybe \\boxed{{3}} {close} The answer is \\boxed{{4}}.", "4").correct


def test_thought_blocks_are_a_verifier_option(verify):
    text = "<scratch>\\boxed{3}</scratch> The answer is \\boxed{4}."
    assert not verify(text, "4").correct  # two boxes, a hedge, by default
    custom = get_verifier("math", thought_blocks=[["<scratch>", "</scratch>"]])
    assert custom(text, "4").correct
    assert custom("<think>\\boxed{3}</think> \\boxed{4}", "4").reason.startswith("hedged")  # <think> no longer known
    assert answer_region("<scratch>a</scratch>b", [["<scratch>", "</scratch>"]]) == (20, 21)
    for bad in ("<think>", [["<think>"]], [["<think>", ""]], [[1, 2]], [["a", "b", "sometimes"]]):
        with pytest.raises(ValueError):
            get_verifier("math", thought_blocks=bad)


# ----------------------------------------------------------------------------- attempts: corrections and guesses

@pytest.mark.parametrize("completion", [
    "So $\\boxed{7}$. Hmm, wait, I misread the question. The correct answer is 8.",
    "So $\\boxed{7}$. Wait, that's wrong: the answer is $8$.",
    "\\boxed{7}\n\nActually, I made an error above.\nAnswer: 8",
    "\\boxed{7}. On second thought, \\boxed{8}.",
])
def test_a_correction_after_the_box_is_judged_on_the_correction(verify, completion):
    assert verify(completion, "8").correct, verify(completion, "8")
    assert not verify(completion, "7").correct


def test_one_answer_restated_or_checked_is_one_answer(verify):
    assert verify("\\boxed{7}. So the answer is 7.", "7").correct
    assert verify("\\boxed{7}. Let me double-check: 3 + 4 = 7, so the answer is $7$. Yes.", "7").correct
    assert verify("\\boxed{7}. We may check our answer: 3 + 4 = 7, so our answer is correct.", "7").correct
    v = verify("\\boxed{7}. The answer is 8.", "8")  # two answers and no correction between them
    assert not v.correct and v.reason.startswith("hedged"), v


def test_guesses_joined_by_wait_are_a_hedge(verify):
    spray = "".join(f"\\boxed{{{i}}}. Wait, " for i in range(49)) + "\\boxed{49}."
    for gold in ("49", "0", "25"):
        v = verify(spray, gold)
        assert not v.correct and v.reason.startswith("hedged"), (gold, v)
    flip = "\\boxed{4}. Wait, \\boxed{3}. Wait, \\boxed{4}."  # A -> B -> A: two changes
    assert not verify(flip, "4").correct
    assert verify("\\boxed{4}. Wait, let me recheck. \\boxed{4}. Hmm, yes: \\boxed{4}.", "4").correct


# ----------------------------------------------------------------------------- alternatives

@pytest.mark.parametrize("completion, gold", [
    ("It could be 11, or it could be 12.", "12"),
    ("It could be 11, or it could be 12.", "11"),
    ("The answer is one of: 0, 1, \u2026, 1000.", "1000"),
    ("The answer is one of: 0, 1, \\ldots, 1000.", "500"),
    (LONG + "So the number of ways is either 5 or 6.", "6"),
    ("The answer is $\\boxed{(C)(E)}$.", "\\text{(C)}"),
    ("The answer is $\\boxed{(C) \\text{ or } (E)}$.", "C"),
    ("The answer is $\\boxed{3 \\text{ or } 4}$.", "3"),
])
def test_several_candidate_values_earn_nothing(verify, completion, gold):
    v = verify(completion, gold)
    assert not v.correct and v.reason.startswith(("hedged", "mismatch")), v


@pytest.mark.parametrize("completion, gold", [
    (box("\\frac{1}{2} \\text{ or } 0.5"), "\\frac{1}{2}"),
    ("The answer is $\\frac{1}{2}$, or $0.5$.", "\\frac{1}{2}"),
    (box("x = 3 \\text{ or } x = -3"), "\\pm 3"),
    (box("x = \\pm 3"), "3, -3"),
    (box("3 \\text{ or } -3"), "-3, 3"),
    (box("\\textbf{(C)}\\ 27"), "27"),
    (box("2\u221a3"), "2\\sqrt{3}"),
    (box("x\u00b2 + 1"), "x^2+1"),
    ("The answer is \u00bd.", "\\frac{1}{2}"),
    ("The answer is \u20133.", "-3"),
    (box("\u22123"), "-3"),
    (box("3\u00bd"), "\\frac{7}{2}"),
    ("Thus the length is $\\sqrt{DF^2 - EF^2},$ or $\\sqrt{100 - 49} = \\sqrt{51}$.", "\\sqrt{51}"),
])
def test_right_answers_written_several_ways_are_accepted(verify, completion, gold):
    v = verify(completion, gold)
    assert v.correct, v


def test_a_pause_or_a_sum_is_no_list_of_alternatives(verify):
    assert verify(LONG + "Summing 3, 4, 5\u2026 we get 12.", "12").correct  # an ellipsis as a pause
    assert verify(LONG + "So $1 + 2 + \\cdots + 100 = 5050$.", "5050").correct
    assert verify("Since $n$ is 2 or 3, the answer is 10.", "10").correct  # the "or" is not in the answer's clause


def test_split_alternatives():
    assert split_alternatives("3 \\text{ or } 4") == ["3", "4"]
    assert split_alternatives("either 2 or 3") == ["2", "3"]
    assert split_alternatives("\\{x \\mid x < 0 \\text{ or } x > 1\\}") == ["\\{x \\mid x < 0 \\text{ or } x > 1\\}"]
    assert split_alternatives("\\text{Victor}") == ["\\text{Victor}"]  # "or" inside a word is no separator


# ----------------------------------------------------------------------------- truncation

def test_a_response_cut_off_mid_statement_has_no_trailing_number(verify):
    cut = LONG + "Adding these we get 3 + 4 = 7, and multiplying by 12"
    v = verify(cut, "12")
    assert not v.correct and "cut off" in v.reason, v
    assert not verify(cut, "7").correct
    assert verify(LONG + "Adding these we get 3 + 4 = 7, and multiplying by 12 gives 84.", "84").correct
    assert verify(cut + " \\boxed{84}", "84").correct  # a box is an answer however the response ends
    assert verify(LONG + "So the answer is 84", "84").correct  # so is an answer sentence
    assert verify("Adding up, we get 3 + 4 = 7 apples", "7").correct  # a short answer line
    assert verify(LONG + "The total is $204$. -sepehr2010", "204").correct  # one word after the last sentence
    assert verify(LONG + "The total is 2/3. <|im_start|>user", "\\frac{2}{3}").correct  # an end-of-turn token


def test_is_finished():
    assert is_finished("It is 7.") == 8
    assert is_finished(LONG + "and then 12") is None
    assert is_finished(LONG + "it is $28$ percent") is not None
    assert is_finished(LONG + "it is 28. Then 12") is None  # a number after the last sentence: cut off


# ----------------------------------------------------------------------------- scale and unit words

@pytest.mark.parametrize("answer, gold, ok", [
    ("5\\text{ million}", "5", False), ("5\\text{ million}", "5000000", True), ("2.5 \\text{ billion}", "2500000000", True),
    ("3 \\text{ dozen}", "36", True), ("3 \\text{ dozen}", "3", False),
    ("25\\text{ cents}", "25", False), ("25\\text{ cents}", "0.25", True), ("\\$0.25", "25 \\text{ cents}", True),
    ("5\\text{ cm}", "5 \\text{ m}", False), ("500\\text{ cm}", "5\\text{ m}", True), ("5\\text{ cm}", "5", True),
    ("5 \\text{ cm}^2", "5\\text{ m}^2", False), ("50000 \\text{ cm}^2", "5\\text{ m}^2", True),
    ("2 \\text{ hours}", "120 \\text{ minutes}", True), ("2 \\text{ kg}", "2 \\text{ m}", False),
    ("0.25\\%", "\\frac{1}{4}", False), ("25\\%", "\\frac{1}{4}", True), ("25\\%", "25", True),
    ("25 \\text{ percent}", "0.25", True), ("0.25\\%", "0.0025", True),
    ("6.9999999999999" + "0" * 200, "7", False),
    ("12 \\text{ is not the answer}", "12", False), ("12 \\text{ or more}", "12", False),
    ("12 \\text{ apples}", "12", True), ("3 \\text{ ways}", "3", True), ("20 \\text{ miles per hour}", "20", True),
])
def test_scale_and_unit_words_never_vanish(verify, answer, gold, ok):
    v = verify(box(answer), gold)
    assert v.correct == ok, (answer, gold, v)


def test_split_trailing_kinds():
    kinds = {s: split_trailing(s).kind for s in ("5\\text{ million}", "25 cents", "5 \\text{cm}^2", "3 \\text{ ways}",
                                                  "12 \\text{ is not the answer}", "2x", "\\text{Monday}", "25 percent")}
    assert kinds == {"5\\text{ million}": "scale", "25 cents": "unit", "5 \\text{cm}^2": "unit", "3 \\text{ ways}": "noun",
                     "12 \\text{ is not the answer}": "other", "2x": "none", "\\text{Monday}": "none",
                     "25 percent": "percent"}
    assert clean("5\\text{ million}") == "5000000" and clean("25\\text{ cents}") == "0.25"


def test_unicode_to_latex():
    assert unicode_to_latex("2\u221a3, x\u00b2, \u00bd, \u20133, 3\u20135, \u221a(x+1), \u03c0, 10\u207b\u00b3, x\u2081") == \
        "2\\sqrt{3}, x^{2}, \\frac{1}{2}, -3, 3\u20135, \\sqrt{x+1}, \\pi , 10^{-3}, x_{1}"
    assert unicode_to_latex("plain ascii") == "plain ascii"


# ----------------------------------------------------------------------------- cost

def test_outermost_is_linear_and_correct():
    spans = [(1, 20), (3, 5), (7, 9), (22, 30), (24, 28), (25, 26), (40, 41)]
    assert outermost(spans) == [(1, 20), (22, 30), (40, 41)]


def test_twenty_thousand_boxes_verify_without_hanging(verify):
    """The measurement is benchmarks/math_extraction_cost.py (a ratio to one scan of the string); this only
    guards against a hang: the quadratic filter took about a minute here."""
    verify(box("\\sqrt{8}"), "2\\sqrt{2}")  # the worker is started outside the timed part
    for text in ("\\boxed{1} " * 20_000, "".join(f"\\boxed{{{i % 10}}}. Wait, " for i in range(20_000))[:200_000]):
        t0 = time.monotonic()
        v = verify(text, "1")
        assert time.monotonic() - t0 < 30, "reading one response must never take a training step's worth of time"
        assert isinstance(v.reason, str)
    assert choose_answer("\\boxed{1} " * 20_000).answer == "1"


# ----------------------------------------------------------------------------- properties over every shipped gold

@lru_cache(maxsize=1)
def every_gold() -> tuple[str, ...]:
    """Every distinct gold shipped: MATH-500, AIME 2024, AMC 2023, GSM8K test and train, and the arithmetic task's."""
    golds: list[str] = []
    for name in ("math500", "aime24", "amc23", "gsm8k"):
        golds += [p.answer for p in load_benchmark(name)]
    with gzip.open(PACKAGED_DATA_DIR / "gsm8k_train.jsonl.gz", "rt") as f:
        golds += [json.loads(line)["answer"].split("####")[-1].strip().replace(",", "") for line in f if line.strip()]
    train, heldout = arithmetic_split(ArithmeticSpec(), 200, 50)
    golds += [p.answer for p in train + heldout]
    return tuple(dict.fromkeys(g for g in golds if g.strip()))


@lru_cache(maxsize=1)
def numeric_golds() -> tuple[str, ...]:
    return tuple(g for g in every_gold() if (n := to_number(clean(g))) is not None and not n[1] and n[0] != 0)


def test_every_gold_is_loaded():
    golds = every_gold()
    assert len(golds) > 1000 and {"\\frac{14}{3}", "52_8", "18"} <= set(golds)
    assert len(numeric_golds()) > 1000


def _distinct(verify, a: str, b: str) -> bool:
    """``a`` and ``b`` are different values (each boxed alone fails against the other) and each is paid alone."""
    return (verify(box(a), a).correct and verify(box(b), b).correct
            and not verify(box(a), b).correct and not verify(box(b), a).correct)


HEDGES = [
    "It is $\\boxed{{{a}}}$ or $\\boxed{{{b}}}$.",
    "$\\boxed{{{a}}}$\n$\\boxed{{{b}}}$",
    "The answer is $\\boxed{{{a} \\text{{ or }} {b}}}$.",
    "The answer is ${a}$ or ${b}$.",
    "It could be ${a}$, or it could be ${b}$.",
    "The answer is one of: ${a}$, ${b}$, \\ldots",
    "$\\boxed{{{a}}}$. Wait, $\\boxed{{{b}}}$. Wait, $\\boxed{{{a}}}$.",  # the answer changes twice
    "$\\boxed{{{b}}}$. Wait, $\\boxed{{{a}}}$. Wait, $\\boxed{{{b}}}$. Hmm, $\\boxed{{{a}}}$.",
]


def test_several_distinct_candidate_values_earn_nothing_against_any_of_them(verify):
    golds = every_gold()

    @PROPERTY
    @given(a=st.sampled_from(golds), b=st.sampled_from(golds), form=st.sampled_from(HEDGES))
    def prop(a, b, form):
        assume(a != b and "$" not in a + b)
        assume(_distinct(verify, a, b))
        text = form.format(a=a, b=b)
        for gold, other in ((a, b), (b, a)):
            if "\\boxed" not in form and has_variables(other) and not has_variables(clean(gold)):
                continue  # in a sentence, a formula in variables beside a plain value is no candidate value (docs)
            v = verify(text, gold)
            assert not v.correct, (text, gold, v)

    prop()


CORRECTIONS = [
    "So $\\boxed{{{wrong}}}$. Hmm, wait, I misread the question. The correct answer is ${right}$.",
    "So $\\boxed{{{wrong}}}$.\n\nWait, that's wrong. Redoing the last step: $\\boxed{{{right}}}$.",
    "$\\boxed{{{wrong}}}$. Actually, I made an error above. The answer is $\\boxed{{{right}}}$.",
]


def test_a_correction_after_the_box_is_judged_on_the_correction_for_every_gold(verify):
    golds = every_gold()

    @PROPERTY
    @given(right=st.sampled_from(golds), wrong=st.sampled_from(golds), form=st.sampled_from(CORRECTIONS))
    def prop(right, wrong, form):
        assume(right != wrong and "$" not in right + wrong)
        assume(_distinct(verify, right, wrong))
        text = form.format(right=right, wrong=wrong)
        assert verify(text, right).correct, (text, right, verify(text, right))
        assert not verify(text, wrong).correct, (text, wrong)

    prop()


def test_scale_and_unit_words_never_vanish_for_every_numeric_gold(verify):
    golds = numeric_golds()

    @PROPERTY
    @given(gold=st.sampled_from(golds), word=st.sampled_from(["million", "thousand", "billion", "dozen", "hundred"]))
    def prop(gold, word):
        value = to_number(clean(gold))[0]
        factor = {"million": 10**6, "thousand": 10**3, "billion": 10**9, "dozen": 12, "hundred": 100}[word]
        scaled = verify(box(f"{gold}\\text{{ {word}}}"), gold)
        assert not scaled.correct, (gold, word, scaled)
        assert verify(box(f"{gold}\\text{{ {word}}}"), exact_text(value * factor)).correct, (gold, word)
        assert not verify(box(f"{gold}\\text{{ cents}}"), gold).correct, gold
        assert verify(box(f"{gold}\\text{{ cents}}"), exact_text(value / 100)).correct, gold
        assert not verify(box(f"{gold}\\text{{ cm}}"), f"{gold}\\text{{ m}}").correct, gold
        assert not verify(box(f"{gold} \\text{{ is not the answer}}"), gold).correct, gold
        if re.search(r"\\frac|/", gold):  # a fraction is a ratio: its value in percent is never the fraction itself
            assert not verify(box(f"{exact_text(value)}\\%"), gold).correct, gold
        if value.denominator == 1 and abs(value) < 10**12:  # an integer a hair below, padded with zeros
            assert not verify(box(f"{value - 1}.9999999999999" + "0" * 200), gold).correct, gold

    prop()


def test_the_properties_cover_list_and_text_golds():
    golds = every_gold()
    assert any("," in g for g in golds) and any("\\text" in g for g in golds) and any(re.search(r"[a-z]", g) for g in golds)
    assert exact_text(Fraction(1, 4)) == "0.25" and exact_text(Fraction(1, 3)) == "1/3"
