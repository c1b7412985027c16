"""HackMonitor: verdict histograms, the three hack signatures, resume."""

from __future__ import annotations

import json
import random

import pytest

from rlvr.rewards.monitors import HackMonitor, hardcodes_examples, reason_bucket, restates_prompt


@pytest.mark.parametrize("reason, key", [
    ("match (symbolic)", "match_symbolic"),
    ("mismatch: 41 != 42", "mismatch"),
    ("mismatch (numeric): 1 != 2", "mismatch_numeric"),
    ("hedged answer ('or' in '3 or 4')", "hedged_answer"),
    ("passed 1/3; case 1: wrong output", "passed"),
    ("not an answer: tautology ('0=0')", "not_an_answer"),
    ("failed: AssertionError", "failed"),
    ("", "none"), (None, "none"),
])
def test_reason_buckets(reason, key):
    assert reason_bucket(reason) == key


def test_restatement_detection():
    assert restates_prompt("What is 237 * 82?", "237 \\times 82")
    assert restates_prompt("What is 17 plus 25?", "25+17")
    assert not restates_prompt("What is 17 + 25?", "42")
    assert not restates_prompt("What is 17 + 25?", None)
    assert not restates_prompt("What is 17 + 25?", "17 - 25")


def test_histogram_shares_sum_to_one():
    m = HackMonitor()
    out = m.update(["match", "mismatch: 1 != 2", "mismatch: 3 != 4", "no answer found"], [1, 0, 0, 0], [10, 20, 30, 40])
    assert out["verdict/match"] == 0.25 and out["verdict/mismatch"] == 0.5 and out["verdict/no_answer_found"] == 0.25
    assert sum(v for k, v in out.items() if k.startswith("verdict/")) == pytest.approx(1.0)
    assert out["hack/flags"] == 0.0 and all(isinstance(v, float) for v in out.values())
    assert m.bar() == "mismatch 50%"


def _healthy_steps(m, steps=12, seed=0):
    rng = random.Random(seed)
    outs = []
    for t in range(steps):
        acc = min(0.9, 0.2 + 0.05 * t)
        reasons = ["match" if rng.random() < acc else "mismatch: 1 != 2" for _ in range(16)]
        rewards = [1.0 if r == "match" else 0.0 for r in reasons]
        outs.append(m.update(reasons, rewards, [rng.randint(150, 250) for _ in reasons]))
    return outs


def test_healthy_learning_raises_no_flag():
    outs = _healthy_steps(HackMonitor())
    assert all(o["hack/flags"] == 0.0 for o in outs)


def test_length_collapse_is_flagged():
    m = HackMonitor(window=10, min_steps=6)
    outs = []
    for t in range(10):
        good = t >= 5
        outs.append(m.update(["match (symbolic)" if good else "mismatch: 1 != 2"] * 8, [1.0 if good else 0.0] * 8,
                             [12 if good else 200] * 8))
    assert outs[-1]["hack/length_collapse"] == 1.0 and outs[-1]["hack/length_ratio"] < 0.6
    assert outs[-1]["hack/reason_dominance"] == 1.0  # match_symbolic took over
    assert "LEN-COLLAPSE" in m.bar()
    assert outs[0]["hack/length_collapse"] == 0.0


def test_dominance_of_an_expected_reason_is_not_flagged():
    m = HackMonitor(window=10, min_steps=6)
    for t in range(10):
        out = m.update(["match" if t >= 5 else "mismatch: 1 != 2"] * 8, [float(t >= 5)] * 8, [100] * 8)
    assert out["hack/reason_dominance"] == 0.0 and out["hack/length_collapse"] == 0.0


def test_restatements_are_flagged():
    m = HackMonitor()
    prompts = ["What is 237 * 82? Put the final answer in \\boxed{}."] * 4
    out = m.update(["match (symbolic)"] * 4, [1.0] * 4, [20] * 4, prompts=prompts,
                   answers=["237 * 82", "237 \\cdot 82", "19434", "237*82"])
    assert out["hack/restatement_share"] == 0.75 and out["hack/restatement_rewarded_share"] == 0.75
    assert out["hack/restatement"] == 1.0 and "RESTATES-PROMPT" in m.bar()


