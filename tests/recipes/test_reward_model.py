"""`rlvr rm train`: metrics by hand, then ORM / PRM training on the tiny model, loaded back by the search scorers."""

from __future__ import annotations

import json
import math

import pytest

from rlvr.recipes.reward_model import (
    RMConfig,
    binary_metrics,
    expected_calibration_error,
    roc_auc,
    train_reward_model,
)


def test_roc_auc_by_hand():
    # positives 0.9, 0.4; negatives 0.5, 0.1: pairs (0.9>0.5, 0.9>0.1, 0.4<0.5, 0.4>0.1) -> 3/4
    assert roc_auc([0.9, 0.5, 0.4, 0.1], [True, False, True, False]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts 1/2: (1 + 0.5) / 2
    assert roc_auc([0.7, 0.7, 0.2, 0.9], [True, False, False, True]) == pytest.approx((2 + 0.5 + 1) / 4)
    assert math.isnan(roc_auc([0.1, 0.2], [True, True]))


def test_ece_and_binary_metrics_by_hand():
    # bins of width 0.5: {0.2, 0.4} labels {0, 1}: |0.5 - 0.3| = 0.2; {0.8, 0.9} labels {1, 1}: |1 - 0.85| = 0.15
    # ECE = 2/4 * 0.2 + 2/4 * 0.15 = 0.175
    assert expected_calibration_error([0.2, 0.4, 0.8, 0.9], [0, 1, 1, 1], bins=2) == pytest.approx(0.175)
    assert expected_calibration_error([1.0], [1], bins=10) == 0.0  # p = 1 falls in the last bin
    m = binary_metrics([0.2, 0.4, 0.8, 0.9], [0, 1, 1, 1], bins=2)
    assert m["accuracy"] == pytest.approx(0.75) and m["auc"] == pytest.approx(1.0)
    assert m["brier"] == pytest.approx((0.04 + 0.36 + 0.04 + 0.01) / 4)


def test_config_refuses_bad_values():
    from rlvr.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="heldout_fraction"):
        load_config(RMConfig, None, ["heldout_fraction=1.5"])
    with pytest.raises(ConfigError, match="objective"):
        load_config(RMConfig, None, ["objective=listwise"])


def _samples_file(path, n_problems=6):
    """A samples file with multi-step completions, half right half wrong, for numeric verification."""
    header = {"rlvr_samples": 1, "task": "jsonl", "task_fingerprint": "0" * 16, "model": "tiny",
              "model_fingerprint": "0" * 16, "sampling": {"n": 4, "temperature": 1.0, "top_p": 1.0,
                                                           "max_new_tokens": 32, "seed": 0}}
    lines = [json.dumps(header)]
    for i in range(n_problems):
        a, b = i + 1, 2 * i + 3
        right, wrong = a + b, a + b + 1
        texts = [f"{a}+{b}\n\nso {right}\n\n\\boxed{{{right}}}", f"{a}+{b}\n\n\\boxed{{{wrong}}}",
                 f"add\n\n\\boxed{{{right}}}", f"{a}-{b}\n\nso {wrong}\n\n\\boxed{{{wrong}}}"]
        lines.append(json.dumps({"id": f"p{i}", "answer": str(right), "prompt": f"What is {a}+{b}?",
                                 "samples": [{"text": t, "num_tokens": len(t), "finish_reason": "stop",
                                              "logprob_sum": -1.0 * len(t)} for t in texts]}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("objective,lora", [("pointwise", False), ("bradley_terry", True)])
def test_orm_trains_and_loads_as_a_search_scorer(tmp_path, tiny_model_dir, objective, lora):
    pytest.importorskip("peft") if lora else None
    samples = _samples_file(tmp_path / "s.samples.jsonl")
    out = tmp_path / "orm"
    cfg = RMConfig(kind="orm", model=str(tiny_model_dir), samples=str(samples), output_dir=str(out),
                   verifier="numeric", objective=objective, lr=1e-3, batch_size=4, max_updates=3,
                   heldout_fraction=0.34, lora={"enabled": lora, "r": 4})
    report = train_reward_model(cfg)
    assert report["problems"] == {"train": 4, "held_out": 2}
    assert report["train"]["updates"] == 3
    h = report["held_out"]
    assert h["n"] == 8 and h["positive_share"] == 0.5 and 0 <= h["auc"] <= 1 and 0 <= h["ece"] <= 1
    assert json.loads((out / "rm_metrics.json").read_text())["kind"] == "orm"
    assert json.loads((out / "rlvr_reward_model.json").read_text())["lora"] is lora
    assert not (out / "adapter_config.json").exists()  # LoRA merged: a plain HF model
    from rlvr.search.scorers import load_scorer

    scorer = load_scorer(f"orm:{out}")
    from rlvr.types import Problem

    s = scorer.score(Problem(id="x", prompt="What is 1+3?"), "\\boxed{4}")
    assert 0.0 < s < 1.0


def test_prm_trains_with_math_shepherd_labels_and_loads(tmp_path, tiny_model_dir):
    samples = _samples_file(tmp_path / "s.samples.jsonl", n_problems=4)
    out = tmp_path / "prm"
    cfg = RMConfig(kind="prm", model=str(tiny_model_dir), samples=str(samples), output_dir=str(out),
                   verifier="numeric", step_tag="#", good="+", bad="-", rollouts_per_step=2, max_new_tokens=6,
                   samples_per_problem=2, lr=1e-3, batch_size=2, max_updates=2, heldout_fraction=0.5)
    report = train_reward_model(cfg)
    labels = [json.loads(x) for x in (out / "prm_labels.jsonl").read_text().splitlines()]
    assert len(labels) == 8  # 2 samples x 4 problems
    for row in labels:
        assert len(row["labels"]) == len(row["steps"]) and all(0.0 <= y <= 1.0 for y in row["labels"])
    # the last step's label is the sample's verdict: samples 0 (right) and 1 (wrong) alternate
    assert {(r["sample"], r["labels"][-1]) for r in labels} == {(0, 1.0), (1, 0.0)}
    assert report["held_out_steps"]["n"] > 0 and report["train"]["updates"] == 2
    from rlvr.search.scorers import load_scorer
    from rlvr.types import Problem

    scorer = load_scorer(f"prm:{out}", step_tag="#")
    scores = scorer.score_steps(Problem(id="x", prompt="What is 1+3?"), ["1+3", "so 4", "\\boxed{4}"])
    assert len(scores) == 3 and all(0.0 < s < 1.0 for s in scores)


def test_rm_train_cli_fresh_samples_then_search(tmp_path, tiny_model_dir, capsys):
    from rlvr.cli import main

    out = tmp_path / "orm"
    rc = main(["rm", "train", f"model={tiny_model_dir}", f"output_dir={out}", "num_problems=4", "n=2",
               "max_new_tokens=4", "max_updates=1", "batch_size=2", "heldout_fraction=0.5"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "ORM trained on 2 problems" in text and f"orm:{out}" in text
    assert (out / "samples.jsonl").is_file()
    rc = main(["search", str(out / "samples.jsonl"), "--scorer", f"orm:{out}", "--strategies", "best_of_n",
               "--no-allocator", "--no-progress", "--output", str(tmp_path / "search.json")])
    assert rc == 0 and (tmp_path / "search.json").is_file()


def test_check_reward_model_dir_refuses_the_wrong_kind(tmp_path, tiny_model_dir):
    from rlvr.search.scorers import check_reward_model_dir

    check_reward_model_dir(str(tiny_model_dir), "prm")  # a causal LM is a PRM candidate
    with pytest.raises(ValueError, match="sequence classifier"):
        check_reward_model_dir(str(tiny_model_dir), "orm")
    with pytest.raises(ValueError, match="no config.json"):
        check_reward_model_dir(str(tmp_path), "orm")
    orm = tmp_path / "orm"
    orm.mkdir()
    (orm / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"],
                                                 "id2label": {"0": "a", "1": "b", "2": "c"}}))
    with pytest.raises(ValueError, match="1 or 2 labels, it has 3"):
        check_reward_model_dir(str(orm), "orm")
    (orm / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"],
                                                 "id2label": {"0": "LABEL_0"}}))
    check_reward_model_dir(str(orm), "orm")
    (orm / "rlvr_reward_model.json").write_text(json.dumps({"kind": "orm"}))
    with pytest.raises(ValueError, match="trained as a ORM"):
        check_reward_model_dir(str(orm), "prm")


