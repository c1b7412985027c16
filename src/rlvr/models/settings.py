"""The ``model`` section of a run: which policy, its dtype, device, matrix products and LoRA."""

from __future__ import annotations

from typing import Literal

from rlvr.config import ConfigModel, option
from rlvr.models.lora import LoraSettings

__all__ = ["ModelConfig"]


class ModelConfig(ConfigModel):
    name: str = option("smollm2-135m-instruct", "bundled model name, HF directory, rlvr checkpoint, or hub id")
    dtype: Literal["float32", "bfloat16"] = option("float32", "parameter dtype of the policy")
    cache_dir: str | None = option(None, "where bundled models are converted to (default $RLVR_CACHE or ~/.cache/rlvr)")
    device: str = option("auto", "where the policy runs: auto (cuda if available, else cpu), cpu, cuda, cuda:N")
    matmul: Literal["aten", "onednn"] = option(
        "aten", "float32 CPU matrix products (sampler, learner, LM head): aten (PyTorch's BLAS, MKL) or onednn "
                "(oneDNN kernels: 1.5-2.2x faster where MKL takes a generic path, e.g. AMD CPUs; rounding differs)")
    lora: LoraSettings = option(None, "LoRA adapters (peft) instead of full fine-tuning", default_factory=LoraSettings)

    def check(self) -> None:
        """A misspelt bundled name is refused when the config loads, not after a hub lookup."""
        from rlvr.models.loader import _typo_message, bundled_typo

        close = bundled_typo(self.name)
        if close:
            raise ValueError(f"model.name: {_typo_message(self.name, close)}")

