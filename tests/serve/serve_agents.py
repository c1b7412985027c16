"""Agents the serve tests run (importable as ``serve_agents:NAME`` by ``env.params.entry``)."""

from __future__ import annotations

import asyncio
import time

import openai

CALLS: list[tuple[str, str]] = []
"""(base_url, problem id) of every call of :func:`two_turns` (the tests read it)."""


def two_turns(base_url: str, problem) -> None:
    """Two requests with the stock client, the second extending the first; the verifier scores the last answer."""
    CALLS.append((base_url, problem.id))
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    messages = [{"role": "user", "content": problem.prompt}]
    first = client.chat.completions.create(model="policy", messages=messages)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "sure?"}]
    client.chat.completions.create(model="policy", messages=messages)
    return None


async def async_reward(base_url: str, problem) -> float:
    """One request with the async client; its reward is 1 when the answer has an even length."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    out = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": problem.prompt}])
    return float(len(out.choices[0].message.content or "") % 2 == 0)


def raises(base_url: str, problem) -> float:
    """Fails on problems whose id ends in 0, after one request; answers 1.0 otherwise."""
    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": problem.prompt}])
    if problem.id.endswith("0"):
        raise RuntimeError("the agent broke")
    return 1.0


def hangs(base_url: str, problem) -> float:
    """Hangs on problems whose id ends in 0 (past any test timeout); answers 1.0 otherwise."""
    if problem.id.endswith("0"):
        time.sleep(30)
    return 1.0


async def async_hangs(base_url: str, problem) -> float:
    await asyncio.sleep(30)
    return 1.0


def returns_text(base_url: str, problem):
    return "correct!"


def uneven_turns(base_url: str, problem) -> None:
    """Three requests on problems whose id ends in 0, one otherwise, each after a pause of up to 30 ms; a
    one-request agent then takes 0.3 s more to return (its episode stays open while the others ask again)."""
    import random

    client = openai.OpenAI(base_url=base_url, api_key="rlvr", max_retries=0)
    messages = [{"role": "user", "content": problem.prompt}]
    for _ in range(3 if problem.id.endswith("0") else 1):
        time.sleep(random.uniform(0, 0.03))
        reply = client.chat.completions.create(model="policy", messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "and?"}]
    if not problem.id.endswith("0"):
        time.sleep(0.3)
    return None
