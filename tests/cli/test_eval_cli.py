"""`rlvr eval` end to end on a tiny model: stored samples, report, re-scoring, refusal, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.cli import main


def _data(tmp_path, k=5):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+0", "a": str(i)}) + "\n" for i in range(k)))
    return data


def _args(tmp_path, model, *extra):
    return ["eval", "--task", "jsonl", "--path", str(_data(tmp_path)), "--prompt-field", "q", "--answer-field", "a",
            "--model", str(model), "--n", "3", "--temperature", "1.0", "--max-new-tokens", "5", "--no-progress",
            "--samples", str(tmp_path / "s.jsonl"), *extra]


def test_eval_task_generates_once_and_reports(tmp_path, tiny_model_dir, capsys):
    rc = main(_args(tmp_path, tiny_model_dir, "--report", str(tmp_path / "rep"), "--limit", "3"))
    assert rc == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "pass@3" in out and "maj@3" in out and "report written to" in out
    assert out.count("pass@1 ") == 1
    res = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert res["num_problems"] == 3 and res["samples_per_problem"] == 3 and res["verifier"] == "math"
    assert res["metrics"]["ks"] == [1, 2, 3] and res["sampling"]["temperature"] == 1.0
    assert res["generated_problems"] == 3 and sum(res["verdict_reasons"].values()) == 9
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "data:image/png;base64," in page and "http" not in page.replace("http-equiv", "")
    before = (tmp_path / "s.jsonl").read_text()
    assert len(before.splitlines()) == 4

    # re-score: no generation (the file is unchanged), another verifier and k list
    rc = main(_args(tmp_path, tiny_model_dir, "--rescore-only", "--verifier", "numeric", "--k", "1,3", "--limit", "3",
                    "--output", str(tmp_path / "r2.json")))
    assert rc == 0, capsys.readouterr().err
    r2 = json.loads((tmp_path / "r2.json").read_text())
    assert r2["verifier"] == "numeric" and r2["metrics"]["ks"] == [1, 3] and r2["generated_problems"] == 0
    assert (tmp_path / "s.jsonl").read_text() == before

    # re-scoring the full task is refused: two problems were never generated
    capsys.readouterr()
    # n = 1 (--k 1): pass@1 is printed once, and no maj@1
    assert main(_args(tmp_path, tiny_model_dir, "--rescore-only", "--k", "1", "--limit", "3")) == 0
    out = capsys.readouterr().out
    assert out.count("pass@1") == 1 and "maj@" not in out
    rc = main(_args(tmp_path, tiny_model_dir, "--rescore-only"))
    assert rc == 2 and "incomplete, 2 of 5" in capsys.readouterr().err
    # without --limit, a normal run generates only the 2 missing problems
    assert main(_args(tmp_path, tiny_model_dir)) == 0
    after = (tmp_path / "s.jsonl").read_text()
    assert after.startswith(before) and len(after.splitlines()) == 6


def test_eval_refuses_samples_from_other_settings(tmp_path, tiny_model_dir, capsys):
    assert main(_args(tmp_path, tiny_model_dir, "--limit", "1")) == 0
    capsys.readouterr()
    args = _args(tmp_path, tiny_model_dir, "--limit", "1")
    args[args.index("--temperature") + 1] = "0.5"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "s.jsonl" in err and "temperature=1.0 vs 0.5" in err
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"q": "9+9", "a": "18"}) + "\n")
    args = _args(tmp_path, tiny_model_dir, "--limit", "1")
    args[args.index("--path") + 1] = str(other)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "task: file has 'jsonl' (fingerprint" in err and "asked for 'jsonl' (fingerprint" in err


def test_eval_rescore_missing_file_and_bad_task_file(tmp_path, tiny_model_dir, capsys):
    assert main(_args(tmp_path, tiny_model_dir, "--rescore-only")) == 2
    assert "no such samples file" in capsys.readouterr().err
    assert main(["eval", "--task", "jsonl", "--model", str(tiny_model_dir)]) == 2
    assert "--task jsonl needs --path" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1", "answer": "1"}\n{"prompt": \n')
    assert main(["eval", "--task", "jsonl", "--path", str(bad), "--model", str(tiny_model_dir)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_eval_benchmark_files_pick_verifier_and_breakdowns(tmp_path, tiny_model_dir, capsys):
    math500 = tmp_path / "math500_test.jsonl"
    math500.write_text("".join(json.dumps({"problem": f"What is {i}/2?", "answer": f"\\frac{{{i}}}{{2}}",
                                           "subject": ["Algebra", "Geometry"][i % 2], "level": 1 + i % 3,
                                           "unique_id": f"test/x/{i}.json", "solution": "..."}) + "\n"
                               for i in range(4)))
    gsm8k = tmp_path / "gsm8k_test.jsonl"
    gsm8k.write_text(json.dumps({"question": "2+2?", "answer": "2+2=4\n#### 4"}) + "\n")
    common = ["--model", str(tiny_model_dir), "--n", "2", "--temperature", "1.0", "--max-new-tokens", "3",
              "--limit", "3", "--no-progress"]
    rc = main(["eval", "--task", "math500", "--path", str(math500), *common, "--output", str(tmp_path / "m.json")])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "m.json").read_text())
    assert res["verifier"] == "math" and res["task"] == "math500" and res["num_problems"] == 3
    assert set(res["breakdown"]) == {"level", "subject"} and list(res["breakdown"]["level"]) == ["1", "2", "3"]
    assert [row["subject"] for row in res["per_problem"]] == ["Algebra", "Geometry", "Algebra"]
    assert len(list(tmp_path.glob("math500-tiny-model-*-n2-T1.samples.jsonl"))) == 1  # + a hash of the model dir
    rc = main(["eval", "--task", "gsm8k", "--path", str(gsm8k), *common, "--output", str(tmp_path / "g.json")])
    assert rc == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "g.json").read_text())["verifier"] == "numeric"


def test_eval_passes_the_engines_options(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """`rlvr eval ... rollout.engine_params={decode: static, share_prefix: 8}` samples with those HFEngine options."""
    import rlvr.engines.hf

    made = []
    real = rlvr.engines.hf.HFEngine

    def spy(*a, **kw):
        made.append((kw.get("decode"), kw.get("share_prefix")))
        return real(*a, **kw)

    monkeypatch.setattr(rlvr.engines.hf, "HFEngine", spy)  # what the registry's hf builder imports
    rc = main(_args(tmp_path, tiny_model_dir, "--limit", "2",
                   "rollout.engine_params={decode: static, share_prefix: 8}"))
    assert rc == 0, capsys.readouterr().err
    assert made == [("static", 8)]
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 3  # header + 2 problems
    assert main(_args(tmp_path, tiny_model_dir, "--limit", "2", "--rescore-only")) == 0
    assert main(_args(tmp_path, tiny_model_dir, "--samples", str(tmp_path / "t.jsonl"), "--limit", "1",
                      "rollout.engine_params={decode: bogus}")) == 2
    assert "rollout.engine_params.decode" in capsys.readouterr().err


def test_eval_samples_with_the_configured_rollout_engine(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """`rlvr eval rollout.engine=NAME` builds NAME through the engine registry, as `rlvr train` does, on the
    evaluated model and system prompt (before, eval always built an HFEngine: rollout.engine=vllm was ignored)."""
    import dataclasses
    import sys

    from rlvr.engines.registry import ENGINES

    built = []
    real_hf = ENGINES.get("hf")

    def fake_vllm(model, tokenizer, ctx):  # stands in for vLLM: records what it was built from
        built.append((ctx.model_name, ctx.system_prompt, ctx.batch_size))
        return real_hf(model, tokenizer, ctx)

    monkeypatch.setitem(ENGINES._entries, "vllm", dataclasses.replace(ENGINES._entries["vllm"], obj=fake_vllm))
    rc = main(_args(tmp_path, tiny_model_dir, "--limit", "2", "--system-prompt", "Be brief.",
                    "rollout.engine=vllm", "rollout.batch_size=3"))
    assert rc == 0, capsys.readouterr().err
    assert built == [(str(tiny_model_dir), "Be brief.", 3)]
    monkeypatch.undo()
    # without the extra, the error names it instead of a traceback
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert main(_args(tmp_path, tiny_model_dir, "--samples", str(tmp_path / "v.jsonl"), "--limit", "1",
                      "rollout.engine=vllm")) == 2
    assert "rlvr[gpu]" in capsys.readouterr().err


def test_eval_of_a_mixture_config_without_a_task_is_refused_with_what_to_do(tmp_path, capsys):
    """One verifier scores an `rlvr eval`; a mixture's problems each need their own, so it says so before any
    model loads instead of silently evaluating task.name."""
    config = Path(__file__).resolve().parents[2] / "configs" / "mixture.yaml"
    rc = main(["eval", "--model", str(tmp_path / "never-loaded"), str(config)])
    err = capsys.readouterr().err
    assert rc == 2 and "trains a task mixture (mixture.tasks: arithmetic, code, chain_sum)" in err and "--task" in err
