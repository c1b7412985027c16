"""Power sampling (Reasoning with Sampling): Metropolis-Hastings over suffixes toward p(x)^alpha."""

from __future__ import annotations

import math

import pytest

from rlvr.search.power import PowerConfig, acceptance, power_sample
from rlvr.types import Problem, Sample


class Scripted:
    """A fake engine: the first call returns ``first``; each later call returns the next scripted suffix."""

    def __init__(self, tok, first, proposals):
        self.tokenizer, self.first, self.proposals, self.prefixes = tok, first, list(proposals), []

    def generate(self, problems, params, prefixes=None):
        if prefixes is None:
            ids, lps = self.first
        else:
            self.prefixes.append(list(prefixes[0]))
            ids, lps = self.proposals.pop(0)
        return [[Sample("p", [1], list(ids), list(lps), self.tokenizer.decode(ids), "stop", 0)]]


class FixedRng:
    def __init__(self, positions, uniforms):
        self.positions, self.uniforms = list(positions), list(uniforms)

    def randrange(self, n):
        return self.positions.pop(0)

    def random(self):
        return self.uniforms.pop(0)


def test_the_acceptance_ratio_by_hand():
    # suffix log-probs old -2, new -3, alpha 4: exp(3 * -1) = e^-3; a better suffix is always accepted
    assert acceptance(4.0, -2.0, -3.0) == pytest.approx(math.exp(-3))
    assert acceptance(4.0, -2.0, -1.0) == 1.0
    assert acceptance(1.0, -2.0, -9.0) == 1.0  # alpha 1: the chain samples p itself


def test_a_chain_by_hand(tiny_tokenizer):
    tok = tiny_tokenizer
    a, b, c, d = (tok.encode(ch, add_special_tokens=False)[0] for ch in "abcd")
    first = ([a, b, c], [-0.5, -1.0, -1.0])                  # log p(x) = -2.5
    worse = ([d, d], [-2.0, -2.0])                           # from t = 1: -4 vs the old suffix's -2
    better = ([d], [-0.1])                                   # from t = 2: -0.1 vs -1
    eng = Scripted(tok, first, [worse, worse, better])
    # step 1: t=1, A = exp(3 * (-4 + 2)) = e^-6, u = 0.001 < A: accepted; step 2: t=1 again, old suffix now -4,
    # the same proposal: A = 1, u = 0.99 accepted; step 3: t=2, old suffix -2.0 (the second d), new -0.1: accepted
    rng = FixedRng([1, 1, 2], [0.001, 0.99, 0.5])
    r = power_sample(eng, Problem("p", prompt="q"), PowerConfig(alpha=4.0, steps=3, max_new_tokens=8), rng=rng)
    assert eng.prefixes == [[a], [a], [a, d]]
    assert r.accepted == 3 and r.proposed == 3
    assert r.text == tok.decode([a, d, d]) and r.logprob == pytest.approx(-0.5 - 2.0 - 0.1)
    # the same chain, but u above e^-6 at step 1: rejected, and the later steps see the old suffix
    eng = Scripted(tok, first, [worse, better])
    r = power_sample(eng, Problem("p", prompt="q"), PowerConfig(alpha=4.0, steps=2, max_new_tokens=8),
                     rng=FixedRng([1, 2], [0.01, 0.5]))
    assert r.accepted == 1 and r.text == tok.decode([a, b, d]) and r.logprob == pytest.approx(-0.5 - 1.0 - 0.1)


def test_live_on_the_tiny_model_and_the_cli(tiny_model_dir, tmp_path, capsys):
    import json

    from rlvr.cli import main

    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(2)))
    out = tmp_path / "power.json"
    assert main(["search", "--power", "4", "--mcmc-steps", "3", "--max-new-tokens", "6", "--task", "jsonl",
                 "--path", str(data), "--model", str(tiny_model_dir), "--output", str(out), "--no-progress"]) == 0
    rep = json.loads(out.read_text())
    assert rep["num_problems"] == 2 and rep["strategy"] == "power" and 0 <= rep["acceptance_rate"] <= 1
    assert all(r["proposed"] == 3 and r["generated_tokens"] >= 1 for r in rep["per_problem"])
    assert "power sampling (2 problems" in capsys.readouterr().out
    with pytest.raises(ValueError, match="alpha must be"):
        PowerConfig(alpha=0.5)
