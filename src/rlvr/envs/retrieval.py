"""A search tool over a local corpus (BM25) and the ``search`` environment built on it.

``<search>query</search>`` is answered inline with ``<result>`` the top ``k`` passages ``</result>``
(or, with ``observation="tool"`` / the JSON protocol, as a tool message), like the calculator
of :mod:`rlvr.envs.tool_env`.  Ranking is Okapi BM25 (Robertson & Zaragoza 2009,
"The Probabilistic Relevance Framework: BM25 and Beyond") from the ``bm25s`` package (sparse
score matrices precomputed at indexing: a query is a sum of a few sparse rows), with its
English stop words and lower-casing; each entry is indexed as its title plus its text.
The index of a corpus file is built once per process and cached (:func:`corpus_index`).

The default corpus is the fictional encyclopedia of :mod:`rlvr.tasks.search_qa` (the
``search_qa`` task asks about it); ``corpus`` names another JSON-lines file (optionally
gzip-compressed) whose rows have ``title`` and ``text``.  ``pip install 'rlvr[search]'``.
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import Annotated, Literal

from pydantic import Field

from rlvr.envs.base import ENVIRONMENTS, Environment, Limits
from rlvr.envs.tool_env import ToolEnvironment
from rlvr.envs.tools import Tool
from rlvr.tasks.search_qa import EXAMPLE_NAMES, load_corpus
from rlvr.utils.extras import require_extra

__all__ = ["SEARCH_MISSING", "require_bm25s", "BM25Index", "corpus_index", "search", "search_tool", "SEARCH_SYSTEM",
           "search_example"]

SEARCH_MISSING = "the search tool needs the bm25s package: pip install 'rlvr[search]'"


def require_bm25s():
    """The ``bm25s`` module, or ImportError with the one line that says how to install it."""
    return require_extra("bm25s", SEARCH_MISSING)


class BM25Index:
    """BM25 over ``(title, text)`` passages; :meth:`search` returns ``(index, score)`` pairs, best first."""

    def __init__(self, passages: list[tuple[str, str]], k1: float = 1.5, b: float = 0.75):
        if not passages:
            raise ValueError("a search index needs at least one passage")
        bm25s = require_bm25s()
        logging.getLogger("bm25s").setLevel(logging.WARNING)  # its per-index DEBUG line is noise in a run's log
        self.passages = list(passages)
        self._bm25s = bm25s
        self.retriever = bm25s.BM25(k1=k1, b=b)
        tokens = bm25s.tokenize([f"{t}. {x}" for t, x in self.passages], stopwords="en", show_progress=False)
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The best ``k`` passages with a positive score (none when no query word is in the corpus)."""
        words = self._bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        if not words:
            return []
        import numpy as np

        scores = np.asarray(self.retriever.get_scores(words))
        order = np.argsort(-scores, kind="stable")[:k]  # ties: the earlier passage first
        return [(int(i), float(scores[i])) for i in order if scores[i] > 0]


_INDEXES: dict[str, BM25Index] = {}
_LOCK = threading.Lock()


def corpus_index(corpus: str | None = None) -> BM25Index:
    """The BM25 index of a corpus file (None: the shipped encyclopedia), built on first use and cached."""
    key = corpus or ""
    with _LOCK:
        if key not in _INDEXES:
            rows = load_corpus(corpus)
            _INDEXES[key] = BM25Index([(r["title"], r["text"]) for r in rows])
        return _INDEXES[key]


def format_passages(index: BM25Index, hits: list[tuple[int, float]], passage_chars: int) -> str:
    """``[1] Title: text`` lines, each text cut to ``passage_chars`` characters."""
    lines = []
    for n, (i, _) in enumerate(hits, 1):
        title, text = index.passages[i]
        if len(text) > passage_chars:
            text = text[:passage_chars].rstrip() + "..."
        lines.append(f"[{n}] {title}: {text}")
    return "\n".join(lines)


def search(query: str, *, k: int = 3, passage_chars: int = 400, corpus: str | None = None) -> str:
    """The best ``k`` passages of ``corpus`` for ``query`` as ``[n] Title: text`` lines (each text cut to
    ``passage_chars``), or a ``no results ...`` line."""
    query = query.strip()
    if not query:
        return "no results: the query is empty"
    index = corpus_index(corpus)
    hits = index.search(query[:500], k)
    if not hits:
        return f"no results for {query[:100]!r}"
    return format_passages(index, hits, passage_chars)


