"""The rollout-engine contract (``rlvr.engines.base.RolloutEngine``): every shipped engine has every member the
Protocol declares, and the registry refuses a plugin engine that lacks one, naming it.

The members are read from the Protocol itself (:func:`engine_members`), so a member added there but missing in an
engine fails here.  The Ray engine is checked at class level here (its instances need a cluster) and as an instance
in ``tests/integration/test_distributed_ray.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import make_model
from rlvr.distributed.ray_backend import RayRolloutEngine
from rlvr.engines import HFEngine, RolloutEngine, SamplingParams
from rlvr.engines.base import EngineBase, engine_members, missing_members
from rlvr.engines.registry import ENGINES, EngineContext, build_engine
from rlvr.engines.vllm import VLLMEngine
from rlvr.types import ComponentError, Problem, Sample
from rlvr.verifiers.hack_suite import YesEngine


def test_the_protocol_declares_what_callers_use():
    assert set(engine_members()) == {"tokenizer", "generator", "pad_id", "eos_ids", "batch_size", "on_chunk",
                                     "sleeping", "generate", "sync_weights", "load_state_dict", "prefix_cache",
                                     "sleep"}


class _FakeLLM:
    def sleep(self, level=1):
        pass

    def wake_up(self):
        pass


def _shipped(tok):
    model = make_model(tok)
    return {
        "hf": HFEngine(model, tok, batch_size=8),
        "hf bf16 copy": HFEngine(model, tok, batch_size=8, dtype=torch.bfloat16),
        "vllm": VLLMEngine(tokenizer=tok, llm=_FakeLLM(), sampling_params_cls=SimpleNamespace, batch_size=8),
        "registry hf": build_engine("hf", model, tok, EngineContext(batch_size=8)),
        "judge stand-in": YesEngine(),
    }


def test_every_shipped_engine_has_every_member(tiny_tokenizer):
    for name, eng in _shipped(tiny_tokenizer).items():
        assert missing_members(eng) == [], name
        assert isinstance(eng, RolloutEngine), name
        assert isinstance(eng.eos_ids, set) and isinstance(eng.generator, torch.Generator), name


def test_the_ray_engine_class_defines_every_member():
    """Instance attributes come from EngineBase.__init__ (which RayRolloutEngine.__init__ calls); the methods and
    properties must be the Ray engine's own where the defaults would be wrong."""
    assert issubclass(RayRolloutEngine, EngineBase)
    own = vars(RayRolloutEngine)
    for name in ("generate", "sync_weights", "load_state_dict", "batch_size"):
        assert name in own, name
    for name in engine_members():
        assert hasattr(RayRolloutEngine, name) or name in {"tokenizer", "generator", "pad_id", "eos_ids",
                                                            "on_chunk"}, name


def test_optional_capabilities_say_not_supported(tiny_tokenizer):
    engines = _shipped(tiny_tokenizer)
    assert engines["hf"].prefix_cache() is not None
    assert engines["vllm"].prefix_cache() is None and engines["judge stand-in"].prefix_cache() is None
    assert engines["hf"].sleep() is False  # samples from the policy itself: nothing of its own to free
    bf16 = engines["hf bf16 copy"]
    assert bf16.sleep() is True and bf16.sleeping and bf16.sleep() is False
    vllm = engines["vllm"]
    assert vllm.sleep() is True and vllm.sleeping and vllm.sleep() is False
    vllm.wake_up()
    assert not vllm.sleeping
    with pytest.raises(NotImplementedError, match="cannot load a state dict"):
        YesEngine().load_state_dict({})


