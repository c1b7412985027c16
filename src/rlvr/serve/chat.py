"""The OpenAI chat format on one side, the chat template's messages and the model's text on the other.

No web framework here: requests are validated with pydantic into :class:`ChatRequest`, messages are
normalised into the form chat templates render (``content`` a string, an assistant's ``tool_calls`` with their
``arguments`` as a dict), the model's text is split into content and tool calls
(``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, the Hermes / Qwen protocol that
tool-aware chat templates teach, parsed by :func:`rlvr.envs.tools.parse_tool_call`), and errors are
:class:`ApiError` (an HTTP status and OpenAI-style error JSON).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlvr.envs.tools import parse_tool_call

__all__ = ["ApiError", "ChatRequest", "parse_request", "normalise_messages", "split_tool_calls", "completion_json",
           "error_json", "canonical"]


class ApiError(Exception):
    """A request the endpoint refuses: ``status`` and an OpenAI-style ``{"error": {...}}`` body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return error_json(self.message, self.type, self.param, self.code)


def error_json(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    """The body of an OpenAI-style error response."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class ChatRequest(BaseModel):
    """The fields of ``POST /v1/chat/completions`` the endpoint reads; others are ignored unless refused below."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    model: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=128)
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False


def parse_request(body: bytes) -> ChatRequest:
    """The request in ``body`` (JSON), or :class:`ApiError` 400 naming what is wrong."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        req = ChatRequest.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ApiError(400, f"{loc}: {err['msg']}", param=loc) from None
    if req.stream:
        raise ApiError(400, "stream=true is not supported by this endpoint; ask without streaming", param="stream")
    if req.top_logprobs:
        raise ApiError(400, "top_logprobs is not supported (the sampler keeps only the sampled token's log-prob); "
                            "use logprobs=true", param="top_logprobs")
    if req.tool_choice not in (None, "auto", "none"):
        raise ApiError(400, "tool_choice may only be 'auto' or 'none' (the model decides in its own text)",
                       param="tool_choice")
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stops) > 4 or any(not s for s in stops):
        raise ApiError(400, "stop: at most 4 non-empty strings", param="stop")
    return req


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text is accepted
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}.content: only text parts are supported", param=f"{where}.content")
            out.append(part["text"])
        return "".join(out)
    raise ApiError(400, f"{where}.content must be a string or a list of text parts", param=f"{where}.content")


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as chat templates take them: ``role`` and string ``content``, an assistant's
    ``tool_calls`` as ``{"id", "type": "function", "function": {"name", "arguments": dict}}``, a tool message's
    ``tool_call_id`` (and ``name``).  Fields templates do not read (``refusal``, ``audio``, ...) are dropped."""
    out = []
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        role = m.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise ApiError(400, f"{where}.role: {role!r} is not one of system, user, assistant, tool",
                           param=f"{where}.role")
        msg: dict[str, Any] = {"role": role, "content": _text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for j, c in enumerate(m["tool_calls"]):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise ApiError(400, f"{where}.tool_calls.{j}: needs function.name", param=f"{where}.tool_calls")
                calls.append({"id": c.get("id"), "type": "function",
                              "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", {}))}})
            msg["tool_calls"] = calls
        if role == "tool":
            if m.get("tool_call_id") is not None:
                msg["tool_call_id"] = m["tool_call_id"]
            if m.get("name") is not None:
                msg["name"] = m["name"]
        out.append(msg)
    return out


def canonical(message: dict[str, Any]) -> str:
    """A normalised message as a string that two equal messages share (for comparing conversations)."""
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.S)


def split_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The model's ``text`` as (content without the tool-call blocks, OpenAI ``tool_calls``).

    Only well-formed blocks (JSON with a ``name`` and object ``arguments``) become tool calls; a malformed one
    stays in the content, so the agent sees what the model wrote.
    """
    calls, kept, last = [], [], 0
    for m in _CALL_BLOCK.finditer(text):
        call = parse_tool_call(m.group(0), [])
        if call is None or call.error is not None or call.name is None:
            continue
        kept.append(text[last:m.start()])
        last = m.end()
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}})
    kept.append(text[last:])
    content = "".join(kept).strip() if calls else text
    return content, calls


def completion_json(model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int) -> dict:
    """The body of a chat completion response."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "system_fingerprint": None,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


FinishReason = Literal["stop", "length", "tool_calls"]
