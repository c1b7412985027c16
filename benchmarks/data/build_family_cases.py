"""Build ``family_cases.jsonl``: labelled cases for universal answers, reasoning output,
self-corrections, hedges and decimal precision (read by ``benchmarks/verifier_quality.py``).

    python benchmarks/data/build_family_cases.py

Deterministic (no randomness).  Labels follow the rules documented in
``rlvr.verifiers.math.extract`` (reasoning, corrections, hedges) and
``rlvr.verifiers.math.compare`` (precision, non-finite values): an answer is right when
its value equals the gold; a ``<think>`` block is never the answer; a self-correction is
judged on its final attempt; several different answers offered at once are wrong; an
decimal and an exact value match only when the decimal is the value correctly rounded
to at least 6 significant digits.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "family_cases.jsonl"

# Shipped golds of several kinds (MATH-500, AIME 2024, GSM8K).
GOLDS = ["9", "42", r"\frac{14}{3}", r"3\sqrt{13}", r"\sqrt{2}", r"\pi", "52_8", r"90^\circ", r"-\frac{\pi}{6}",
         r"\left( 3, \frac{\pi}{2} \right)", r"(-\infty, 0]", r"\text{(C)}", r"\text{Evelyn}", "0", "204", "18",
         r"x^2+7x+10", r"\begin{pmatrix} -1/3 \\ 2/3 \\ 5/3 \end{pmatrix}", "1.25", r"\$18.90"]
UNIVERSAL = [r"\infty", r"-\infty", r"+\infty", r"\pm\infty", r"\infty^\infty", r"e^{\infty}", "\u221e",
             r"10^{1000}", r"-10^{1000}", r"10^{-1000}", "1e309", r"\frac{0}{0}", r"\infty - \infty", r"0 \cdot \infty",
             "nan", r"\emptyset", r"\mathbb{R}", r"(-\infty,\infty)", "x", "n", r"\text{all real numbers}", "none"]
WRAPS = ["The answer is $\\boxed{{{}}}$.", "The answer is ${}$."]


def case(category: str, gold: str, completion: str, label: bool) -> dict:
    return {"category": category, "gold": gold, "completion": completion, "label": label}


def build() -> list[dict]:
    out = []
    for i, answer in enumerate(UNIVERSAL):  # each universal answer, two wrappers, against the golds
        for k, gold in enumerate(GOLDS):
            if (i + k) % 3 == 0:
                out.append(case("universal", gold, WRAPS[(i + k) % 2].format(answer), False))
    true_equals = [
        (r"(-\infty, 3]", r"x \le 3", True), (r"(-\infty, 3]", r"(-\infty,3]", True), (r"(-\infty, 3]", r"(-\infty, 3)", False),
        (r"(-\infty, 3]", r"\mathbb{R}", False), (r"(2,\infty)", "x > 2", True), (r"(2,\infty)", r"\infty", False),
        (r"\infty", r"\infty", True), (r"\infty", r"+\infty", True), (r"\infty", "\u221e", True), (r"\infty", r"-\infty", False),
        (r"\infty", r"10^{1000}", False), (r"\emptyset", r"\varnothing", True), (r"\emptyset", r"\{\}", True),
        (r"\emptyset", "0", False), (r"\mathbb{R}", r"(-\infty,\infty)", True), (r"\mathbb{R}", r"(-\infty, 0]", False),
        (r"(-\infty, 2) \cup (3, \infty)", r"(3,\infty)\cup(-\infty,2)", True),
        (r"(-\infty, 2) \cup (3, \infty)", r"\mathbb{R}", False), (r"10^{1000}", "1e1000", True),
        (r"10^{1000}", r"10^{1000}+1", False), ("0", r"10^{-1000}", False), ("0", "0.0", True),
    ]
    out += [case("universal_true", g, f"So the answer is $\\boxed{{{a}}}$.", lab) for g, a, lab in true_equals]

    reasoning = [
        ("<think>Maybe it is \\boxed{3}? Let me check: 2+2=4.</think>\nThe answer is $\\boxed{4}$.", "4", True),
        ("Maybe \\boxed{3}? No: 2+2=4.</think>\nThe answer is $\\boxed{4}$.", "4", True),
        ("<think>\\boxed{3} or \\boxed{5}</think> So the answer is 4.", "4", True),
        ("<think>\\boxed{3}</think>\n<answer>4</answer>", "4", True),
        ("<thinking>first guess \\boxed{3}</thinking>\n$\\boxed{4}$", "4", True),
        ("<think>2+2 = 4, so \\boxed{4}</think>", "4", False),
        ("<think>2+2 = 4, so \\boxed{4}", "4", False),
        ("<think>the answer is \\boxed{4}</think>\nThe answer is $\\boxed{3}$.", "4", False),
        ("<think>\\boxed{4}</think><answer>3</answer>", "4", False),
        ("<think>It is \\boxed{42}.</think>\nI am not sure.", "42", False),
    ]
    out += [case("reasoning", g, c, lab) for c, g, lab in reasoning]

    corrections = [
        "So the answer is \\boxed{3}. Hmm, that doesn't look right. Let me recompute: 2+2=4. The answer is \\boxed{4}.",
        "So the answer is \\boxed{3}. Actually, I was wrong: 2+2=4, so \\boxed{4}.",
        "So the answer is \\boxed{3}.\n\nCorrection: 2+2=4, so the answer is \\boxed{4}.",
        "So the answer is \\boxed{3}.\n\nWait, let me double-check. 2+2=4. So the answer is \\boxed{4}.",
        "First attempt: \\boxed{3}. That was a mistake; redoing it gives \\boxed{4}.",
        "\\boxed{3}. On second thought, it is \\boxed{4}.",
    ]
    for c in corrections:
        out.append(case("correction", "4", c, True))
        out.append(case("correction", "3", c, False))  # the retracted first attempt earns nothing

    hedges = ["It is \\boxed{3} or \\boxed{4}.", "\\boxed{3}, \\boxed{4}", "\\boxed{3}\n\\boxed{4}",
              "The answer is \\boxed{4}. Also possible: \\boxed{3}.", "Wait, it is \\boxed{3} or \\boxed{4}.",
              "\\boxed{1}. Actually, \\boxed{3} or \\boxed{4}.", "The answer is \\boxed{4}. Wait, that's wrong.",
              "\\boxed{3} Wait, \\boxed{4} Wait, \\boxed{5}"]
    for c in hedges:
        for g in ("3", "4"):
            out.append(case("hedge_list", g, c, False))

    precision = [("2.9999999", "3", False), ("3.0000001", "3", False), ("3.0", "3", True), ("0.0000001", "0", False),
                 ("0.333333", r"\frac{1}{3}", True), ("0.33333", r"\frac{1}{3}", False), ("0.333", r"\frac{1}{3}", False),
                 (r"\frac{1}{3}", "0.333", False), (r"\frac{1}{3}", "0.333333", True), (r"\frac{5}{4}", "1.25", True),
                 ("2.50000001", "2.5", True),
                 ("1.41421356", r"\sqrt{2}", True), ("1.41421357", r"\sqrt{2}", False), ("3.1415927", r"\pi", True),
                 ("3.1415926", r"\pi", False), ("(2.9999999, 4)", "(3,4)", False), ("17.999999", "18", False),
                 ("18.00", "18", True), ("203.99999", "204", False), ("0.0833333333333333", r"\frac{1}{12}", True)]
    out += [case("precision", g, f"So the answer is $\\boxed{{{a}}}$.", lab) for a, g, lab in precision]
    return out


def main() -> None:
    cases = build()
    OUT.write_text("".join(json.dumps(c) + "\n" for c in cases))
    pos = sum(c["label"] for c in cases)
    print(f"wrote {OUT.name}: {len(cases)} cases ({pos} correct, {len(cases) - pos} wrong)")


if __name__ == "__main__":
    main()
