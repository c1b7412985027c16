"""What the engines do differently for problems with images (a vision-language policy).

Only calls that hold a problem with images take these paths; text problems are rendered and sampled
exactly as before (``format_prompt``), on any policy.

* :func:`image_prompts`: the prompt ids of the image problems through the policy's processor
  (placeholders expanded) and one :class:`~rlvr.types.ImageInputs` per problem, which every sample of
  its group carries to the learner;
* :func:`prefill_inputs`: the image tensors of a chunk's rows for the prefill forward (the decode steps
  need none: the image features are in the KV cache by then);
* :func:`ban_tokens`: the sampler never emits an image placeholder (the learner's forward would then look
  for an image that does not exist); like top-p, the ban shapes what is sampled while the recorded
  log-probs stay those of the model's full distribution, which is what the learner recomputes.
"""

from __future__ import annotations

from typing import Sequence

import torch

from rlvr.models.vision import image_token_ids, merge_image_inputs, render_prompt, uses_mrope
from rlvr.types import ImageInputs, Problem

__all__ = ["image_prompts", "prefill_inputs", "ban_tokens", "banned_ids", "has_images"]


def has_images(images: Sequence[ImageInputs | None] | None) -> bool:
    return images is not None and any(x is not None for x in images)


def image_prompts(tokenizer, problems: Sequence[Problem], prompts: list[list[int]], system_prompt: str | None,
                  model=None) -> tuple[list[list[int]], list[ImageInputs | None]]:
    """``prompts`` with each image problem's replaced by its processor rendering, and the image inputs."""
    if model is not None and uses_mrope(model):
        raise ValueError(f"{type(model).__name__} computes multimodal rotary positions (Qwen2-VL style), which "
                         "the HF engine's cache does not reproduce: sample it with rollout.engine=vllm")
    out, images = list(prompts), []
    for i, p in enumerate(problems):
        if p.images:
            out[i], inputs = render_prompt(tokenizer, p, system_prompt)
            images.append(inputs)
        else:
            images.append(None)
    return out, images


def prefill_inputs(images: Sequence[ImageInputs | None] | None, model) -> dict[str, torch.Tensor]:
    """Keyword inputs of a prefill forward over rows with these images ({} for a text chunk)."""
    if not has_images(images):
        return {}
    p = next(model.parameters())
    return merge_image_inputs(images, device=p.device, dtype=p.dtype)


def banned_ids(tokenizer) -> torch.Tensor | None:
    """The image placeholder ids the sampler must not emit (None for a text-only policy)."""
    ids = image_token_ids(tokenizer)
    return torch.tensor(sorted(ids), dtype=torch.long) if ids else None


def ban_tokens(x: torch.Tensor, banned: torch.Tensor | None, fill: float) -> torch.Tensor:
    """``x`` ([rows, vocab] logits or probabilities) with the ``banned`` columns set to ``fill``."""
    if banned is None:
        return x
    x = x.clone()
    x[:, banned.to(x.device)] = fill
    return x
