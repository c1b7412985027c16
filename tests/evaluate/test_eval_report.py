"""The results JSON, PNG plots and self-contained HTML report of `rlvr eval`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from rlvr.evaluate.report import build_results, write_report
from rlvr.evaluate.samples import SampleRecord, make_header, score_samples
from rlvr.types import Problem


def _records(P: int = 12, n: int = 4) -> list[SampleRecord]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(P):
        answer = str(i)
        texts = [f"<b>step</b> & so \\boxed{{{answer if rng.random() < 0.5 else i + 1}}}" for _ in range(n)]
        out.append(SampleRecord(id=f"test/p{i}.json", answer=answer,
                                metadata={"level": 1 + i % 3, "subject": ["Algebra", "Geometry"][i % 2]},
                                prompt=f"What is {i} <script>alert(1)</script>?",
                                samples=[{"text": t, "num_tokens": 20 + j, "finish_reason": "stop" if j else "length",
                                          "logprob_sum": -3.0} for j, t in enumerate(texts)]))
    return out


def _header(records):
    problems = [Problem(id=r.id, prompt=r.prompt, answer=r.answer) for r in records]
    return make_header("math500", problems, "tiny", "0" * 16, n=4, temperature=1.0, max_new_tokens=32, seed=1)


def test_results_and_report_files(tmp_path):
    recs = _records()
    scored = score_samples(recs, "math")
    res = build_results(_header(recs), recs, scored, examples=4)
    assert res["num_problems"] == 12 and res["samples_per_problem"] == 4 and res["n"] == 12
    assert res["accuracy"] == res["metrics"]["avg@k"]["4"]["value"] == scored.correct.mean()
    assert set(res["breakdown"]) == {"level", "subject"} and list(res["breakdown"]["level"]) == ["1", "2", "3"]
    assert res["tokens"]["truncated_fraction"] == 0.25
    assert [p["id"] for p in res["per_problem"]] == scored.ids
    assert {ex["correct"] for ex in res["examples"]} == {True, False}

    paths = write_report(res, tmp_path / "rep")
    for key in ("results", "passk", "level", "subject", "html"):
        assert paths[key].is_file() and paths[key].stat().st_size > 0, key
    for key in ("passk", "level", "subject"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(paths["results"].read_text())["task"] == "math500"

    page = paths["html"].read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?\s*(https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page
    assert len(re.findall(r"src='data:image/png;base64,[A-Za-z0-9+/=]{100,}'", page)) == 3
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;step&lt;/b&gt; &amp; so" in page
    assert "pass@4" in page and "By level" in page and "By subject" in page


def test_report_without_metadata_has_no_breakdown(tmp_path):
    recs = _records(5)
    for r in recs:
        r.metadata = {}
    res = build_results(_header(recs), recs, score_samples(recs, "math"))
    assert res["breakdown"] == {}
    paths = write_report(res, tmp_path)
    assert "level" not in paths and paths["html"].read_text().count("data:image/png;base64,") == 1


def test_report_lists_verdict_reasons(tmp_path):
    recs = _records(4)
    res = build_results(_header(recs), recs, score_samples(recs, "math"))
    res["verdict_reasons"] = {"match (identical)": 3, "timeout": 1}
    page = write_report(res, tmp_path)["html"].read_text()
    assert "Verifier verdicts: match (identical) 3, timeout 1." in page


def _cards(page: str) -> list[str]:
    return re.findall(r"<div class='card'><div>([^<]*)</div>", page)


def test_report_cards_show_each_number_once(tmp_path):
    """avg@n equals pass@1, and with one sample per problem pass@1 = maj@1 = accuracy: no card repeats one."""
    recs = _records(6)
    page = write_report(build_results(_header(recs), recs, score_samples(recs, "math")), tmp_path / "n4")["html"]
    assert _cards(page.read_text()) == ["accuracy (avg@4 = pass@1)", "pass@4", "maj@4"]

    one = _records(6, n=1)
    header = make_header("math500", [Problem(id=r.id, prompt=r.prompt, answer=r.answer) for r in one], "tiny",
                         "0" * 16, n=1, temperature=0.0, max_new_tokens=32, seed=1)
    page = write_report(build_results(header, one, score_samples(one, "math")), tmp_path / "n1")["html"].read_text()
    assert _cards(page) == ["accuracy (pass@1)"]


def test_accuracy_axis_spans_0_to_100_percent_when_every_answer_is_wrong(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    limits = {}
    save = Figure.savefig

    def record(fig, path, *a, **kw):
        limits[Path(path).name] = fig.axes[0].get_ylim() if Path(path).name == "passk.png" else fig.axes[0].get_xlim()
        return save(fig, path, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", record)
    recs = _records(6)
    for r in recs:
        r.answer = "never"
    res = build_results(_header(recs), recs, score_samples(recs, "math"))
    assert res["accuracy"] == 0.0 and res["metrics"]["pass@k"]["4"]["value"] == 0.0
    write_report(res, tmp_path)
    assert limits["passk.png"] == (0.0, 100.0)
    assert limits["by_subject.png"] == (0.0, 100.0)
