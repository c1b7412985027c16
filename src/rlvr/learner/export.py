"""Export an rlvr training checkpoint as a plain Hugging Face model directory (``rlvr export``).

The output holds what ``transformers.AutoModelForCausalLM.from_pretrained(out)`` and
``AutoTokenizer.from_pretrained(out)`` need and nothing of rlvr:

    config.json               the policy's architecture (e.g. LlamaForCausalLM)
    model.safetensors         the policy's weights; for a LoRA run the merged W + (alpha/r) B A
    generation_config.json    eos / pad token ids (pad falls back to eos, as rlvr samples)
    tokenizer files           tokenizer.json, tokenizer_config.json, chat template, ...

The critic, optimizer and loop state of the checkpoint are left out.  With
``gguf=True`` the directory also gets ``model.gguf`` for llama.cpp (float32
tensors; Llama-architecture models with a GPT-2-style byte-level BPE tokenizer, see
:mod:`rlvr.models.gguf_export`; anything else is refused, and nothing is written).

A checkpoint here is what ``save_checkpoint`` writes (``<run>/checkpoints/step-N``,
complete when it holds ``DONE``); a run directory means its latest complete
checkpoint.  For a LoRA run the checkpoint's ``model/`` already holds the merged
weights W + (alpha/r) B A (``save_checkpoint`` merges them with
``rlvr.models.lora.merged_state_dict``; the un-merged base is not stored), so the
export needs no ``peft``; it checks that every layer the adapter in ``adapter/``
adapts exists in ``model/`` with matching shapes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["export_checkpoint", "resolve_checkpoint", "ExportError"]


class ExportError(ValueError):
    """The checkpoint cannot be exported (not a checkpoint, incomplete, inconsistent) or the output exists."""


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint directory for ``path``: itself (``step-N`` with ``DONE``), or a run
    directory's latest complete checkpoint."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ExportError(f"{p}: no such checkpoint directory")
    if (p / "model" / "config.json").is_file():
        if not (p / "DONE").is_file():
            raise ExportError(f"{p} is an incomplete checkpoint (no DONE marker: the run was killed while saving)")
        return p
    if (p / "dcp").is_dir() and (p / "DONE").is_file():
        raise ExportError(f"{p} is a sharded (FSDP) checkpoint without full weights in model/; export needs "
                          "model/ (written when the run saves full weights next to the shards)")
    if (p / "checkpoints").is_dir():
        from rlvr.learner.checkpoint import latest_checkpoint

        latest = latest_checkpoint(p)
        if latest is None:
            raise ExportError(f"{p}/checkpoints holds no complete checkpoint")
        return latest
    raise ExportError(f"{p} is not an rlvr checkpoint (expected model/config.json and DONE, as "
                      "<run>/checkpoints/step-N has) nor a run directory with checkpoints/")


def _check_adapter_merge(ckpt: Path, model) -> None:
    """For a LoRA checkpoint: every layer ``adapter/`` adapts exists in ``model/`` (which holds
    the merged weights) with the adapter's input size and output size."""
    from safetensors.torch import load_file

    files = sorted((ckpt / "adapter").glob("*.safetensors"))
    if not files:
        raise ExportError(f"{ckpt}/adapter holds no adapter weights")
    cfg = json.loads((ckpt / "adapter" / "adapter_config.json").read_text())
    weights = {}
    for f in files:
        weights.update(load_file(f))
    params = dict(model.named_parameters())
    for key, tensor in weights.items():
        if ".lora_A." not in key:
            continue
        # base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight -> model.layers.0.self_attn.q_proj.weight
        layer = key.split(".lora_A.")[0].removeprefix("base_model.model.") + ".weight"
        if layer not in params:
            raise ExportError(f"{ckpt}: the adapter adapts {layer}, which model/ does not have")
        b = weights.get(key.replace(".lora_A.", ".lora_B."))
        if params[layer].shape[1] != tensor.shape[1] or b is None or b.shape[0] != params[layer].shape[0]:
            raise ExportError(f"{ckpt}: the adapter of {layer} (A {tuple(tensor.shape)}, B "
                              f"{None if b is None else tuple(b.shape)}) does not fit its weight "
                              f"{tuple(params[layer].shape)}: model/ and adapter/ come from different models")
    if not cfg.get("r"):
        raise ExportError(f"{ckpt}/adapter/adapter_config.json has no rank r")


def export_checkpoint(checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike, *, gguf: bool = False,
                      overwrite: bool = False) -> Path:
    """Write the policy of an rlvr checkpoint as a plain HF model directory at ``out_dir``.

    Args:
        checkpoint_dir: ``<run>/checkpoints/step-N``, or a run directory (its latest checkpoint).
        out_dir: the directory to create (written to a temporary directory first and
            renamed, so a failed export leaves nothing behind).
        gguf: also write ``out_dir/model.gguf`` (float32, for llama.cpp); see
            :func:`rlvr.models.gguf_export.write_gguf`.
        overwrite: replace an existing ``out_dir``; otherwise an existing non-empty one is an error.

    Returns:
        ``out_dir`` as a Path.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    ckpt = resolve_checkpoint(checkpoint_dir)
    out = Path(out_dir).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise ExportError(f"{out} exists and is not empty (pass overwrite=True / --overwrite to replace it)")
    src = ckpt / "model"
    model = AutoModelForCausalLM.from_pretrained(src, dtype="auto")
    if (ckpt / "adapter").is_dir():
        _check_adapter_merge(ckpt, model)
    tokenizer = AutoTokenizer.from_pretrained(src) if (src / "tokenizer_config.json").is_file() else None

    gen = model.generation_config if model.generation_config is not None else GenerationConfig()
    if gen.eos_token_id is None:
        gen.eos_token_id = model.config.eos_token_id if model.config.eos_token_id is not None else (
            tokenizer.eos_token_id if tokenizer is not None else None)
    if gen.pad_token_id is None:  # rlvr samples with pad = eos when the model has no pad token
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        gen.pad_token_id = pad if pad is not None else (
            gen.eos_token_id[0] if isinstance(gen.eos_token_id, list) else gen.eos_token_id)
    model.generation_config = gen

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        with torch.no_grad():
            model.save_pretrained(tmp, safe_serialization=True)
        gen.save_pretrained(tmp)  # also for models whose save_pretrained skips it
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if gguf:
            from rlvr.models.gguf_export import GGUFExportError, write_gguf

            try:
                write_gguf(model, tokenizer, tmp / "model.gguf")
            except GGUFExportError as e:
                raise ExportError(f"cannot write GGUF for {ckpt}: {e} (export without --gguf works)") from e
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
