"""The search_qa task: the shipped corpus is its generator's output, every question is answerable from the entry it
is about and not from its own text, held-out questions are about other entries, bad options fail at load."""

from __future__ import annotations

import gzip
import re

import pytest
from hypothesis import given, settings, strategies as st

from rlvr.tasks.search_qa import (CORPUS_FILE, EXAMPLE_NAMES, answer_leaks, corpus_bytes, corpus_questions,
                                  generate_corpus, load_corpus, search_qa_split)


def _entry_mentions(text: str, answer: str) -> bool:
    """The answer as a whole word (or words) of the entry's text."""
    return re.search(rf"(?<![\w]){re.escape(answer)}(?![\w])", text) is not None


def test_the_shipped_corpus_is_its_generators_output():
    rows = generate_corpus()
    assert load_corpus() == rows
    assert gzip.decompress(CORPUS_FILE.read_bytes()) == gzip.decompress(corpus_bytes(rows))
    assert CORPUS_FILE.stat().st_size < 300_000
    assert corpus_bytes(rows) == corpus_bytes(generate_corpus())  # no timestamp in the gzip stream


def test_the_shipped_corpus_has_unique_titles_and_no_example_names():
    rows = load_corpus()
    assert 500 <= len(rows) <= 2000
    assert len({r["title"].lower() for r in rows}) == len(rows)
    text = " ".join(r["text"] for r in rows).lower()
    assert not any(name.lower() in text for name in EXAMPLE_NAMES)
    assert {r["kind"] for r in rows} == {"town", "river", "person", "invention"}


def test_every_shipped_question_is_answerable_from_its_entry_and_not_from_itself():
    rows = {r["id"]: r for r in load_corpus()}
    questions = corpus_questions(list(rows.values()))
    assert len(questions) > 3000
    for q in questions:
        entry = rows[q["entry"]]
        assert _entry_mentions(entry["text"], q["answer"]), q
        assert not answer_leaks(q["question"], q["answer"]), q
        # the question names its entry: the entity's name is in the question
        assert entry["facts"]["name"].lower() in q["question"].lower()


def test_distractors_are_in_the_corpus():
    """Near-twin names (one entry's title a prefix of another's, e.g. X and Xan) and several numbers per entry."""
    titles = sorted(r["title"] for r in load_corpus() if r["kind"] == "town")
    stems = {t.rstrip("aeiouy") for t in titles}
    twins = sum(1 for s in stems if sum(t.rstrip("aeiouy").startswith(s) or t.startswith(s) for t in titles) > 1)
    assert twins > 20
    for r in load_corpus():
        assert len(re.findall(r"\d+", r["text"])) >= 3


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), towns=st.integers(1, 30), rivers=st.integers(1, 10), people=st.integers(1, 30),
       inventions=st.integers(1, 20))
def test_generated_questions_are_answerable_and_do_not_give_the_answer_away(seed, towns, rivers, people,
                                                                             inventions):
    rows = generate_corpus(seed, towns=towns, rivers=rivers, people=people, inventions=inventions)
    by_id = {r["id"]: r for r in rows}
    assert len({r["title"].lower() for r in rows}) == len(rows)
    for q in corpus_questions(rows):
        assert _entry_mentions(by_id[q["entry"]]["text"], q["answer"])
        assert q["answer"].lower() not in q["question"].lower()
        assert not any(w in q["question"].lower() for w in q["answer"].lower().split())
        if q["kind"] == "number":
            assert q["answer"].isdigit()


def test_answer_leaks_catches_names_and_words():
    assert answer_leaks("Who founded Velmora?", "Velmora")
    assert answer_leaks("Who devised the Orla lamp?", "Orla Penn")
    assert not answer_leaks("Who devised the Kesh lamp?", "Orla Penn")


def test_the_split_holds_out_whole_entries_and_is_reproducible():
    train, held = search_qa_split(num_train=500, num_heldout=64, seed=3)
    assert len(train) == 500 and len(held) == 64
    assert not {p.metadata["entry"] for p in train} & {p.metadata["entry"] for p in held}
    assert [p.id for p in search_qa_split(num_train=500, num_heldout=64, seed=3)[1]] == [p.id for p in held]
    # the held-out questions do not move with num_train; another seed gives other ones
    assert [p.id for p in search_qa_split(num_train=100, num_heldout=64, seed=3)[1]] == [p.id for p in held]
    assert [p.id for p in search_qa_split(num_train=100, num_heldout=64, seed=4)[1]] != [p.id for p in held]
    assert all("\\boxed{}" in p.prompt and p.metadata["question"] in p.prompt for p in held)
    train, held = search_qa_split(num_train=50, num_heldout=8, answers="number")
    assert all(p.answer.isdigit() for p in train + held)
    train, held = search_qa_split(num_train=50, num_heldout=8, answers="name")
    assert not any(p.answer.isdigit() for p in train + held)


