"""Evaluation defaults a user can rely on: one max_new_tokens default, a warning when most answers are cut off,
an interval that is not degenerate at 0% or 100%, a default samples file per model directory, and messages
that name the caller's own option."""

from __future__ import annotations

import inspect
import json
import logging

import numpy as np
import pytest

from rlvr.evaluate.metrics import bootstrap_means, compute_metrics
from rlvr.evaluate.pipeline import EvalRequest, default_samples_path, run_eval, truncation_warning
from rlvr.evaluate.samples import SampleFileError, make_header, open_for_append
from rlvr.types import Problem


def _problems(n: int = 3) -> list[Problem]:
    return [Problem(id=f"p{i}", prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(n)]


def test_one_max_new_tokens_default_for_the_api_the_request_the_config_and_the_cli(capsys):
    import rlvr.evaluate.api as api
    from rlvr.cli import main
    from rlvr.evaluate.settings import DEFAULT_MAX_NEW_TOKENS, EvalConfig

    assert inspect.signature(api.evaluate).parameters["max_new_tokens"].default == DEFAULT_MAX_NEW_TOKENS
    assert EvalRequest(task="t", problems=[]).max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    assert EvalConfig().max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert f"(default eval.max_new_tokens = {DEFAULT_MAX_NEW_TOKENS})" in flat


def test_most_answers_at_the_token_limit_warn_naming_the_callers_option():
    results = {"tokens": {"truncated_fraction": 0.75}, "sampling": {"max_new_tokens": 64}}
    line = truncation_warning(results, "--max-new-tokens (eval.max_new_tokens)")
    assert line == ("75% of the answers stopped at the token limit (64 new tokens) and are cut off: raise "
                    "--max-new-tokens (eval.max_new_tokens)")
    assert truncation_warning({"tokens": {"truncated_fraction": 0.5}, "sampling": {}}, "x") is None


def test_the_api_warns_when_most_answers_are_cut_off(tmp_path, tiny_model_dir, caplog):
    import rlvr

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+0", "answer": str(i)}) + "\n" for i in range(3)))
    with caplog.at_level(logging.WARNING):  # the tiny random model never stops before its limit
        res = rlvr.evaluate(str(tiny_model_dir), task="jsonl", path=str(data), max_new_tokens=2,
                            samples_path=tmp_path / "s.jsonl")
    assert res["warnings"] == ["100% of the answers stopped at the token limit (2 new tokens) and are cut off: "
                               "raise max_new_tokens"]
    assert res["warnings"][0] in caplog.text


def test_cli_eval_prints_the_truncation_warning(tmp_path, tiny_model_dir, capsys):
    from rlvr.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+0", "answer": str(i)}) + "\n" for i in range(3)))
    assert main(["eval", "--task", "jsonl", "--path", str(data), "--model", str(tiny_model_dir),
                 "--max-new-tokens", "2", "--no-progress", "--output", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "rlvr: warning: 100% of the answers stopped at the token limit (2 new tokens) and are cut off: raise " \
           "--max-new-tokens (eval.max_new_tokens)" in err


def test_an_interval_at_0_or_100_percent_is_not_degenerate():
    none = compute_metrics(np.zeros((40, 1), dtype=bool), [[None]] * 40)
    row = none["avg@k"]["1"]
    assert row["value"] == 0.0 and row["ci_low"] == 0.0
    assert row["ci_high"] == pytest.approx(3.8415 / (40 + 3.8415), abs=1e-4)  # Wilson: z^2 / (n + z^2), 8.8%
    assert row["ci_method"] == "wilson"
    every = compute_metrics(np.ones((40, 1), dtype=bool), [["1"]] * 40)["pass@k"]["1"]
    assert every["ci_high"] == 1.0 and every["ci_low"] == pytest.approx(40 / (40 + 3.8415), abs=1e-4)
    # anywhere else: the bootstrap's numbers, unchanged
    correct = np.array([[True], [False], [False], [True], [False]])
    mixed = compute_metrics(correct, [["1"]] * 5)["avg@k"]["1"]
    lo, hi = bootstrap_means(correct.astype(float))
    assert (mixed["ci_low"], mixed["ci_high"]) == (float(lo[0]), float(hi[0])) and "ci_method" not in mixed


def test_default_samples_files_of_two_runs_checkpoints_differ(tmp_path, tiny_model_dir):
    a, b = tmp_path / "run-a" / "checkpoints" / "step-000001", tmp_path / "run-b" / "checkpoints" / "step-000001"
    for ckpt in (a, b):
        (ckpt / "model").mkdir(parents=True)
        (ckpt / "model" / "config.json").write_text("{}")
    pa, pb = default_samples_path("gsm8k", str(a), 1, 0.0), default_samples_path("gsm8k", str(b), 1, 0.0)
    assert pa != pb and pa.name.startswith("gsm8k-step-000001-") and pa.name.endswith("-n1-T0.samples.jsonl")
    assert default_samples_path("gsm8k", str(a), 1, 0.0) == pa  # the same checkpoint: the same file (resumes)
    # a bundled name or a hub id keeps its plain name
    assert default_samples_path("math500", "smollm2-135m-instruct", 8, 0.8).name == \
        "math500-smollm2-135m-instruct-n8-T0.8.samples.jsonl"


def test_a_samples_file_of_other_settings_names_the_callers_option(tmp_path):
    problems = _problems()
    path = tmp_path / "s.jsonl"
    open_for_append(path, make_header("t", problems, "m", "fp1", n=1, temperature=0.0, top_p=1.0, max_new_tokens=4,
                                      seed=0)).close()
    other = make_header("t", problems, "m", "fp2", n=1, temperature=0.0, top_p=1.0, max_new_tokens=4, seed=0)
    with pytest.raises(SampleFileError, match="Use another samples_path, or delete this one"):
        open_for_append(path, other, option="samples_path")
    with pytest.raises(SampleFileError, match="Use another --samples, or delete this one"):
        open_for_append(path, other, option="--samples")


def test_the_api_and_the_cli_name_their_own_option_on_a_collision(tmp_path, tiny_model_dir, capsys):
    import rlvr
    from rlvr.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+0", "answer": str(i)}) + "\n" for i in range(2)))
    samples = tmp_path / "s.samples.jsonl"
    rlvr.evaluate(str(tiny_model_dir), task="jsonl", path=str(data), max_new_tokens=2, samples_path=samples)
    lines = samples.read_text().splitlines()  # the file as if another model had made it
    samples.write_text("\n".join([json.dumps({**json.loads(lines[0]), "model_fingerprint": "0" * 16}), *lines[1:]])
                       + "\n")
    with pytest.raises(SampleFileError, match="Use another samples_path"):
        rlvr.evaluate(str(tiny_model_dir), task="jsonl", path=str(data), max_new_tokens=2, samples_path=samples)
    assert main(["eval", "--task", "jsonl", "--path", str(data), "--model", str(tiny_model_dir),
                 "--max-new-tokens", "2", "--no-progress", "--samples", str(samples)]) == 2
    assert "Use another --samples" in capsys.readouterr().err


def test_eval_refuses_a_limit_beyond_the_context_and_unwritable_dirs_before_loading(tmp_path, tiny_model_dir,
                                                                                   monkeypatch):
    import rlvr.evaluate.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_load_model", lambda *a: pytest.fail("the model was loaded first"))
    req = EvalRequest(task="t", problems=_problems(), model=str(tiny_model_dir), max_new_tokens=600,
                      samples_path=tmp_path / "s.jsonl", progress=False)
    with pytest.raises(ValueError, match=r"^max_new_tokens=600 plus the prompts .* exceeds the context of .* "
                                         r"\(512 tokens, max_position_embeddings\)"):
        run_eval(req)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    req = EvalRequest(task="t", problems=_problems(), model=str(tiny_model_dir), max_new_tokens=4,
                      samples_path=blocker / "s.jsonl", progress=False)
    with pytest.raises(ValueError, match=r"^samples_path: cannot write there: .* is a file"):
        run_eval(req)
