"""`rlvr search` on a hand-made stored-samples file: report JSON, sweep numbers and the chart."""

from __future__ import annotations

import json

import pytest

from rlvr.evaluate.samples import SampleRecord, make_header, open_for_append
from rlvr.types import Problem

# 4 problems x 4 samples; the reference of every problem is 7
TEXTS = [
    ["\\boxed{7}", "\\boxed{7}", "\\boxed{3}", "\\boxed{3}"],    # maj@4 tie 7/3 -> 7 (first): right
    ["\\boxed{2}", "\\boxed{7}", "\\boxed{2}", "\\boxed{7}"],    # maj@4 tie -> 2: wrong; pass@2 right
    ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "no answer"],    # never right
    ["\\boxed{7}", "\\boxed{5}", "\\boxed{5}", "\\boxed{5}"],    # maj@4 -> 5: wrong; maj@1 right
]


@pytest.fixture
def samples_file(tmp_path):
    problems = [Problem(f"t/{i}", prompt=f"question {i}", answer="7") for i in range(len(TEXTS))]
    header = make_header("jsonl", problems, "hand-made", "0" * 16, n=4, temperature=1.0, max_new_tokens=32, seed=0)
    path = tmp_path / "hand.samples.jsonl"
    with open_for_append(path, header) as w:
        for p, texts in zip(problems, TEXTS):
            w.write(SampleRecord(id=p.id, answer=p.answer, prompt=p.prompt,
                                 samples=[{"text": t, "num_tokens": 10 * (j + 1), "finish_reason": "stop",
                                           "logprob_sum": -1.0} for j, t in enumerate(texts)]))
    return path


def test_cli_search_oracle_sweep(samples_file, tmp_path, capsys):
    from rlvr.cli import main

    out, png = tmp_path / "s.json", tmp_path / "s.png"
    assert main(["search", str(samples_file), "--budgets", "1,2,4", "--probe", "1", "--bins", "2", "--folds", "2",
                 "--output", str(out), "--plot", str(png), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "oracle: an upper bound" in text and "majority" in text
    rep = json.loads(out.read_text())
    acc = {name: [p["accuracy"] for p in pts] for name, pts in rep["curves"].items()}
    assert acc["best_of_n"] == pytest.approx([0.5, 0.75, 0.75])  # oracle best-of-N = pass@N
    assert acc["majority"] == pytest.approx([0.5, 0.5, 0.25])    # N=2: p0 7, p1 tie->2, p3 tie->7; N=4 above
    toks = [p["mean_tokens"] for p in rep["curves"]["majority"]]
    assert toks == pytest.approx([10, 30, 100])
    assert "compute_optimal" in rep["curves"] and rep["scorer_is_oracle"]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_search_default_paths_and_errors(samples_file, capsys):
    from rlvr.cli import main

    assert main(["search", str(samples_file), "--strategies", "majority", "--no-progress"]) == 0
    assert (samples_file.parent / "hand.search.json").is_file()
    assert (samples_file.parent / "hand.search.png").is_file()
    capsys.readouterr()
    assert main(["search", str(samples_file), "--budgets", "8", "--no-progress"]) == 2
    assert "outside 1..4" in capsys.readouterr().err
    assert main(["search", str(samples_file), "--scorer", "rm:x", "--no-progress"]) == 2
    assert "bad scorer" in capsys.readouterr().err
    bad = samples_file.parent / "bad.samples.jsonl"
    lines = samples_file.read_text().splitlines()
    bad.write_text("\n".join([lines[0], "{oops", lines[1]]) + "\n")
    assert main(["search", str(bad), "--no-progress"]) == 2
    assert "bad.samples.jsonl:2" in capsys.readouterr().err


def test_search_with_reward_model_adds_oracle_ceiling(samples_file, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from conftest import make_tokenizer
    from rlvr.search.run import search_samples

    tok = make_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, num_labels=1, pad_token_id=tok.pad_token_id)
    LlamaForSequenceClassification(cfg).save_pretrained(tmp_path / "orm")
    tok.save_pretrained(tmp_path / "orm")
    rep = search_samples(samples_file, scorer=f"orm:{tmp_path / 'orm'}", budgets=[1, 4], allocator=False,
                         progress=False)
    assert rep["scorer"].startswith("orm:") and not rep["scorer_is_oracle"]
    assert [p["accuracy"] for p in rep["curves"]["pass@n (oracle)"]] == pytest.approx([0.5, 0.75])
    bon = rep["curves"]["best_of_n"]
    assert bon[0]["accuracy"] == pytest.approx(0.5)  # N=1 is sample 0 whatever the scorer
    assert 0.0 <= bon[1]["accuracy"] <= 0.75  # a reranker never beats the oracle


def test_cli_beam_mode_on_tiny_models(tmp_path, tiny_model_dir, capsys):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from conftest import make_tokenizer
    from rlvr.cli import main

    tok = make_tokenizer()
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "prm")
    tok.save_pretrained(tmp_path / "prm")
    data = tmp_path / "probs.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i}+1?", "answer": str(i + 1)}) + "\n"
                            for i in range(3)))
    out = tmp_path / "beam.json"
    assert main(["search", "--beam", "--task", "jsonl", "--path", str(data), "--limit", "2", "--model",
                 str(tiny_model_dir), "--scorer", f"prm:{tmp_path / 'prm'}", "--step-tag", "#", "--delimiter", " ",
                 "--beam-width", "2", "--expansions", "2", "--max-steps", "2", "--step-max-tokens", "4",
                 "--output", str(out), "--no-progress"]) == 0
    assert "beam search (2 problems, width 2 x 2" in capsys.readouterr().out
    rep = json.loads(out.read_text())
    assert rep["num_problems"] == 2 and rep["n"] == 4 and 0 <= rep["accuracy"] <= 1
    assert all(0 < r["generated_tokens"] <= r["candidates"] * 4 for r in rep["per_problem"])
    assert rep["config"]["delimiter"] == " " and rep["scorer"].startswith("prm:")


def test_logprob_scorer_uses_stored_logprobs(samples_file):
    from rlvr.evaluate.samples import read_samples
    from rlvr.search.run import logprob_scores, search_samples

    _, records = read_samples(samples_file)
    s = logprob_scores(records)
    # every stored sample has logprob_sum -1 and 10 * (j + 1) tokens
    import numpy as np

    np.testing.assert_allclose(s[0], np.exp(-1 / (10 * (np.arange(4) + 1))))
    rep = search_samples(samples_file, scorer="logprob", budgets=[4], strategies=["best_of_n"], allocator=False,
                         progress=False)
    # the longest sample (index 3) has the highest mean token probability: p0 "3" wrong, p1 "7" right,
    # p2 no answer, p3 "5" wrong
    assert rep["curves"]["best_of_n"][0]["accuracy"] == pytest.approx(0.25)
    assert rep["scorer"] == "logprob" and "pass@n (oracle)" in rep["curves"]
