"""The SFT recipe: prompt tokens carry no loss, rendering matches the rollouts', bad input fails at load in one
line, a stopped run resumes to bit-identical weights, the final model is one rlvr train loads."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.config import ConfigError
from rlvr.engines.hf import format_prompt
from rlvr.learner.sft import SFTSettings, _logprobs, encode_example, heldout_nll, masked_nll, sft_batch
from rlvr.learner.update import sub_batch
from rlvr.recipes.sft import load_examples
from rlvr.recipes.sft_config import load_sft_config
from rlvr.tasks.jsonl import DatasetError
from rlvr.tasks.sft_data import SFTExample
from rlvr.types import Problem


def _cfg(tmp_path, *extra):
    return load_sft_config(None, [f"train.output_dir={tmp_path / 'run'}", "train.steps=4", "train.batch_size=4",
                                  "train.micro_batch_size=2", "train.lr=1e-2", "train.warmup_steps=0",
                                  "train.threads=1", "train.progress=false", "train.save_every=0",
                                  "task.params.num_train=40", "task.num_heldout=8", "data.num_heldout=4",
                                  "eval.before_training=false", "eval.after_training=false", *extra])


# --------------------------------------------------------------------------- the loss
def test_masked_nll_hand_computed_and_blind_to_masked_targets():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -4.0, -1.5]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    nll, n = masked_nll(logp, mask)
    assert float(nll) == pytest.approx(2.0 + 3.0 + 0.5) and float(n) == 3.0  # by hand: -(-2 - 3 - 0.5)
    # from logits: changing the targets of masked positions leaves the loss unchanged and gives them no gradient
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7, requires_grad=True)
    targets = torch.tensor([[1, 2, 3], [4, 5, 6]])
    other = torch.where(mask.bool(), targets, (targets + 3) % 7)
    loss_a = masked_nll(torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0], mask)[0]
    loss_b = masked_nll(torch.log_softmax(logits, -1).gather(-1, other[..., None])[..., 0], mask)[0]
    assert float(loss_a.detach()) == float(loss_b.detach())
    loss_a.backward()
    assert torch.all(logits.grad[~mask.bool()] == 0)
    assert torch.all(logits.grad[mask.bool()].abs().sum(-1) > 0)


def test_prompt_and_user_turn_tokens_get_no_gradient_through_the_model(tiny_model, tiny_tokenizer):
    """A chat with two assistant turns through the tiny model: the gradient of the loss w.r.t. the logits that
    predict prompt, user-turn and template tokens is exactly 0; the logits of assistant tokens get one; the loss
    equals the hand-computed mean NLL of the assistant tokens from a plain full forward pass."""
    ex = SFTExample("c", messages=({"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
                                   {"role": "user", "content": "and 2+2?"}, {"role": "assistant", "content": "4"}))
    s = encode_example(tiny_tokenizer, ex, "be brief")
    assert s.mask is not None and 0 in s.mask and s.mask[-1] == 1
    batch = sft_batch([s], tiny_tokenizer.pad_token_id)
    mb, start = sub_batch(batch, torch.tensor([0]))
    captured = {}

    def keep(_, __, out):
        out.retain_grad()
        captured["logits"] = out

    h = tiny_model.lm_head.register_forward_hook(keep)
    logp = _logprobs(tiny_model, mb, start, SFTSettings())
    h.remove()
    mask = mb.completion_mask[:, start:]
    nll, n = masked_nll(logp, mask)
    (nll / n).backward()
    g = captured["logits"].grad[0, :-1]  # row j predicts the token at column start + j
    assert g.shape[0] == mask.shape[1]
    assert torch.all(g[mask[0] == 0] == 0), "a prompt / user-turn target received gradient"
    assert torch.all(g[mask[0] == 1].abs().sum(-1) > 0)
    # the same number from a plain forward over the whole row, counting only assistant targets
    ids = torch.tensor([s.prompt_ids + s.completion_ids])
    with torch.no_grad():
        lp = torch.log_softmax(tiny_model(ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])[:, 0]
    full_mask = torch.tensor([0] * len(s.prompt_ids) + s.mask, dtype=torch.float32)[1:]
    assert float((nll / n).detach()) == pytest.approx(float(-(lp * full_mask).sum() / full_mask.sum()), rel=1e-5)


def test_packed_and_chunked_losses_equal_the_padded_one(tiny_model, tiny_tokenizer):
    exs = [SFTExample(str(i), prompt=f"What is {i} + {i}?", completion=f"{2 * i}. The answer is \\boxed{{{2 * i}}}.")
           for i in range(1, 7)]
    samples = [encode_example(tiny_tokenizer, e) for e in exs]
    pad = tiny_tokenizer.pad_token_id
    base = heldout_nll(tiny_model, samples, SFTSettings(micro_batch_size=2), pad)
    packed = heldout_nll(tiny_model, samples, SFTSettings(micro_batch_tokens=64, logprob_chunk_size=8), pad)
    assert packed["tokens"] == base["tokens"] == sum(len(s.completion_ids) for s in samples)
    assert packed["loss"] == pytest.approx(base["loss"], rel=1e-5)


# --------------------------------------------------------------------------- rendering
def test_prompts_are_rendered_as_the_rollouts_render_them(tiny_tokenizer):
    ex = SFTExample("p", prompt="What is 2 + 3?", completion="5")
    s = encode_example(tiny_tokenizer, ex, "You are a calculator.")
    assert s.prompt_ids == format_prompt(tiny_tokenizer, Problem("p", prompt="What is 2 + 3?"), "You are a calculator.")
    assert s.completion_ids == tiny_tokenizer.encode("5", add_special_tokens=False) + [tiny_tokenizer.eos_token_id]
    assert s.mask is None  # every completion token carries loss
    cut = encode_example(tiny_tokenizer, SFTExample("q", prompt="x", completion="123456789"), None,
                         max_length=len(s.prompt_ids) - 10 + 3)
    assert cut is None or len(cut.prompt_ids) + len(cut.completion_ids) <= len(s.prompt_ids) - 7


def test_task_source_completions_are_accepted_by_the_verifiers(tmp_path):
    from rlvr.verifiers import get_verifier

    cfg = _cfg(tmp_path)
    train, held, problems = load_examples(cfg)
    assert len(train) == 40 and len(held) == 4 and len(problems) == 8
    assert {e.id for e in train}.isdisjoint(e.id for e in held)
    for name in ("numeric", "math"):
        v = get_verifier(name)
        assert all(v(e.completion, e.metadata["answer"]).correct for e in train + held)


def test_a_template_the_verifier_refuses_fails_at_load(tmp_path):
    with pytest.raises(ConfigError, match="data.completion_template.*not accepted by reward.verifier=numeric"):
        load_examples(_cfg(tmp_path, "data.completion_template=the sum of {expression}"))


# --------------------------------------------------------------------------- bad input
def test_bad_files_fail_in_one_line_naming_file_line_and_fields(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n" +
                    json.dumps({"prompt": "c", "answer": "d"}) + "\n")
    with pytest.raises(DatasetError) as e:
        load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={good}"))
    msg = str(e.value)
    assert "\n" not in msg and f"{good}:2" in msg and "'completion'" in msg and "answer, prompt" in msg
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DatasetError, match="empty file"):
        load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={empty}"))
    with pytest.raises(DatasetError, match="file not found"):
        load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={tmp_path / 'missing.jsonl'}"))
    with pytest.raises(ConfigError, match="data.path"):
        _cfg(tmp_path, "data.source=jsonl")
    with pytest.raises(ConfigError, match="did you mean 'train.batch_size'"):
        _cfg(tmp_path, "train.batchsize=3")


def test_chat_rows_and_a_held_out_slice_from_a_file(tmp_path):
    f = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(10)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, held, problems = load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={f}", "data.num_heldout=3",
                                               "eval.accuracy=false"))
    assert len(train) == 7 and len(held) == 3 and problems == []  # no accuracy evaluation: no task problems
    assert len(load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={f}"))[2]) == 8  # a task section: on
    assert {m["content"] for e in train + held for m in e.messages} == {f"q{i}" for i in range(10)} | \
        {f"a{i}" for i in range(10)}


# --------------------------------------------------------------------------- the run
def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_a_stopped_run_resumes_to_bit_identical_weights(tmp_path, tiny_model_dir):
    from rlvr.recipes.rl import TrainingInterrupted
    from rlvr.recipes.sft import run_sft

    common = [f"model.name={tiny_model_dir}", "train.optimizer=adamw_bf16", "train.micro_batch_tokens=200",
              "train.schedule=cosine", "train.warmup_steps=1", "train.steps=5"]
    a = run_sft(_cfg(tmp_path / "a", *common))
    assert a["steps"] == 5 and (tmp_path / "a" / "run" / "final" / "model.safetensors").is_file()

    def stop(row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        run_sft(_cfg(tmp_path / "b", *common), on_step=stop)
    b = run_sft(_cfg(tmp_path / "b", *common, "train.resume=true"))
    assert b["steps"] == 5
    wa, wb = _weights(tmp_path / "a" / "run" / "final"), _weights(tmp_path / "b" / "run" / "final")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    rows = [json.loads(x) for x in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    # the initial weights differ: training moved them
    w0 = _weights(tiny_model_dir)
    assert any(not torch.equal(w0[k], wa[k]) for k in wa)


def test_held_out_loss_falls_and_the_final_model_loads_as_rlvr_train_model(tmp_path, tiny_model_dir):
    from rlvr.config import load_config
    from rlvr.models import load_policy
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.sft import run_sft

    s = run_sft(_cfg(tmp_path, f"model.name={tiny_model_dir}", "train.steps=8", "eval.before_training=true",
                     "eval.after_training=true", "eval.num_problems=4", "eval.max_new_tokens=4", "eval.every=4",
                     "eval.loss_every=4"))
    assert s["heldout_loss_after"] < s["heldout_loss_before"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "heldout.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "heldout_loss" in r] == [0, 4, 8, 8]  # before, every 4, after
    assert [r["step"] for r in rows if "heldout_accuracy" in r] == [0, 4, 8, 8]
    assert "accuracy_before" in s and "accuracy_after" in s
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_model"] == str(tmp_path / "run" / "final")
    cfg = load_config(RunConfig, None, [f"model.name={summary['final_model']}"])
    model, _ = load_policy(cfg.model.name)
    w = _weights(tmp_path / "run" / "final")
    assert all(torch.equal(p, w[k]) for k, p in model.state_dict().items() if k in w)
    # the directory is the run's: a second run into it is refused, --overwrite deletes the final model too
    from rlvr.recipes.rundir import RunDirectoryError

    with pytest.raises(RunDirectoryError, match="earlier finished run"):
        run_sft(_cfg(tmp_path, f"model.name={tiny_model_dir}"))


# --------------------------------------------------------------------------- offline RL: weighted examples
def test_weighted_examples_scale_their_nll_by_hand(tiny_model, tiny_tokenizer):
    """Reward-weighted regression: the gradient is that of sum_i w_i sum_t -log p_it / N (N: every loss token),
    so a weight-0 example contributes nothing and a weight-2 one counts twice."""
    import copy

    from rlvr.learner.sft import supervised_update

    tok = tiny_tokenizer
    exs = [SFTExample("a", prompt="1+1", completion="2", weight=2.0),
           SFTExample("b", prompt="2+2", completion="five", weight=0.0),
           SFTExample("c", prompt="3+3", completion="6", weight=0.5)]
    samples = [encode_example(tok, ex) for ex in exs]
    ref = copy.deepcopy(tiny_model)
    batch = sft_batch(samples, tok.pad_token_id)
    mb, start = sub_batch(batch, torch.arange(3))
    mask = mb.completion_mask[:, start:]
    logp = _logprobs(ref, mb, start, SFTSettings())
    per_row = -(logp * mask).sum(-1)
    loss = (torch.tensor([2.0, 0.0, 0.5]) * per_row).sum() / mask.sum()
    loss.backward()
    seen = {}

    class Record(torch.optim.SGD):
        def step(self, closure=None):
            seen["g"] = [p.grad.clone() for p in tiny_model.parameters() if p.grad is not None]

    out = supervised_update(tiny_model, Record(tiny_model.parameters(), lr=0.0), samples,
                            SFTSettings(micro_batch_size=2, max_grad_norm=0), tok.pad_token_id)
    assert out["loss"] == pytest.approx(float(loss.detach()), rel=1e-5) and out["tokens"] == int(mask.sum())
    want = [p.grad for p in ref.parameters() if p.grad is not None]
    assert len(seen["g"]) == len(want)
    for g, w in zip(seen["g"], want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)


def test_a_weight_field_is_read_and_bad_weights_fail_naming_the_line(tmp_path):
    f = tmp_path / "logged.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}", "reward": r}) + "\n"
                         for i, r in enumerate([1.0, 0.0, 0.25, 2])))
    train, held, _ = load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={f}", "data.weight_field=reward",
                                        "data.num_heldout=0"))
    assert sorted(ex.weight for ex in train) == [0.0, 0.25, 1.0, 2.0]
    for bad, match in [(-1, "must be a finite number >= 0"), ("high", "must be a finite number >= 0"),
                       (None, "must be a finite number >= 0")]:
        g = tmp_path / "bad.jsonl"
        g.write_text(json.dumps({"prompt": "q", "completion": "a", "reward": 1}) + "\n"
                     + json.dumps({"prompt": "q", "completion": "a", "reward": bad}) + "\n")
        with pytest.raises(DatasetError, match=match) as e:
            load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={g}", "data.weight_field=reward"))
        assert f"{g}:2" in str(e.value)
    h = tmp_path / "none.jsonl"
    h.write_text(json.dumps({"prompt": "q", "completion": "a"}) + "\n")
    with pytest.raises(DatasetError, match="no weight field 'reward'"):
        load_examples(_cfg(tmp_path, "data.source=jsonl", f"data.path={h}", "data.weight_field=reward"))
    with pytest.raises(ConfigError, match="data.weight_field"):
        _cfg(tmp_path, "data.weight_field=reward")  # the task source has no weights
