"""Tools: plain Python callables with a JSON schema, called by the policy, run under a time limit.

A :class:`Tool` wraps a function; its schema comes from the signature and the
Google-style docstring (``transformers.utils.get_json_schema``, the format chat
templates with tool support expect).  The policy calls tools in one of two text
protocols, both parsed by :func:`parse_tool_call`:

* **JSON** (Hermes / Qwen style, what tool-aware chat templates teach)::

      <tool_call>{"name": "calculator", "arguments": {"expression": "123 * 45"}}</tool_call>

* **short** (for models without tool training, taught by a worked example): a tool
  with one required parameter is called as ``<NAME>argument</NAME>``, e.g.
  ``<calculator>123 * 45</calculator>``.

Built in: :func:`calculator` (exact integer/rational arithmetic on a parsed AST;
nothing is ``eval``-ed), :func:`python_tool` (a program run in rlvr's code
sandbox, the same isolation and limits as the ``code_*`` verifiers) and ``search``
(BM25 over a local corpus, :mod:`rlvr.envs.retrieval`).

Errors are observations, never exceptions: an unknown tool, bad arguments,
unparseable JSON, a tool that raises or one that exceeds its time limit each
come back as ``error: ...`` text the policy can learn from (:meth:`ToolBox.call`).
"""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

from rlvr.utils.deadline import TIMED_OUT, call_with_timeout

__all__ = ["Tool", "ToolBox", "ToolCall", "parse_tool_call", "calculator", "python_tool", "BUILTIN_TOOLS",
           "CalculatorError"]


@dataclass(frozen=True)
class ToolCall:
    """A parsed call: which tool, with which arguments, or why it could not be parsed."""

    name: str | None
    arguments: dict[str, Any]
    error: str | None = None
    """Set when the call was malformed (the observation then says why)."""


@dataclass
class Tool:
    """A callable offered to the policy; ``schema`` is the OpenAI/HF function schema."""

    fn: Callable[..., Any]
    name: str = ""
    schema: dict | None = None
    timeout: float | None = None
    """Seconds per call (None: the environment's ``limits.tool_timeout``)."""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.fn.__name__
        if self.schema is None:
            from transformers.utils import get_json_schema

            self.schema = get_json_schema(self.fn)
            self.schema["function"]["name"] = self.name

    @property
    def parameters(self) -> dict:
        return self.schema["function"].get("parameters", {}).get("properties", {})

    @property
    def required(self) -> list[str]:
        return list(self.schema["function"].get("parameters", {}).get("required", []))

    @property
    def short_form(self) -> bool:
        """True when the tool can be called as ``<name>argument</name>`` (one required parameter)."""
        return len(self.required) == 1


_JSON_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def parse_tool_call(text: str, tools: Sequence[Tool]) -> ToolCall | None:
    """The last tool call in ``text`` (either protocol), or None when the turn calls no tool.

    A ``<tool_call>`` block that is not valid JSON, or names no tool, is a call
    with ``error`` set; arguments are checked against the tool's schema by
    :meth:`ToolBox.call`.
    """
    found: list[tuple[int, ToolCall]] = []
    for m in _JSON_CALL.finditer(text):
        body = m.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            found.append((m.start(), ToolCall(None, {}, f"tool call is not valid JSON ({e.msg} at char {e.pos})")))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            found.append((m.start(), ToolCall(None, {}, 'tool call must be {"name": ..., "arguments": {...}}')))
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models emit the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        if not isinstance(args, dict):
            found.append((m.start(), ToolCall(obj["name"], {}, "tool call arguments must be a JSON object")))
            continue
        found.append((m.start(), ToolCall(obj["name"], args)))
    for tool in tools:
        if not tool.short_form:
            continue
        for m in re.finditer(rf"<{re.escape(tool.name)}>(.*?)</{re.escape(tool.name)}>", text, re.S):
            found.append((m.start(), ToolCall(tool.name, {tool.required[0]: m.group(1).strip()})))
    if not found:
        return None
    return max(found, key=lambda x: x[0])[1]


