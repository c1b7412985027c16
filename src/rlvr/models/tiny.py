"""A tiny randomly initialised Llama and a character-level tokenizer, for quick trials.

The model (2 layers, hidden size 32, about 17k parameters) learns nothing useful, but every part of a run
(sampling, verification, the update, checkpoints, evaluation) goes through it in seconds on a CPU, with no
download.  The test suite builds its model with the same functions.

Write one as an HF directory (weights, config and its tokenizer) and train on it::

    python -m rlvr.models.tiny /tmp/tiny-model
    rlvr train configs/arithmetic_grpo.yaml model.name=/tmp/tiny-model train.steps=2
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["CHARS", "CHAT_TEMPLATE", "make_model", "make_tokenizer", "save_tiny_model"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template (the bundled SmolLM2's turn markers)."""

CHARS = list("0123456789+-*/=?.,:;!()[]{}\\ \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ$%#'\"_")
"""The tokenizer's characters, one token each (after the four special tokens)."""


def make_tokenizer():
    """A character-level fast tokenizer: ``<pad>``, ``<|im_start|>``, ``<|im_end|>`` (end of sequence),
    ``<unk>``, then one token per character of :data:`CHARS`; :data:`CHAT_TEMPLATE`, left padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + CHARS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<|im_end|>",
                                  unk_token="<unk>", additional_special_tokens=["<|im_start|>"])
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def make_model(tokenizer, seed: int = 0, layers: int = 2, hidden: int = 32):
    """A randomly initialised ``LlamaForCausalLM`` over ``tokenizer``'s vocabulary (tied embeddings, 4 attention
    heads, 2 key-value heads), its weights drawn after ``torch.manual_seed(seed)``: the same seed gives the same
    weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny_model(out_dir: str | os.PathLike, *, seed: int = 0, layers: int = 2, hidden: int = 32) -> Path:
    """Write the tiny model and its tokenizer to ``out_dir`` as an HF directory (usable as ``model.name``);
    returns the directory."""
    out = Path(out_dir)
    tok = make_tokenizer()
    make_model(tok, seed=seed, layers=layers, hidden=hidden).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.models.tiny",
                                     description="Write a tiny randomly initialised model and its character "
                                                 "tokenizer to OUT_DIR, for quick trials (model.name=OUT_DIR).")
    parser.add_argument("out_dir", metavar="OUT_DIR")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    parser.add_argument("--hidden", type=int, default=32, help="hidden size, a multiple of 4 (default 32)")
    args = parser.parse_args(argv)
    out = save_tiny_model(args.out_dir, seed=args.seed, layers=args.layers, hidden=args.hidden)
    print(f"wrote a tiny model to {out}; train on it with: rlvr train CONFIG model.name={out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
