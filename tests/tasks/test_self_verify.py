"""Verification problems from stored solutions (joint solve-and-verify RL in a mixture)."""

from __future__ import annotations

import json

import pytest

from conftest import make_model, make_tokenizer, tiny_run_config
from rl_harness import Recorder
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.tasks.jsonl import DatasetError
from rlvr.tasks.self_verify import VERIFY_TEMPLATE, verification_split
from rlvr.verifiers import get_verifier


def _samples(path, n=6):
    header = {"rlvr_samples": 1, "task": "arithmetic", "task_fingerprint": "0" * 16, "model": "m",
              "model_fingerprint": "0" * 16, "sampling": {"n": 3, "temperature": 1.0, "top_p": 1.0,
                                                           "max_new_tokens": 32, "seed": 0}}
    rows = [json.dumps(header)]
    for i in range(n):
        a = i + 2
        texts = [f"{a} + {a} = {2 * a}. \\boxed{{{2 * a}}}", f"\\boxed{{{2 * a + 1}}}", f"\\boxed{{{2 * a + 2}}}"]
        rows.append(json.dumps({"id": f"q{i}", "answer": str(2 * a), "prompt": f"What is {a} + {a}?",
                                "samples": [{"text": t, "num_tokens": 5, "finish_reason": "stop", "logprob_sum": -1}
                                            for t in texts]}))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_problems_labels_and_the_split_by_hand(tmp_path):
    path = _samples(tmp_path / "s.samples.jsonl")
    train, held = verification_split(str(path), num_heldout=2, balance=False)
    assert len(train) == 4 * 3 and len(held) == 2 * 3
    assert not {p.metadata["source"] for p in train} & {p.metadata["source"] for p in held}  # split by question
    p = next(p for p in train if p.metadata["sample"] == 0)
    q = p.metadata["source"]
    a = int(q[1:]) + 2
    assert p.answer == "yes" and p.prompt == VERIFY_TEMPLATE.format(question=f"What is {a} + {a}?",
                                                                     solution=f"{a} + {a} = {2 * a}. \\boxed{{{2 * a}}}")
    assert sorted(x.answer for x in train if x.metadata["source"] == q) == ["no", "no", "yes"]
    bal, _ = verification_split(str(path), num_heldout=2, balance=True)
    assert sum(x.answer == "yes" for x in bal) == sum(x.answer == "no" for x in bal) == 4  # 4 right, 4 of 8 wrong
    math = get_verifier("math")
    assert math("\\boxed{yes}", "yes").correct and not math("\\boxed{yes or no}", "yes").correct  # a hedge earns 0


def test_bad_files_fail_naming_the_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q"}) + "\n")
    with pytest.raises(DatasetError, match="not a samples file"):
        verification_split(str(bad))
    with pytest.raises(ConfigError, match="must be a samples file"):
        load_config(RunConfig, None, ["task.name=verify_samples", f"task.params={{path: {tmp_path / 'none'}}}"])


def test_joint_solve_and_verify_in_a_mixture_trains(tmp_path):
    path = _samples(tmp_path / "s.samples.jsonl")
    mix = (f"mixture.tasks=[{{task: arithmetic, label: solve, params: {{num_train: 20}}, num_heldout: 4}}, "
           f"{{task: verify_samples, label: verify, params: {{path: {path}}}, num_heldout: 2, verifier: math}}]")
    cfg = tiny_run_config(tmp_path / "run", "train.steps=3", "rollout.max_new_tokens=6", mix)
    tok = make_tokenizer()
    r = Recorder(cfg, model=make_model(tok), tokenizer=tok)
    r.train()
    labels = {s.problem_id.split("/", 1)[0] for ro, _ in r.seen for s in ro.samples}
    assert labels == {"solve", "verify"}  # both tasks were drawn
    math = get_verifier("math")
    for ro, _ in r.seen:
        for s, v in zip(ro.samples, ro.verdicts):
            if s.problem_id.startswith("verify/"):
                p = r.problem_by_id[s.problem_id]
                assert p.answer in ("yes", "no") and v.score == math(s.text, p.answer).score
