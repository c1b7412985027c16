"""The BM25 search tool and env.name=search: ranking on a hand-made corpus, both call protocols, the options,
a missing package, and a run of the recipe on the tiny model."""

from __future__ import annotations

import json
import sys

import pytest

from rlvr.envs import build_environment, parse_tool_call
from rlvr.envs.retrieval import BM25Index, corpus_index, search, search_example, search_tool
from rlvr.tasks.search_qa import load_corpus
from rlvr.types import Problem
from rlvr.verifiers import get_verifier

MINI = [
    {"title": "Velmora", "text": "Velmora is a town on the river Kessan, founded in 1203 by Orla Penn."},
    {"title": "Velmoran", "text": "Velmoran is a town on the river Ulle, founded in 1377 by Brin Tass."},
    {"title": "Kessan", "text": "The Kessan is a river 412 kilometres long that flows past Velmora."},
    {"title": "Orla Penn", "text": "Orla Penn (1170-1240) was a surveyor who devised the Drell loom in 1210."},
    {"title": "Drell loom", "text": "The Drell loom is a weaving machine devised by Orla Penn in 1210."},
]


@pytest.fixture
def mini_corpus(tmp_path):
    path = tmp_path / "mini.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MINI))
    return str(path)


@pytest.mark.parametrize("query, first", [
    ("When was Velmora founded?", "Velmora"),
    ("Velmoran founded", "Velmoran"),
    ("How long is the river Kessan?", "Kessan"),
    ("the Drell loom weaving machine", "Drell loom"),
    ("Orla Penn surveyor born", "Orla Penn"),
])
def test_bm25_ranks_the_right_entry_first(mini_corpus, query, first):
    out = search(query, k=2, corpus=mini_corpus)
    lines = out.splitlines()
    assert lines[0].startswith(f"[1] {first}: ")
    assert len(lines) == 2 and lines[1].startswith("[2] ")


def test_results_are_cut_counted_and_empty_when_nothing_matches(mini_corpus):
    out = search("Velmora founded", k=5, passage_chars=20, corpus=mini_corpus)
    first = out.splitlines()[0]
    assert first == "[1] Velmora: Velmora is a town on..."
    assert len(out.splitlines()) <= 5
    assert search("zebra quasar", corpus=mini_corpus) == "no results for 'zebra quasar'"
    assert search("the of and", corpus=mini_corpus).startswith("no results")  # only stop words
    assert search("   ", corpus=mini_corpus) == "no results: the query is empty"


def test_the_index_is_built_once_per_corpus(mini_corpus):
    assert corpus_index(mini_corpus) is corpus_index(mini_corpus)
    assert corpus_index() is corpus_index() and len(corpus_index().passages) == len(load_corpus())


def test_index_scores_are_bm25():
    """Hand-computed BM25 as Lucene scores it: idf log(1 + (N - df + 0.5) / (df + 0.5)) times
    tf / (tf + k1 (1 - b + b dl / avgdl)) (Lucene dropped Okapi's constant factor k1 + 1).  "a" and "b" are dropped
    by the tokenizer (one letter), so the documents are [apple, apple, apple] (length 3) and [pear] (length 1)."""
    import math

    idx = BM25Index([("a", "apple apple apple"), ("b", "pear")], k1=1.5, b=0.75)
    hits = idx.search("apple", k=2)
    assert [i for i, _ in hits] == [0]  # the document without the word has score 0: not returned
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))
    tf, k1, b, dl, avgdl = 3, 1.5, 0.75, 3, 2
    assert hits[0][1] == pytest.approx(idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)), rel=1e-5)


