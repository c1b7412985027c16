"""Scorers: oracle verifier, outcome reward model and Math-Shepherd-style PRM built as tiny models here."""

from __future__ import annotations

import pytest
import torch

from conftest import make_tokenizer
from rlvr.search.scorers import (
    OracleScorer,
    OutcomeRewardModel,
    ProcessRewardModel,
    Scorer,
    aggregate_step_scores,
    load_scorer,
    split_steps,
)
from rlvr.types import Problem

PROB = Problem("p1", prompt="What is 2+3?", answer="5")


def _llama_cfg(tok, **kw):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None, **kw)


@pytest.fixture(scope="module")
def orm_dirs(tmp_path_factory):
    from transformers import LlamaForSequenceClassification

    tok = make_tokenizer()
    out = {}
    for labels in (1, 2):
        torch.manual_seed(labels)
        m = LlamaForSequenceClassification(_llama_cfg(tok, num_labels=labels))
        path = tmp_path_factory.mktemp(f"orm{labels}")
        m.save_pretrained(path)
        tok.save_pretrained(path)
        out[labels] = path
    return out


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    from transformers import LlamaForCausalLM

    tok = make_tokenizer()
    torch.manual_seed(7)
    m = LlamaForCausalLM(_llama_cfg(tok))
    path = tmp_path_factory.mktemp("prm")
    m.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_aggregations_hand_computed():
    s = [0.9, 0.5, 0.8]
    assert aggregate_step_scores(s, "min") == 0.5
    assert aggregate_step_scores(s, "last") == 0.8
    assert aggregate_step_scores(s, "mean") == pytest.approx(2.2 / 3)
    assert aggregate_step_scores(s, "prod") == pytest.approx(0.36)
    assert aggregate_step_scores([], "min") == 0.0
    with pytest.raises(ValueError, match="aggregation"):
        aggregate_step_scores(s, "max")


def test_split_steps():
    assert split_steps("a\n\nb\n\n\n\nc") == ["a", "b", "c"]
    assert split_steps("x; y", delimiter=";") == ["x", " y"]
    with pytest.raises(ValueError):
        split_steps("x", delimiter="")


def test_oracle_scorer_is_the_verifier():
    o = OracleScorer("math")
    assert isinstance(o, Scorer)
    assert o.score(PROB, "2+3 = 5, so the answer is \\boxed{5}.") == 1.0
    assert o.score(PROB, "\\boxed{6}") == 0.0
    assert o.score_steps(PROB, ["2+3 is five", "\\boxed{5}"]) == [0.0, 1.0]


def test_orm_scores_match_a_manual_forward(orm_dirs):
    from transformers import AutoModelForSequenceClassification

    tok = make_tokenizer()
    for labels, path in orm_dirs.items():
        orm = OutcomeRewardModel(str(path))
        assert isinstance(orm, Scorer)
        a, b = orm.score(PROB, "\\boxed{5}"), orm.score(PROB, "I think 7")
        assert 0 < a < 1 and 0 < b < 1 and a != b
        model = AutoModelForSequenceClassification.from_pretrained(path).eval()
        ids = tok.apply_chat_template([{"role": "user", "content": PROB.prompt},
                                       {"role": "assistant", "content": "\\boxed{5}"}], tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(ids)])).logits[0]
        want = torch.sigmoid(logits[0]) if labels == 1 else logits.softmax(-1)[1]
        assert a == pytest.approx(float(want), abs=1e-5)
        steps = orm.score_steps(PROB, ["first", "second"])
        assert steps[1] == pytest.approx(orm.score(PROB, "first\n\nsecond"))


def test_prm_scores_each_step_at_its_tag(prm_dir):
    from transformers import AutoModelForCausalLM

    prm = ProcessRewardModel(str(prm_dir), step_tag="#", good="+", bad="-", aggregate="min")
    assert isinstance(prm, Scorer)
    steps = ["2 plus 3", "equals 5", "answer \\boxed{5}"]
    scores = prm.score_steps(PROB, steps)
    assert len(scores) == 3 and all(0 < s < 1 for s in scores)
    # causal: a step's score depends only on the prefix up to its tag
    assert prm.score_steps(PROB, steps[:2]) == pytest.approx(scores[:2], abs=1e-5)
    # manual: the ids are question + " " + (step + " " + "#" + "\n") per step, scored at each "#"
    tok = make_tokenizer()
    text = PROB.prompt + " " + "".join(s + " #\n" for s in steps)
    ids = tok.encode(text, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(prm_dir).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    plus, minus, tag = (tok.convert_tokens_to_ids(c) for c in "+-#")
    want = [float(logits[i, [plus, minus]].softmax(-1)[0]) for i, t in enumerate(ids) if t == tag]
    assert scores == pytest.approx(want, abs=1e-5)
    assert prm.score(PROB, "\n\n".join(steps)) == pytest.approx(min(scores), abs=1e-6)
    assert prm.score_steps(PROB, []) == []


def test_prm_rejects_unknown_tag_and_bad_specs(prm_dir):
    with pytest.raises(ValueError, match="not in the tokenizer"):
        ProcessRewardModel(str(prm_dir))  # default tag "ки" is not in the tiny character vocabulary
    with pytest.raises(ValueError, match="bad scorer"):
        load_scorer("rm:/x")
    with pytest.raises(ValueError, match="no model directory"):
        load_scorer("orm:/does/not/exist")
    assert load_scorer("oracle").name == "oracle:math"
    assert load_scorer(f"prm:{prm_dir}", step_tag="#").name.startswith("prm:")
