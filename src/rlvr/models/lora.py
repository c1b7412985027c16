"""LoRA fine-tuning through ``peft`` (optional extra: ``pip install rlvr[lora]``).

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models")
freezes every pretrained weight ``W`` and learns a low-rank update per target
linear layer::

    W' = W + (alpha / r) * B @ A        A: [r, in], B: [out, r], B initialised to 0

so the learner trains (and AdamW keeps state for) only ``A`` and ``B``.

This module is the one place that touches ``peft``:

* :class:`LoraSettings` is the typed ``model.lora`` config section;
* :func:`apply_lora` wraps a causal LM in a ``PeftModel`` (only adapters require grad);
* the rollout engine samples from a plain copy whose weights are the *merged*
  ``W + (alpha/r) B A`` (:func:`merged_copy` once, then :func:`copy_merged_into`
  after every update).  The learner's modules are never merged or mutated, so its
  gradients keep flowing into ``A`` and ``B``;
* :func:`merged_state_dict` gives the plain (peft-free) weights that checkpoints
  store under ``model/``, so ``rlvr eval --model <checkpoint>`` needs no peft.

``peft`` is imported lazily: importing this module (the config does) costs nothing,
and a missing ``peft`` raises :class:`MissingExtraError` naming the extra to install.
"""

from __future__ import annotations

import copy

import torch

from rlvr.config import ConfigModel, option
from rlvr.utils.extras import MissingExtraError, require_extra

__all__ = ["LoraSettings", "MissingExtraError", "LLAMA_TARGET_MODULES", "require_peft", "is_lora_model",
           "apply_lora", "merged_weights", "merged_state_dict", "merged_copy", "copy_merged_into",
           "trainable_state_dict"]

LLAMA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraSettings(ConfigModel):
    enabled: bool = option(False, "train LoRA adapters (peft) instead of all weights; needs pip install rlvr[lora]")
    r: int = option(16, "LoRA rank r", ge=1)
    alpha: float = option(32.0, "LoRA scaling numerator: the update is (alpha / r) * B @ A", gt=0)
    dropout: float = option(0.0, "dropout on the LoRA branch's input", ge=0, lt=1)
    target_modules: list[str] = option(None, "linear layers that get adapters (default: Llama-style attention + MLP)",
                                       default_factory=lambda: list(LLAMA_TARGET_MODULES), min_length=1)
    merge_for_rollout: bool = option(True, "sample from a merged copy (W + BA; faster decoding, one more copy of "
                                           "the weights) instead of through the adapters")


def require_peft():
    """Import and return ``peft``, or raise :class:`MissingExtraError` telling how to install it."""
    return require_extra("peft", "LoRA (model.lora.enabled=true) needs the optional dependency peft: "
                                 "pip install rlvr[lora]")


def is_lora_model(model) -> bool:
    """True for a ``peft`` model with LoRA adapters (checked without importing peft)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def apply_lora(model, settings: LoraSettings):
    """Wrap ``model`` in LoRA adapters (``peft.get_peft_model``); only adapter weights require grad.

    The returned ``PeftModel`` shares the base weights with ``model`` (frozen in place).
    """
    peft = require_peft()
    settings = LoraSettings.model_validate(settings.model_dump())  # the ranges, also after a change in place
    config = peft.LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                             target_modules=list(settings.target_modules), bias="none", task_type="CAUSAL_LM")
    return peft.get_peft_model(model, config)


def _lora_layers(model):
    """(clean parameter-name prefix, layer) for every LoRA layer with an active adapter."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            active = [a for a in module.active_adapters if a in module.lora_A]
            if active:
                yield name, module, active


@torch.no_grad()
def merged_weights(model) -> dict[str, torch.Tensor]:
    """``{plain weight name: W + sum_adapters (alpha/r) B A}`` for every LoRA-wrapped layer.

    Names are those of the un-wrapped model (``model.layers.0.self_attn.q_proj.weight``).
    Computed out of place: ``model`` is not modified.
    """
    require_peft()
    out = {}
    for name, module, active in _lora_layers(model):
        w = module.get_base_layer().weight.detach()
        delta = sum(module.get_delta_weight(a) for a in active)
        out[f"{name}.weight"] = w + delta.to(w.dtype)
    return out


@torch.no_grad()
def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The full plain state dict of the base architecture with adapters merged (``model`` untouched)."""
    sd = {}
    for key, value in model.get_base_model().state_dict().items():
        if ".lora_" in key:
            continue
        sd[key.replace(".base_layer.", ".")] = value
    sd.update(merged_weights(model))
    return sd


@torch.no_grad()
def merged_copy(model, dtype: torch.dtype | None = None):
    """A plain (peft-free) copy of a LoRA model with merged weights, optionally cast to ``dtype``."""
    require_peft()
    plain = copy.deepcopy(model).merge_and_unload()
    if dtype is not None:
        plain = plain.to(dtype)
    from rlvr.models.frozen import freeze

    return freeze(plain)


@torch.no_grad()
def copy_merged_into(target, model) -> None:
    """Write ``model``'s merged LoRA weights into the plain copy ``target`` (in ``target``'s dtype).

    Only the adapted layers change during LoRA training, so only they are copied.
    """
    for name, w in merged_weights(model).items():
        target.get_parameter(name).copy_(w)


def trainable_state_dict(model) -> dict[str, torch.Tensor]:
    """The parameters that require grad, by name (adapters for LoRA; everything for full fine-tuning)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}