def _search_schema(query: str) -> str:
    """Search the encyclopedia and return the best matching passages.

    Args:
        query: words to look for, e.g. a name and what you want to know about it
    """
    raise NotImplementedError  # the schema the policy sees (k, passage length and corpus are the environment's)


def search_tool(k: int = 3, passage_chars: int = 400, corpus: str | None = None) -> Tool:
    """The ``search`` tool with these options; builds (or reuses) the corpus's index now, so that a missing
    package or a bad corpus fails before the first episode."""
    if not (1 <= k <= 20):
        raise ValueError(f"search: k must be in 1..20, got {k}")
    if not (20 <= passage_chars <= 4000):
        raise ValueError(f"search: passage_chars must be in 20..4000, got {passage_chars}")
    corpus_index(corpus)
    from transformers.utils import get_json_schema

    schema = get_json_schema(_search_schema)
    schema["function"]["name"] = "search"
    return Tool(partial(search, k=k, passage_chars=passage_chars, corpus=corpus), name="search", schema=schema)


SEARCH_SYSTEM = ("You can search an encyclopedia of invented places, people and inventions that you cannot know "
                 "by heart. To look something up, write <search>query</search> and the best matching passages "
                 "appear right after it. Then give the final answer in \\boxed{}.")
"""The default system prompt of ``env.name=search``."""


def search_example(passage_chars: int = 400) -> list[dict]:
    """The worked example shown before every problem: one search, its result, a boxed answer.  It is about a
    town that is not in the shipped corpus (:data:`rlvr.tasks.search_qa.EXAMPLE_NAMES`), so it gives no answer
    away; its result is written the way the tool writes results."""
    town, founder = EXAMPLE_NAMES[0], EXAMPLE_NAMES[1]
    text = (f"{town} is a town in the province of Ostrel, on the river Malden. It was founded in 1420 by Ira "
            f"{founder} and received its market charter in 1502. At the last census {town} had a population of "
            f"8120; the town lies at an elevation of 96 metres.")
    if len(text) > passage_chars:
        text = text[:passage_chars].rstrip() + "..."
    return [
        {"role": "user", "content": f"In what year was the town of {town} founded? Put the final answer in "
                                    "\\boxed{}."},
        {"role": "assistant", "content": f"<search>{town} founded</search><result>[1] {town}: {text}</result>\n"
                                         "The answer is \\boxed{1420}."},
    ]


def _check_search(params: dict, **_) -> None:
    require_bm25s_value_error()
    if params.get("corpus") is not None:
        load_corpus(params["corpus"])  # a missing file or a row without title/text: a config error (rows cached)


def require_bm25s_value_error() -> None:
    """:func:`require_bm25s` for load-time checks: a missing package is a ValueError (a config error)."""
    try:
        require_bm25s()
    except ImportError as e:
        raise ValueError(str(e)) from None


@ENVIRONMENTS.register("search", tags={"multi_turn"}, check=_check_search,
                       doc="retrieval: <search>query</search> answered with the top-k BM25 passages of a local "
                           "corpus (default: the search_qa encyclopedia) until a final answer, which reward.verifier "
                           "scores; params k, passage_chars, corpus, max_turns, observation, example "
                           "(pip install 'rlvr[search]')")
def search_env(verifier, tokenizer, *, k: Annotated[int, Field(ge=1, le=20)] = 3,
               passage_chars: Annotated[int, Field(ge=20, le=4000)] = 400, corpus: str | None = None,
               max_turns: Annotated[int, Field(ge=2)] = 3, max_total_tokens: int = 0, tool_timeout: float = 10.0,
               system_prompt: str | None = SEARCH_SYSTEM, example: bool = True,
               observation: Literal["inline", "tool"] = "inline") -> Environment:
    return ToolEnvironment(verifier, [search_tool(k=k, passage_chars=passage_chars, corpus=corpus)],
                           limits=Limits(max_turns, max_total_tokens, tool_timeout), system_prompt=system_prompt,
                           example=search_example(passage_chars) if example else None, observation=observation,
                           tokenizer=tokenizer)
