"""Vision-language policies: images, processors, and the model inputs they make.

A vision-language model (VLM) here is one ``transformers`` loads with ``AutoProcessor`` and
``AutoModelForImageTextToText`` (LLaVA, Idefics3 / SmolVLM, Gemma 3, Qwen2-VL / Qwen2.5-VL, ...).
Its processor renders a chat whose user message holds ``{"type": "image"}`` parts, expands every
image into the run of placeholder tokens the model replaces with the vision tower's features, and
returns ``pixel_values`` (and model-specific tensors such as ``image_sizes`` or ``image_grid_thw``).

How rlvr carries it, token in and token out:

* the tokenizer stays the tokenizer everywhere (engines, environments, checkpoints take it), with the
  processor attached to it (:func:`attach_processor`; :func:`as_tokenizer` accepts either);
* an engine renders an image problem with :func:`render_prompt`: the prompt ids (placeholders expanded)
  and an :class:`~rlvr.types.ImageInputs` that every sample of the group shares;
* the learner concatenates the rows' image tensors in row order (:func:`merge_image_inputs`), which is
  also the order of the placeholder runs in the (padded or packed) token ids, so each row's image
  features land on its own placeholders;
* the placeholders are prompt tokens, never in a loss mask, and the sampler never emits one
  (:func:`image_token_ids` lists the ids it bans).

Positions: models with 1-D positions (LLaVA, Idefics3, Gemma 3) take rlvr's own position ids;
models with multimodal rotary positions (Qwen2-VL's ``get_rope_index``) compute theirs
(:func:`uses_mrope`): the learner passes none for them and refuses to pack them, and the HF engine
refuses them (sample with vLLM).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from rlvr.types import ImageInputs, Problem

__all__ = ["ImageLoadError", "load_image", "check_image", "attach_processor", "processor_of", "as_tokenizer",
           "is_vision_model", "is_vision_checkpoint", "load_vision_policy", "image_messages", "render_prompt",
           "image_token_ids", "merge_image_inputs", "vision_trunk", "uses_mrope", "tiny_random_vlm",
           "VISION_TEMPLATE"]

_PROCESSOR_ATTR = "rlvr_processor"


class ImageLoadError(ValueError):
    """An image is missing, unreadable or not an image; the message names it."""


def _pil():
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - Pillow comes with matplotlib, a dependency
        raise ImportError("images need Pillow: pip install pillow") from e
    return Image


def load_image(image: Any, base: str | os.PathLike | None = None):
    """``image`` as an RGB ``PIL.Image``: a path (relative ones against ``base``), a PIL image, or an array.

    Arrays are ``[H, W]`` (grey) or ``[H, W, C]`` with C in 1, 3, 4; floats are read as [0, 1]. Raises
    :class:`ImageLoadError` naming the file (or the array's shape) when it cannot be read.
    """
    Image = _pil()
    if isinstance(image, Image.Image):
        return image.convert("RGB") if image.mode != "RGB" else image
    if isinstance(image, (str, os.PathLike)):
        path = Path(image).expanduser()
        if base is not None and not path.is_absolute():
            path = Path(base) / path
        if not path.is_file():
            raise ImageLoadError(f"image {path}: file not found")
        try:
            with Image.open(path) as im:
                im.load()
                return im.convert("RGB")
        except Exception as e:  # noqa: BLE001 - PIL raises many kinds for a damaged file
            raise ImageLoadError(f"image {path}: cannot be read ({type(e).__name__}: {e})") from e
    if isinstance(image, dict) and ("bytes" in image or "path" in image):  # a `datasets` Image(decode=False)
        if image.get("bytes"):
            import io

            try:
                with Image.open(io.BytesIO(image["bytes"])) as im:
                    im.load()
                    return im.convert("RGB")
            except Exception as e:  # noqa: BLE001
                raise ImageLoadError(f"image {image.get('path') or '<bytes>'}: cannot be read "
                                     f"({type(e).__name__}: {e})") from e
        if image.get("path"):
            return load_image(image["path"], base)
        raise ImageLoadError("image record with neither bytes nor path")
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None and (isinstance(image, np.ndarray) or torch.is_tensor(image)):
        arr = image.detach().cpu().numpy() if torch.is_tensor(image) else image
        if arr.ndim == 3 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        if not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[-1] in (3, 4))) or arr.size == 0:
            raise ImageLoadError(f"image array of shape {tuple(arr.shape)}: expected [H, W] or [H, W, 3|4]")
        if not np.isfinite(arr).all():
            raise ImageLoadError(f"image array of shape {tuple(arr.shape)} holds NaN or inf")
        if arr.dtype.kind == "f":
            arr = (np.clip(arr, 0.0, 1.0) * 255).round().astype(np.uint8)
        elif arr.dtype != np.uint8:
            arr = np.clip(arr, 0, 255).astype(np.uint8)
        return Image.fromarray(arr).convert("RGB")
    raise ImageLoadError(f"not an image: {type(image).__name__} (a path, a PIL image or an array)")


def check_image(image: Any, base: str | os.PathLike | None = None) -> None:
    """Raise :class:`ImageLoadError` unless ``image`` decodes (see :func:`load_image`)."""
    load_image(image, base)


# ----------------------------------------------------------------------------- processors
def attach_processor(tokenizer, processor):
    """``tokenizer`` with ``processor`` attached (what engines and checkpoints find with :func:`processor_of`)."""
    setattr(tokenizer, _PROCESSOR_ATTR, processor)
    return tokenizer


def processor_of(tokenizer) -> Any | None:
    """The processor attached to ``tokenizer`` (None for a text-only policy)."""
    return getattr(tokenizer, _PROCESSOR_ATTR, None)


def as_tokenizer(obj):
    """A tokenizer from a tokenizer or a processor (then with the processor attached to its tokenizer)."""
    if obj is not None and hasattr(obj, "image_processor") and hasattr(obj, "tokenizer"):
        return attach_processor(obj.tokenizer, obj)
    return obj


def is_vision_model(model) -> bool:
    """True for an image-text-to-text model (its config has a ``vision_config``), LoRA-wrapped or not."""
    hf_config = getattr(model, "config", None)
    return getattr(hf_config, "vision_config", None) is not None


def is_vision_checkpoint(path: str | os.PathLike) -> bool:
    """True when the HF directory's ``config.json`` describes a vision-language model."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    try:
        return "vision_config" in json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False


def load_vision_policy(path: str, *, dtype, device: str = "cpu"):
    """``(model, tokenizer)`` of a VLM directory: ``AutoModelForImageTextToText`` and ``AutoProcessor``
    (attached to the returned tokenizer, left padding, a pad token set)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
    model.to(device)
    processor = AutoProcessor.from_pretrained(path)
    tok = processor.tokenizer
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, attach_processor(tok, processor)


# ----------------------------------------------------------------------------- prompts
def image_messages(problem: Problem, system_prompt: str | None = None) -> list[dict]:
    """The problem's chat with its images as ``{"type": "image"}`` parts: before the text of the first user
    message, unless some message's content already lists image parts (their count must match)."""
    msgs = problem.to_messages(system_prompt)
    n = len(problem.images or [])
    listed = sum(1 for m in msgs if isinstance(m.get("content"), list)
                 for c in m["content"] if isinstance(c, dict) and c.get("type") == "image")
    if listed:
        if listed != n:
            raise ValueError(f"problem {problem.id!r}: its messages show {listed} images but it has {n}")
        return msgs
    out, placed = [], False
    for m in msgs:
        content = m.get("content")
        if not placed and m.get("role") == "user":
            parts = [{"type": "image"} for _ in range(n)]
            if isinstance(content, list):
                parts += content
            elif content:
                parts.append({"type": "text", "text": content})
            m = {**m, "content": parts}
            placed = True
        elif isinstance(content, str):
            m = {**m, "content": [{"type": "text", "text": content}]}
        out.append(m)
    if not placed:
        raise ValueError(f"problem {problem.id!r} has images but no user message to show them in")
    return out


def _digest(tensors: dict[str, Any]) -> str:
    h = hashlib.sha1()
    for k in sorted(tensors):
        v = tensors[k]
        h.update(k.encode())
        if torch.is_tensor(v):
            h.update(str((tuple(v.shape), str(v.dtype))).encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()[:20]


def render_prompt(tokenizer, problem: Problem, system_prompt: str | None = None) -> tuple[list[int], ImageInputs]:
    """Token ids (placeholders expanded) and image inputs of an image problem, through the attached processor.

    The chat template of the processor (else of the tokenizer) renders :func:`image_messages` with the
    generation prompt; the processor expands each image's placeholder and makes the pixel tensors.
    """
    processor = processor_of(tokenizer)
    if processor is None:
        raise ValueError(f"problem {problem.id!r} has images but the policy has no image processor "
                         "(a text-only model): use a vision-language model (AutoModelForImageTextToText)")
    images = [load_image(im) for im in problem.images or []]
    messages = image_messages(problem, system_prompt)
    extra = {"tools": problem.tools} if problem.tools else {}
    renderer = processor if getattr(processor, "chat_template", None) else tokenizer
    text = renderer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
    with torch.inference_mode(False):  # engines sample in inference mode; the learner's backward reads these
        out = processor(text=[text], images=images, return_tensors="pt")
    ids = out["input_ids"][0].tolist()
    tensors = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask", "token_type_ids")
               and torch.is_tensor(v)}
    banned = image_token_ids(tokenizer)
    n_img = sum(1 for t in ids if t in banned)
    return ids, ImageInputs(tensors, _digest(tensors), n_img)


def image_token_ids(tokenizer) -> set[int]:
    """Ids of the image placeholder tokens of the attached processor (empty for a text-only policy)."""
    processor = processor_of(tokenizer)
    if processor is None:
        return set()
    cached = getattr(processor, "_rlvr_image_ids", None)
    if cached is not None:
        return cached
    tok = getattr(processor, "tokenizer", tokenizer)
    ids: set[int] = set()
    for attr in ("image_token_id", "image_token_index"):
        v = getattr(processor, attr, None)
        if isinstance(v, int):
            ids.add(v)
    for attr in ("image_token", "boi_token", "eoi_token", "fake_image_token", "global_image_token"):
        t = getattr(processor, attr, None)
        if isinstance(t, str) and t:
            i = tok.convert_tokens_to_ids(t)
            if isinstance(i, int) and i != tok.unk_token_id:
                ids.add(i)
    for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<image>"):
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != tok.unk_token_id and t in tok.get_vocab():
            ids.add(i)
    processor._rlvr_image_ids = ids
    return ids


# ----------------------------------------------------------------------------- the learner's inputs
def merge_image_inputs(rows: Sequence[ImageInputs | None], device=None, dtype=None) -> dict[str, torch.Tensor]:
    """The image tensors of ``rows`` (None: a text row) concatenated along dimension 0 in row order.

    The model fills its placeholder tokens with image features in the order they appear in the
    flattened (row-major) token ids, so rows in order keep each row's images on its own placeholders.
    Floating tensors are cast to ``dtype`` (the model's) and everything is moved to ``device``.
    """
    present = [r for r in rows if r is not None]
    if not present:
        return {}
    out: dict[str, torch.Tensor] = {}
    for k in present[0].tensors:
        parts = [r.tensors[k] for r in present]
        t = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        out[k] = t.to(device) if device is not None else t
    return out


def _base(model):
    from rlvr.models.lora import is_lora_model

    return model.get_base_model() if is_lora_model(model) else model


def vision_trunk(model):
    """The module that takes the ids *and* the image inputs and returns the last hidden states (the
    VLM's ``model``: vision tower + projector + language model, without the LM head)."""
    base = _base(model)
    trunk = getattr(base, "model", None)
    if trunk is None:
        raise ValueError(f"{type(base).__name__} has no .model trunk (not an image-text-to-text model?)")
    return trunk


def uses_mrope(model) -> bool:
    """True for models that compute multimodal rotary positions themselves (Qwen2-VL's ``get_rope_index``)."""
    trunk = getattr(_base(model), "model", None)
    return hasattr(trunk, "get_rope_index")


# ----------------------------------------------------------------------------- a tiny VLM for tests
VISION_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template that renders string contents as the text template does and image parts as ``<image>``."""


def tiny_random_vlm(tokenizer, *, seed: int = 0, hidden: int = 32, layers: int = 2, image_size: int = 32,
                    patch_size: int = 8):
    """A randomly initialised LLaVA (a one-layer CLIP vision tower, a Llama text model) and its processor,
    built in memory from ``transformers`` configs: for tests and plumbing runs, not for learning to see.

    ``tokenizer`` gains an ``<image>`` special token and :data:`VISION_TEMPLATE` (its string-content
    renderings are unchanged); returns ``(model, processor)``, the processor's tokenizer being ``tokenizer``.
    """
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    try:
        from transformers import CLIPImageProcessorPil as ImageProcessor
    except ImportError:  # older transformers: the one class
        from transformers import CLIPImageProcessor as ImageProcessor
    if "<image>" not in tokenizer.get_vocab():
        tokenizer.add_tokens(["<image>"], special_tokens=True)
    tokenizer.chat_template = VISION_TEMPLATE
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    vc = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                          image_size=image_size, patch_size=patch_size, projection_dim=16)
    tc = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                     num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=None,
                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_index=image_id,
                      vision_feature_select_strategy="default", vision_feature_layer=-1, projector_hidden_act="gelu",
                      tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    ip = ImageProcessor(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(image_processor=ip, tokenizer=tokenizer, patch_size=patch_size,
                               vision_feature_select_strategy="default", chat_template=VISION_TEMPLATE,
                               num_additional_image_tokens=1)
    return model, processor