class ToolBox:
    """The tools of an environment, called with a per-call time limit; every failure is an observation.

    Calls run in a daemon thread and are abandoned (not waited for) after their
    time limit (:func:`rlvr.utils.deadline.call_with_timeout`: a hung call never holds
    up Ctrl-C or the process's exit); the built-in Python tool runs in a separate
    sandboxed process with its own kill timer, so nothing it does outlives its limit.
    """

    def __init__(self, tools: Sequence[Tool | Callable], timeout: float = 10.0):
        self.tools = {t.name: t for t in (x if isinstance(x, Tool) else Tool(x) for x in tools)}
        self.timeout = timeout

    def __iter__(self):
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    @property
    def schemas(self) -> list[dict]:
        return [t.schema for t in self.tools.values()]

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """End tags that end an assistant turn so that the call's result can be appended."""
        out = ["</tool_call>"] + [f"</{t.name}>" for t in self.tools.values() if t.short_form]
        return tuple(out)

    def call(self, call: ToolCall) -> tuple[str, bool]:
        """Run ``call``; returns ``(observation text, ok)``.  Never raises."""
        if call.error:
            return f"error: {call.error}", False
        tool = self.tools.get(call.name or "")
        if tool is None:
            return f"error: unknown tool {call.name!r}; available: {', '.join(self.tools)}", False
        missing = [p for p in tool.required if p not in call.arguments]
        unknown = [p for p in call.arguments if p not in tool.parameters]
        if missing or unknown:
            what = (f"missing argument(s) {', '.join(missing)}" if missing else "") + \
                   ("; " if missing and unknown else "") + (f"unknown argument(s) {', '.join(unknown)}" if unknown else "")
            return f"error: {tool.name}: {what}", False
        limit = tool.timeout or self.timeout
        try:
            result = call_with_timeout(lambda: tool.fn(**call.arguments), limit, name="rlvr-tool")
        except Exception as e:  # noqa: BLE001 - a tool's failure is the policy's observation
            return f"error: {tool.name}: {type(e).__name__}: {e}"[:500], False
        if result is TIMED_OUT:
            return f"error: {tool.name} timed out after {limit:g} s", False
        return str(result), True


# --------------------------------------------------------------------------- built-in tools
class CalculatorError(ValueError):
    """The expression is not plain arithmetic."""


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _calc(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _calc(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _calc(node.left), _calc(node.right)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > 64 or abs(left) > 10**12:
                raise CalculatorError("exponent must be an integer of at most 64 and the base at most 1e12")
            return left ** int(right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        return Fraction(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_calc(node.operand))
    raise CalculatorError(f"not arithmetic: {ast.dump(node)[:60]}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly (+ - * / // % ** and parentheses).

    Args:
        expression: the expression, e.g. 123 * (45 + 6)
    """
    text = expression.replace("×", "*").replace("\\times", "*").replace("÷", "/").replace("^", "**")
    text = text.replace(",", "").strip().rstrip("=").strip()
    if len(text) > 200:
        raise CalculatorError("expression longer than 200 characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"cannot parse {expression!r}") from e
    value = _calc(tree)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.10g}"


def python_tool(code: str) -> str:
    """Run a Python program in a sandbox and return what it printed.

    Args:
        code: the program; print the values you need
    """
    from rlvr.verifiers.code.sandbox import SandboxLimits, run_python

    res = run_python(code, limits=SandboxLimits(timeout=5.0, wall_timeout=15.0, memory_mb=512))
    out = (res.stdout or "")[-2000:]
    if res.status == "ok":
        return out if out.strip() else "(no output)"
    err = (res.stderr or "").strip().splitlines()
    tail = err[-1] if err else ""
    status = "timeout" if res.status == "cpu_limit" else res.status  # 5 CPU seconds, or 15 s of wall clock
    return f"{out}error ({status}): {tail}"[-2000:]


def _search_tool() -> Tool:
    """BM25 search over the shipped encyclopedia, default options (``env.name=search`` sets k, passage length and
    corpus); needs ``pip install 'rlvr[search]'``."""
    from rlvr.envs.retrieval import search_tool

    return search_tool()


BUILTIN_TOOLS: dict[str, Callable[[], Tool]] = {
    "calculator": lambda: Tool(calculator),
    "python": lambda: Tool(python_tool, name="python"),
    "search": lambda: _search_tool(),
}
"""Tools an environment can name in its ``tools`` option."""
