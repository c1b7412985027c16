"""Answer-level entropy, support change (Invisible Leash) and policy calibration (RLCR) in eval results."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlvr.evaluate.metrics import answer_entropy, calibration_metrics, expected_calibration_error, support_change
from rlvr.evaluate.report import build_results
from rlvr.evaluate.samples import SampleRecord, make_header, score_samples
from rlvr.types import Problem


def test_answer_entropy_by_hand():
    assert answer_entropy(["4", "4", "4", "4"]) == 0.0
    assert answer_entropy(["1", "2", "3", "4"]) == pytest.approx(2.0)  # log2 4
    # p = (1/2, 1/4, 1/4): H = 0.5 + 0.5 + 0.5 = 1.5 bits; the two missing answers are one bucket
    assert answer_entropy(["7", None, "7", None, "8", "9", "7", "7"]) == pytest.approx(
        -(0.5 * math.log2(0.5) + 0.25 * math.log2(0.25) + 2 * 0.125 * math.log2(0.125)))
    assert answer_entropy(["7", "7", None, "9"]) == pytest.approx(1.5)


def test_support_change_by_hand():
    base = {"a": 2, "b": 0, "c": 1, "d": 0, "only_base": 3}
    trained = {"a": 4, "b": 1, "c": 0, "d": 0, "only_trained": 1}
    s = support_change(base, trained)
    assert (s["shared"], s["preserved"], s["shrunk"], s["expanded"], s["out_of_support"]) == (4, 1, 1, 1, 1)
    assert s["shrunk_ids"] == ["c"] and s["expanded_ids"] == ["b"]


def test_calibration_by_hand():
    # stated: 0.9 right, 0.9 wrong, 0.2 wrong, 0.7 right; one sample states nothing
    m = calibration_metrics([0.9, 0.9, None, 0.2, 0.7], [True, False, True, False, True], bins=2)
    assert m["num_stated"] == 4 and m["stated_fraction"] == pytest.approx(0.8)
    assert m["brier"] == pytest.approx((0.01 + 0.81 + 0.04 + 0.09) / 4)
    # bin [0, .5): {0.2: wrong} -> |0 - 0.2| * 1/4; bin [.5, 1]: {0.9 R, 0.9 W, 0.7 R} -> |2/3 - 2.5/3| * 3/4
    assert m["ece"] == pytest.approx(0.2 / 4 + abs(2 / 3 - 2.5 / 3) * 3 / 4)
    assert calibration_metrics([None, None], [True, False]) is None
    assert expected_calibration_error([0.2, 0.4, 0.8, 0.9], [0, 1, 1, 1], bins=2) == pytest.approx(0.175)
    with pytest.raises(ValueError, match="bins"):
        calibration_metrics([0.5], [True], bins=0)


def _records(texts: list[list[str]], answers: list[str]) -> list[SampleRecord]:
    return [SampleRecord(id=f"p{i}", answer=a, metadata={}, prompt=f"q{i}",
                         samples=[{"text": t, "num_tokens": 5, "finish_reason": "stop"} for t in row])
            for i, (row, a) in enumerate(zip(texts, answers))]


def test_eval_results_carry_the_diagnostics():
    texts = [[r"\boxed{3} <confidence>0.9</confidence>", r"\boxed{3} <confidence>0.8</confidence>"],
             [r"\boxed{5} <confidence>0.6</confidence>", r"\boxed{6}"]]
    recs = _records(texts, ["3", "6"])
    scored = score_samples(recs, "math")
    header = make_header("t", [Problem(id=r.id, prompt=r.prompt, answer=r.answer) for r in recs], "tiny",
                         "0" * 16, n=2, temperature=1.0, max_new_tokens=8, seed=0)
    res = build_results(header, recs, scored, examples=0)
    assert [p["answer_entropy"] for p in res["per_problem"]] == [0.0, 1.0]
    d = res["diagnostics"]
    assert d["answer_entropy_bits"] == 0.5 and d["distinct_answers"] == 1.5
    cal = d["calibration"]  # stated: 0.9 R, 0.8 R, 0.6 W
    assert cal["num_stated"] == 3 and cal["stated_fraction"] == 0.75
    assert cal["brier"] == pytest.approx((0.01 + 0.04 + 0.36) / 3)


def test_compare_prints_the_support_change_of_two_eval_results(tmp_path, capsys):
    from rlvr.cli import main

    def write(name, counts):
        p = tmp_path / name
        p.write_text(json.dumps({"task": "t", "per_problem": [
            {"id": f"p{i}", "accuracy": c / 4, "num_correct": c, "n": 4} for i, c in enumerate(counts)]}))
        return p

    rng = np.random.default_rng(0)
    base = rng.integers(0, 3, 60).tolist()
    trained = [4 if c > 0 else (1 if i % 5 == 0 else 0) for i, c in enumerate(base)]
    trained[0:3] = [0, 0, 0]
    a, b = write("base.json", base), write("rl.json", trained)
    out = tmp_path / "cmp.json"
    assert main(["compare", f"base={a}", f"rl={b}", "--output", str(out)]) == 0
    want = support_change({f"p{i}": c for i, c in enumerate(base)}, {f"p{i}": c for i, c in enumerate(trained)})
    text = capsys.readouterr().out
    assert (f"support of rl against base over 60 shared problems: {want['preserved']} solved by both, "
            f"{want['shrunk']} lost") in text
    assert json.loads(out.read_text())["comparisons"][0]["support"]["expanded"] == want["expanded"] > 0
