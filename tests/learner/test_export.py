"""rlvr export: a checkpoint as a plain HF directory that transformers loads without rlvr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import make_model, make_tokenizer
from rlvr.learner.export import ExportError, export_checkpoint
from rlvr.learner.checkpoint import save_checkpoint

IDS = [[5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22, 23, 30, 31, 32, 33]]

# Runs in a fresh isolated interpreter (no PYTHONPATH, so no rlvr source tree or tests on sys.path)
# where rlvr cannot be imported at all (the venv may have it installed: it is blocked), loads the
# export with plain transformers and prints the logits of IDS and what it loaded.
LOADER = r"""
import json, sys
assert all('wt17' not in p and 'tests' not in p for p in sys.path), sys.path
sys.modules['rlvr'] = None  # any `import rlvr...` from here on raises ImportError
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
out = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(out)
gen = GenerationConfig.from_pretrained(out)
with torch.no_grad():
    logits = model(torch.tensor(json.loads(sys.argv[2]))).logits
has_rlvr = any(m == 'rlvr' or m.startswith('rlvr.') for m, v in sys.modules.items() if v is not None)
print(json.dumps({"logits": logits.tolist(), "arch": type(model).__name__, "has_rlvr": has_rlvr,
                  "eos": gen.eos_token_id, "pad": gen.pad_token_id, "encoded": tok("12+3")["input_ids"],
                  "chat": tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                  add_generation_prompt=True)}))
"""


def _load_without_rlvr(out: Path, ids=IDS) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    # -I: isolated mode (no PYTHONPATH, no user site, no cwd on sys.path); run from an empty directory
    res = subprocess.run([sys.executable, "-I", "-c", LOADER, str(out), json.dumps(ids)], cwd=out, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _logits(model, ids=IDS) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.float()


def _checkpoint(run: Path, model, tok, step: int = 3) -> Path:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    return save_checkpoint(run, step, model, tok, opt, None, {"data_position": 12})


def _train_a_little(model, steps: int = 3) -> None:
    """A few optimizer steps so the weights (LoRA B included) move away from their init."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    x = torch.tensor(IDS)
    for _ in range(steps):
        loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()