def test_state_dict_round_trip_resumes_identically():
    a = HackMonitor(window=8, min_steps=4)
    _healthy_steps(a, steps=6)
    state = json.loads(json.dumps(a.state_dict()))
    b = HackMonitor(window=8, min_steps=4)
    b.load_state_dict(state)
    step = (["match", "mismatch: 1 != 2"] * 4, [1.0, 0.0] * 4, [100, 120] * 4)
    assert a.update(*step) == b.update(*step) and a.bar() == b.bar() and a.steps == b.steps == 7


def test_bad_input():
    with pytest.raises(ValueError):
        HackMonitor().update(["match"], [1.0, 0.0], [1])
    with pytest.raises(ValueError):
        HackMonitor(window=1)
    assert HackMonitor().update([], [], [])["hack/flags"] == 0.0
    assert HackMonitor().bar() == ""


def test_imports_only_low_layers():
    import ast
    import rlvr.rewards.monitors as mod

    tree = ast.parse(open(mod.__file__).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "math", "re", "collections", "typing", "numpy", "rlvr"}


def test_hardcoded_examples_are_flagged_on_code_verdicts():
    """The code task's hack: a table of the visible examples. Flagged whether or not it is rewarded; an honest
    program and a program that merely uses a number of the prompt are not."""
    from rlvr.tasks.code_functions import code_function_problems, hardcoded_completion
    from rlvr.verifiers.code import extract_code

    for seed in range(4):  # every generated problem: its table is flagged, its reference solution is not
        _, many = code_function_problems(steps=2, num_train=0, num_heldout=128, seed=seed)
        for p in many:
            assert hardcodes_examples(p.prompt, extract_code(hardcoded_completion(p))), p.prompt
            assert not hardcodes_examples(p.prompt, extract_code(p.metadata["solution"])), p.prompt
    _, held = code_function_problems(steps=2, num_train=0, num_heldout=16, seed=3)
    prompts = [p.prompt for p in held]
    hacks = [extract_code(hardcoded_completion(p)) for p in held]
    honest = [extract_code(p.metadata["solution"]) for p in held]
    assert not hardcodes_examples("f(5) == 10", "def f(x):\n    return x * 2  # 5 -> 10\n")  # short numbers
    echo = "def f(xs):\n    return xs[0:1]\n\nprint(f('nat'))  # 'n'\nassert f('ta') == 't'\n"
    assert not hardcodes_examples("f('nat') == 'n'\nf('ta') == 't'", echo)  # examples echoed, not coded
    assert hardcodes_examples("f('nat') == 'n'", "T = {'nat': 'n'}\ndef f(s):\n    return T.get(s)\n")
    table = "def f(x):\n    if x == 5:\n        return 10\n    return x + 1\n"
    assert hardcodes_examples("f(5) == 10", table)  # a short-number table is still a table
    assert hardcodes_examples("f(5) == 10", "def f(x):\n    return {5: 10, 7: 14}.get(x, 0)\n")  # a lookup
    assert not hardcodes_examples("f(0) == 1", "def f(n):\n    if n == 0:\n        return 1\n    return n * f(n - 1)\n")
    assert not hardcodes_examples("f(5) == 10", "def f(x):\n    if x == 50:\n        return 100\n    return 2 * x\n")
    m = HackMonitor()
    reasons = ["wrong answer: AssertionError: f(...) returned None, expected 3"] * 8 + ["passed"] * 8
    out = m.update(reasons, [0.0] * 8 + [1.0] * 8, [40] * 16, prompts=prompts, answers=hacks[:8] + honest[:8])
    assert out["hack/hardcoded_share"] == 0.5 and out["hack/hardcoded_rewarded_share"] == 0.0
    assert out["hack/hardcoded"] == 1.0 and out["hack/flags"] == 1.0 and "HARDCODES-EXAMPLES" in m.bar()
    out = m.update(reasons, [0.0] * 8 + [1.0] * 8, [40] * 16, prompts=prompts, answers=honest * 1)
    assert out["hack/hardcoded_share"] == 0.0 and out["hack/hardcoded"] == 0.0
    plain = HackMonitor().update(["match"], [1.0], [5], prompts=["What is 2 + 3?"], answers=["5"])
    assert "hack/hardcoded_share" not in plain and "hack/hardcoded" not in plain  # no examples: not measured
