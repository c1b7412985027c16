"""Image problems through `rlvr.train`, `rlvr train` and `rlvr eval` with a tiny randomly initialised VLM; a text-only
run computes what it computed before images existed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import make_model, make_tokenizer, make_vlm, tiny_run_config  # noqa: E402
from recorded import assert_matches, record  # noqa: E402
from rlvr.recipes.rl import train  # noqa: E402
from rlvr.types import Verdict  # noqa: E402

VISUAL = ["task.name=visual", "task.params={kind: count, difficulty: 2, num_train: 24, num_heldout: 4, image_size: 48}",
          "reward.verifier=numeric", "train.threads=1"]


def _length_verifier(text, ref):  # varied rewards for a random policy, so every step learns from image rows
    return Verdict(float(len(text) % 3 == 0), str(len(text)))


@pytest.mark.parametrize("learner", [
    [],  # padded micro-batches, full logits
    ["train.micro_batch_tokens=512", "train.share_prompts=true", "train.logprob_chunk_size=16",
     "rollout.dtype=bfloat16"],  # the demo's learner: packed, shared prompts, chunked head, bf16 sampler
])
def test_rlvr_train_on_image_problems(tmp_path, learner):
    model, tok = make_vlm()
    rows = []
    cfg = tiny_run_config(tmp_path, *VISUAL, "train.steps=2", "eval.before_training=true",
                          "eval.after_training=true", "eval.num_problems=4", *learner)
    summary = train(cfg, model=model, tokenizer=tok, verifier=_length_verifier, on_step=rows.append)
    assert len(rows) == 2 and sum(r["learner_tokens"] for r in rows) > 0
    assert all(r["logprob_mismatch"] < (0.05 if learner else 1e-4) for r in rows if r["learner_tokens"])
    assert summary["eval_after"]["greedy"]["n"] == 4
    ckpt = Path(summary["final_checkpoint"]) / "model"
    assert (ckpt / "preprocessor_config.json").is_file() and (ckpt / "chat_template.jinja").is_file() or \
        (ckpt / "processor_config.json").is_file()


def test_rlvr_train_lora_vlm(tmp_path):
    pytest.importorskip("peft")
    model, tok = make_vlm()
    rows = []
    cfg = tiny_run_config(tmp_path, *VISUAL, "train.steps=2", "model.lora.enabled=true", "model.lora.r=4",
                          "model.lora.target_modules=[q_proj, v_proj]", "train.micro_batch_tokens=512")
    train(cfg, model=model, tokenizer=tok, verifier=_length_verifier, on_step=rows.append)
    assert sum(r["learner_tokens"] for r in rows) > 0 and all(r["grad_norm"] >= 0 for r in rows)


def test_vision_runs_refuse_what_does_not_carry_images(tmp_path):
    model, tok = make_vlm()
    cfg = tiny_run_config(tmp_path, *VISUAL, "algorithm.advantage=gae")
    with pytest.raises(ValueError, match="critic"):
        train(cfg, model=model, tokenizer=tok)
    text_tok = make_tokenizer()
    with pytest.raises(ValueError, match="text-only model"):
        train(tiny_run_config(tmp_path, *VISUAL), model=make_model(text_tok), tokenizer=text_tok)


def test_cli_train_then_eval_a_vlm_on_the_visual_task(tmp_path, tiny_vlm_dir, capsys):
    from rlvr.cli import main

    out = tmp_path / "run"
    common = [f"model.name={tiny_vlm_dir}", *VISUAL, "eval.num_problems=4", "eval.max_new_tokens=6"]
    args = [str(a) for a in (f"train.output_dir={out}", "train.steps=2", "train.prompts_per_step=2",
                             "rollout.group_size=2", "rollout.max_new_tokens=6", "train.progress=false",
                             "eval.before_training=false", *common)]
    assert main(["train", *args]) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    ckpt = sorted((out / "checkpoints").iterdir())[-1]
    assert (out / "eval_after.json").is_file()
    capsys.readouterr()
    rc = main(["eval", f"train.output_dir={out}", *common, "--model", str(ckpt), "--n", "2", "--temperature", "1.0",
               "--samples", str(tmp_path / "s.jsonl"), "--output", str(tmp_path / "r.json"), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["num_problems"] == 4 and res["samples_per_problem"] == 2 and res["verifier"] == "numeric"
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert len(lines) == 5 and "How many" in lines[1]


def test_text_only_runs_are_unchanged():
    """The same tiny text runs as tests/fixtures/text_run_metrics.json, which was recorded with the code before
    images existed (65bf72b): every logged number and the final weights are equal, bit for bit on the recording's
    platform and within float rounding on another (tests/recorded.py; ``python tests/integration/
    test_vision_train.py`` records this platform from a commit known to compute the same)."""
    assert_matches(text_runs(), TEXT_RUN_FIXTURE)


TEXT_RUN_FIXTURE = Path(__file__).parents[1] / "fixtures" / "text_run_metrics.json"


def text_runs() -> dict:
    import tempfile

    got = {}
    for name, extra in (("plain", []), ("packed", ["train.micro_batch_tokens=256", "train.share_prompts=true",
                                                   "train.logprob_chunk_size=16", "rollout.dtype=bfloat16"])):
        tok = make_tokenizer()
        model = make_model(tok)
        rows = []
        with tempfile.TemporaryDirectory() as d:
            cfg = tiny_run_config(f"{d}/{name}", "train.threads=1", *extra)
            train(cfg, model=model, tokenizer=tok, verifier=_length_verifier, on_step=rows.append)
        keep = ("reward_mean", "reward_std", "accuracy", "response_length", "adv_mean", "adv_std", "loss", "entropy",
                "grad_norm", "logprob_mismatch", "learner_tokens")
        got[name] = {"rows": [{k: r[k] for k in keep if k in r} for r in rows],
                     "weight_sum": float(sum(p.detach().double().sum() for p in model.parameters()))}
    return got


if __name__ == "__main__":  # record this platform's text runs (see test_text_only_runs_are_unchanged)
    print(f"wrote the recording of {record(TEXT_RUN_FIXTURE, text_runs())} in {TEXT_RUN_FIXTURE}")
