"""A fictional encyclopedia and questions that can only be answered by reading it (the ``search_qa`` task).

The corpus (``rlvr/data/search_corpus.jsonl.gz``, written by ``scripts/make_search_corpus.py``
from :func:`generate_corpus`) describes invented towns, rivers, people and inventions:
every name is made of random syllables and every number is drawn at random, so no model
knows an answer without reading the entry.  Entries are short paragraphs with distractors:
several numbers each (a town's founding year, population, elevation and charter year),
names that differ by a letter or two (``Velmora`` / ``Velmoran``), people who share a
surname, and cross-references (a river lists the towns on its banks, a person's entry names
the invention an invention's entry also describes).

Each row is ``{"id", "kind", "title", "text", "facts"}``; ``facts`` holds the values the
text states, from which :func:`corpus_questions` writes questions whose answer is a number
or a name (scored by ``reward.verifier=math``, which compares names case-insensitively and
numbers by value).  :func:`search_qa_split` holds out whole entries: no held-out question is
about an entry that a training question is about.  The search tool that answers
``<search>query</search>`` over the same corpus is :mod:`rlvr.envs.retrieval`.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import string
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Literal

from rlvr.types import Problem

__all__ = ["CORPUS_FILE", "CORPUS_SEED", "CORPUS_SIZES", "DEFAULT_TEMPLATE", "EXAMPLE_NAMES", "generate_corpus",
           "corpus_bytes", "load_corpus", "corpus_questions", "search_qa_split", "check_search_qa", "answer_leaks"]

CORPUS_FILE = Path(__file__).resolve().parent.parent / "data" / "search_corpus.jsonl.gz"
"""The shipped corpus (written by ``scripts/make_search_corpus.py``)."""

CORPUS_SEED = 0
CORPUS_SIZES = {"towns": 420, "rivers": 150, "people": 420, "inventions": 260}
"""The generator's arguments for the shipped file."""

DEFAULT_TEMPLATE = "{question} Put the final answer in \\boxed{{}}."
"""Prompt template: a ``str.format`` string with one ``{question}`` field."""

EXAMPLE_NAMES = ("Brannoch", "Tessary")
"""Names reserved for the search environment's worked example: never used in the corpus."""

AnswerKind = Literal["all", "number", "name"]

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v",
           "w", "z", "tr", "j"]
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ae", "ou"]
_CODAS = ["", "", "", "", "n", "r", "l", "s", "m", "nd", "rn", "th"]
_BLOCKED = ("fuc", "fuk", "shit", "cunt", "dick", "cock", "slut", "whor", "nazi", "rape", "anal", "tit", "porn",
            "damn", "hell", "piss", "nig")
_SUFFIXES = ["a", "an", "e", "is", "on", "ia", "el", "or", "en", "ith"]
_PROVINCES = ["Ostrel", "Varnhold", "Quessa", "Dunmere", "Ilvany", "Corrowen", "Tashkar", "Pellin"]
_PROFESSIONS = ["clockmaker", "engineer", "glassblower", "cartographer", "physician", "shipwright", "weaver",
                "astronomer", "chemist", "surveyor", "printer", "miller"]
_DEVICES = [("loom", "a weaving machine"), ("regulator", "a timekeeping device"), ("lens", "an optical instrument"),
            ("pump", "a water pump"), ("press", "a printing press"), ("kiln", "a firing oven"),
            ("sextant", "a navigation instrument"), ("valve", "a steam valve"), ("lamp", "an oil lamp"),
            ("compass", "a magnetic compass"), ("plough", "an iron plough"), ("crane", "a harbour crane")]


class _Names:
    """Unique invented words; ``similar`` makes a distinct near-twin of an existing one (a distractor)."""

    def __init__(self, rng: random.Random, reserved: Iterable[str] = ()):
        self.rng = rng
        self.used: set[str] = {w.lower() for w in reserved}

    def _take(self, word: str) -> bool:
        w = word.lower()
        if w in self.used or len(w) < 4 or len(w) > 11 or any(b in w for b in _BLOCKED):
            return False
        self.used.add(w)
        return True

    def new(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*syllables)
            word = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                           for _ in range(n))
            word = word.capitalize()
            if self._take(word):
                return word

    def similar(self, base: str) -> str:
        for _ in range(100):
            word = base.rstrip("aeiouy") + self.rng.choice(_SUFFIXES)
            if self._take(word.capitalize()):
                return word.capitalize()
        return self.new()


