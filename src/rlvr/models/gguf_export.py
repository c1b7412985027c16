"""Write a Llama-architecture HF model as a float32 GGUF file for llama.cpp (``rlvr export --gguf``).

Written with the ``gguf`` package's :class:`gguf.GGUFWriter` the way llama.cpp's
``convert_hf_to_gguf.py`` lays out a ``llama`` model:

- metadata ``llama.*``: context length, embedding/feed-forward sizes, block count,
  head counts, RMS-norm epsilon, rope dimension and base, vocabulary size;
- tensors ``token_embd``, ``blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,
  ffn_gate,ffn_up,ffn_down}``, ``output_norm`` and ``output`` (left out for tied
  embeddings, as llama.cpp then uses ``token_embd``), all float32; the Q and K
  projections are permuted from HF's rotate-half rope layout to GGML's interleaved one;
- the tokenizer as ``tokenizer.ggml.model = "gpt2"``: the token list, types and
  merges of a byte-level BPE ``tokenizer.json``, the llama.cpp pre-tokenizer name
  (``gpt-2``, or ``smollm`` for single-digit splitting first), the bos/eos/pad/unk
  ids and the chat template.

Anything else (another architecture, rope scaling, a head size other than
hidden/heads, attention or MLP biases, a tokenizer that is not byte-level BPE such
as SentencePiece, a pre-tokenizer such as Llama 3's or Qwen's regex) raises :class:`GGUFExportError` rather than writing a file llama.cpp
would read wrongly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["write_gguf", "GGUFExportError"]


class GGUFExportError(ValueError):
    """The model or tokenizer cannot be written as GGUF by this exporter."""


def _permute(w, n_head: int):
    """HF (rotate-half) -> GGML (interleaved) row order of a Q or K projection (llama.cpp's ``permute``)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _rope_theta(hf_config) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if rope_type not in (None, "default"):
        raise GGUFExportError(f"GGUF export supports plain rope only; this model uses rope_type={rope_type!r}")
    theta = getattr(hf_config, "rope_theta", None) or params.get("rope_theta")
    if theta is None:
        raise GGUFExportError("the model config has no rope_theta")
    return float(theta)


def _check_llama(model) -> None:
    hf_config = model.config
    if hf_config.model_type != "llama":
        raise GGUFExportError(f"GGUF export supports Llama-architecture models; this one is {hf_config.model_type!r}")
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    if head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
        raise GGUFExportError(f"head_dim {head_dim} x {hf_config.num_attention_heads} heads != hidden size "
                              f"{hf_config.hidden_size}: not supported by this GGUF exporter")
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        raise GGUFExportError("attention/MLP biases are not supported by this GGUF exporter")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise GGUFExportError(f"hidden_act {hf_config.hidden_act!r} is not supported (llama.cpp's llama uses silu)")


def _is_gpt2_byte_level(p) -> bool:
    return (isinstance(p, dict) and p.get("type") == "ByteLevel" and p.get("use_regex", True)
            and not p.get("add_prefix_space", False))


def _pre_tokenizer_name(pre) -> str:
    """llama.cpp's ``tokenizer.ggml.pre`` for the HF pre-tokenizer, which decides how llama.cpp splits
    text before BPE: ``gpt-2`` (plain GPT-2 byte-level regex) or ``smollm`` (single digits split
    first, then the GPT-2 regex).  Other pre-tokenizers are refused rather than guessed."""
    if _is_gpt2_byte_level(pre):
        return "gpt-2"
    if isinstance(pre, dict) and pre.get("type") == "Sequence":
        parts = pre.get("pretokenizers", [])
        if (len(parts) == 2 and parts[0].get("type") == "Digits" and parts[0].get("individual_digits")
                and _is_gpt2_byte_level(parts[1])):
            return "smollm"
    raise GGUFExportError("GGUF export supports the GPT-2 byte-level pre-tokenizer (optionally after single-"
                          f"digit splitting, as SmolLM); this tokenizer's is {json.dumps(pre)[:160]}")


def _tokenizer_vocab(tokenizer) -> tuple[list[str], list[int], list[str], str]:
    """(tokens by id, GGUF token types, merges, llama.cpp pre-tokenizer name) of a byte-level BPE
    fast tokenizer."""
    import gguf

    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        raise GGUFExportError("GGUF export needs a fast (tokenizers) tokenizer")
    spec = json.loads(backend.to_str())
    model = spec.get("model", {})
    pre = json.dumps(spec.get("pre_tokenizer"))
    if model.get("type") != "BPE" or "ByteLevel" not in pre:
        raise GGUFExportError(f"GGUF export supports byte-level BPE tokenizers (gpt2 style); this one is "
                              f"{model.get('type')!r} with pre-tokenizer {pre[:80]}")
    pre_name = _pre_tokenizer_name(spec.get("pre_tokenizer"))
    vocab: dict[str, int] = dict(model["vocab"])
    added = {t["id"]: t for t in spec.get("added_tokens", [])}
    for i, t in added.items():
        vocab.setdefault(t["content"], i)
    size = max(vocab.values()) + 1
    by_id = {i: tok for tok, i in vocab.items()}
    tokens, types = [], []
    for i in range(size):
        if i not in by_id:  # a hole in the ids: a placeholder llama.cpp never produces
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, [int(t) for t in types], merges, pre_name


def write_gguf(model, tokenizer, path: str | os.PathLike) -> Path:
    """Write ``model`` (a Llama ``*ForCausalLM``) and its byte-level BPE ``tokenizer`` as float32 GGUF.

    Raises:
        GGUFExportError: an architecture, rope variant or tokenizer this exporter cannot write.
    """
    import gguf

    if tokenizer is None:
        raise GGUFExportError("GGUF export needs the tokenizer (the checkpoint has none)")
    _check_llama(model)
    tokens, types, merges, pre_name = _tokenizer_vocab(tokenizer)
    hf_config = model.config
    if len(tokens) > hf_config.vocab_size:
        raise GGUFExportError(f"the tokenizer has {len(tokens)} tokens but the model only {hf_config.vocab_size} rows")
    while len(tokens) < hf_config.vocab_size:  # embedding rows past the tokenizer (padding to a multiple)
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(int(gguf.TokenType.UNUSED))
    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    _add_architecture(w, hf_config)
    _add_tokenizer(w, tokenizer, tokens, types, merges, pre_name)
    _add_tensors(w, model)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add_architecture(w, hf_config) -> None:
    """The llama.cpp architecture keys of a Llama config (float32 tensors)."""
    import gguf

    n_head = hf_config.num_attention_heads
    w.add_name(Path(str(getattr(hf_config, "_name_or_path", "") or "rlvr-export")).name or "rlvr-export")
    w.add_context_length(hf_config.max_position_embeddings)
    w.add_embedding_length(hf_config.hidden_size)
    w.add_block_count(hf_config.num_hidden_layers)
    w.add_feed_forward_length(hf_config.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(hf_config.num_key_value_heads or n_head)
    w.add_rope_dimension_count(hf_config.hidden_size // n_head)
    w.add_rope_freq_base(_rope_theta(hf_config))
    w.add_layer_norm_rms_eps(float(hf_config.rms_norm_eps))
    w.add_vocab_size(hf_config.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def _add_tokenizer(w, tokenizer, tokens: list[str], types: list[int], merges: list[str], pre_name: str) -> None:
    """The byte-level BPE vocabulary, merges, special token ids and chat template."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre_name)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for setter, value in ((w.add_bos_token_id, tokenizer.bos_token_id), (w.add_eos_token_id, tokenizer.eos_token_id),
                          (w.add_pad_token_id, tokenizer.pad_token_id), (w.add_unk_token_id, tokenizer.unk_token_id)):
        if value is not None:
            setter(int(value))
    w.add_add_bos_token(False)  # the HF tokenizer's post-processor decides; rlvr prompts use the chat template
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        w.add_chat_template(template)


def _add_tensors(w, model) -> None:
    """Every weight as float32 under its llama.cpp name (q and k rows permuted to its rope layout)."""
    import numpy as np
    import torch

    hf_config = model.config
    n_head = hf_config.num_attention_heads
    n_kv = hf_config.num_key_value_heads or n_head
    sd = {k: v.detach().to(torch.float32).cpu().numpy() for k, v in model.state_dict().items()}

    def put(name: str, key: str, permute_heads: int | None = None) -> None:
        if key not in sd:
            raise GGUFExportError(f"the model has no tensor {key!r}")
        t = sd[key]
        if permute_heads is not None:
            t = _permute(t, permute_heads)
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))

    put("token_embd.weight", "model.embed_tokens.weight")
    for i in range(hf_config.num_hidden_layers):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight")
        put(f"blk.{i}.attn_q.weight", p + "self_attn.q_proj.weight", n_head)
        put(f"blk.{i}.attn_k.weight", p + "self_attn.k_proj.weight", n_kv)
        put(f"blk.{i}.attn_v.weight", p + "self_attn.v_proj.weight")
        put(f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight")
        put(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight")
        put(f"blk.{i}.ffn_gate.weight", p + "mlp.gate_proj.weight")
        put(f"blk.{i}.ffn_up.weight", p + "mlp.up_proj.weight")
        put(f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight")
    put("output_norm.weight", "model.norm.weight")
    if not bool(getattr(hf_config, "tie_word_embeddings", False)):
        put("output.weight", "lm_head.weight")
