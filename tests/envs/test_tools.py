"""Tools and the tool-use environment: parsing, errors as observations, time limits, reward hacks."""

from __future__ import annotations

import time

import pytest

from rlvr.envs import ENVIRONMENTS, EpisodeState, Tool, ToolBox, build_environment, calculator, parse_tool_call
from rlvr.envs.tools import CalculatorError, python_tool
from rlvr.types import Problem
from rlvr.verifiers import get_verifier


def test_calculator_is_exact_and_refuses_code():
    assert calculator("123 * 45") == "5535"
    assert calculator("(2 + 3) * 4 - 1") == "19"
    assert calculator("7 / 2") == "3.5"
    assert calculator("1,234 × 2 =") == "2468"
    assert calculator("2^10") == "1024"
    for bad in ("__import__('os').system('ls')", "open('/etc/passwd')", "[1]*3", "2 ** 10000", "1/0", "x + 1"):
        with pytest.raises(CalculatorError):
            calculator(bad)


def test_schema_comes_from_the_signature_and_docstring():
    t = Tool(calculator)
    assert t.schema["function"]["name"] == "calculator"
    assert t.required == ["expression"] and t.short_form


def test_both_protocols_parse_and_the_last_call_wins():
    tools = [Tool(calculator)]
    c = parse_tool_call('x <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>', tools)
    assert (c.name, c.arguments, c.error) == ("calculator", {"expression": "1+2"}, None)
    c = parse_tool_call("<calculator>3*4</calculator> then <calculator>5*6</calculator>", tools)
    assert c.arguments == {"expression": "5*6"}
    assert parse_tool_call("no call here, \\boxed{3}", tools) is None


@pytest.mark.parametrize("text, expected", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": 1+}</tool_call>', "not valid JSON"),
    ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown tool 'rm_rf'; available: calculator"),
    ('<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>', "missing argument(s) expression"),
    ('<tool_call>["calculator"]</tool_call>', 'must be {"name"'),
    ("<calculator>import os</calculator>", "error: calculator: CalculatorError"),
])
def test_malformed_calls_are_error_observations(text, expected):
    box = ToolBox([Tool(calculator)])
    obs, ok = box.call(parse_tool_call(text, list(box)))
    assert not ok and obs.startswith("error:") and expected in obs


def test_a_slow_tool_times_out_as_an_observation():
    import threading

    release = threading.Event()

    def slow(x: str) -> str:
        """Wait until the test ends.

        Args:
            x: anything
        """
        release.wait(120)
        return "late"

    box = ToolBox([Tool(slow, timeout=0.2)])
    t0 = time.monotonic()
    try:
        obs, ok = box.call(parse_tool_call("<slow>1</slow>", list(box)))
    finally:
        release.set()
    # the tool returns only when released: the call came back without it (the bound only catches a wait)
    assert not ok and "timed out after 0.2 s" in obs and obs != "late"
    assert time.monotonic() - t0 < 60


def test_python_tool_runs_in_the_sandbox():
    assert python_tool("print(6 * 7)").strip() == "42"
    out = python_tool("import os\nprint(open('/etc/shadow').read())")
    assert "error" in out
    out = python_tool("while True: pass")
    assert "error (timeout)" in out or "error (killed)" in out


def _episode(env, prompt="What is 123 * 45?", answer="5535"):
    return env.reset(Problem("p", prompt=prompt, answer=answer))


def test_tool_environment_answers_calls_then_scores_the_final_answer():
    env = build_environment("tools", get_verifier("numeric"), None)
    st = _episode(env)
    assert st.messages[0]["role"] == "system" and "<calculator>" in st.messages[0]["content"]
    assert st.messages[1]["content"] == "What is 17 * 23?"  # the worked example comes before the problem
    r = env.step(st, "<calculator>123 * 45</calculator>")
    assert not r.done and r.role == "inline" and r.observation == "<result>5535</result>\n"
    st.turn += 1
    r = env.step(st, "The answer is \\boxed{5535}.")
    assert r.done and r.reward == 1.0 and r.verdict.correct
    assert "</calculator>" in env.stop and "</tool_call>" in env.stop


def test_reward_hacks_on_the_tool_environment():
    """The cheapest hacks: let the tool's output stand as the answer, call forever, answer then call."""
    env = build_environment("tools", get_verifier("numeric"), None)
    # 1. call the tool and then say nothing: the tool's result is the environment's text, never scored as the
    #    policy's answer (only the policy's own final turn is)
    st = _episode(env)
    r = env.step(st, "<calculator>123 * 45</calculator>")
    assert not r.done  # a call is answered, never scored
    st.turn += 1
    r = env.step(st, "")
    assert r.done and r.reward == 0.0
    # 2. an episode that only calls tools never gets a reward: the runner closes it at max_turns with 0
    closed = env.close(st, "max_turns=4 reached")
    assert closed.done and closed.reward == 0.0 and not closed.verdict.correct
    # 3. a wrong final answer after a correct tool result is wrong
    st = _episode(env)
    r = env.step(st, "So \\boxed{5545}")
    assert r.done and r.reward == 0.0


def test_retry_environment_gives_feedback_and_discounts_the_second_attempt():
    env = build_environment("retry", get_verifier("numeric"), None, attempts=2, discount=0.5)
    st = _episode(env)
    r = env.step(st, "\\boxed{1}")
    assert not r.done and r.role == "user" and "not correct" in r.observation
    assert r.info == {"correct_at_turn_1": 0.0}
    st.turn += 1
    r = env.step(st, "\\boxed{5535}")
    assert r.done and r.reward == 0.5 and r.info == {"correct_at_turn_2": 1.0}
    st = _episode(env)
    r = env.step(st, "\\boxed{5535}")
    assert r.done and r.reward == 1.0


def test_environment_options_are_validated():
    from rlvr.registry import RegistryError

    with pytest.raises(RegistryError, match="env.params.max_turn: not an option"):
        build_environment("tools", None, None, max_turn=3)
    with pytest.raises(ValueError, match="unknown tool"):
        build_environment("tools", None, None, tools=["shell"])
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ValueError, match=r"env.params: unknown tool\(s\) \['shell'\]"):
        load_config(RunConfig, None, ["env.name=tools", "env.params={tools: [shell]}"])
    assert "multi_turn" in ENVIRONMENTS.entry("tools").tags
    assert "multi_turn" not in ENVIRONMENTS.entry("single_turn").tags
