"""Resumable checkpoints: weights (safetensors), optimizer, scheduler, RNG states, data position.

A checkpoint is a directory ``<output_dir>/checkpoints/step-000010/``::

    model/              save_pretrained output (safetensors) + tokenizer; for a LoRA
                        model the merged weights W + BA, so it loads without peft
    adapter/            LoRA only: the adapter weights (peft format), what resume loads
    optimizer.pt        optimizer and LR-scheduler state dicts
    <name>.safetensors  extra modules the loop trains besides the policy (PPO: critic.safetensors)
    state.pt            step, data position, RNG states, anything the loop adds
    config.yaml         the run's config when the checkpoint was written (what resume compares with)
    MANIFEST.json       size and SHA-256 of every file above
    DONE                written last: a directory without it is incomplete

It is written to a temporary directory, every file fsync'd, and renamed, so a run killed while
saving leaves the previous checkpoint intact; ``latest_checkpoint`` ignores
directories without ``DONE``. Re-saving a step that exists moves the old directory aside first and
removes it only after the new one is in place (:func:`recover_checkpoints` puts it back when a kill
came between the two). :func:`latest_intact_checkpoint` checks the manifest before anything loads and
falls back to the newest intact checkpoint, setting a damaged one aside as ``damaged-step-N``.
"""

from __future__ import annotations

import json
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
from rlvr.utils.files import fsync_dir, fsync_file, sha256_file

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state", "set_rng_state",
           "check_finite_weights", "NonFiniteWeightsError", "verify_checkpoint", "latest_intact_checkpoint",
           "find_intact_checkpoint",
           "recover_checkpoints", "set_aside", "CheckpointError", "MANIFEST"]

_STEP_DIR = re.compile(r"^step-(\d+)$")
_REPLACED = re.compile(r"^\.replaced-step-(\d+)-")
MANIFEST = "MANIFEST.json"


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
                    state: dict[str, Any], keep: int = 2, modules: dict[str, torch.nn.Module] | None = None,
                    config_text: str | None = None) -> Path:
    """Write a complete checkpoint atomically and prune all but the newest ``keep``.

    ``modules`` are saved as ``<name>.safetensors`` (shared tensors handled by
    ``safetensors.torch.save_model``); their optimizers belong in ``state``. ``config_text`` (the run's
    config as YAML) is kept as ``config.yaml``, what a resume compares its own config with.
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
        if config_text is not None:
            (tmp / "config.yaml").write_text(config_text, encoding="utf-8")
        _write_manifest(tmp)
        (tmp / "DONE").write_text(str(step))
        fsync_file(tmp / "DONE")
        fsync_dir(tmp)
        aside = None
        if final.exists():  # moved aside, removed once the new one is in place: never a moment without either
            aside = Path(tempfile.mkdtemp(prefix=f".replaced-step-{step:06d}-", dir=root))
            os.replace(final, aside / "old")
        os.replace(tmp, final)
        fsync_dir(root)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    except Exception as e:  # a full disk (ENOSPC), a file-size limit, a vanished directory: one line, no traceback
        shutil.rmtree(tmp, ignore_errors=True)
        last = _complete_checkpoints(root)
        kept = f"the latest one is {last[-1].name}, intact" if last else "no checkpoint was written"
        raise CheckpointError(f"cannot write the checkpoint of step {step} in {root}: {type(e).__name__}: "
                              f"{str(e)[:160]}; {kept}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep > 0:
        for old in _complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _checkpoint_files(path: Path) -> list[Path]:
    return sorted(f for f in path.rglob("*") if f.is_file() and f.name not in (MANIFEST, "DONE"))


def _write_manifest(path: Path) -> None:
    """Fsync every file of the checkpoint being written and record its size and SHA-256 in MANIFEST.json."""
    files = {}
    for f in _checkpoint_files(path):
        fsync_file(f)
        files[f.relative_to(path).as_posix()] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
    (path / MANIFEST).write_text(json.dumps({"algorithm": "sha256", "files": files}, indent=1))
    fsync_file(path / MANIFEST)
    for d in {f.parent for f in _checkpoint_files(path)} | {path}:
        fsync_dir(d)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used: damaged, incomplete or written for another model (the message names the file)."""


def verify_checkpoint(path: str | Path) -> str | None:
    """None when every file listed in the checkpoint's MANIFEST.json has its recorded size and SHA-256; else
    what is wrong, naming the first damaged file. A checkpoint written before manifests existed is not
    checked (None)."""
    path = Path(path)
    if not (path / "DONE").is_file():
        return "no DONE marker (an incomplete write)"
    manifest = path / MANIFEST
    if not manifest.is_file():
        return None
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{MANIFEST} is unreadable ({type(e).__name__})"
    for rel, meta in files.items():
        f = path / rel
        if not f.is_file():
            return f"{rel} is missing"
        size = f.stat().st_size
        if size != meta.get("size"):
            return f"{rel} has {size} bytes, {meta.get('size')} were written"
        if sha256_file(f) != meta.get("sha256"):
            return f"{rel} does not match its checksum (its bytes changed after it was written)"
    return None


