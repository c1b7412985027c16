"""N-gram contamination report with planted overlaps."""

from __future__ import annotations

import json
import random

import pytest

from rlvr.evaluate.contamination import (
    NgramIndex,
    contamination_report,
    load_texts,
    ngram_hashes,
    normalize_words,
)

WORDS = [f"w{i}" for i in range(500)]


def _text(rng, k):
    return " ".join(rng.choice(WORDS) for _ in range(k))


def test_normalize_and_ngrams():
    assert normalize_words("  The  CAT\tsat\n ｆｕｌｌ ") == ["the", "cat", "sat", "full"]  # NFKC folds full-width
    assert len(ngram_hashes(list("abcdef"), 3)) == 4
    assert ngram_hashes(["a", "b"], 3) == []
    assert ngram_hashes(["a", "b", "c"], 3) == ngram_hashes(["a", "b", "c"], 3)


def test_overlap_fraction_hand_counted():
    idx = NgramIndex(["a b c d e f"], n=3)
    # eval "x a b c d y": 3-grams (x a b) (a b c) (b c d) (c d y) -> 2 of 4 in train
    assert idx.overlap("X A b  c d y") == (0.5, 2, 4)
    assert idx.overlap("a b") == (0.0, 0, 0)  # shorter than n, not an exact duplicate
    idx2 = NgramIndex(["a b"], n=3)
    assert idx2.overlap("A  B") == (1.0, 0, 0)  # short exact duplicate


def test_planted_overlaps_are_flagged():
    rng = random.Random(0)
    train = [_text(rng, 60) for _ in range(200)]
    clean = [(f"clean{i}", _text(rng, 40)) for i in range(50)]
    # planted: an eval item copying 30 consecutive words of a training text into fresh text
    src = train[17].split()
    planted = ("planted", _text(rng, 5) + " " + " ".join(src[10:40]).upper() + " " + _text(rng, 5))
    verbatim = ("verbatim", train[3])
    rep = contamination_report(train, clean + [planted, verbatim], n=13, threshold=0.5)
    flagged = {it["id"] for it in rep.flagged}
    assert flagged == {"planted", "verbatim"}
    by_id = {it["id"]: it for it in rep.items}
    assert by_id["verbatim"]["fraction"] == 1.0
    # planted: 40 words -> 28 13-grams, 30 copied words -> 18 of them inside the copy
    assert by_id["planted"]["ngrams"] == 28 and by_id["planted"]["overlapping"] == 18
    assert all(by_id[i]["fraction"] == 0 for i, _ in clean)  # random 13-grams over 500 words never collide
    s = rep.summary()
    assert s["flagged"] == 2 and s["eval_items"] == 52 and s["any_overlap"] == 2
    # a lower n catches more: 13 -> 3 on a partial 10-word copy
    partial = ("partial", _text(rng, 20) + " " + " ".join(src[:10]))
    assert contamination_report(train, [partial], n=13).items[0]["fraction"] == 0
    assert contamination_report(train, [partial], n=3).items[0]["overlapping"] >= 8


def test_load_texts_and_cli(tmp_path, capsys):
    from rlvr.cli import main

    train = tmp_path / "train.jsonl"
    ev = tmp_path / "eval.jsonl"
    base = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    train.write_text(json.dumps({"question": base}) + "\n" + json.dumps({"question": "unrelated words only"}) + "\n")
    ev.write_text(json.dumps({"id": "e1", "prompt": base}) + "\n" + json.dumps({"id": "e2", "prompt": "fresh"}) + "\n")
    assert load_texts(str(ev)) == [("e1", base), ("e2", "fresh")]
    out = tmp_path / "rep.json"
    assert main(["contamination", str(train), str(ev), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 of 2" in text and "e1" in text
    rep = json.loads(out.read_text())
    assert rep["summary"]["flagged"] == 1 and rep["flagged"][0]["id"] == "e1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"other": 1}) + "\n")
    assert main(["contamination", str(bad), str(ev)]) == 2
    assert "bad.jsonl:1: no text field" in capsys.readouterr().err
    from rlvr.tasks.jsonl import DatasetError

    with pytest.raises(DatasetError, match="neither a JSONL file nor a known task"):
        load_texts("no_such_task")
