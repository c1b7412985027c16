"""The ``translation`` reward function: a sentence-level MT metric (chrF or BLEU, by ``sacrebleu``) of the
completion's translation against the reference translation (MT-R1-Zero)."""

from __future__ import annotations

import re
from typing import Callable

from rlvr.rewards.rubric import reward_function
from rlvr.utils.extras import require_extra

__all__ = ["translation_reward", "extract_translation", "MISSING"]

MISSING = "the translation reward needs sacrebleu: pip install 'rlvr[mt]'"


def extract_translation(completion: str, tag: str | None) -> str | None:
    """The text of the one ``<tag>...</tag>`` block (stripped), or the whole completion when ``tag`` is None;
    None when there is no such block or more than one (several translations are not an answer)."""
    if not isinstance(completion, str):
        return None
    if tag is None:
        return completion.strip()
    blocks = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", completion, re.DOTALL)
    return blocks[0].strip() if len(blocks) == 1 else None


@reward_function("translation", tags={"bounded"})
def translation_reward(metric: str = "chrf", tag: str | None = "translate",
                       max_chars: int = 20_000) -> Callable[..., float]:
    """The sentence ``metric`` of the translation against the reference answer, scaled to [0, 1].

    Feng et al. 2025 ("MT-R1-Zero: Advancing LLM-based Machine Translation via R1-Zero-like Reinforcement
    Learning", arXiv 2504.10160) reward a translation by an automatic metric of the text inside
    ``<translate>...</translate>`` (their rule metric is BLEU; chrF, the character n-gram F-score of Popović
    2015 with beta = 2, is the other standard rule metric).  Both come from ``sacrebleu``
    (``sentence_chrf`` / ``sentence_bleu``, divided by 100).  A completion without exactly one ``<tag>`` block
    (``tag: null``: the whole completion is the translation) scores 0, as does one over ``max_chars``; MT-R1-Zero's
    format term is a separate ``format`` function.
    """
    if metric not in ("chrf", "bleu"):
        raise ValueError(f"metric must be chrf or bleu, got {metric!r}")
    if tag is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", tag):
        raise ValueError(f"tag must be a tag name (letters, digits, _ or -), got {tag!r}")
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars!r}")
    state: dict = {}

    def score(completion: str, answer: str) -> float:
        if "fn" not in state:  # imported at the first call: the config loads without sacrebleu
            sacrebleu = require_extra("sacrebleu", MISSING)
            state["fn"] = sacrebleu.sentence_chrf if metric == "chrf" else sacrebleu.sentence_bleu
        text = extract_translation(completion, tag)
        if not text or len(text) > max_chars:
            return 0.0
        return float(state["fn"](text, [answer]).score) / 100.0

    return score