def _entity_names(names: _Names, rng: random.Random, n: int, twin_share: float = 0.3) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        if out and rng.random() < twin_share:
            out.append(names.similar(rng.choice(out)))
        else:
            out.append(names.new())
    return out


def generate_corpus(seed: int = CORPUS_SEED, towns: int = CORPUS_SIZES["towns"], rivers: int = CORPUS_SIZES["rivers"],
                    people: int = CORPUS_SIZES["people"], inventions: int = CORPUS_SIZES["inventions"]
                    ) -> list[dict[str, Any]]:
    """The corpus rows, a pure function of the arguments (the shipped file is ``generate_corpus()``)."""
    for key, n in (("towns", towns), ("rivers", rivers), ("people", people), ("inventions", inventions)):
        if n < 1:
            raise ValueError(f"generate_corpus: {key} must be >= 1, got {n}")
    rng = random.Random(seed)
    names = _Names(rng, reserved=EXAMPLE_NAMES)
    river_names = _entity_names(names, rng, rivers)
    town_names = _entity_names(names, rng, towns)
    tributaries = [names.new() for _ in range(rivers)]
    surnames = _entity_names(names, rng, max(2, people * 2 // 3))
    first_names = [names.new((1, 2)) for _ in range(60)]
    inv_words = _entity_names(names, rng, inventions)
    founders = [f"{rng.choice(first_names)} {names.new()}" for _ in range(towns)]

    rows: list[dict[str, Any]] = []
    town_facts = []
    for i, name in enumerate(town_names):
        founded = rng.randint(1100, 1850)
        f = {"name": name, "province": rng.choice(_PROVINCES), "river": rng.choice(river_names),
             "founded": founded, "population": rng.randint(800, 250000), "elevation": rng.randint(5, 2400),
             "charter": founded + rng.randint(20, 300), "founder": founders[i]}
        town_facts.append(f)
        text = (f"{name} is a town in the province of {f['province']}, on the river {f['river']}. It was founded in "
                f"{founded} by {f['founder']} and received its market charter in {f['charter']}. At the last "
                f"census {name} had a population of {f['population']}; the town lies at an elevation of "
                f"{f['elevation']} metres.")
        rows.append({"id": f"town-{i:04d}", "kind": "town", "title": name, "text": text, "facts": f})
    for i, name in enumerate(river_names):
        on = [t["name"] for t in town_facts if t["river"] == name][:3]
        f = {"name": name, "length": rng.randint(40, 3200), "source_elevation": rng.randint(200, 4200),
             "tributary": tributaries[i], "tributary_length": rng.randint(8, 300), "towns": on}
        banks = (f" Towns on its banks include {', '.join(on[:-1])} and {on[-1]}." if len(on) > 1 else
                 f" The town of {on[0]} lies on its banks." if on else " No town lies on its banks.")
        text = (f"The {name} is a river {f['length']} kilometres long. It rises at an elevation of "
                f"{f['source_elevation']} metres.{banks} Its largest tributary is the {f['tributary']}, "
                f"{f['tributary_length']} kilometres long.")
        rows.append({"id": f"river-{i:04d}", "kind": "river", "title": name, "text": text, "facts": f})
    person_facts = []
    full_names: set[str] = set()
    while len(person_facts) < people:
        full = f"{rng.choice(first_names)} {rng.choice(surnames)}"
        if full in full_names or full in founders:
            continue
        full_names.add(full)
        born = rng.randint(1500, 1900)
        f = {"name": full, "born": born, "died": born + rng.randint(30, 95), "birthplace": rng.choice(town_names),
             "profession": rng.choice(_PROFESSIONS), "she": rng.random() < 0.5, "invention": None}
        person_facts.append(f)
    inv_facts = []
    inventors = rng.sample(range(people), min(inventions, people))
    for j, word in enumerate(inv_words):
        p = person_facts[inventors[j % len(inventors)]]
        device, what = rng.choice(_DEVICES)
        year = rng.randint(p["born"] + 18, p["died"] - 1)
        f = {"name": f"the {word} {device}", "inventor": p["name"], "year": year, "town": rng.choice(town_names),
             "weight": rng.randint(2, 900), "made": rng.randint(10, 5000), "what": what}
        inv_facts.append(f)
        if p["invention"] is None:
            p["invention"], p["invention_year"] = f["name"], year
        text = (f"The {word} {device} is {what} devised by {p['name']} in {year} in the town of {f['town']}. The "
                f"first one weighed {f['weight']} kilograms, and {f['made']} were made in the following fifty years.")
        rows.append({"id": f"invention-{j:04d}", "kind": "invention", "title": f"{word} {device}", "text": text,
                     "facts": f})
    for i, f in enumerate(person_facts):
        pron, poss = ("She", "her") if f.pop("she") else ("He", "his")
        text = (f"{f['name']} ({f['born']}-{f['died']}) was a {f['profession']} born in the town of "
                f"{f['birthplace']}.")
        if f["invention"]:
            text += f" {pron} is best known for {f['invention']}, built in {f['invention_year']}."
        else:
            text += f" {pron} worked for {rng.randint(5, 40)} years in the guild of {rng.choice(town_names)}."
        text += f" {pron} died at the age of {f['died'] - f['born']}, and {poss} papers were printed in " \
                f"{f['died'] + rng.randint(1, 60)}."
        rows.append({"id": f"person-{i:04d}", "kind": "person", "title": f["name"], "text": text, "facts": f})
    return rows


def corpus_bytes(rows: list[dict[str, Any]]) -> bytes:
    """The file's bytes: one sorted-key JSON object per line, gzip level 9 with no name and no timestamp."""
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=True) + "\n" for r in rows).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=buf, mtime=0) as f:
        f.write(text)
    return buf.getvalue()


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[dict[str, Any], ...]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"corpus {str(p)!r} is not a file")
    opener = gzip.open if p.suffix == ".gz" else open
    rows = []
    with opener(p, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{n}: not a JSON object ({e.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("title"), str) \
                    or not isinstance(row.get("text"), str):
                raise ValueError(f"{p}:{n}: a corpus row needs string fields 'title' and 'text'")
            rows.append(row)
    if not rows:
        raise ValueError(f"{p}: the corpus is empty")
    return tuple(rows)


def load_corpus(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The rows of a corpus file (JSON lines, optionally gzip-compressed; default: the shipped one), cached."""
    return list(_load(str(Path(path).expanduser() if path is not None else CORPUS_FILE)))


_QUESTIONS = {  # kind -> [(fact, template, answer kind)]
    "town": [("founded", "In what year was the town of {name} founded?", "number"),
             ("population", "What was the population of the town of {name} at the last census?", "number"),
             ("founder", "Who founded the town of {name}?", "name"),
             ("river", "On which river does the town of {name} lie?", "name")],
    "river": [("length", "How long, in kilometres, is the river {name}?", "number"),
              ("tributary", "What is the name of the largest tributary of the river {name}?", "name")],
    "person": [("born", "In what year was {name} born?", "number"),
               ("died", "In what year did {name} die?", "number"),
               ("birthplace", "In which town was {name} born?", "name")],
    "invention": [("inventor", "Who devised {name}?", "name"),
                  ("year", "In what year was {name} devised?", "number"),
                  ("town", "In which town was {name} devised?", "name")],
}


def answer_leaks(question: str, answer: str) -> bool:
    """True when the answer (or any word of it) can be read off the question text."""
    q = question.lower()
    words = answer.lower().split()
    return answer.lower() in q or any(w in q for w in words if len(w) >= 3)


def corpus_questions(rows: list[dict[str, Any]], answers: AnswerKind = "all") -> list[dict[str, Any]]:
    """Every question the corpus's facts support: ``{"id", "entry", "question", "answer", "kind"}`` (questions whose
    answer could be read off the question are left out)."""
    out = []
    for row in rows:
        for fact, template, kind in _QUESTIONS.get(row.get("kind"), ()):
            if answers != "all" and kind != answers:
                continue
            facts = row.get("facts") or {}
            if "name" not in facts or fact not in facts:
                raise ValueError(f"corpus row {row.get('id', row['title'])!r} (kind {row['kind']}) needs facts "
                                 f"'name' and {fact!r} for its questions")
            question = template.format(name=facts["name"])
            answer = str(facts[fact])
            if answer_leaks(question, answer):
                continue
            out.append({"id": f"{row['id']}-{fact}", "entry": row["id"], "question": question, "answer": answer,
                        "kind": kind})
    return out


def check_template(template: str) -> None:
    """Raise ValueError unless ``template`` is a format string whose only field is ``{question}``."""
    if not isinstance(template, str):
        raise ValueError(f"template must be a string, got {type(template).__name__}")
    hint = "literal braces are written {{ and }}, e.g. \\boxed{{}}"
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise ValueError(f"bad prompt template {template!r}: {e} ({hint})") from e
    if fields != {"question"}:
        raise ValueError(f"prompt template must use only the field {{question}}; {template!r} has "
                         f"{sorted(fields) or 'none'} ({hint})")
    try:
        template.format(question="x")
    except (ValueError, KeyError, IndexError, AttributeError) as e:
        raise ValueError(f"bad prompt template {template!r}: {e} ({hint})") from e


def _split_questions(num_heldout: int, seed: int, answers: AnswerKind, corpus: str | None
                     ) -> tuple[list[dict], list[dict]]:
    """(train pool, held-out) questions: whole entries are held out, in a seeded order, until ``num_heldout``."""
    questions = corpus_questions(load_corpus(corpus), answers)
    by_entry: dict[str, list[dict]] = {}
    for q in questions:
        by_entry.setdefault(q["entry"], []).append(q)
    entries = sorted(by_entry)
    rng = random.Random(seed)
    rng.shuffle(entries)
    held: list[dict] = []
    k = 0
    while len(held) < num_heldout and k < len(entries):
        held += by_entry[entries[k]]
        k += 1
    pool = [q for e in entries[k:] for q in by_entry[e]]
    rng.shuffle(pool)
    return pool, held[:num_heldout]


def check_search_qa(params: dict[str, Any], *, num_heldout: int | None = None, **_: Any) -> None:
    """Load-time checks: the template, and enough questions for ``num_train`` and the held-out count."""
    check_template(params.get("template", DEFAULT_TEMPLATE))
    n_held = params.get("num_heldout", 256) if num_heldout is None else num_heldout
    pool, held = _split_questions(n_held, params.get("seed", 0), params.get("answers", "all"),
                                  params.get("corpus"))
    if len(held) < n_held or params.get("num_train", 2000) > len(pool):
        raise ValueError(f"search_qa: the corpus supports {len(pool) + len(held)} questions "
                         f"({params.get('answers', 'all')} answers); with {len(held)} held out (whole entries) "
                         f"{len(pool)} are left for training, but num_train = {params.get('num_train', 2000)} and "
                         f"num_heldout = {n_held}")


def search_qa_split(num_train: int = 2000, num_heldout: int = 256, seed: int = 0, answers: AnswerKind = "all",
                    template: str = DEFAULT_TEMPLATE, corpus: str | None = None) -> tuple[list[Problem], list[Problem]]:
    """Seeded ``(train, held_out)`` problems; held-out questions are about entries no training question is about."""
    check_search_qa(dict(num_train=num_train, seed=seed, answers=answers, template=template, corpus=corpus),
                    num_heldout=num_heldout)
    pool, held = _split_questions(num_heldout, seed, answers, corpus)

    def problem(q: dict, tag: str) -> Problem:
        return Problem(f"search-{tag}-{q['id']}", prompt=template.format(question=q["question"]), answer=q["answer"],
                       metadata={"entry": q["entry"], "question": q["question"], "answer_kind": q["kind"]})

    return [problem(q, "train") for q in pool[:num_train]], [problem(q, "heldout") for q in held]
