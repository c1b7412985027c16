"""Contamination check: n-gram overlap between a training task and an evaluation set.

The text of every item is normalised (Unicode NFKC, lower-cased, split on
whitespace) and cut into word ``n``-grams (default 13, the length GPT-3's
contamination study used, Brown et al. 2020, App. C).  For each evaluation item
the report gives the fraction of its n-grams that occur anywhere in the training
set; items at or above ``threshold`` are flagged.  An item shorter than ``n``
words has no n-gram; it is checked for an exact (normalised) duplicate among the
training texts instead (fraction 1.0 if found, else 0.0).

N-grams are stored as 64-bit BLAKE2 hashes (collisions are negligible at these
sizes), so a training set of a few million words fits in memory.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

__all__ = ["normalize_words", "ngram_hashes", "NgramIndex", "ContaminationReport", "contamination_report",
           "load_texts", "TEXT_FIELDS", "split_for_completion", "rouge_l_f1", "completion_audit",
           "greedy_text_generator"]

TEXT_FIELDS = ("prompt", "problem", "question", "text", "input")
"""Fields tried, in order, for an item's text in a JSONL file when none is named."""


def normalize_words(text: str) -> list[str]:
    """NFKC-normalised, lower-cased, whitespace-split words."""
    return unicodedata.normalize("NFKC", text).lower().split()


def _h(words: Sequence[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(words).encode(), digest_size=8).digest(), "little")


def ngram_hashes(words: Sequence[str], n: int) -> list[int]:
    """Hashes of the word n-grams of ``words`` in order (empty when fewer than ``n`` words)."""
    return [_h(words[i:i + n]) for i in range(len(words) - n + 1)]


class NgramIndex:
    """The set of n-gram hashes of the training texts, plus their whole normalised texts."""

    def __init__(self, texts: Iterable[str], n: int = 13):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = n
        self.grams: set[int] = set()
        self.exact: set[int] = set()
        self.num_texts = 0
        for t in texts:
            w = normalize_words(t)
            self.grams.update(ngram_hashes(w, n))
            self.exact.add(_h(w))
            self.num_texts += 1

    def overlap(self, text: str) -> tuple[float, int, int]:
        """``(fraction, overlapping n-grams, n-grams)`` of ``text`` against the index."""
        w = normalize_words(text)
        grams = ngram_hashes(w, self.n)
        if not grams:
            return (1.0 if w and _h(w) in self.exact else 0.0), 0, 0
        hit = sum(g in self.grams for g in grams)
        return hit / len(grams), hit, len(grams)


@dataclass
class ContaminationReport:
    n: int
    threshold: float
    num_train: int
    items: list[dict] = field(default_factory=list)
    """Per evaluation item: ``id``, ``fraction``, ``overlapping``, ``ngrams``, ``flagged``."""

    @property
    def flagged(self) -> list[dict]:
        return [it for it in self.items if it["flagged"]]

    def summary(self) -> dict:
        k = len(self.items)
        return {"n": self.n, "threshold": self.threshold, "train_texts": self.num_train, "eval_items": k,
                "flagged": len(self.flagged), "flagged_fraction": len(self.flagged) / k if k else 0.0,
                "any_overlap": sum(it["fraction"] > 0 for it in self.items),
                "mean_overlap": sum(it["fraction"] for it in self.items) / k if k else 0.0}

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "flagged": self.flagged, "items": self.items}


def contamination_report(train_texts: Iterable[str], eval_items: Iterable[tuple[str, str]], *, n: int = 13,
                         threshold: float = 0.5) -> ContaminationReport:
    """Overlap of every ``(id, text)`` evaluation item with the training texts (see the module docstring)."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    index = NgramIndex(train_texts, n)
    rep = ContaminationReport(n=n, threshold=threshold, num_train=index.num_texts)
    for item_id, text in eval_items:
        frac, hit, total = index.overlap(text)
        rep.items.append({"id": str(item_id), "fraction": frac, "overlapping": hit, "ngrams": total,
                          "flagged": frac >= threshold and (total > 0 or frac > 0)})
    return rep


def load_texts(spec: str, role: str = "eval", fields: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``(id, text)`` items of a task name or a JSONL file.

    ``spec``: a JSONL path (each line's ``fields`` joined by a newline, default
    the first present of :data:`TEXT_FIELDS`); ``gsm8k`` (its train split when
    ``role == "train"``, else test); ``math500``, ``aime24``, ``amc23``; or
    ``arithmetic`` (the default generated train or held-out split).  Task items
    use the problem prompt.
    """
    from rlvr.tasks.jsonl import DatasetError, read_jsonl

    p = Path(spec)
    if spec.endswith(".jsonl") or p.is_file():
        out = []
        for line_no, row in read_jsonl(p):
            names = list(fields) if fields else [next((f for f in TEXT_FIELDS if f in row), None)]
            if names == [None] or any(f not in row for f in names):
                want = ", ".join(fields) if fields else " or ".join(TEXT_FIELDS)
                raise DatasetError(f"{p}:{line_no}: no text field ({want})")
            out.append((str(row.get("id", f"{p.name}:{line_no}")), "\n".join(str(row[f]) for f in names)))
        return out
    from rlvr.types import problem_text
    from rlvr.tasks import load_benchmark, load_gsm8k

    if spec == "gsm8k":
        problems = load_gsm8k(split="train" if role == "train" else "test")
    elif spec == "arithmetic":
        from rlvr.tasks.registry import TASKS

        train, held = TASKS.get("arithmetic")()  # the default arithmetic task
        problems = train if role == "train" else held
    else:
        try:
            problems = load_benchmark(spec)
        except (KeyError, ValueError) as e:
            raise DatasetError(f"{spec}: neither a JSONL file nor a known task ({e})") from None
    return [(pr.id, problem_text(pr)) for pr in problems]


