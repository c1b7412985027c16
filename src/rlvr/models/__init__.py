"""Model loading: bundled default, HF directories, hub ids."""

from rlvr.models.loader import (
    BUNDLED_MODELS,
    DEFAULT_MODEL,
    ModelNotFoundError,
    cache_dir,
    load_policy,
    load_tokenizer,
    resolve_model_path,
)

__all__ = [
    "BUNDLED_MODELS",
    "DEFAULT_MODEL",
    "ModelNotFoundError",
    "cache_dir",
    "load_policy",
    "load_tokenizer",
    "resolve_model_path",
]
