"""The ``diversity`` reward function: a correct sample earns a bonus for differing from the rest of its group."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr.rewards.rubric import reward_function

__all__ = ["diversity_reward", "ngram_set", "jaccard"]

_WORD = re.compile(r"\w+|[^\w\s]")


def ngram_set(text: str, n: int) -> frozenset[tuple[str, ...]]:
    """The set of word n-grams of ``text`` (words and punctuation marks, lower-cased); a text shorter than ``n``
    words gives its one short tuple, an empty text the empty set."""
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """``|a ∩ b| / |a ∪ b|``; two empty sets are identical (1)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@reward_function("diversity", scope="group", tags={"bounded"})
def diversity_reward(n: int = 2, correct_only: bool = True) -> Callable[..., Tensor]:
    """A novelty bonus: ``d_i = 1 - max_{j != i} J(S_i, S_j)``, times ``c_i`` unless ``correct_only`` is false.

    ``S_i`` is the set of word ``n``-grams of sample i's completion and ``J`` the Jaccard similarity, so a sample
    that repeats another of its group earns 0 and one sharing no n-gram with any earns 1.  This is the rule-based
    form of the diversity / intrinsic rewards of the literature map (DARL, multi-answer RL, Darling's
    quality x diversity product, Li et al. 2025, arXiv 2509.02534, whose diversity is a learned partition of the
    group; here it is n-gram overlap, with no model).  Beside a binary ``verifier`` of weight 1 and this function
    of weight ``w``, a correct sample earns ``1 + w d_i`` and an incorrect one 0: diversity is never paid for a
    wrong answer (``correct_only=false`` pays it to every sample, a pure exploration bonus).  A group of one
    sample earns 0.
    """
    if not (isinstance(n, int) and 1 <= n <= 8):
        raise ValueError(f"n must be an integer in [1, 8], got {n!r}")

    def score(completions: Sequence[str], correct: Tensor) -> Tensor:
        G = len(completions)
        sets = [ngram_set(c if isinstance(c, str) else "", n) for c in completions]
        d = torch.zeros(G)
        for i in range(G):
            others = [jaccard(sets[i], sets[j]) for j in range(G) if j != i]
            d[i] = 1.0 - max(others) if others else 0.0
        return d * (correct > 0).to(torch.float32) if correct_only else d

    return score
