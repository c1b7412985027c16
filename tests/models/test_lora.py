"""LoRA via peft: trainable set, merged sampler weights, checkpoints, missing-extra error."""

from __future__ import annotations

import copy
import sys

import pytest
import torch

pytest.importorskip("peft", reason="LoRA tests need the lora extra (pip install rlvr[lora])")

from rlvr.models.lora import (LLAMA_TARGET_MODULES, LoraSettings, MissingExtraError, apply_lora,  # noqa: E402
                              copy_merged_into, is_lora_model, merged_copy, merged_weights, require_peft)
from rlvr.engines import HFEngine, SamplingParams  # noqa: E402
from rlvr.learner.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402
from rlvr.types import Problem  # noqa: E402

from conftest import make_model  # noqa: E402

SETTINGS = LoraSettings(enabled=True, r=4, alpha=8.0)


def _lora_model(tok, seed=0):
    return apply_lora(make_model(tok, seed=seed), SETTINGS)


def _train_one_step(model, seed=0):
    """One AdamW step on a random next-token loss so that B (initialised to 0) becomes non-zero."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 60, (3, 12), generator=g)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return opt


def test_only_adapters_require_grad(tiny_tokenizer):
    base = make_model(tiny_tokenizer)
    n_base = sum(p.numel() for p in base.parameters())
    model = apply_lora(base, SETTINGS)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # hidden 32, intermediate 64, 2 layers, 4 heads of 8, 2 kv heads -> k/v out 16; r = 4:
    # each adapted linear has r*(in + out) parameters
    shapes = {"q_proj": (32, 32), "k_proj": (32, 16), "v_proj": (32, 16), "o_proj": (32, 32),
              "gate_proj": (32, 64), "up_proj": (32, 64), "down_proj": (64, 32)}
    expected = 2 * sum(4 * (i + o) for i, o in shapes.values())
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == expected
    assert sorted(shapes) == sorted(LLAMA_TARGET_MODULES)
    assert is_lora_model(model) and not is_lora_model(base)
    # the base weights are frozen and counted once
    assert sum(p.numel() for n, p in model.named_parameters() if ".lora_" not in n) == n_base


def test_merged_weights_are_w_plus_scaled_ba_and_leave_the_learner_alone(tiny_tokenizer):
    model = _lora_model(tiny_tokenizer)
    _train_one_step(model)
    layer = model.get_base_model().model.layers[1].self_attn.q_proj
    A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert B.abs().sum() > 0  # the step moved B off its zero init
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = merged_weights(model)
    expected = layer.base_layer.weight + (8.0 / 4) * B @ A  # alpha / r = 2
    torch.testing.assert_close(merged["model.layers.1.self_attn.q_proj.weight"], expected)
    assert len(merged) == 2 * len(LLAMA_TARGET_MODULES)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    # and it agrees with peft's own merge on a copy
    reference = copy.deepcopy(model).merge_and_unload()
    for name, w in merged.items():
        torch.testing.assert_close(w, reference.get_parameter(name), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_engine_weights_equal_merged_after_an_update(tiny_tokenizer, dtype):
    model = _lora_model(tiny_tokenizer)
    engine = HFEngine(model, tiny_tokenizer, dtype=dtype)
    assert not is_lora_model(engine.model) and engine.model is not model
    _train_one_step(model)
    stale = engine.model.get_parameter("model.layers.0.mlp.up_proj.weight").clone()
    engine.sync_weights(model)
    reference = copy.deepcopy(model).merge_and_unload()
    sd = engine.model.state_dict()
    for name, value in reference.state_dict().items():
        want = value.to(dtype) if dtype is not None else value
        torch.testing.assert_close(sd[name], want, atol=1e-6, rtol=0, msg=name)
    assert not torch.equal(stale, engine.model.get_parameter("model.layers.0.mlp.up_proj.weight"))
    # the fp32 merged sampler computes the same distribution as the adapter model
    if dtype is None:
        ids = torch.randint(4, 60, (2, 10), generator=torch.Generator().manual_seed(1))
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(engine.model(input_ids=ids).logits, model(input_ids=ids).logits,
                                       atol=1e-5, rtol=0)
    out = engine.generate([Problem("p", "What is 1 + 2?", "3")], SamplingParams(n=2, max_new_tokens=4))
    assert len(out[0]) == 2


def test_unmerged_engine_samples_through_the_adapters(tiny_tokenizer):
    model = _lora_model(tiny_tokenizer)
    engine = HFEngine(model, tiny_tokenizer, merge_lora=False)
    assert engine.model is model
    engine.sync_weights(model)  # a no-op: same module
    assert engine.model is model


def test_copy_merged_into_a_plain_copy(tiny_tokenizer):
    model = _lora_model(tiny_tokenizer)
    plain = merged_copy(model)
    _train_one_step(model)
    copy_merged_into(plain, model)
    for name, w in merged_weights(model).items():
        assert torch.equal(plain.get_parameter(name), w)


def test_checkpoint_round_trip_with_lora(tmp_path, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = _lora_model(tiny_tokenizer)
    opt = _train_one_step(model)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    path = save_checkpoint(tmp_path, 1, model, tiny_tokenizer, opt, sched, {"data_position": 7})
    assert latest_checkpoint(tmp_path) == path
    assert (path / "adapter" / "adapter_model.safetensors").is_file()
    # model/ is a plain HF checkpoint with merged weights: loadable without peft
    plain = AutoModelForCausalLM.from_pretrained(path / "model")
    ids = torch.randint(4, 60, (2, 9), generator=torch.Generator().manual_seed(2))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5, rtol=0)

    # resume: a fresh LoRA model on the same base gets exactly the trained adapters and optimizer state
    fresh = _lora_model(tiny_tokenizer)
    fresh_opt = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=1e-2)
    fresh_sched = torch.optim.lr_scheduler.LambdaLR(fresh_opt, lambda s: 1.0)
    state = load_checkpoint(path, fresh, fresh_opt, fresh_sched)
    assert state["step"] == 1 and state["data_position"] == 7
    for (n, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), n
    assert fresh_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()

    # a full-weights model loads the merged weights; a LoRA model refuses a full checkpoint
    full = make_model(tiny_tokenizer)
    load_checkpoint(path, full)
    with torch.no_grad():
        torch.testing.assert_close(full(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-6, rtol=0)
    full_path = save_checkpoint(tmp_path / "full", 1, full, tiny_tokenizer, opt, None, {})
    with pytest.raises(RuntimeError, match="no LoRA adapter"):
        load_checkpoint(full_path, _lora_model(tiny_tokenizer))


def test_missing_peft_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # makes `import peft` raise ImportError
    with pytest.raises(MissingExtraError, match=r"pip install rlvr\[lora\]"):
        require_peft()


def test_settings_validate():
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ConfigError, match=r"model.lora.r: must be >= 1, got 0"):
        load_config(RunConfig, None, ["model.lora.r=0"])
    with pytest.raises(ConfigError, match=r"model.lora.target_modules: needs at least 1 items, got 0"):
        load_config(RunConfig, None, ["model.lora.target_modules=[]"])
    with pytest.raises(ValueError, match="r"):
        LoraSettings(r=0)


# ----------------------------------------------------------------------------- through the recipe
def _parity(completion: str, reference: str):
    from rlvr.types import Verdict

    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _train(tok, out, *extra, on_step=None):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train

    cfg = load_config(RunConfig, None, [
        f"train.output_dir={out}", "train.steps=4", "train.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=8", "train.micro_batch_size=4", "train.lr=5e-2", "train.warmup_steps=0",
        "train.save_every=2", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", "model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8", *extra])
    problems = [Problem(id=f"t{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(10)]
    base = make_model(tok)
    summary = train(cfg, model=base, tokenizer=tok, problems=(problems, []), verifier=_parity, on_step=on_step)
    return base, summary


def _adapters(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_" in n}


def test_lora_recipe_trains_adapters_only_and_resumes_exactly(tmp_path, tiny_tokenizer):
    from rlvr.recipes.rl import TrainingInterrupted
    from rlvr.trackers import read_metrics

    original = make_model(tiny_tokenizer).state_dict()
    base, summary = _train(tiny_tokenizer, tmp_path / "full")
    rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    assert any(r["learner_seqs"] > 0 for r in rows)
    assert all(r["logprob_mismatch"] < 1e-4 for r in rows if r["learner_seqs"])  # merged sampler == learner
    # the frozen base weights did not move; the adapters did
    sd = base.state_dict()  # peft wrapped ``base`` in place: adapted layers hold ``base_layer.weight``
    for name, w in original.items():
        key = name if name in sd else name.replace(".weight", ".base_layer.weight")
        assert torch.equal(sd[key].cpu(), w), name
    ckpt = tmp_path / "full" / "checkpoints" / "step-000004"
    assert (ckpt / "adapter" / "adapter_model.safetensors").is_file()
    full_adapters = _load_adapters(ckpt)
    assert any(v.abs().sum() > 0 for k, v in full_adapters.items() if "lora_B" in k)

    def stop(row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        _train(tiny_tokenizer, tmp_path / "split", on_step=stop)
    _train(tiny_tokenizer, tmp_path / "split", "train.resume=true")
    split_adapters = _load_adapters(tmp_path / "split" / "checkpoints" / "step-000004")
    assert full_adapters.keys() == split_adapters.keys()
    for k in full_adapters:
        torch.testing.assert_close(full_adapters[k], split_adapters[k], atol=1e-6, rtol=0, msg=k)


def _load_adapters(ckpt):
    from safetensors.torch import load_file

    return load_file(ckpt / "adapter" / "adapter_model.safetensors")


def test_lora_with_a_rollout_process_sends_adapters_only(tmp_path, tiny_tokenizer):
    _train(tiny_tokenizer, tmp_path / "a", "train.save_every=0")
    _train(tiny_tokenizer, tmp_path / "b", "train.save_every=0", "train.rollout_worker=true")
    a = _load_adapters(tmp_path / "a" / "checkpoints" / "step-000004")
    b = _load_adapters(tmp_path / "b" / "checkpoints" / "step-000004")
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU path)")
def test_lora_recipe_on_cuda(tmp_path, tiny_tokenizer):
    from rlvr.trackers import read_metrics

    base, _ = _train(tiny_tokenizer, tmp_path, "model.device=cuda", "rollout.dtype=bfloat16", "train.save_every=0")
    assert next(base.parameters()).device.type == "cuda"
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 4 and all(r["cuda_peak_mb"] > 0 for r in rows)
    assert any(r["learner_seqs"] > 0 for r in rows)
    # the bf16 merged sampler on the GPU agrees with the fp32 adapter learner up to bf16 rounding
    assert all(r["logprob_mismatch"] < 0.05 for r in rows if r["learner_seqs"])
    model = apply_lora(make_model(tiny_tokenizer).cuda(), SETTINGS)
    engine = HFEngine(model, tiny_tokenizer, dtype=torch.bfloat16)
    assert next(engine.model.parameters()).device.type == "cuda"
    _train_one_step_cuda(model)
    engine.sync_weights(model)
    for name, w in merged_weights(model).items():
        assert torch.equal(engine.model.get_parameter(name), w.to(torch.bfloat16)), name


def _train_one_step_cuda(model):
    ids = torch.randint(4, 60, (3, 12), generator=torch.Generator().manual_seed(0)).cuda()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
