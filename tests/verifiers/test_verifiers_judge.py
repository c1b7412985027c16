"""Model judge: strict parsing, caching, master-key guard, rule fallback, and engine plumbing."""

from __future__ import annotations

import json

import pytest

from rlvr.engines.base import EngineBase
from rlvr.types import Sample
from rlvr.verifiers import get_verifier
from rlvr.verifiers.judge import (ModelJudge, is_master_key, judge_fallback, parse_judgement, rule_undecided,
                                  split_reference)
from rlvr.types import Verdict


class FakeEngine(EngineBase):
    """A rollout engine that answers every prompt with ``reply`` and records the prompts."""

    def __init__(self, reply: str = "yes"):
        super().__init__(None)
        self.reply = reply
        self.prompts: list[str] = []
        self.params = []

    def generate(self, problems, params, prefixes=None, cache=None):
        self.prompts += [p.prompt for p in problems]
        self.params.append(params)
        return [[Sample(p.id, [], [], [], self.reply, "stop")] for p in problems]

    def sync_weights(self, model):
        pass


REF = json.dumps({"question": "What is 6 times 7?", "answer": "42"})


@pytest.mark.parametrize("key", [":", "Thought process:", "Let's solve this step by step.",
                                 "", "   ", "...", "Thought process: Let's solve this step by step.",
                                 "Solution:", "\u89e3", "LET\u2019S SOLVE THIS STEP BY STEP!!"])
def test_master_keys_rejected_before_the_judge(key):
    engine = FakeEngine("yes")  # a judge that accepts everything: only the guard can say no
    judge = ModelJudge(engine)
    v = judge(key, REF)
    assert not v.correct and "master-key" in v.reason
    assert engine.prompts == []


def test_master_key_guard_lets_real_answers_through():
    assert not is_master_key("Thought process: 6 * 7 = 42.")
    assert not is_master_key("The answer is forty-two")
    assert not is_master_key("42")
    assert is_master_key(None) and is_master_key(12)
    engine = FakeEngine("yes")
    assert ModelJudge(engine)("Thought process: six sevens are forty-two", REF).correct
    assert len(engine.prompts) == 1


@pytest.mark.parametrize("output, decision", [
    ("yes", True), ("Yes.", True), (" **No** ", False), ('"no"', False), ("NO!", False),
    ("Let me check.\nAnswer: yes", True), ("reasoning...\nVerdict: no.", False),
    ("yes, but actually no", None), ("maybe", None), ("", None), ("The answer is yes", None),
    ("yes\nno", None), ("Answer: yes\nor not", None), (None, None),
])
def test_parse_judgement_is_strict(output, decision):
    assert parse_judgement(output) is decision


def test_judge_prompt_sampling_and_unparseable_output():
    engine = FakeEngine("I think so")
    v = ModelJudge(engine)("It is 42", REF)
    assert not v.correct and "unparseable" in v.reason
    prompt = engine.prompts[0]
    assert "What is 6 times 7?" in prompt and "Reference answer: 42" in prompt and "It is 42" in prompt
    assert engine.params[0].temperature == 0 and engine.params[0].n == 1
    assert ModelJudge(FakeEngine("no"))("It is 41", REF).score == 0.0
    assert ModelJudge(FakeEngine("Yes"))("It is 42", "42").score == 1.0  # plain reference
    with pytest.raises(ValueError):
        ModelJudge(engine, template="no fields")


def test_judge_cache_memory_and_disk(tmp_path):
    path = tmp_path / "judge.jsonl"
    engine = FakeEngine("yes")
    judge = ModelJudge(engine, cache_path=path)
    assert judge("It is 42", REF).correct and judge("It is 42", REF).correct
    assert len(engine.prompts) == 1 and judge.calls == 1
    assert judge("It is 43", REF).correct and len(engine.prompts) == 2
    verdicts = judge.judge_many([("q", "1", "one"), ("q", "1", "one"), ("q", "1", ":")])
    assert [v.correct for v in verdicts] == [True, True, False] and len(engine.prompts) == 3
    other = FakeEngine("no")
    again = ModelJudge(other, cache_path=path)
    assert again("It is 42", REF).correct and other.prompts == []  # answered from disk


