"""Step-level beam search: exact pruning on a scripted engine, and a live run on a tiny model;
plus the engine's ``prefixes`` option that beam search continues beams with."""

from __future__ import annotations

import pytest

from rlvr.engines.base import EngineBase
from rlvr.engines import HFEngine
from rlvr.engines.base import SamplingParams
from rlvr.search.beam import BeamConfig, beam_search, beam_search_many
from rlvr.types import Problem, Sample

PROB = Problem("p", prompt="q", answer="")


class ScriptedEngine(EngineBase):
    """Continuations chosen by the current prefix text; token ids are character codes."""

    TREE = {
        "": ["A\n\n", "B\n\n", "C\n\n", "D\n\n"],
        "A\n\n": ["x<eos>", "y\n\n"],
        "C\n\n": ["z<eos>", "w\n\n"],
        "A\n\ny\n\n": ["q<eos>", "r<eos>"],
    }

    def __init__(self):
        super().__init__(None)
        self.calls = []

    def generate(self, problems, params, prefixes=None, cache=None):
        self.calls.append((len(problems), params.n, [("".join(map(chr, p))) for p in prefixes]))
        out = []
        for prefix in prefixes:
            texts = self.TREE["".join(map(chr, prefix))]
            assert len(texts) == params.n
            group = []
            for g, t in enumerate(texts):
                text = t.replace("<eos>", "")
                ids = [ord(c) for c in text] + ([0] if t.endswith("<eos>") else [])
                group.append(Sample("p", [], ids, [0.0] * len(ids), text, "stop", g))
            out.append(group)
        return out


SCORES = {"A": 0.9, "B": 0.2, "C": 0.8, "D": 0.5, "x": 0.1, "y": 0.95, "z": 0.85, "w": 0.3, "q": 0.4, "r": 0.99}


class TableScorer:
    name = "table"

    def score_steps(self, problem, steps):
        return [SCORES[s] for s in steps]

    def score(self, problem, text):
        return 0.0


def test_beam_search_prunes_by_min_step_score():
    eng = ScriptedEngine()
    cfg = BeamConfig(beam_width=2, expansions=2, aggregate="min", max_steps=5)
    res = beam_search(eng, TableScorer(), PROB, cfg)
    # step 0 keeps A (0.9) and C (0.8); step 1: A+y = min(.9,.95) = .9, C+z = .8 (done), A+x = .1, C+w = .3;
    # step 2 expands only A+y: A+y+r = .9 (done), A+y+q = .4 -> kept: A+y+r and C+z, both done -> stop
    assert res.text == "A\n\ny\n\nr"
    assert res.step_scores == [0.9, 0.95, 0.99] and res.score == pytest.approx(0.9)
    assert res.finished and res.num_steps == 3
    assert [c[:2] for c in eng.calls] == [(1, 4), (2, 2), (1, 2)]
    assert eng.calls[1][2] == ["A\n\n", "C\n\n"]  # beams continue their own text
    assert res.candidates == 4 + 4 + 2
    assert res.generated_tokens == 4 * 3 + (2 + 3 + 2 + 3) + (2 + 2)  # every sampled token, pruned ones too


def test_beam_search_last_aggregation_and_step_cap():
    res = beam_search(ScriptedEngine(), TableScorer(), PROB, BeamConfig(beam_width=2, expansions=2,
                                                                         aggregate="last", max_steps=2))
    # after 2 steps: A+y (.95), C+z (.85, done), C+w (.3), A+x (.1) -> kept A+y, C+z; A+y is unfinished,
    # so the best finished beam (C+z) is the answer
    assert res.text == "C\n\nz" and res.finished and res.score == pytest.approx(0.85)
    with pytest.raises(ValueError, match="aggregate"):
        BeamConfig(aggregate="max")


def test_engine_prefix_continues_greedy_decoding(tiny_model, tiny_tokenizer):
    eng = HFEngine(tiny_model, tiny_tokenizer)
    prob = Problem("p", prompt="What is 1+2?", answer="3")
    full = eng.generate([prob], SamplingParams(n=1, max_new_tokens=12, temperature=0.0, ignore_eos=True))[0][0]
    ids = full.completion_ids
    cont = eng.generate([prob], SamplingParams(n=1, max_new_tokens=7, temperature=0.0, ignore_eos=True),
                        prefixes=[ids[:5]])[0][0]
    assert cont.completion_ids == ids[5:12]
    assert cont.prompt_ids == full.prompt_ids + ids[:5]
    text_prefix = tiny_tokenizer.decode(ids[:5])
    cont2 = eng.generate([prob], SamplingParams(n=1, max_new_tokens=7, temperature=0.0, ignore_eos=True),
                         prefixes=[text_prefix])[0][0]
    assert cont2.completion_ids == ids[5:12]  # character tokenizer: text round-trips exactly
    with pytest.raises(ValueError, match="prefixes"):
        eng.generate([prob], SamplingParams(n=1), prefixes=[[], []])


class LengthScorer:
    """Prefers short steps (a stand-in process scorer for the live run)."""

    name = "length"

    def score_steps(self, problem, steps):
        return [1.0 / (1 + len(s)) for s in steps]


def test_live_beam_search_on_tiny_model(tiny_model, tiny_tokenizer):
    eng = HFEngine(tiny_model, tiny_tokenizer)
    cfg = BeamConfig(beam_width=2, expansions=2, max_steps=3, step_max_tokens=6, delimiter=" ", temperature=1.0,
                     aggregate="mean", seed=3)
    probs = [Problem("a", prompt="What is 2+2?", answer="4"), Problem("b", prompt="What is 3+1?", answer="4")]
    results = beam_search_many(eng, LengthScorer(), probs, cfg)
    assert [r.problem_id for r in results] == ["a", "b"]
    for r in results:
        assert 4 <= r.candidates <= 4 + 2 * 2 + 2 * 2
        assert 0 < r.generated_tokens <= r.candidates * 6
        assert 1 <= r.num_steps <= 3 and len(r.step_scores) == r.num_steps
        assert r.score == pytest.approx(sum(r.step_scores) / len(r.step_scores))
    again = beam_search_many(eng, LengthScorer(), probs, cfg)
    assert [r.text for r in again] == [r.text for r in results]  # seeded: reproducible
