"""Shared fixtures: a tiny randomly initialised Llama and a character-level tokenizer.

Built in memory (by ``rlvr.models.tiny``, which also writes one for users' quick trials) so the default suite
needs no download and no bundled model.
"""

from __future__ import annotations

import sys

import pytest
import torch

from rlvr.models.tiny import CHARS, CHAT_TEMPLATE, make_model, make_tokenizer, save_tiny_model  # noqa: F401


def tiny_run_config(out, *extra: str):
    """The training-loop tests' short run: 4 steps of 2 prompts x 4 samples of at most 8 new tokens, micro-batches
    of 4, lr 1e-2 without warm-up, seed 3, no progress bar, no checkpoints, no evaluation; ``extra`` are further
    ``key=value`` overrides (a later one wins, so a file states only where it differs)."""
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    return load_config(RunConfig, None, [
        f"train.output_dir={out}", "train.steps=4", "train.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=8", "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=0", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", *extra])


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` imported as a module without running its ``main`` (for tests of its pure parts)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return make_tokenizer()


@pytest.fixture
def tiny_model(tiny_tokenizer):
    return make_model(tiny_tokenizer)


@pytest.fixture
def tiny_model_dir(tmp_path):
    """A tiny model saved as an HF directory (usable as ``model.name``): what ``python -m rlvr.models.tiny``
    writes."""
    return save_tiny_model(tmp_path / "tiny-model")


def close(a, b, tol=1e-5):
    """Assert ``a`` and ``b`` agree elementwise within ``tol`` (absolute), compared in float64."""
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                               atol=tol, rtol=0)


def make_vlm(seed: int = 0):
    """A tiny randomly initialised LLaVA (``rlvr.models.vision.tiny_random_vlm``) on a fresh character tokenizer:
    ``(model, tokenizer)``, the processor attached to the tokenizer (16 image placeholders per image)."""
    from rlvr.models.vision import attach_processor, tiny_random_vlm

    tok = make_tokenizer()
    model, processor = tiny_random_vlm(tok, seed=seed)
    return model, attach_processor(tok, processor)


def random_images(n: int, seed: int = 0, size: int = 40):
    """``n`` random RGB uint8 arrays (distinct images)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


@pytest.fixture
def tiny_vlm_dir(tmp_path):
    """A tiny VLM saved as an HF directory with its processor (usable as ``model.name``)."""
    from rlvr.models.vision import processor_of

    model, tok = make_vlm()
    path = tmp_path / "tiny-vlm"
    model.save_pretrained(path)
    processor_of(tok).save_pretrained(path)
    return path
