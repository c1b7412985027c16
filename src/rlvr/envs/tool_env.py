"""Tool use: the policy may call tools (a calculator, a sandboxed Python) before it answers.

Each assistant turn either calls a tool (the turn ends at the call's closing tag;
the result is appended and the policy continues) or gives the final answer, which
``reward.verifier`` scores.  With ``observation="inline"`` (the default, for models
without tool training) the result is written right after the call inside the same
assistant message as ``<result>...</result>``; with ``"tool"`` it is a ``tool``
message rendered by the chat template, and a template that supports tools is
given the tool schemas.
"""

from __future__ import annotations

from typing import Literal

from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply
from rlvr.envs.rendering import supports_tools
from rlvr.envs.tools import BUILTIN_TOOLS, Tool, ToolBox, parse_tool_call
from rlvr.types import Problem, Verdict
from rlvr.verifiers import safe_verify

__all__ = ["ToolEnvironment", "CALCULATOR_SYSTEM", "CALCULATOR_EXAMPLE"]

CALCULATOR_SYSTEM = ("You can use a calculator. To compute something, write <calculator>expression</calculator> "
                     "and the result appears right after it. Then give the final answer in \\boxed{}.")
"""The default system prompt of ``tools`` with the calculator (the short protocol)."""

CALCULATOR_EXAMPLE = [
    {"role": "user", "content": "What is 17 * 23?"},
    {"role": "assistant", "content": "<calculator>17 * 23</calculator><result>391</result>\n"
                                     "The answer is \\boxed{391}."},
]
"""One worked example shown before every problem (``example=true``): the protocol, end to end."""


class ToolEnvironment(Environment):
    """Episodes in which the policy may call ``tools`` up to ``max_turns - 1`` times before answering.

    Reward: the verifier's score of the final answer (the last turn that calls no tool): 1 if
    correct for binary verifiers, partial credit passed through.  A malformed call (unknown
    tool, bad arguments, bad JSON) or a failing tool is answered with an ``error: ...``
    observation and the episode goes on; so does a call that times out.  ``info`` counts
    ``tool_calls`` and ``tool_errors``.
    """

    def __init__(self, verifier, tools: list[Tool], *, limits: Limits, system_prompt: str | None,
                 example: list[dict] | None, observation: Literal["inline", "tool"], tokenizer=None):
        self.verifier = verifier
        self.box = ToolBox(tools, timeout=limits.tool_timeout)
        self.limits = limits
        self.stop = self.box.stop_strings
        self.system_prompt = system_prompt
        self.example = example or []
        self.observation = observation
        self.schemas = self.box.schemas if observation == "tool" and tokenizer is not None \
            and supports_tools(tokenizer) else None

    def reset(self, problem: Problem) -> EpisodeState:
        msgs = problem.to_messages()
        if msgs and msgs[0]["role"] == "system":
            head, msgs = [msgs[0]], msgs[1:]
        else:
            head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return EpisodeState(problem, head + [dict(m) for m in self.example] + msgs, tools=self.schemas,
                            data={"tool_calls": 0, "tool_errors": 0})

    def step(self, state: EpisodeState, text: str) -> Reply:
        call = parse_tool_call(text, list(self.box))
        if call is not None and not _answered_after_call(text, self.box.stop_strings):
            result, ok = self.box.call(call)
            state.data["tool_calls"] += 1
            state.data["tool_errors"] += 0 if ok else 1
            info = {"tool_calls": 1, "tool_errors": 0 if ok else 1}
            if self.observation == "inline":
                return Reply(observation=f"<result>{result}</result>\n", role="inline", info=info)
            return Reply(observation=result, role="tool", info=info)
        verdict = safe_verify(self.verifier, text, state.problem.answer)
        return Reply(done=True, reward=float(verdict.score), verdict=verdict,
                     info={"tool_calls": 0, "tool_errors": 0})  # counted even for episodes without a call

    def close(self, state: EpisodeState, reason: str) -> Reply:
        return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=f"no final answer: {reason}"))


def _answered_after_call(text: str, end_tags: tuple[str, ...]) -> bool:
    """True when the turn gives a boxed answer after its last tool call (the call is then ignored)."""
    last = max((text.rfind(t) for t in end_tags), default=-1)
    return "\\boxed" in text[last:] if last >= 0 else False


def _check_tools(params: dict, **_) -> None:
    unknown = [t for t in params.get("tools") or () if t not in BUILTIN_TOOLS]
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}; built in: {', '.join(BUILTIN_TOOLS)}")
    if "search" in (params.get("tools") or ()):
        from rlvr.envs.retrieval import require_bm25s_value_error

        require_bm25s_value_error()
    if params.get("max_turns", 1) < 1:
        raise ValueError("max_turns must be >= 1")


@ENVIRONMENTS.register("tools", tags={"multi_turn"}, check=_check_tools,
                       doc="tool use: calls to tools (calculator, python, search) answered until a final answer, which "
                           "reward.verifier scores; params tools, max_turns, observation, example")
def tools_env(verifier, tokenizer, *, tools: list[str] = ("calculator",), max_turns: int = 4,
              max_total_tokens: int = 0, tool_timeout: float = 10.0, system_prompt: str | None = CALCULATOR_SYSTEM,
              example: bool = True, observation: Literal["inline", "tool"] = "inline") -> Environment:
    unknown = [t for t in tools if t not in BUILTIN_TOOLS]
    if unknown:
        raise ValueError(f"env.params.tools: unknown tool(s) {unknown}; built in: {', '.join(BUILTIN_TOOLS)}")
    return ToolEnvironment(verifier, [BUILTIN_TOOLS[t]() for t in tools],
                           limits=Limits(max_turns, max_total_tokens, tool_timeout), system_prompt=system_prompt,
                           example=CALCULATOR_EXAMPLE if example else None, observation=observation,
                           tokenizer=tokenizer)