def test_full_finetune_checkpoint_exports_and_loads_without_rlvr(tmp_path):
    tok = make_tokenizer()
    model = make_model(tok, seed=3)
    _train_a_little(model)
    ckpt = _checkpoint(tmp_path / "run", model, tok)
    out = export_checkpoint(ckpt, tmp_path / "export")
    names = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" in names and "config.json" in names and "generation_config.json" in names
    assert "tokenizer.json" in names and not any(n.endswith((".pt", ".bin")) for n in names)
    assert not (out / "adapter").exists() and not (out / "DONE").exists()
    got = _load_without_rlvr(out)
    assert got["has_rlvr"] is False and got["arch"] == "LlamaForCausalLM"
    torch.testing.assert_close(torch.tensor(got["logits"]), _logits(model), atol=1e-5, rtol=0)
    assert got["eos"] == tok.eos_token_id and got["pad"] == tok.pad_token_id
    assert got["encoded"] == tok("12+3")["input_ids"]
    assert got["chat"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_lora_checkpoint_exports_merged_weights(tmp_path):
    pytest.importorskip("peft", reason="LoRA checkpoints need the lora extra (pip install rlvr[lora])")
    from rlvr.models.lora import LoraSettings, apply_lora

    tok = make_tokenizer()
    peft_model = apply_lora(make_model(tok, seed=4), LoraSettings(enabled=True, r=4, alpha=8.0))
    _train_a_little(peft_model)
    b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert b and all(p.abs().sum() > 0 for p in b)  # the adapters really change the model
    base_logits = None
    with peft_model.disable_adapter():
        base_logits = _logits(peft_model)
    expected = _logits(peft_model)
    assert (expected - base_logits).abs().max() > 1e-3
    ckpt = _checkpoint(tmp_path / "run", peft_model, tok)
    assert (ckpt / "adapter").is_dir()
    # the run directory works too: its latest checkpoint is exported
    out = export_checkpoint(tmp_path / "run", tmp_path / "export")
    assert not any("adapter" in p.name for p in out.iterdir())
    got = _load_without_rlvr(out)
    assert got["has_rlvr"] is False
    torch.testing.assert_close(torch.tensor(got["logits"]), expected, atol=1e-5, rtol=0)
    keys = json.loads(subprocess.run(
        [sys.executable, "-I", "-c", "import json, sys; from safetensors import safe_open; "
         "print(json.dumps(list(safe_open(sys.argv[1], 'pt').keys())))", str(out / "model.safetensors")],
        capture_output=True, text=True, check=True).stdout)
    assert not any("lora" in k or "base_layer" in k for k in keys)


def test_cli_export_and_errors(tmp_path, capsys):
    from rlvr.cli import main

    tok = make_tokenizer()
    model = make_model(tok, seed=5)
    ckpt = _checkpoint(tmp_path / "run", model, tok, step=7)
    assert main(["export", str(ckpt), str(tmp_path / "out")]) == 0
    assert "exported" in capsys.readouterr().out
    assert (tmp_path / "out" / "model.safetensors").is_file()
    # an existing output is refused unless --overwrite
    assert main(["export", str(ckpt), str(tmp_path / "out")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["export", str(ckpt), str(tmp_path / "out"), "--overwrite"]) == 0
    # not a checkpoint; an incomplete checkpoint
    assert main(["export", str(tmp_path), str(tmp_path / "o2")]) == 2
    assert "not an rlvr checkpoint" in capsys.readouterr().err
    (ckpt / "DONE").unlink()
    with pytest.raises(ExportError, match="incomplete checkpoint"):
        export_checkpoint(ckpt, tmp_path / "o3")
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()
    assert not [p for p in tmp_path.iterdir() if ".export-" in p.name]  # no temporary leftovers


# ---------------------------------------------------------------- GGUF


def _bpe_tokenizer():
    """A small byte-level BPE tokenizer (the GPT-2 / SmolLM2 kind GGUF's "gpt2" model holds)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from conftest import CHAT_TEMPLATE

    bpe = ByteLevelBPETokenizer()
    text = ["What is 12 + 30? The answer is \\boxed{42}.", "Janet's ducks lay 16 eggs per day.",
            "<|im_start|>user\nhi there<|im_end|>\n"] * 20
    bpe.train_from_iterator(text, vocab_size=320, min_frequency=1,
                            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", bos_token="<|im_start|>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _bpe_llama(tok, tied: bool, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=tied, rope_theta=5000.0, rms_norm_eps=1e-5,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger than the default init, so a wrong rope layout would show in the logits
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model


GGUF_LOADER = r"""
import json, sys
sys.modules['rlvr'] = None
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
out, text = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(out, gguf_file="model.gguf")
ids = tok(text)["input_ids"]
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits
print(json.dumps({"ids": ids, "logits": logits.tolist(), "tied": model.config.tie_word_embeddings}))
"""


@pytest.mark.parametrize("tied", [False, True])
def test_gguf_export_reads_back_and_matches_logits(tmp_path, tied):
    import gguf

    from rlvr.models.gguf_export import _permute

    tok = _bpe_tokenizer()
    model = _bpe_llama(tok, tied)
    ckpt = _checkpoint(tmp_path / "run", model, tok)
    out = export_checkpoint(ckpt, tmp_path / "export", gguf=True)

    reader = gguf.GGUFReader(str(out / "model.gguf"))

    def field(key):
        f = reader.fields[key]
        return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]].tolist()

    assert field("general.architecture") == "llama"
    assert field("llama.block_count") == 2 and field("llama.embedding_length") == 32
    assert field("llama.attention.head_count") == 4 and field("llama.attention.head_count_kv") == 2
    assert field("llama.rope.freq_base") == 5000.0 and field("llama.rope.dimension_count") == 8
    assert field("tokenizer.ggml.model") == "gpt2" and field("tokenizer.ggml.pre") == "gpt-2"
    assert field("tokenizer.ggml.eos_token_id") == tok.eos_token_id
    assert field("tokenizer.ggml.tokens")[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert field("tokenizer.chat_template") == tok.chat_template
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 + 9 * 2 + (0 if tied else 1) and ("output.weight" in tensors) == (not tied)
    q_hf = model.model.layers[1].self_attn.q_proj.weight.detach().numpy()
    q_gguf = tensors["blk.1.attn_q.weight"].data.reshape(q_hf.shape)
    assert (q_gguf == _permute(q_hf, 4)).all() and not (q_gguf == q_hf).all()  # GGML's rope row order
    emb = tensors["token_embd.weight"].data.reshape(len(tok), 32)
    assert (emb == model.model.embed_tokens.weight.detach().numpy()).all()

    text = "What is 12 + 30? The answer is \\boxed{42}. Ducks!"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-I", "-c", GGUF_LOADER, str(out), text], cwd=out, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    ids = tok(text)["input_ids"]
    assert got["ids"] == ids and got["tied"] == tied  # the GGUF tokenizer encodes as the original
    torch.testing.assert_close(torch.tensor(got["logits"]), _logits(model, [ids]), atol=1e-5, rtol=0)


def test_gguf_refuses_what_it_cannot_write(tmp_path):
    from rlvr.cli import main

    tok = make_tokenizer()  # a character-level WordLevel tokenizer: no GGUF tokenizer model fits it
    ckpt = _checkpoint(tmp_path / "run", make_model(tok), tok)
    with pytest.raises(ExportError, match="byte-level BPE"):
        export_checkpoint(ckpt, tmp_path / "o1", gguf=True)
    assert not (tmp_path / "o1").exists()
    assert main(["export", str(ckpt), str(tmp_path / "o2"), "--gguf"]) == 2
    assert not (tmp_path / "o2").exists()
    # rope scaling is refused too (llama.cpp would need its parameters)
    from rlvr.models.gguf_export import GGUFExportError, write_gguf

    btok = _bpe_tokenizer()
    m = _bpe_llama(btok, tied=True)
    m.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(GGUFExportError, match="rope_type='linear'"):
        write_gguf(m, btok, tmp_path / "x.gguf")