# --------------------------------------------------------------------------- partial-prompt completion audit
def split_for_completion(text: str, fraction: float) -> tuple[str, str]:
    """``(prefix, remainder)`` of ``text`` cut at a word boundary after ``ceil(fraction * words)`` words (at least
    one word on each side when the text has two or more; the prefix keeps the text's own spacing)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    if len(spans) < 2:
        return text, ""
    k = min(len(spans) - 1, max(1, math.ceil(fraction * len(spans))))
    return text[:spans[k - 1][1]], text[spans[k][0]:]


def rouge_l_f1(candidate: str, reference: str) -> float:
    """ROUGE-L F1 of two texts over their normalised words (Lin 2004: the longest common subsequence ``L``,
    ``P = L / |candidate|``, ``R = L / |reference|``, ``F1 = 2PR / (P + R)``; 0 when either is empty)."""
    a, b = normalize_words(candidate), normalize_words(reference)
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def completion_audit(generate: Callable[[list[str]], list[str]], items: Sequence[tuple[str, str]], *,
                     fraction: float = 0.6, threshold: float = 0.8, batch_size: int = 16) -> dict:
    """Partial-prompt completion: does a model continue benchmark problems it was only half shown?

    Wu et al. 2025 ("Reasoning or Memorization: Unreliable Results of Reinforcement Learning Due to Data
    Contamination", Sec. 3): each problem is cut after ``fraction`` of its words (they use 40-80%); the model,
    given the prefix as plain text (no chat template), continues it greedily; the continuation is compared with
    the true remainder by ROUGE-L F1 and exact match (its first ``|remainder|`` normalised words equal the
    remainder's).  A model that has seen the benchmark reproduces remainders it could not infer; a clean one
    rarely gets past a few words.  ``generate(prefixes) -> continuations`` decodes one batch (see
    :func:`greedy_text_generator`).

    Returns ``{"summary": {items, fraction, threshold, mean_rouge_l, exact_match_rate, flagged}, "items": [{id,
    rouge_l, exact_match, flagged, prefix, remainder, continuation}]}``; an item is flagged at ROUGE-L >=
    ``threshold`` or an exact match.
    """
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    cut = [(i, *split_for_completion(t, fraction)) for i, t in items]
    cut = [c for c in cut if c[2]]  # a one-word item has nothing to continue
    rows = []
    for start in range(0, len(cut), batch_size):
        chunk = cut[start:start + batch_size]
        outs = generate([c[1] for c in chunk])
        if len(outs) != len(chunk):
            raise ValueError(f"the generator returned {len(outs)} continuations for {len(chunk)} prefixes")
        for (item_id, prefix, rest), out in zip(chunk, outs):
            want = normalize_words(rest)
            got = normalize_words(out)[:len(want)]
            rl = rouge_l_f1(" ".join(normalize_words(out)[:len(want)]), rest)
            em = got == want
            rows.append({"id": str(item_id), "rouge_l": rl, "exact_match": em, "flagged": em or rl >= threshold,
                         "prefix": prefix, "remainder": rest, "continuation": out})
    k = len(rows)
    return {"summary": {"items": k, "fraction": fraction, "threshold": threshold,
                        "mean_rouge_l": sum(r["rouge_l"] for r in rows) / k if k else 0.0,
                        "exact_match_rate": sum(r["exact_match"] for r in rows) / k if k else 0.0,
                        "flagged": sum(r["flagged"] for r in rows)},
            "items": rows}


def greedy_text_generator(model, tokenizer, max_new_tokens: int = 64) -> Callable[[list[str]], list[str]]:
    """``generate(prefixes) -> continuations``: greedy decoding of plain-text prefixes (no chat template, the
    tokenizer's own special tokens) with transformers' ``generate``, left-padded in batches."""
    import torch

    def generate(prefixes: list[str]) -> list[str]:
        old_side = tokenizer.padding_side
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        try:
            enc = tokenizer(prefixes, return_tensors="pt", padding=True)
        finally:
            tokenizer.padding_side = old_side
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id)
        new = out[:, enc["input_ids"].shape[1]:]
        return tokenizer.batch_decode(new, skip_special_tokens=True)

    return generate