def test_prm_labels_from_checking_the_calculations(tmp_path, tiny_model_dir):
    """label=calculations: 1 before the first step with a wrong written calculation, 0 from it on; no sampling."""
    from rlvr.rewards.functions.arithmetic_steps import calculation_step_labels

    assert calculation_step_labels(["2 + 3 = 5", "so 5 * 2 = 11", "then 11 + 1 = 12", "\\boxed{12}"]) == [1, 0, 0, 0]
    assert calculation_step_labels(["add them", "2 + 3 = 5", "\\boxed{5}"]) == [1, 1, 1]
    header = {"rlvr_samples": 1, "task": "jsonl", "task_fingerprint": "0" * 16, "model": "tiny",
              "model_fingerprint": "0" * 16, "sampling": {"n": 2, "temperature": 1.0, "top_p": 1.0,
                                                           "max_new_tokens": 32, "seed": 0}}
    rows = [json.dumps(header)]
    for i in range(4):
        a, b = i + 1, i + 4
        texts = [f"{a} + {b} = {a + b}\n\n\\boxed{{{a + b}}}", f"{a} + {b} = {a + b + 1}\n\n\\boxed{{{a + b + 1}}}"]
        rows.append(json.dumps({"id": f"p{i}", "answer": str(a + b), "prompt": f"What is {a}+{b}?",
                                "samples": [{"text": t, "num_tokens": len(t), "finish_reason": "stop",
                                             "logprob_sum": -1.0} for t in texts]}))
    samples = tmp_path / "c.samples.jsonl"
    samples.write_text("\n".join(rows) + "\n")
    out = tmp_path / "prm"
    cfg = RMConfig(kind="prm", model=str(tiny_model_dir), samples=str(samples), output_dir=str(out),
                   verifier="numeric", step_tag="#", good="+", bad="-", label="calculations",
                   samples_per_problem=2, lr=1e-3, batch_size=2, max_updates=1, heldout_fraction=0.5)
    train_reward_model(cfg)
    labels = [json.loads(x) for x in (out / "prm_labels.jsonl").read_text().splitlines()]
    assert {(r["sample"], tuple(r["labels"])) for r in labels} == {(0, (1.0, 1.0)), (1, (0.0, 0.0))}