def test_the_task_is_registered_and_bad_options_fail_at_load():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.tasks.registry import build_task

    base = ["task.name=search_qa", "env.name=search", "reward.verifier=math"]
    cfg = load_config(RunConfig, None, base + ["task.params={num_train: 20}", "task.num_heldout=5"])
    train, held = build_task(cfg.task)
    assert len(train) == 20 and len(held) == 5
    for bad, msg in [("task.params={num_train: 100000}", "num_train = 100000"),
                     ("task.params={answers: dates}", "task.params.answers"),
                     ("task.params={template: 'Q: {q}'}", "only the field {question}"),
                     ("task.params={template: 'Q: {question} \\boxed{}'}", "literal braces"),
                     ("task.params={num_train: -1}", "task.params.num_train")]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            load_config(RunConfig, None, base + [bad])


def test_a_corpus_of_ones_own_is_checked(tmp_path):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    base = ["task.name=search_qa", "env.name=search", "reward.verifier=math"]
    no_facts = tmp_path / "no_facts.jsonl"
    no_facts.write_text('{"id": "t1", "kind": "town", "title": "Amber", "text": "Amber is a town."}\n')
    not_json = tmp_path / "not_json.jsonl"
    not_json.write_text('{"title": "x", "text": "y"}\nnot json\n')
    for corpus, msg in [(tmp_path / "none.jsonl", "is not a file"), (no_facts, "needs facts 'name' and 'founded'"),
                        (not_json, "not_json.jsonl:2: not a JSON object")]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            load_config(RunConfig, None, base + [f"task.params={{corpus: {corpus}}}"])
    # a corpus in the shipped format (here a small generated one) makes a task of its own
    small = tmp_path / "small.jsonl.gz"
    small.write_bytes(corpus_bytes(generate_corpus(7, towns=10, rivers=3, people=10, inventions=5)))
    train, held = search_qa_split(num_train=20, num_heldout=4, corpus=str(small))
    titles = {r["title"] for r in load_corpus(small)}
    assert len(train) == 20 and len(held) == 4 and all(any(t in p.prompt for t in titles) for p in train + held)


def test_the_math_verifier_scores_numbers_and_names_as_the_task_needs():
    from rlvr.verifiers import get_verifier

    math = get_verifier("math")
    assert math("The answer is \\boxed{1733}.", "1733").score == 1.0
    assert math("\\boxed{1618-1674}", "1618").score == 0.0
    assert math("\\boxed{trardrarn}", "Trardrarn").score == 1.0  # names: case-insensitive
    assert math("\\boxed{Trardrarna}", "Trardrarn").score == 0.0  # a near-twin is wrong
    assert math("\\boxed{Vale Orrin}", "Orrin Vale").score == 0.0


def test_a_response_offering_every_value_of_the_entry_earns_nothing():
    """The cheapest hack on this task: search, then offer every number (or every name) the retrieved entry holds.
    Property, over every shipped question whose entry holds at least two candidates of the answer's kind: boxing
    them all, or listing them in one box, earns 0 from the task's verifier (reward.verifier=math)."""
    from rlvr.verifiers import get_verifier

    verify = get_verifier("math", timeout=5)
    rows = {r["id"]: r for r in load_corpus()}
    checked = 0
    for q in corpus_questions(list(rows.values()))[::7]:  # every 7th question: all kinds, all templates
        text = rows[q["entry"]]["text"]
        if q["answer"].isdigit():
            candidates = sorted(set(re.findall(r"\d+", text)))
        else:
            candidates = sorted(set(re.findall(r"\b[A-Z][a-z]+\b", text)))
        if q["answer"] not in candidates or len(candidates) < 2:
            continue
        checked += 1
        assert verify(f"\\boxed{{{q['answer']}}}", q["answer"]).score == 1.0, q  # the answer alone is paid
        boxes = " or ".join(f"\\boxed{{{c}}}" for c in candidates)
        assert verify(f"It is one of these: {boxes}.", q["answer"]).score == 0.0, q
        assert verify(f"\\boxed{{{', '.join(candidates)}}}", q["answer"]).score == 0.0, q
    assert checked > 300
