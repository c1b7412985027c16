"""Problem synthesis from failures (SwS-style): variants of failed problems queued and trained on first."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_model, make_tokenizer
from rl_harness import Recorder
from rlvr.config import ConfigError, load_config
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.config import RunConfig
from rlvr.tasks.arithmetic import ArithmeticSpec, arithmetic_split, evaluate_expression
from rlvr.tasks.synthesis import FailureSynthesizer, variants
from rlvr.trackers import read_metrics
from rlvr.types import Problem
from rlvr.verifiers import get_verifier


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 4), neg=st.booleans())
def test_variants_keep_the_structure_and_their_answers_are_right(seed, n, neg):
    """Property: a variant has the failed problem's operators in order, operands in the spec's range, a correct
    reference answer (the numeric verifier accepts its worked solution), and differs from the original."""
    spec = ArithmeticSpec(num_operands=n, min_value=1, max_value=30, operators=("+", "-", "*"),
                          allow_negative_results=neg)
    (p,), _ = arithmetic_split(spec, 1, 0, seed=seed)
    vs = variants(p, random.Random(seed), 3)
    assert 1 <= len(vs) <= 3 and len({v.id for v in vs}) == len(vs)
    for v in vs:
        md = v.metadata
        assert md["operators"] == p.metadata["operators"] and md["synthesized_from"] == p.id and v.id != p.id
        assert all(1 <= x <= 30 for x in md["operands"])
        assert int(v.answer) == evaluate_expression(md["operands"], md["operators"])
        assert neg or int(v.answer) >= 0
        assert v.prompt == p.prompt.replace(p.metadata["expression"], md["expression"])
        assert get_verifier("numeric")(md["solution"], v.answer).correct
    assert variants(Problem("x", prompt="What is 2+2?", answer="4"), random.Random(0), 3) == []  # not generated


def test_the_queue_by_hand():
    (a, b), held = arithmetic_split(ArithmeticSpec(num_operands=2, max_value=9), 2, 1, seed=0)
    s = FailureSynthesizer(k=2, share=0.5, capacity=3, forbidden=[h.id for h in held], seed=1)
    assert s.observe(a, [0.0, 1.0]) == 0  # a success: nothing
    assert s.observe(a, [0.0, 0.0]) == 2 and s.observe(b, [0.0]) == 1  # capacity 3
    assert len(s) == 3 and s.made == 3
    assert [p.metadata["synthesized_from"] for p in s.take(4)] == [a.id, a.id]  # share 0.5 of 4 prompts
    state = s.state_dict()
    t = FailureSynthesizer(k=2, share=0.5, capacity=3, seed=99)
    t.load_state_dict(state)
    assert [p.id for p in t.queue] == [p.id for p in s.queue] and t.made == 3
    assert [p.id for p in t.take(2)] == [p.id for p in s.take(2)]
    assert [v.id for v in variants(a, t.rng, 2)] == [v.id for v in variants(a, s.rng, 2)]  # the RNG restored too


def test_held_out_expressions_are_never_synthesised():
    spec = ArithmeticSpec(num_operands=2, max_value=3)  # 9 expressions: variants collide with held-out ones often
    train, held = arithmetic_split(spec, 3, 6, seed=0)
    s = FailureSynthesizer(k=4, share=1.0, capacity=100, forbidden=[h.id for h in held], seed=0)
    for _ in range(20):
        s.observe(train[0], [0.0])
    assert s.made > 0 and not {p.id for p in s.queue} & {h.id for h in held}


def test_through_the_recipe_failed_problems_come_back_as_variants(tmp_path):
    tok = make_tokenizer()
    spec = ArithmeticSpec(num_operands=2, max_value=40)
    problems = arithmetic_split(spec, 8, 3, seed=0)
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={tmp_path}", "train.steps=3", "train.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=3", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", "guidance.synthesize=1", "guidance.synthesize_share=0.5"])
    r = Recorder(cfg, model=make_model(tok, seed=0), tokenizer=tok, problems=problems)
    r.train()
    # the tiny random model fails every arithmetic problem: from step 2 on, one of the two prompts is a variant
    # of a problem failed at an earlier step
    seen: set[str] = set()
    made = 0
    for k, (ro, _) in enumerate(r.seen):
        ids = sorted({s.problem_id for s in ro.samples})
        origins = [r.problem_by_id[pid].metadata.get("synthesized_from") for pid in ids]
        assert sum(o is not None for o in origins) == (0 if k == 0 else 1)
        assert all(o in seen for o in origins if o is not None)
        made += sum(o is not None for o in origins)
        seen |= set(ids)
    assert made == 2
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [row["guidance/synthesized_total"] for row in rows] == [2.0, 4.0, 6.0]
    state = torch.load(latest_checkpoint(tmp_path) / "state.pt", weights_only=False)
    assert [d["id"] for d in state["synthesis"]["queue"]] == [p.id for p in r.synth.queue]


def test_config_refuses_what_synthesis_cannot_run():
    with pytest.raises(ConfigError, match="needs task.name=arithmetic"):
        load_config(RunConfig, None, ["task.name=code_functions", "reward.verifier=code_humaneval",
                                      "guidance.synthesize=2"])
    with pytest.raises(ConfigError, match="problem synthesis is off"):
        load_config(RunConfig, None, ["guidance.synthesize_share=0.3"])
    with pytest.raises(ConfigError, match="guidance.synthesize"):
        load_config(RunConfig, None, ["guidance.synthesize=17"])