def test_the_search_environment_answers_a_search_then_scores_the_answer():
    env = build_environment("search", get_verifier("math"), None, k=2)
    row = next(r for r in load_corpus() if r["kind"] == "town")
    st = env.reset(Problem("q", prompt=f"In what year was the town of {row['title']} founded?",
                           answer=str(row["facts"]["founded"])))
    assert "<search>" in st.messages[0]["content"] and st.messages[2]["role"] == "assistant"
    r = env.step(st, f"<search>{row['title']} founded</search>")
    assert not r.done and r.role == "inline" and r.observation.startswith(f"<result>[1] {row['title']}: ")
    assert str(row["facts"]["founded"]) in r.observation and r.info["tool_calls"] == 1
    st.turn += 1
    assert env.step(st, f"It is \\boxed{{{row['facts']['founded']}}}.").reward == 1.0
    assert "</search>" in env.stop


def test_the_worked_example_is_written_the_way_the_tool_writes(tmp_path):
    example = search_example()
    user, assistant = example[0]["content"], example[1]["content"]
    query = assistant.split("<search>")[1].split("</search>")[0]
    result = assistant.split("<result>")[1].split("</result>")[0]
    town = result.split(":")[0].removeprefix("[1] ")
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"title": town, "text": result.split(": ", 1)[1]}) + "\n")
    assert search(query, corpus=str(path)) == result
    assert town in user and "\\boxed{1420}" in assistant


def test_the_tools_environment_takes_search_in_both_protocols():
    env = build_environment("tools", get_verifier("math"), None, tools=["search", "calculator"])
    st = env.reset(Problem("q", prompt="?", answer="1"))
    r = env.step(st, '<tool_call>{"name": "search", "arguments": {"query": "river kilometres"}}</tool_call>')
    assert r.observation.startswith("<result>[1] ") and r.info["tool_errors"] == 0
    r = env.step(st, '<tool_call>{"name": "search", "arguments": {"query": "x", "k": 50}}</tool_call>')
    assert "unknown argument(s) k" in r.observation and r.info["tool_errors"] == 1
    call = parse_tool_call("<search>Velmora</search>", list(env.box))
    assert call.name == "search" and call.arguments == {"query": "Velmora"}


def test_tool_messages_carry_the_schema():
    tool = search_tool()
    assert tool.schema["function"]["name"] == "search"
    assert list(tool.parameters) == ["query"] and tool.required == ["query"] and tool.short_form


def test_bad_options_fail_at_load(tmp_path, monkeypatch):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    base = ["task.name=search_qa", "env.name=search", "reward.verifier=math"]
    for bad, msg in [("env.params={k: 0}", "env.params.k"), ("env.params={passage_chars: 5}", "passage_chars"),
                     ("env.params={max_turns: 1}", "env.params.max_turns"),
                     (f"env.params={{corpus: {tmp_path / 'none.jsonl'}}}", "is not a file"),
                     ("env.params={tools: [search]}", "not an option")]:
        with pytest.raises(ValueError, match=msg):
            load_config(RunConfig, None, base + [bad])
    with pytest.raises(ValueError, match="k must be in 1..20"):
        search_tool(k=0)
    bad_corpus = tmp_path / "bad.jsonl"
    bad_corpus.write_text('{"name": "x"}\n')
    with pytest.raises(ValueError, match="needs string fields 'title' and 'text'"):
        build_environment("search", None, None, corpus=str(bad_corpus))
    with pytest.raises(ValueError, match=r"env.params: .*bad.jsonl:1: a corpus row needs string fields"):
        load_config(RunConfig, None, base + [f"env.params={{corpus: {bad_corpus}}}"])
    # without bm25s: one line naming the pip command, at load, for env.name=search and for tools=[search]
    monkeypatch.setitem(sys.modules, "bm25s", None)
    for over in (base, ["env.name=tools", "env.params={tools: [search]}"]):
        with pytest.raises(ValueError, match=r"needs the bm25s package: pip install 'rlvr\[search\]'"):
            load_config(RunConfig, None, over)