def test_split_reference():
    assert split_reference(REF) == ("What is 6 times 7?", "42")
    assert split_reference("42") == ("(not given)", "42")
    assert split_reference({"question": "q", "answer": 1}) == ("q", "1")
    assert split_reference("{not json") == ("(not given)", "{not json")


def test_fallback_never_overrides_a_refuting_rule():
    engine = FakeEngine("yes")
    verify = get_verifier("judge_fallback", rule="numeric", engine=engine)
    v = verify("so the answer is \\boxed{42}", REF)
    assert v.correct and v.reason == "match" and engine.prompts == []  # rule accepted
    v = verify("so the answer is \\boxed{41}", REF)
    assert not v.correct and v.reason.startswith("mismatch") and engine.prompts == []  # rule refuted
    v = verify("six sevens make forty-two", REF)  # rule found no number: undecided
    assert v.correct and "no answer found" in v.reason and "judge: yes" in v.reason
    assert len(engine.prompts) == 1
    for key in (":", "Thought process:", "Let's solve this step by step."):
        v = verify(key, REF)
        assert not v.correct and "master-key" in v.reason
    assert len(engine.prompts) == 1


def test_rule_undecided_definition():
    assert rule_undecided(Verdict(0.0, None, "anything"))
    assert rule_undecided(Verdict(0.0, "x", "unparseable answer: x"))
    assert rule_undecided(Verdict(0.0, "x", "uncertain: could not simplify"))
    assert not rule_undecided(Verdict(0.0, "41", "mismatch: 41 != 42"))
    assert not rule_undecided(Verdict(1.0, None, "match"))


def test_fallback_with_a_crashing_rule():
    def boom(completion, reference):
        raise RuntimeError("bug")

    v = judge_fallback(boom, ModelJudge(FakeEngine("yes")))("forty-two", REF)
    assert v.correct and "verifier error" in v.reason


@pytest.mark.parametrize("bad", [None, 7, b"bytes", "", "x" * 1_000_000, bytes(range(256)).decode("latin-1")])
def test_judge_bad_input_never_raises(bad):
    engine = FakeEngine("yes")
    judge = ModelJudge(engine, max_response_chars=1000)
    v = judge(bad, REF)
    assert isinstance(v, Verdict)
    if not isinstance(bad, str) or not bad.strip():
        assert not v.correct and engine.prompts == []
    for p in engine.prompts:
        assert len(p) < 2000  # megabyte responses are cut before prompting
    assert not get_verifier("judge_fallback", engine=FakeEngine("no"))(bad, REF).correct


def test_judge_needs_an_engine():
    with pytest.raises(ValueError, match="engine"):
        get_verifier("judge")


def test_plumbing_with_tiny_model(tiny_model, tiny_tokenizer):
    from rlvr.engines import HFEngine

    judge = ModelJudge(HFEngine(tiny_model, tiny_tokenizer, batch_size=4), max_new_tokens=4)
    v = judge("It is 42", REF)
    (decision, text), = judge.cache.values()
    assert isinstance(text, str) and parse_judgement(text) is decision
    assert v.score == (1.0 if decision else 0.0)
    assert judge("It is 42", REF) == v and judge.calls == 1


@pytest.mark.slow
def test_judge_with_bundled_model():
    from rlvr.models import load_policy
    from rlvr.engines import HFEngine

    model, tokenizer = load_policy("smollm2-135m-instruct")
    judge = ModelJudge(HFEngine(model, tokenizer, batch_size=4))
    verdicts = judge.judge_many([("What is 2 + 2?", "4", "2 + 2 = 4, so the answer is 4."),
                                 ("What is 2 + 2?", "4", "The answer is 5.")])
    assert all(isinstance(v, Verdict) for v in verdicts) and judge.calls == 2
    for v, (decision, text) in zip(verdicts, judge.cache.values()):
        assert parse_judgement(text) is decision
        assert v.reason.startswith("judge")
