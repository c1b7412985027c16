"""The endpoint with the stock ``openai`` client: round trips, tool calls, recording token in / token out, errors."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
import torch

from serve_helpers import ScriptedEngine, SpyEngine, hf_engine, tool_tokenizer
from rlvr.engines import SamplingParams
from rlvr.learner.batching import collate
from rlvr.serve import Backend, ServeOptions
from rlvr.serve.app import Server, ServeError
from rlvr.types import Problem, Verdict

PROBLEM = Problem("p0", prompt="12+7?", answer="19")


def _server(engine, **opts) -> Server:
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    return Server(Backend(engine, params=params, options=ServeOptions(**opts))).start()


def _ids(tokenizer, messages, **kw) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, **kw)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="rlvr", max_retries=0)


@pytest.fixture
def spy(tiny_tokenizer):
    return SpyEngine(hf_engine(tiny_tokenizer))


@pytest.fixture
def served(spy):
    server = _server(spy)
    yield server
    server.stop()


def test_chat_round_trip_records_exactly_the_ids_served(served, spy, tiny_tokenizer):
    backend = served.backend
    eid = backend.open_episode(PROBLEM)
    client = _client(served.episode_url(eid))
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": PROBLEM.prompt}]
    replies = []
    for follow_up in ("sure?", "and 2*3?"):
        r = client.chat.completions.create(model="policy", messages=messages, logprobs=True)
        assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
        assert r.usage.completion_tokens == len(r.choices[0].logprobs.content) >= 1
        replies.append(r)
        messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": follow_up}]
    r = client.chat.completions.create(model="policy", messages=messages, logprobs=True)
    replies.append(r)
    rec = backend.close_episode(eid)
    assert rec.requests == 3 and len(rec.segments) == 1 and rec.non_extending == 0

    served_samples = spy.samples  # what the engine produced, call by call
    assert len(served_samples) == 3
    sample = rec.to_sample(tiny_tokenizer, Verdict(1.0), 1.0, {}, [], 2)
    # every request's prompt is the recording so far: the first prompt, the ids served, the rendered messages
    for k, s in enumerate(served_samples):
        assert s.prompt_ids == sample.prompt_ids + sample.completion_ids[:len(s.prompt_ids) - len(sample.prompt_ids)]
        if k:
            assert len(s.prompt_ids) > len(served_samples[k - 1].prompt_ids) + len(served_samples[k - 1].completion_ids)
    # what the learner trains on (the policy tokens of the collated row) is exactly what the engine served
    batch = collate([sample], torch.zeros(1), pad_id=0)
    row = batch.completion_mask[0].bool()
    trained_ids = batch.input_ids[0][row].tolist()
    trained_lps = batch.sampler_logprobs[0][row].tolist()
    assert trained_ids == [t for s in served_samples for t in s.completion_ids]
    assert trained_lps == pytest.approx([lp for s in served_samples for lp in s.logprobs], abs=1e-6)
    # ... and what the client was told
    assert [c.logprob for r in replies for c in r.choices[0].logprobs.content] == pytest.approx(trained_lps, abs=1e-6)
    assert sample.info["turn_ends"][-1] == len(sample.completion_ids)
    assert sample.logprobs[sample.info["turn_ends"][0]] == 0.0  # a rendered message, not the policy's


def test_a_request_that_rewrites_history_starts_a_new_segment_that_trains(served, spy, tiny_tokenizer):
    backend = served.backend
    eid = backend.open_episode(PROBLEM)
    client = _client(served.episode_url(eid))
    first = client.chat.completions.create(model="p", messages=[{"role": "user", "content": "12+7?"}])
    rewritten = [{"role": "user", "content": "12+7?"}, {"role": "assistant", "content": "a summary"},
                 {"role": "user", "content": "go on"}]
    client.chat.completions.create(model="p", messages=rewritten)
    rec = backend.close_episode(eid)
    assert first.choices[0].message.content != "a summary"
    assert len(rec.segments) == 2 and rec.non_extending == 1
    sample = rec.to_sample(tiny_tokenizer, Verdict(0.0), 0.0, {}, [], 2)
    last = spy.samples[-1]
    assert sample.prompt_ids == last.prompt_ids == _ids(tiny_tokenizer, rewritten,
                                                                   add_generation_prompt=True)
    assert sample.completion_ids == last.completion_ids and sample.mask == [1] * len(last.completion_ids)
    assert sample.info["non_extending"] == 1 and sample.info["segments"] == 2


def test_tool_calls_round_trip_through_the_chat_template():
    tok = tool_tokenizer()
    call = '<tool_call>{"name": "add", "arguments": {"a": 12, "b": 7}}</tool_call>'
    engine = ScriptedEngine(tok, ["let me add." + call, "it is 19."])
    tools = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
    with _server(engine) as server:
        eid = server.backend.open_episode(PROBLEM)
        client = _client(server.episode_url(eid))
        messages = [{"role": "user", "content": "12+7?"}]
        r = client.chat.completions.create(model="p", messages=messages, tools=tools)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content == "let me add."
        (tc,) = choice.message.tool_calls
        assert tc.type == "function" and tc.function.name == "add" and json.loads(tc.function.arguments) == \
            {"a": 12, "b": 7}
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tc.id, "content": "19"}]
        r2 = client.chat.completions.create(model="p", messages=messages, tools=tools)
        assert r2.choices[0].message.content == "it is 19." and r2.choices[0].finish_reason == "stop"
        rec = server.backend.close_episode(eid)
    assert len(rec.segments) == 1
    sample = rec.to_sample(tok, Verdict(1.0), 1.0, {}, [], tok.eos_token_id)
    # the recorded ids are what the template gives for the whole conversation (the tool call rendered from its
    # structured form), up to the newline after the last end-of-turn token: nothing was re-tokenised differently
    whole = messages + [{"role": "assistant", "content": "it is 19."}]
    full = _ids(tok, [{**m, "tool_calls": [
        {"type": "function", "function": {"name": c["function"]["name"],
                                          "arguments": json.loads(c["function"]["arguments"])}}
        for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in whole], tools=tools)
    ours = sample.prompt_ids + sample.completion_ids
    assert full == ours + tok.encode("\n", add_special_tokens=False)
    assert engine.samples[1].prompt_ids == ours[:len(engine.samples[1].prompt_ids)]
    policy = [t for t, m in zip(sample.completion_ids, sample.mask) if m]
    assert policy == engine.samples[0].completion_ids + engine.samples[1].completion_ids


def test_errors_are_openai_errors(served, tiny_tokenizer):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError, match="unknown episode"):
        _client(served.episode_url("nope")).chat.completions.create(model="p", messages=msgs)
    with pytest.raises(openai.NotFoundError, match="episode"):  # training: no plain endpoint
        _client(served.url + "/v1").chat.completions.create(model="p", messages=msgs)
    eid = served.backend.open_episode(PROBLEM)
    client = _client(served.episode_url(eid))
    with pytest.raises(openai.BadRequestError, match="run's temperature 1"):
        client.chat.completions.create(model="p", messages=msgs, temperature=0.3)
    with pytest.raises(openai.BadRequestError, match="n=2"):
        client.chat.completions.create(model="p", messages=msgs, n=2)
    with pytest.raises(openai.BadRequestError, match="stream"):
        client.chat.completions.create(model="p", messages=msgs, stream=True)
    with pytest.raises(openai.APIStatusError, match="over this endpoint's limit") as e:
        client.chat.completions.create(model="p", messages=[{"role": "user", "content": "x" * (1 << 20)}])
    assert e.value.status_code == 413
    r = client.chat.completions.create(model="p", messages=msgs, max_tokens=3, temperature=1.0)
    assert r.usage.completion_tokens <= 3
    served.backend.close_episode(eid)
    with pytest.raises(openai.APIStatusError, match="has ended") as e:
        client.chat.completions.create(model="p", messages=msgs)
    assert e.value.status_code == 410
    eid = served.backend.open_episode(PROBLEM)
    served.backend.stop("the run has stopped")
    patient = openai.OpenAI(base_url=served.episode_url(eid), api_key="x", max_retries=5)  # told not to retry
    with pytest.raises(openai.InternalServerError, match="no longer serves completions") as e:
        patient.chat.completions.create(model="p", messages=msgs)
    assert e.value.status_code == 503
    assert e.value.response.headers["x-should-retry"] == "false"


def test_a_port_in_use_fails_at_start_in_one_line(served, spy):
    with pytest.raises(ServeError, match=rf"cannot serve on 127.0.0.1:{served.port}: the port is in use") as e:
        Server(Backend(spy, options=ServeOptions(port=served.port))).start()
    assert "\n" not in str(e.value)


def test_models_and_health(served):
    eid = served.backend.open_episode(PROBLEM)
    assert [m.id for m in _client(served.episode_url(eid)).models.list()] == ["rlvr-policy"]
    import httpx

    assert httpx.get(served.url + "/health").json() == {"status": "ok", "episodes_open": 1}
    assert httpx.get(served.url + "/nowhere").json()["error"]["type"] == "not_found_error"


def test_concurrent_requests_share_engine_calls(spy):
    server = _server(spy, batch_window_s=0.5)
    try:
        eids = [server.backend.open_episode(Problem(f"p{i}", prompt=f"{i}+1")) for i in range(4)]

        async def ask(eid):
            c = openai.AsyncOpenAI(base_url=server.episode_url(eid), api_key="x", max_retries=0)
            return await c.chat.completions.create(model="p", messages=[{"role": "user", "content": "1+1"}])

        async def main():
            return await asyncio.gather(*(ask(e) for e in eids))

        outs = asyncio.run(main())
    finally:
        server.stop()
    assert len(outs) == 4 and all(o.choices for o in outs)
    assert server.backend.generate_calls == 1 and len(spy.calls[0]) == 4  # one engine call for the 4 requests


def test_plain_endpoint_for_manual_use_honours_sampling_settings(tiny_tokenizer):
    engine = hf_engine(tiny_tokenizer)
    backend = Backend(engine, params=SamplingParams(max_new_tokens=6), episodes_only=False)
    with Server(backend) as server:
        r = _client(server.url + "/v1").chat.completions.create(
            model="p", messages=[{"role": "user", "content": "hi"}], n=3, temperature=0.7, max_tokens=4, seed=1)
    assert len(r.choices) == 3 and all(len(c.message.content or "") <= 4 for c in r.choices)
    assert not backend.episodes  # nothing recorded