def test_the_search_environment_runs_in_the_recipe(tmp_path, tiny_tokenizer):
    """One step and a before/after evaluation on the tiny model, the task and environment from the config."""
    from conftest import make_model, tiny_run_config
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    cfg = tiny_run_config(tmp_path, "task.name=search_qa", "task.params={num_train: 8}", "task.num_heldout=2",
                          "env.name=search", "env.params={k: 1, passage_chars: 40, example: false, max_turns: 2, "
                          "system_prompt: 'Use <search>q</search>.'}",
                          "reward.verifier=math", "train.steps=1", "rollout.max_new_tokens=6",
                          "eval.before_training=true", "eval.after_training=true", "eval.num_problems=2",
                          "eval.max_new_tokens=6", "train.threads=1")
    summary = train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    assert 0 <= rows[0]["env/tool_call_rate"] <= 1
    for when in ("eval_before", "eval_after"):
        greedy = summary[when]["greedy"]
        assert "tool_call_rate" in greedy["episodes"] and greedy["n"] == 2
        assert all(ex["id"].startswith("search-heldout-") for ex in greedy["examples"])


def test_the_documented_commands_load():
    """Every `rlvr train` line of docs/environments.md's search section is a config that loads."""
    import re
    import shlex
    from pathlib import Path

    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "environments.md").read_text()
    section = text.split("\n## Search: retrieval over a local corpus\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln.split(" #", 1)[0].strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)
             for ln in block.splitlines()]
    commands = [shlex.split(ln)[2:] for ln in lines if ln.startswith("rlvr train")]
    assert len(commands) == 3
    for args in commands:
        path = str(root / args[0]) if args and args[0].endswith(".yaml") else None
        cfg = load_config(RunConfig, path, args[1:] if path else args)
        assert cfg.env.name in ("search", "tools")


# --------------------------------------------------------------------------- ZeroSearch: a simulated engine
def test_a_simulated_search_writes_results_with_the_model(tiny_model_dir):
    """The simulator's greedy continuation of ZeroSearch's useful (or, at the noise share, noisy) request comes
    back as [n] lines; the choice is seeded by the query."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.envs.retrieval import SIMULATED_NOISY, SIMULATED_USEFUL, SimulatedSearch

    sim = SimulatedSearch(str(tiny_model_dir), k=2, noise=0.0, max_new_tokens=12)
    out = sim("Vellmar founded")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = tok.apply_chat_template([{"role": "user", "content": SIMULATED_USEFUL.format(k=2, query="Vellmar founded")}],
                                  tokenize=True, add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    lines = [ln.strip() for ln in tok.decode(gen[0, len(ids):], skip_special_tokens=True).splitlines() if ln.strip()]
    want = "\n".join(f"[{n}] {ln}" for n, ln in enumerate(lines[:2], 1)) or "no results for 'Vellmar founded'"
    assert out == want and sim.asked == [("Vellmar founded", False)]
    noisy = SimulatedSearch(str(tiny_model_dir), noise=1.0, max_new_tokens=4)
    noisy("anything")
    assert noisy.asked == [("anything", True)] and "do not answer" in SIMULATED_NOISY
    half = SimulatedSearch(str(tiny_model_dir), noise=0.5)
    draws = [half.noisy(f"q{i}") for i in range(400)]
    assert draws == [half.noisy(f"q{i}") for i in range(400)]  # seeded by the query
    assert 160 < sum(draws) < 240  # about half


def test_the_search_environment_takes_a_simulator(tiny_model_dir, tmp_path):
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    env = build_environment("search", get_verifier("math"), None, k=1, simulator=str(tiny_model_dir),
                            simulator_tokens=8)
    st = env.reset(Problem("q", prompt="In what year was Vellmar founded?", answer="1420"))
    r = env.step(st, "<search>Vellmar founded</search>")
    assert not r.done and r.observation.startswith("<result>") and r.info["tool_calls"] == 1
    for params, match in [(f"{{simulator: {tmp_path}}}", "not a model directory"),
                          ("{noise: 0.5}", "needs a simulator"),
                          (f"{{simulator: {tiny_model_dir}, noise: 2}}", "noise")]:
        with pytest.raises(ConfigError, match=match):
            load_config(RunConfig, None, ["task.name=search_qa", "env.name=search", f"env.params={params}",
                                          "reward.verifier=math"])
