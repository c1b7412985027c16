"""MCTS over reasoning steps (RAP-style): UCT selection, expansion, simulation and back-up, by hand."""

from __future__ import annotations

import math

import pytest

from rlvr.search.mcts import MCTSConfig, Node, mcts_search, uct
from rlvr.types import Problem, Sample


class Script:
    """A fake engine: the n-th call returns ``outputs[n]`` (text, finish reason), recording each call's prefix."""

    def __init__(self, tok, outputs):
        self.tokenizer, self.outputs, self.prefixes = tok, list(outputs), []

    def generate(self, problems, params, prefixes=None):
        self.prefixes.append(list(prefixes[0]) if prefixes else [])
        text, finish = self.outputs.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return [[Sample("p", [1], ids, [-1.0] * len(ids), text, finish, 0)]]


class Good:
    name = "good"

    def score(self, problem, text):
        return 1.0 if text.endswith("good") else 0.0


def test_uct_by_hand():
    parent = Node(visits=3)
    a = Node(visits=1, value=0.0, parent=parent)
    b = Node(visits=2, value=2.0, parent=parent)
    assert uct(a, 3, 1.0) == pytest.approx(math.sqrt(math.log(3)))
    assert uct(b, 3, 1.0) == pytest.approx(1.0 + math.sqrt(math.log(3) / 2))
    assert uct(Node(), 3, 1.0) == math.inf


def test_four_iterations_by_hand(tiny_tokenizer):
    tok = tiny_tokenizer
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    eng = Script(tok, [("a\n\n", "stop"), ("bad", "stop"),       # it 0: expand the root with a, simulate: 0
                       ("b\n\n", "stop"), ("good", "stop"),      # it 1: expand the root with b, simulate: 1
                       ("c\n\n", "stop"), ("good", "stop"),      # it 2: UCT picks b (1 + sqrt(ln 2) > 0 + ...)
                       ("d", "stop")])                           # it 3: b again; "d" ends the answer (EOS)
    r = mcts_search(eng, Good(), Problem("p", prompt="q"),
                    MCTSConfig(iterations=4, expansions=2, c_uct=1.0, max_new_tokens=32))
    a, b = enc("a\n\n"), enc("b\n\n")
    assert eng.prefixes == [[], a, [], b, b, b + enc("c\n\n"), b]
    assert r.text == "b\n\ngood" and r.score == 1.0 and r.nodes == 4 and r.iterations == 4
    # it 3 chose b over a: UCT(a) = 0 + sqrt(ln 3 / 1) = 1.048 < UCT(b) = (1 + 1) / 2 + sqrt(ln 3 / 2) = 1.741


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="iterations"):
        MCTSConfig(iterations=0)
    with pytest.raises(ValueError, match="c_uct"):
        MCTSConfig(c_uct=-1)


def test_live_on_the_tiny_model_and_the_cli(tiny_model_dir, tmp_path, capsys):
    import json

    from rlvr.cli import main

    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 + 1?", "answer": "2"}) + "\n")
    out = tmp_path / "mcts.json"
    assert main(["search", "--mcts", "--iterations", "4", "--expansions", "2", "--step-max-tokens", "3",
                 "--max-new-tokens", "8", "--delimiter", " ", "--task", "jsonl", "--path", str(data),
                 "--model", str(tiny_model_dir), "--output", str(out), "--no-progress"]) == 0
    rep = json.loads(out.read_text())
    row = rep["per_problem"][0]
    assert rep["strategy"] == "mcts" and rep["scorer"].startswith("oracle") and row["iterations"] == 4
    assert 1 <= row["nodes"] <= 4 and row["generated_tokens"] >= 1 and row["score"] in (0.0, 1.0)
    assert "mcts (1 problems, 4 iterations" in capsys.readouterr().out
