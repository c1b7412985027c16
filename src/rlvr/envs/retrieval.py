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
           "search_example", "SimulatedSearch", "SIMULATED_USEFUL", "SIMULATED_NOISY"]

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


def search_tool(k: int = 3, passage_chars: int = 400, corpus: str | None = None, simulator: str | None = None,
                noise: float = 0.0, max_new_tokens: int = 96) -> Tool:
    """The ``search`` tool with these options; builds (or reuses) the corpus's index now, so that a missing
    package or a bad corpus fails before the first episode.  With ``simulator`` (a causal-LM directory) the results
    are written by that model instead (:class:`SimulatedSearch`, ZeroSearch), no corpus is read."""
    if not (1 <= k <= 20):
        raise ValueError(f"search: k must be in 1..20, got {k}")
    if not (20 <= passage_chars <= 4000):
        raise ValueError(f"search: passage_chars must be in 20..4000, got {passage_chars}")
    from transformers.utils import get_json_schema

    schema = get_json_schema(_search_schema)
    schema["function"]["name"] = "search"
    if simulator is not None:
        return Tool(SimulatedSearch(simulator, k=k, noise=noise, max_new_tokens=max_new_tokens), name="search",
                    schema=schema)
    corpus_index(corpus)
    return Tool(partial(search, k=k, passage_chars=passage_chars, corpus=corpus), name="search", schema=schema)


SIMULATED_USEFUL = ("You are a search engine. Write {k} short passages, one per line, that answer the search query "
                    "below with correct facts.\nQuery: {query}")
"""ZeroSearch's request for useful documents (the simulator writes what a search engine would return)."""

SIMULATED_NOISY = ("You are a search engine. Write {k} short passages, one per line, about the words of the search "
                   "query below that do not answer it.\nQuery: {query}")
"""ZeroSearch's request for noisy documents (related but unhelpful)."""


class SimulatedSearch:
    """A search engine simulated by a causal LM (ZeroSearch, Sun et al. 2025, "ZeroSearch: Incentivize the Search
    Capability of LLMs without Searching", arXiv 2505.04588): each query is answered by documents the simulator
    writes, asked for *useful* ones or, with probability ``noise``, for *noisy* ones (ZeroSearch raises that
    probability along training as a curriculum; here it is fixed per run), so the policy learns to search and to
    judge what it reads without a search API.  The choice is seeded by the query (the same query gets the same kind
    of result in a resumed run); generation is greedy, at most ``max_new_tokens`` tokens, and the text comes back
    as ``[n] passage`` lines like the BM25 tool's.  ZeroSearch fine-tunes its simulator first; any causal-LM
    directory works here, and what it knows is what the policy can find."""

    _models: dict[str, tuple] = {}

    def __init__(self, path: str, k: int = 3, noise: float = 0.0, max_new_tokens: int = 96, seed: int = 0):
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"search: noise must be in [0, 1], got {noise}")
        self.path, self.k, self.noise, self.max_new_tokens, self.seed = path, k, noise, max_new_tokens, seed
        self.asked: list[tuple[str, bool]] = []
        """(query, noisy) of every call, for inspection."""

    def _model(self):
        if self.path not in self._models:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tok = AutoTokenizer.from_pretrained(self.path)
            self._models[self.path] = (tok, AutoModelForCausalLM.from_pretrained(self.path).eval())
        return self._models[self.path]

    def noisy(self, query: str) -> bool:
        """Whether ``query`` gets noisy documents: a draw with probability ``noise`` seeded by the query."""
        import hashlib
        import random

        key = int.from_bytes(hashlib.sha256(f"{self.seed}\0{query}".encode()).digest()[:8], "big")
        return random.Random(key).random() < self.noise

    def __call__(self, query: str) -> str:
        import torch

        query = query.strip()
        if not query:
            return "no results: the query is empty"
        noisy = self.noisy(query)
        self.asked.append((query, noisy))
        tok, model = self._model()
        text = (SIMULATED_NOISY if noisy else SIMULATED_USEFUL).format(k=self.k, query=query[:500])
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                          add_generation_prompt=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        else:
            ids = tok(text + "\n", add_special_tokens=True)["input_ids"]
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), max_new_tokens=self.max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        written = tok.decode(out[0, len(ids):], skip_special_tokens=True)
        lines = [ln.strip() for ln in written.splitlines() if ln.strip()][: self.k]
        if not lines:
            return f"no results for {query[:100]!r}"
        return "\n".join(f"[{n}] {ln}" for n, ln in enumerate(lines, 1))


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
    if params.get("simulator") is not None:
        from pathlib import Path

        if params.get("corpus") is not None:
            raise ValueError("search: give a corpus (BM25) or a simulator (an LM writes the results), not both")
        if not (Path(params["simulator"]) / "config.json").is_file():
            raise ValueError(f"search: simulator {params['simulator']!r} is not a model directory (no config.json)")
        if not 0.0 <= float(params.get("noise", 0.0)) <= 1.0:
            raise ValueError(f"search: noise must be in [0, 1], got {params.get('noise')}")
        return
    if params.get("noise", 0.0):
        raise ValueError("search: noise is the share of noisy simulated results; it needs a simulator")
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
                           "scores; params k, passage_chars, corpus, max_turns, observation, example; simulator "
                           "(an LM writes the results, ZeroSearch) with noise (pip install 'rlvr[search]')")
def search_env(verifier, tokenizer, *, k: Annotated[int, Field(ge=1, le=20)] = 3,
               passage_chars: Annotated[int, Field(ge=20, le=4000)] = 400, corpus: str | None = None,
               max_turns: Annotated[int, Field(ge=2)] = 3, max_total_tokens: int = 0, tool_timeout: float = 10.0,
               system_prompt: str | None = SEARCH_SYSTEM, example: bool = True,
               observation: Literal["inline", "tool"] = "inline", simulator: str | None = None,
               noise: Annotated[float, Field(ge=0, le=1)] = 0.0,
               simulator_tokens: Annotated[int, Field(ge=8, le=1024)] = 96) -> Environment:
    return ToolEnvironment(verifier, [search_tool(k=k, passage_chars=passage_chars, corpus=corpus, simulator=simulator,
                                                  noise=noise, max_new_tokens=simulator_tokens)],
                           limits=Limits(max_turns, max_total_tokens, tool_timeout), system_prompt=system_prompt,
                           example=search_example(passage_chars) if example else None, observation=observation,
                           tokenizer=tokenizer)
