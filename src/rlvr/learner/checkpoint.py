"""Resumable checkpoints: weights (safetensors), optimizer, scheduler, RNG states, data position.

A checkpoint is a directory ``<output_dir>/checkpoints/step-000010/``::

    model/              save_pretrained output (safetensors) + tokenizer; for a LoRA
                        model the merged weights W + BA, so it loads without peft
    adapter/            LoRA only: the adapter weights (peft format), what resume loads
    optimizer.pt        optimizer and LR-scheduler state dicts
    <name>.safetensors  extra modules the loop trains besides the policy (PPO: critic.safetensors)
    state.pt            step, data position, RNG states, anything the loop adds
    DONE                written last: a directory without it is incomplete

It is written to a temporary directory and renamed, so a run killed while
saving leaves the previous checkpoint intact; ``latest_checkpoint`` ignores
directories without ``DONE``.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.models.lora import is_lora_model

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state", "set_rng_state",
           "check_finite_weights", "NonFiniteWeightsError"]

_STEP_DIR = re.compile(r"^step-(\d+)$")


def rng_state(generator: torch.Generator | None = None) -> dict[str, Any]:
    """Snapshot of every RNG the loop uses."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if generator is not None and "generator" in state:
        generator.set_state(state["generator"])


def save_checkpoint(output_dir: str | Path, step: int, model, tokenizer, optimizer, scheduler,
                    state: dict[str, Any], keep: int = 2, modules: dict[str, torch.nn.Module] | None = None) -> Path:
    """Write a complete checkpoint atomically and prune all but the newest ``keep``.

    ``modules`` are saved as ``<name>.safetensors`` (shared tensors handled by
    ``safetensors.torch.save_model``); their optimizers belong in ``state``.
    """
    from safetensors.torch import save_model

    check_finite_weights(model, step, modules)
    root = Path(output_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{step:06d}-", dir=root))
    try:
        if is_lora_model(model):
            from rlvr.models.lora import merged_state_dict

            model.get_base_model().save_pretrained(tmp / "model", state_dict=merged_state_dict(model),
                                                   safe_serialization=True)
            model.save_pretrained(tmp / "adapter", safe_serialization=True)
        else:
            model.save_pretrained(tmp / "model", safe_serialization=True)
        if tokenizer is not None:
            from rlvr.models.vision import processor_of

            # a vision-language policy's processor saves its tokenizer, image processor and chat template
            (processor_of(tokenizer) or tokenizer).save_pretrained(tmp / "model")
        for name, module in (modules or {}).items():
            save_model(module, str(tmp / f"{name}.safetensors"))
        torch.save({"optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler is not None else None},
                   tmp / "optimizer.pt")
        torch.save({"step": step, **state}, tmp / "state.pt")
        (tmp / "DONE").write_text(str(step))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep > 0:
        for old in _complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


class NonFiniteWeightsError(RuntimeError):
    """A model about to be checkpointed holds NaN or infinite weights: no checkpoint is written."""


def check_finite_weights(model, step: int, modules: dict[str, torch.nn.Module] | None = None) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the first tensors with NaN/inf (one device sync when all are
    finite: the per-tensor flags are stacked and read once)."""
    named = [(k, p) for k, p in model.named_parameters()]
    named += [(f"{name}.{k}", p) for name, m in (modules or {}).items() for k, p in m.named_parameters()]
    named = [(k, p) for k, p in named if p.is_floating_point() and p.numel()]
    if not named:
        return
    dev = named[0][1].device
    with torch.no_grad():
        flags = torch.stack([torch.isfinite(p).all().to(dev) for _, p in named]).cpu()
    if bool(flags.all()):
        return
    bad = [k for (k, _), ok in zip(named, flags.tolist()) if not ok]
    raise NonFiniteWeightsError(f"refusing to write the checkpoint of step {step}: {len(bad)} of {len(named)} "
                                f"weight tensors hold NaN or inf ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})"
                                "; the checkpoints already written are kept")


def _complete_checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _STEP_DIR.match(p.name)) and (p / "DONE").is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """Newest complete checkpoint under ``output_dir/checkpoints``, or None."""
    done = _complete_checkpoints(Path(output_dir) / "checkpoints")
    return done[-1] if done else None


def load_checkpoint(path: str | Path, model, optimizer=None, scheduler=None,
                    modules: dict[str, torch.nn.Module] | None = None) -> dict[str, Any]:
    """Load weights (in place), optimizer and scheduler state, and ``modules`` saved by
    :func:`save_checkpoint`; return the saved loop state."""
    from safetensors.torch import load_file, load_model

    path = Path(path)
    if not (path / "DONE").is_file():
        raise FileNotFoundError(f"{path} is not a complete rlvr checkpoint (no DONE marker)")
    if is_lora_model(model):
        _load_adapter(path, model)
    else:
        weights = {}
        for f in sorted((path / "model").glob("*.safetensors")):
            weights.update(load_file(f))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        # Tied embeddings are saved once; anything else missing is an error.
        missing = [k for k in missing if k not in _tied_keys(model)]
        if missing or unexpected:
            raise RuntimeError(f"checkpoint {path} does not match the model: missing={missing[:5]} "
                               f"unexpected={unexpected[:5]}")
        if model.config.tie_word_embeddings:
            model.tie_weights()
    for name, module in (modules or {}).items():
        f = path / f"{name}.safetensors"
        if not f.is_file():
            raise RuntimeError(f"checkpoint {path} has no {f.name}: it was written by a run without a {name} "
                               f"(e.g. not algorithm.advantage=gae), so this run cannot resume from it")
        try:
            load_model(module, str(f), device=str(next(module.parameters()).device))
        except Exception as e:  # a damaged file, or one written for a differently shaped module
            raise RuntimeError(f"checkpoint {path}: cannot load {f.name} into this run's {name} (written with "
                               f"other settings, e.g. algorithm.value.critic, or damaged): {e}"[:600]) from e
    opt = torch.load(path / "optimizer.pt", weights_only=False)
    if optimizer is not None:
        optimizer.load_state_dict(opt["optimizer"])
    if scheduler is not None and opt.get("scheduler") is not None:
        scheduler.load_state_dict(opt["scheduler"])
    return torch.load(path / "state.pt", weights_only=False)


def _load_adapter(path: Path, model) -> None:
    """Load a LoRA checkpoint's adapter weights into ``model`` (a peft model on the same base)."""
    from safetensors.torch import load_file

    from rlvr.models.lora import require_peft

    files = sorted((path / "adapter").glob("*.safetensors"))
    if not files:
        raise RuntimeError(f"checkpoint {path} holds no LoRA adapter (adapter/): it was written without "
                           "model.lora.enabled, but the model being resumed has LoRA adapters")
    weights = {}
    for f in files:
        weights.update(load_file(f))
    result = require_peft().set_peft_model_state_dict(model, weights)
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"LoRA adapter in {path} does not match the model: missing={missing[:5]} "
                           f"unexpected={list(result.unexpected_keys)[:5]}")


def _tied_keys(model) -> set[str]:
    if getattr(model.config, "tie_word_embeddings", False):
        return {"lm_head.weight"}
    return set()
