"""Engines and tokenizers the serve tests share."""

from __future__ import annotations

from rlvr.engines import EngineBase
from rlvr.engines.hf import HFEngine, format_prompt, with_prefixes
from rlvr.models.tiny import CHARS
from rlvr.types import Sample

TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls is defined and m.tool_calls %}<|im_start|>assistant\n"
    "{{ m.content }}{% for c in m.tool_calls %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template with tools (Hermes / Qwen style: schemas in a system block, ``<tool_call>{json}</tool_call>``
in assistant turns, ``tool`` messages)."""


def tool_tokenizer():
    """The tiny character tokenizer with ``<``, ``>``, ``|``, ``_``, ``&``, ``@`` added and :data:`TOOL_TEMPLATE`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + CHARS + list("<>|_&@"))}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<|im_end|>", unk_token="<unk>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = TOOL_TEMPLATE
    tok.padding_side = "left"
    return tok


class SpyEngine(EngineBase):
    """Wraps an engine and keeps every call's samples (the ids and log-probs the engine produced and consumed)."""

    def __init__(self, engine):
        super().__init__(engine.tokenizer, eos_ids=engine.eos_ids)
        self.inner = engine
        self.calls: list[list[list[Sample]]] = []

    def prefix_cache(self):
        return self.inner.prefix_cache()

    def generate(self, problems, params, prefixes=None, **kw):
        out = self.inner.generate(problems, params, prefixes=prefixes, **kw)
        self.calls.append(out)
        return out

    def sync_weights(self, model):
        self.inner.sync_weights(model)

    @property
    def samples(self) -> list[Sample]:
        return [s for call in self.calls for group in call for s in group]


class ScriptedEngine(EngineBase):
    """An engine whose completions are given texts (then the end-of-sequence token), with made-up log-probs;
    its prompts are rendered as the HF engine renders them.  No prefix cache (the contract's "unsupported")."""

    def __init__(self, tokenizer, script: list[str]):
        super().__init__(tokenizer, eos_ids={tokenizer.eos_token_id})
        self.script = list(script)
        self.samples: list[Sample] = []

    def generate(self, problems, params, prefixes=None, cache=None):
        prompts = [format_prompt(self.tokenizer, p) for p in problems]
        if prefixes is not None:
            prompts = with_prefixes(self.tokenizer, prompts, prefixes)
        out = []
        for p, prompt in zip(problems, prompts):
            text = self.script.pop(0)
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            lps = [-0.01 * (len(self.samples) + 1) * (j + 1) for j in range(len(ids))]
            self.samples.append(Sample(p.id, prompt, ids, lps, text, "stop"))
            out.append([self.samples[-1]])
        return out

    def sync_weights(self, model):
        pass


def hf_engine(tokenizer, seed: int = 0):
    from rlvr.models.tiny import make_model

    return HFEngine(make_model(tokenizer, seed=seed), tokenizer)
