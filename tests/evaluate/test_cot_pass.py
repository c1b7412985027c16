"""CoT-pass@k (Wen et al. 2025): a sample counts only when its answer is right and its reasoning is accepted."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rlvr.evaluate.pipeline import cot_results
from rlvr.evaluate.samples import SampleRecord, score_samples


def _records() -> list[SampleRecord]:
    texts = [[r"good steps \boxed{3}", r"bad steps \boxed{3}", r"good steps \boxed{4}"],
             [r"bad \boxed{5}", r"bad \boxed{5}", r"good \boxed{5}"]]
    return [SampleRecord(id=f"p{i}", answer=a, metadata={}, prompt=f"q{i}",
                         samples=[{"text": t, "num_tokens": 4, "finish_reason": "stop"} for t in row])
            for i, (row, a) in enumerate(zip(texts, ["3", "5"]))]


def test_cot_pass_at_k_by_hand():
    recs = _records()
    scored = score_samples(recs, "math")
    assert np.asarray(scored.correct).tolist() == [[True, True, False], [True, True, True]]
    seen = []

    def check(problem, text):
        seen.append((problem.id, text))
        return text.startswith("good")

    res = cot_results(recs, scored, check, "words", ks=[1, 3])
    # right and accepted: p0 1 of 3, p1 1 of 3 -> CoT-pass@1 = 1/3; CoT-pass@3 = 1 for both (c = 1 of n = 3)
    assert res["pass@k"]["1"]["value"] == pytest.approx(1 / 3)
    assert res["pass@k"]["3"]["value"] == pytest.approx(1.0)
    assert res["checked"] == 5 and res["accepted_share"] == pytest.approx(2 / 5)
    assert len(seen) == 5 and all("\\boxed{4}" not in t for _, t in seen)  # wrong samples are never checked


def _prm_dir(tmp_path, tiny_model_dir):
    d = tmp_path / "prm"
    shutil.copytree(tiny_model_dir, d)
    (d / "rlvr_reward_model.json").write_text(json.dumps({"kind": "prm", "step_tag": "#", "good": "+", "bad": "-",
                                                          "delimiter": "\n"}))
    return d


def test_the_prm_check_reads_the_prms_format_and_thresholds_its_weakest_step(tmp_path, tiny_model_dir):
    from rlvr.cli.eval import _cot_prm_check
    from rlvr.rewards.models import ProcessRewardModel
    from rlvr.types import Problem

    d = _prm_dir(tmp_path, tiny_model_dir)
    prm = ProcessRewardModel(str(d), step_tag="#", good="+", bad="-", delimiter="\n", aggregate="min")
    p = Problem("x", prompt="1+1")
    text = "1+1\n= 2\nso 2"
    weakest = prm.score(p, text)
    assert 0 < weakest < 1
    accept, name = _cot_prm_check(str(d), weakest - 1e-6, "cpu")
    reject, _ = _cot_prm_check(str(d), weakest + 1e-6, "cpu")
    assert accept(p, text) and not reject(p, text) and "min step" in name
    with pytest.raises(ValueError, match="cot-threshold"):
        _cot_prm_check(str(d), 1.5, "cpu")
    with pytest.raises(ValueError, match="not a model directory"):
        _cot_prm_check(str(tmp_path / "nope"), 0.5, "cpu")


def test_rlvr_eval_reports_cot_pass(tmp_path, tiny_model_dir, capsys):
    from rlvr.cli import main

    d = _prm_dir(tmp_path, tiny_model_dir)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+0", "answer": str(i)}) + "\n" for i in range(3)))
    out = tmp_path / "r.json"
    assert main(["eval", "--task", "jsonl", "--path", str(data), "--model", str(tiny_model_dir), "--max-new-tokens",
                 "4", "--no-progress", "--output", str(out), "--cot-prm", str(d)]) == 0
    res = json.loads(out.read_text())
    assert res["cot"]["check"].startswith(f"prm:{d}") and "1" in res["cot"]["pass@k"]
    assert res["cot"]["pass@k"]["1"]["value"] <= res["metrics"]["pass@k"]["1"]["value"]
    assert "CoT-pass@1" in capsys.readouterr().out
    assert main(["eval", "--task", "jsonl", "--path", str(data), "--model", str(tiny_model_dir), "--no-progress",
                 "--cot-prm", str(tmp_path / "nope")]) == 2
    assert "rlvr: error:" in capsys.readouterr().err