def test_hf_load_state_dict_is_sync_weights_from_tensors(tiny_tokenizer):
    """load_state_dict(plain tensors) samples what sync_weights(model with those tensors) samples, asleep or not."""
    a, b = make_model(tiny_tokenizer, seed=1), make_model(tiny_tokenizer, seed=2)
    p = [Problem("p", "What is 1 + 2?", "3")]
    params = SamplingParams(n=2, max_new_tokens=5, seed=0)
    via_model = HFEngine(make_model(tiny_tokenizer, seed=3), tiny_tokenizer, dtype=torch.bfloat16)
    via_model.sync_weights(b)
    via_tensors = HFEngine(a, tiny_tokenizer, dtype=torch.bfloat16)
    assert via_tensors.sleep()
    via_tensors.load_state_dict(b.state_dict())
    assert not via_tensors.sleeping
    got, want = via_tensors.generate(p, params), via_model.generate(p, params)
    assert [s.completion_ids for s in got[0]] == [s.completion_ids for s in want[0]]


def test_a_minimal_engine_on_the_base_class(tiny_tokenizer):
    class Echo(EngineBase):
        def generate(self, problems, params, prefixes=None, cache=None):
            return [[Sample(p.id, [1], [2], [0.0], "x", "stop", g) for g in range(params.n)] for p in problems]

        def sync_weights(self, model):
            pass

    eng = Echo(tiny_tokenizer, batch_size=4, seed=5)
    assert missing_members(eng) == []
    assert (eng.pad_id, eng.eos_ids, eng.batch_size, eng.on_chunk) == \
        (tiny_tokenizer.pad_token_id, {tiny_tokenizer.eos_token_id}, 4, None)
    assert torch.equal(eng.generator.get_state(), torch.Generator().manual_seed(5).get_state())


class _Incomplete:
    """A plugin engine written against the old two-method interface."""

    tokenizer = generator = None
    pad_id = 0

    def generate(self, problems, params, prefixes=None, cache=None):
        return []

    def sync_weights(self, model):
        pass


def test_the_registry_refuses_an_engine_that_lacks_a_member(tiny_tokenizer):
    @ENGINES.register("test_incomplete", doc="lacks most of the contract")
    def incomplete(model, tokenizer, ctx):
        return _Incomplete()

    @ENGINES.register("test_not_callable", doc="prefix_cache is not a method")
    def not_callable(model, tokenizer, ctx):
        eng = YesEngine()
        eng.prefix_cache = None
        return eng

    try:
        with pytest.raises(ComponentError, match=r"rollout engine 'test_incomplete': its builder returned "
                                                 r"_Incomplete, which lacks batch_size, eos_ids, load_state_dict, "
                                                 r"on_chunk, prefix_cache, sleep, sleeping \(members of "
                                                 r"rlvr.engines.base.RolloutEngine; subclass rlvr.engines.base."
                                                 r"EngineBase"):
            build_engine("test_incomplete", None, tiny_tokenizer, EngineContext())
        with pytest.raises(ComponentError, match=r"'test_not_callable'.*lacks prefix_cache \("):
            build_engine("test_not_callable", None, tiny_tokenizer, EngineContext())
    finally:
        ENGINES.unregister("test_incomplete")
        ENGINES.unregister("test_not_callable")


class _AnsweringLLM(_FakeLLM):
    def generate(self, requests, sp, use_tqdm=True):
        comp = SimpleNamespace(token_ids=[5], index=0, finish_reason="stop",
                               logprobs=[{5: SimpleNamespace(logprob=-1.0)}])
        return [SimpleNamespace(outputs=[comp]) for _ in requests]


def test_vllm_reports_its_call_and_refuses_a_prefix_cache(tiny_tokenizer):
    eng = VLLMEngine(tokenizer=tiny_tokenizer, llm=_AnsweringLLM(), sampling_params_cls=SimpleNamespace)
    seen = []
    eng.on_chunk = lambda done, total: seen.append((done, total))
    probs = [Problem(f"p{i}", "What is 1 + 2?", "3") for i in range(3)]
    groups = eng.generate(probs, SamplingParams(n=1, max_new_tokens=2, seed=0), prefixes=[[7], [8, 9], "x"])
    assert [g[0].completion_ids for g in groups] == [[5]] * 3 and seen == [(3, 3)]
    assert groups[1][0].prompt_ids[-2:] == [8, 9]  # token in: the trajectory's own ids end the prompt
    with pytest.raises(ValueError, match="no prefix cache"):
        eng.generate(probs, SamplingParams(n=1), cache=object())
