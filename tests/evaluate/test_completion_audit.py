"""The partial-prompt completion audit (Wu et al. 2025, "Reasoning or Memorization"): by hand, with a model that
has memorised some items, and end to end on the tiny model through the command line."""

from __future__ import annotations

import json

import pytest

from rlvr.evaluate.contamination import completion_audit, rouge_l_f1, split_for_completion

ITEMS = [("a", "Natalia sold clips to 48 of her friends in April, and then half as many in May."),
         ("b", "Weng earns 12 dollars an hour for babysitting. Yesterday she did 50 minutes."),
         ("c", "What is 2 + 2?")]


def test_split_and_rouge_by_hand():
    assert split_for_completion("a b c d e", 0.6) == ("a b c", "d e")
    assert split_for_completion("a b", 0.9) == ("a", "b")  # at least one word on each side
    assert split_for_completion("word", 0.5) == ("word", "")
    # LCS of (the cat sat on) and (the cat on mat) is 3 words: P = R = 3/4
    assert rouge_l_f1("The cat sat on", "the cat on mat") == pytest.approx(0.75)
    assert rouge_l_f1("", "x") == 0.0 and rouge_l_f1("a b", "c d") == 0.0
    with pytest.raises(ValueError, match="fraction"):
        split_for_completion("a b", 1.0)


def test_a_model_that_memorised_one_item_is_caught_on_that_item_only():
    truth = {prefix: rest for _, t in ITEMS for prefix, rest in [split_for_completion(t, 0.6)]}

    def generate(prefixes):  # recites item a's remainder, then more text; guesses something else elsewhere
        return [truth[p] + " And more." if p.startswith("Natalia") else "I do not know this one." for p in prefixes]

    rep = completion_audit(generate, ITEMS, fraction=0.6, batch_size=2)
    rows = {r["id"]: r for r in rep["items"]}
    assert rows["a"]["exact_match"] and rows["a"]["rouge_l"] == pytest.approx(1.0) and rows["a"]["flagged"]
    assert not rows["b"]["exact_match"] and rows["b"]["rouge_l"] < 0.3 and not rows["b"]["flagged"]
    assert rep["summary"]["items"] == 3 and rep["summary"]["flagged"] == 1
    assert rep["summary"]["exact_match_rate"] == pytest.approx(1 / 3)


def test_the_command_runs_the_audit_on_a_model(tmp_path, tiny_model_dir, capsys):
    from rlvr.cli import main

    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps({"id": i, "question": t}) + "\n" for i, t in ITEMS))
    out = tmp_path / "audit.json"
    assert main(["contamination", str(data), "--completion", "--model", str(tiny_model_dir), "--max-new-tokens",
                 "8", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "completed by" in text and "mean ROUGE-L" in text
    rep = json.loads(out.read_text())
    assert rep["summary"]["items"] == 3 and all(isinstance(r["continuation"], str) for r in rep["items"])


def test_bad_uses_fail_in_one_line(tmp_path, capsys):
    from rlvr.cli import main

    assert main(["contamination", "math500", "--completion"]) == 2
    assert "--completion audits one evaluation set with one model" in capsys.readouterr().err
    assert main(["contamination", "math500"]) == 2
    assert "give a training set and an evaluation set" in capsys.readouterr().err
    assert main(["contamination", "math500", "--completion", "--model", "x", "--fraction", "1.5"]) == 2
    assert "--fraction must be in (0, 1)" in capsys.readouterr().err
