"""Stored samples: write, read, torn lines, refusal of foreign files, exact resume, scoring."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlvr.evaluate.samples import (
    SampleFileError,
    SampleRecord,
    generate_samples,
    make_header,
    model_fingerprint,
    open_for_append,
    read_samples,
    score_samples,
    task_fingerprint,
    voting_key,
)
from rlvr.engines import HFEngine
from rlvr.types import Problem


def _problems(k: int = 5) -> list[Problem]:
    return [Problem(id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), metadata={"level": 1 + i % 2})
            for i in range(k)]


def _header(problems, n=3, model="tiny", fp="f" * 16, seed=7, temperature=1.0, max_new_tokens=6):
    return make_header("toy", problems, model, fp, n=n, temperature=temperature, max_new_tokens=max_new_tokens,
                       seed=seed)


def _record(pid: str, texts: list[str], answer: str = "2") -> SampleRecord:
    return SampleRecord(id=pid, answer=answer, metadata={"level": 3}, prompt="q",
                        samples=[{"text": t, "num_tokens": len(t), "finish_reason": "stop", "logprob_sum": -1.0}
                                 for t in texts])


def test_write_then_read_round_trip(tmp_path):
    probs = _problems(2)
    path = tmp_path / "s.jsonl"
    with open_for_append(path, _header(probs, n=2)) as w:
        w.write(_record("p0", ["\\boxed{2}", "3"]))
        w.write(_record("p1", ["x", "y"], answer="\\frac{1}{2}"))
    header, recs = read_samples(path)
    assert header.task == "toy" and header.n == 2 and header.task_fingerprint == task_fingerprint(probs)
    assert [r.id for r in recs] == ["p0", "p1"] and recs[1].answer == "\\frac{1}{2}"
    assert recs[0].samples[0] == {"text": "\\boxed{2}", "num_tokens": 9, "finish_reason": "stop", "logprob_sum": -1.0}
    first = json.loads(path.read_text().splitlines()[0])
    assert first["rlvr_samples"] == 1 and set(first["sampling"]) == {"n", "temperature", "top_p", "max_new_tokens", "seed"}


def test_writer_rejects_wrong_sample_count_and_duplicates(tmp_path):
    with open_for_append(tmp_path / "s.jsonl", _header(_problems(2), n=2)) as w:
        with pytest.raises(ValueError, match="n=2"):
            w.write(_record("p0", ["a"]))
        w.write(_record("p0", ["a", "b"]))
        with pytest.raises(ValueError, match="already stored"):
            w.write(_record("p0", ["a", "b"]))


def test_torn_last_line_is_ignored_and_cut_before_appending(tmp_path):
    path = tmp_path / "s.jsonl"
    with open_for_append(path, _header(_problems(3), n=1)) as w:
        w.write(_record("p0", ["a"]))
        w.write(_record("p1", ["b"]))
    text = path.read_text()
    path.write_text(text[: len(text) - 20])  # killed in the middle of writing p1
    _, recs = read_samples(path)
    assert [r.id for r in recs] == ["p0"]
    with open_for_append(path, _header(_problems(3), n=1)) as w:
        assert w.done == {"p0"}
        w.write(_record("p1", ["b"]))
    assert [r.id for r in read_samples(path)[1]] == ["p0", "p1"]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_malformed_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "s.jsonl"
    with open_for_append(path, _header(_problems(3), n=1)) as w:
        w.write(_record("p0", ["a"]))
        w.write(_record("p1", ["b"]))
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:-5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SampleFileError, match=r"s\.jsonl:2: malformed JSON"):
        read_samples(path)
    lines[1] = json.dumps({"id": "p0", "answer": "2", "samples": [{"text": "a"}, {"text": "b"}]})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SampleFileError, match=r"s\.jsonl:2: .*2 samples, the header says n=1"):
        read_samples(path)


def test_not_a_samples_file(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"prompt": "1+1", "answer": "2"}\n')
    with pytest.raises(SampleFileError, match=r"x\.jsonl:1: not an rlvr samples header"):
        read_samples(path)
    with pytest.raises(SampleFileError, match="no such samples file"):
        read_samples(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("change, words", [
    (dict(model="other", fp="0" * 16), ["model", "'tiny'", "'other'"]),
    (dict(n=4), ["sampling", "n=3 vs 4"]),
    (dict(temperature=0.5), ["temperature=1.0 vs 0.5"]),
])
def test_foreign_file_is_refused_naming_both(tmp_path, change, words):
    probs = _problems(2)
    path = tmp_path / "s.jsonl"
    open_for_append(path, _header(probs)).close()
    with pytest.raises(SampleFileError) as e:
        open_for_append(path, _header(probs, **change))
    for w in words:
        assert w in str(e.value)
    assert str(path) in str(e.value)


def test_other_task_is_refused_naming_both(tmp_path):
    path = tmp_path / "s.jsonl"
    open_for_append(path, _header(_problems(2))).close()
    other = make_header("gsm8k", _problems(3), "tiny", "f" * 16, n=3, temperature=1.0, max_new_tokens=6, seed=7)
    with pytest.raises(SampleFileError, match=r"task: file has 'toy' \(fingerprint \w+\), asked for 'gsm8k'"):
        open_for_append(path, other)


def test_fingerprints_are_stable_and_sensitive(tiny_tokenizer):
    from conftest import make_model

    a, b = make_model(tiny_tokenizer, seed=0), make_model(tiny_tokenizer, seed=0)
    assert model_fingerprint(a) == model_fingerprint(b)
    with __import__("torch").no_grad():
        b.model.layers[0].mlp.up_proj.weight[0, 0] += 1e-3
    assert model_fingerprint(a) != model_fingerprint(b)
    p = _problems(3)
    assert task_fingerprint(p) == task_fingerprint(_problems(3)) != task_fingerprint(p[:2])


def test_resume_after_kill_equals_uninterrupted_run(tmp_path, tiny_model, tiny_tokenizer):
    probs = _problems(5)
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=8)
    header = _header(probs, n=3, fp=model_fingerprint(tiny_model))
    full = tmp_path / "full.jsonl"
    ref = generate_samples(engine, probs, header, full, progress=False)
    assert len(ref) == 5 and all(len(r.samples) == 3 for r in ref)

    part = tmp_path / "part.jsonl"
    generate_samples(engine, probs, header, part, indices=[0, 1, 2], progress=False)
    text = part.read_text()
    part.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # kill mid-way through p2's line
    assert [r.id for r in read_samples(part)[1]] == ["p0", "p1"]
    engine.generate(probs[:2], __import__("rlvr.engines.base", fromlist=["x"]).SamplingParams(n=2, seed=99))
    resumed = generate_samples(engine, probs, header, part, progress=False)
    assert [r.to_dict() for r in resumed] == [r.to_dict() for r in ref]
    assert read_samples(part)[1] == read_samples(full)[1]


def test_problems_are_decoded_in_chunks_aligned_to_task_positions(tmp_path, tiny_model, tiny_tokenizer):
    probs = _problems(5)
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=6)  # n = 3: 2 problems per call
    calls = []
    real = engine.generate
    engine.generate = lambda ps, params: calls.append(([p.id for p in ps], list(params.seeds))) or real(ps, params)
    header = _header(probs, n=3, fp=model_fingerprint(tiny_model))
    generate_samples(engine, probs, header, tmp_path / "a.jsonl", indices=[4, 1], progress=False)
    assert calls == [(["p1"], [8]), (["p4"], [11])]  # sampling.seed (7) + task position
    calls.clear()
    generate_samples(engine, probs, header, tmp_path / "a.jsonl", progress=False)
    assert calls == [(["p0"], [7]), (["p2", "p3"], [9, 10])]
    calls.clear()
    generate_samples(engine, probs, header, tmp_path / "b.jsonl", progress=False, chunk=5)
    assert calls == [(["p0", "p1", "p2", "p3", "p4"], [7, 8, 9, 10, 11])]


def test_limit_then_full_run_appends_the_rest(tmp_path, tiny_model, tiny_tokenizer):
    probs = _problems(4)
    engine = HFEngine(tiny_model, tiny_tokenizer)
    header = _header(probs, n=2, fp=model_fingerprint(tiny_model))
    path = tmp_path / "s.jsonl"
    first = generate_samples(engine, probs, header, path, indices=[0, 1], progress=False)
    everything = generate_samples(engine, probs, header, path, progress=False)
    assert [r.id for r in everything] == ["p0", "p1", "p2", "p3"]
    assert everything[:2] == first


def test_voting_key_merges_equal_numbers_and_presentations():
    same = ["0.5", "\\frac12", "\\frac{1}{2}", "\\dfrac{1}{2}", "1/2", "$0.5$", " 0.50 "]
    assert {voting_key(s) for s in same} == {"1/2"}
    assert voting_key("x = 3") == voting_key("3") == "3"
    assert voting_key("1,000") == voting_key("1000")
    assert voting_key("\\text{(B)}") == voting_key("B") == "choice:B"
    assert voting_key("\\sqrt{2}") != voting_key("2")
    assert voting_key("\\left( 3, \\frac{\\pi}{2} \\right)") == voting_key("(3,\\frac{\\pi}{2})")
    assert voting_key(None) is None
    assert voting_key("1,600", "numeric") == voting_key("1600.0", "numeric") == "1600.0"


def test_score_samples_math_and_callable(tmp_path):
    recs = [_record("a", ["so \\boxed{2}", "\\boxed{3}", "no idea"]),
            _record("b", ["\\boxed{0.5}", "the answer is \\boxed{\\frac12}", "\\boxed{1/3}"], answer="\\frac{1}{2}")]
    s = score_samples(recs, "math")
    assert s.correct.shape == (2, 3) and s.correct.dtype == bool
    assert s.correct.tolist() == [[True, False, False], [True, True, False]]
    assert s.extracted[1] == ["1/2", "1/2", "1/3"] and s.extracted[0][2] is None
    assert s.num_tokens.tolist()[0] == [len("so \\boxed{2}"), 9, 7]
    assert s.ids == ["a", "b"] and s.metadata[0] == {"level": 3} and s.n == 3
    exact = score_samples(recs, lambda c, a: __import__("rlvr.types", fromlist=["Verdict"]).Verdict(float(c == a), c))
    assert not exact.correct.any()
    assert np.array_equal(score_samples(recs, "math", workers=2).correct, s.correct)


def test_math_verifier_checks_a_repeated_symbolic_pair_once(monkeypatch):
    import rlvr.verifiers.math as vm
    from rlvr.verifiers import get_verifier
    from rlvr.verifiers.math.compare import symbolic_compare

    calls = []

    class FakeSandbox:
        def __init__(self, status="ok"):
            self.status = status

        def call(self, fn, args, timeout):
            calls.append(args[:2])
            return (self.status, fn(*args)) if self.status == "ok" else (self.status, None)

    monkeypatch.setattr(vm, "get_sandbox", lambda: FakeSandbox())
    v = get_verifier("math")
    for _ in range(3):
        assert v("\\boxed{(x+1)^2}", "x^2+2x+1").correct
        assert not v("\\boxed{\\sqrt{3}}", "\\frac{\\pi}{2}").correct
    assert len(calls) == 2
    assert symbolic_compare("x^2+2x+1", "(x+1)^2")[0]
    monkeypatch.setattr(vm, "get_sandbox", lambda: FakeSandbox("timeout"))
    calls.clear()
    v2 = get_verifier("math")
    for _ in range(2):
        assert v2("\\boxed{(x+1)^2}", "x^2+2x+1").reason.startswith("timeout")
    assert len(calls) == 2  # a timeout is not remembered