def set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint ``step-N`` to ``damaged-step-N`` (kept for inspection, never resumed from)."""
    target = path.with_name(f"damaged-{path.name}")
    n = 1
    while target.exists():
        target = path.with_name(f"damaged-{path.name}-{n}")
        n += 1
    os.replace(path, target)
    return target


def find_intact_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint whose files match their manifest (or None), and the newer damaged ones with
    what is wrong with each. Reads only."""
    damaged = []
    for path in reversed(_complete_checkpoints(Path(output_dir) / "checkpoints")):
        problem = verify_checkpoint(path)
        if problem is None:
            return path, damaged
        damaged.append((path, problem))
    return None, damaged


def latest_intact_checkpoint(output_dir: str | Path, warn=None) -> Path | None:
    """The newest complete checkpoint whose files match their manifest, or None when there is no checkpoint.

    Each newer damaged checkpoint is set aside (:func:`set_aside`) and reported through ``warn`` (a callable
    taking one line) with the file that is damaged and the checkpoint used instead. When every checkpoint is
    damaged, nothing is renamed and :class:`CheckpointError` says what is wrong with the newest.
    """
    path, damaged = find_intact_checkpoint(output_dir)
    if path is None and damaged:
        newest, problem = damaged[0]
        raise CheckpointError(f"every checkpoint in {newest.parent} is damaged ({len(damaged)}; the newest, "
                              f"{newest.name}: {problem}): nothing to resume from; start over with --overwrite "
                              "(train.overwrite=true) or another train.output_dir")
    for bad, problem in damaged:
        moved = set_aside(bad)
        if warn is not None:
            warn(f"checkpoint {bad} is damaged: {problem}; set aside as {moved.name}, resuming from {path.name} "
                 "instead")
    return path


def recover_checkpoints(output_dir: str | Path) -> list[str]:
    """Tidy ``output_dir/checkpoints`` after a killed writer (call while holding the run directory):
    temporary directories of unfinished writes are removed, and a checkpoint moved aside for a re-save that
    never completed is put back. Returns one line per action."""
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    done = []
    for p in sorted(root.iterdir()):
        if not p.is_dir() or not p.name.startswith("."):
            continue
        m = _REPLACED.match(p.name)
        old = p / "old"
        if m and (old / "DONE").is_file() and not (root / f"step-{int(m.group(1)):06d}").exists():
            os.replace(old, root / f"step-{int(m.group(1)):06d}")
            done.append(f"restored step-{int(m.group(1)):06d} (its re-save was interrupted)")
        shutil.rmtree(p, ignore_errors=True)
        if not m:
            done.append(f"removed {p.name} (a checkpoint write that never finished)")
    if done:
        fsync_dir(root)
    return done


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
            weights.update(_read(f, load_file))
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
    opt = _read(path / "optimizer.pt", _torch_load)
    if optimizer is not None:
        optimizer.load_state_dict(opt["optimizer"])
    if scheduler is not None and opt.get("scheduler") is not None:
        scheduler.load_state_dict(opt["scheduler"])
    return _read(path / "state.pt", _torch_load)


def _torch_load(f: Path) -> Any:
    return torch.load(f, weights_only=False)


def _read(f: Path, reader) -> Any:
    """``reader(f)``, with a file that cannot be read (truncated, zeroed, not what it claims to be) reported as
    one :class:`CheckpointError` naming it instead of the reader's own exception."""
    try:
        return reader(f)
    except FileNotFoundError as e:
        raise CheckpointError(f"checkpoint {f.parent}: {f.name} is missing") from e
    except Exception as e:  # safetensors' SafetensorError, pickle's UnpicklingError, OSError(EINVAL), EOFError...
        raise CheckpointError(f"checkpoint file {f} cannot be read (damaged or truncated: "
                              f"{type(e).__name__}: {str(e)[:120]})") from e


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
        weights.update(_read(f, load_file))
    result = require_peft().set_peft_model_state_dict(model, weights)
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"LoRA adapter in {path} does not match the model: missing={missing[:5]} "
                           f"unexpected={list(result.unexpected_keys)[:5]}")


def _tied_keys(model) -> set[str]:
    if getattr(model.config, "tie_word_embeddings", False):
        return {"lm_head.weight"}
    return set()
