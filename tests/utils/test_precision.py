"""``rollout.dtype: fast``: bfloat16 where the CPU multiplies bf16 natively (exactly as ``bfloat16``), float32
where it emulates it (and the start-up line says so), the CPU probed once per kind and the verdict cached.

The CPU's flags and the matmul probe are mocked: the tests do not depend on the machine they run on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rlvr.utils.precision as precision
from rlvr.config import load_config
from rlvr.engines import SamplingParams
from rlvr.engines.hf import sampler_dtype
from rlvr.engines.registry import EngineContext, build_engine
from rlvr.recipes.config import RunConfig
from rlvr.types import Problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = [Problem(id=str(i), prompt=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(3)]
AMX = precision.CpuInfo("x86_64", "GenuineIntel", "Intel Xeon Platinum 8480+", frozenset({"amx_bf16", "avx512_bf16"}))
AVX2 = precision.CpuInfo("x86_64", "AuthenticAMD", "AMD EPYC", frozenset())
UNKNOWN = precision.CpuInfo("arm64", "", "Apple M2", None)


class FakeCpu:
    """The CPU the tests pretend to run on (a :class:`CpuInfo`), the rates its probe measures, and how many times
    it was probed."""

    def __init__(self):
        self.info, self.rates, self.probes = AVX2, (46.0, 0.8), 0

    def set(self, info, rates=None):
        self.info, self.rates = info, rates or self.rates

    def probe(self, *args, **kwargs):
        self.probes += 1
        return self.rates


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """A :class:`FakeCpu` (an AVX2-only one until set otherwise); the cache is ``tmp_path`` and the process starts
    with no verdict and nothing announced."""
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "_VERDICTS", {})
    monkeypatch.setattr(precision, "_ANNOUNCED", set())
    fake = FakeCpu()
    monkeypatch.setattr(precision, "cpu_info", lambda: fake.info)
    monkeypatch.setattr(precision, "matmul_probe", fake.probe)
    return fake


def _samples(engine):
    groups = engine.generate(PROBLEMS, SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=5))
    return [(s.completion_ids, s.logprobs) for g in groups for s in g]


def test_native_bf16_cpu_samples_exactly_as_bfloat16(cpu, tiny_model, tiny_tokenizer, capsys):
    cpu.set(AMX, (40.0, 95.0))
    fast = build_engine("hf", tiny_model, tiny_tokenizer, EngineContext(dtype="fast"))
    bf16 = build_engine("hf", tiny_model, tiny_tokenizer, EngineContext(dtype="bfloat16"))
    assert next(fast.model.parameters()).dtype == torch.bfloat16 and fast.model is not tiny_model
    assert _samples(fast) == _samples(bf16)
    out = capsys.readouterr().out
    assert "sampler precision: bfloat16 (rollout.dtype=fast: this CPU, Intel Xeon Platinum 8480+, multiplies bf16 " \
           "natively: amx_bf16+avx512_bf16)" in out


def test_cpu_without_native_bf16_samples_in_float32_and_says_so(cpu, tiny_model, tiny_tokenizer, capsys):
    fast = build_engine("hf", tiny_model, tiny_tokenizer, EngineContext(dtype="fast"))
    auto = build_engine("hf", tiny_model, tiny_tokenizer, EngineContext(dtype="auto"))
    assert fast.model is tiny_model  # no copy: the fp32 policy itself, as with rollout.dtype=auto
    assert _samples(fast) == _samples(auto)
    out = capsys.readouterr().out
    assert out.count("sampler precision:") == 1
    assert ("sampler precision: float32 (rollout.dtype=fast: this CPU, AMD EPYC, has no native bf16 [no avx512_bf16 "
            "or amx_bf16 flag]; a bf16 matmul took 58x as long as in float32)") in out
    # a bf16 policy gets an fp32 sampler copy there
    assert sampler_dtype("fast", tiny_model.to(torch.bfloat16)) == torch.float32


def test_the_demo_samples_in_float32_on_a_cpu_without_native_bf16(cpu, tiny_model, tiny_tokenizer, capsys):
    cfg = load_config(RunConfig, str(ROOT / "configs" / "arithmetic_grpo.yaml"), [])
    assert cfg.rollout.dtype == "fast"
    engine = build_engine("hf", tiny_model, tiny_tokenizer, cfg.engine_context(), **cfg.rollout.engine_params)
    assert engine.model is tiny_model and not engine.sleep()  # no bf16 copy to free either
    assert "sampler precision: float32" in capsys.readouterr().out
    cpu.set(AMX)  # and in bf16, as before, where bf16 is native
    engine = build_engine("hf", tiny_model, tiny_tokenizer, cfg.engine_context(), **cfg.rollout.engine_params)
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    assert "sampler precision: bfloat16" in capsys.readouterr().out


def test_no_demo_config_asks_for_bf16_regardless_of_the_cpu():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        if path.name.startswith(("sft_", "rft_", "pipeline_")):  # SFT / RFT sample with the policy's own dtype;
            # a pipeline's rl stages are the configs checked here
            continue
        cfg = load_config(RunConfig, str(path), [])
        assert cfg.rollout.dtype != "bfloat16", path.name


def test_the_verdict_is_measured_once_per_cpu_kind_and_cached(cpu, tmp_path):
    first = precision.cpu_bf16()
    assert not first.native and cpu.probes == 1
    assert precision.cpu_bf16() == first and cpu.probes == 1  # this process
    precision._VERDICTS.clear()  # a new process: read from the cache file, not measured again
    assert precision.cpu_bf16() == first and cpu.probes == 1
    stored = json.loads((tmp_path / precision.CACHE_FILE).read_text())["cpus"]
    assert list(stored) == [precision.cpu_kind(AVX2)]
    assert stored[precision.cpu_kind(AVX2)]["bf16_gflops"] == 0.8
    cpu.set(AMX, (40.0, 95.0))  # another CPU kind shares the cache: measured, kept beside the first
    assert precision.cpu_bf16().native and cpu.probes == 2
    assert len(json.loads((tmp_path / precision.CACHE_FILE).read_text())["cpus"]) == 2
    assert precision.cpu_bf16(refresh=True).native and cpu.probes == 3


def test_a_kind_names_its_torch_version_and_bf16_flags():
    assert precision.cpu_kind(AMX) == f"x86_64 GenuineIntel Intel Xeon Platinum 8480+ bf16:amx_bf16+avx512_bf16 " \
                                      f"torch {torch.__version__}"
    assert " bf16:- " in precision.cpu_kind(AVX2) and " bf16:? " in precision.cpu_kind(UNKNOWN)


def test_without_readable_flags_the_probe_decides(cpu):
    cpu.set(UNKNOWN, (20.0, 35.0))
    assert precision.cpu_bf16().native
    cpu.set(UNKNOWN, (20.0, 5.0))
    assert not precision.cpu_bf16(refresh=True).native
    assert precision.fast_dtype("cpu", announce=False) == "float32"


def test_native_flags_win_over_a_slow_probe(cpu):
    cpu.set(AMX, (40.0, 30.0))  # a noisy measurement never moves a native CPU off bf16
    assert precision.fast_dtype("cpu", announce=False) == "bfloat16"


def test_cuda_with_bf16_samples_in_bf16(cpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert precision.fast_dtype("cuda", announce=False) == "bfloat16"
    assert EngineContext(dtype="fast").sampler_dtype("cuda") == "bfloat16"  # what vLLM is given
    assert cpu.probes == 0  # no CPU probe for a GPU


def test_cpuinfo_flags_of_x86_and_arm():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n\n" \
          "processor\t: 1\nflags\t\t: other\n"
    assert precision.parse_cpuinfo(x86) == ("AuthenticAMD", "AMD EPYC", {"fpu", "avx2", "fma"})
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\nCPU implementer\t: 0x41\n"
    assert precision.parse_cpuinfo(arm) == ("0x41", "", {"fp", "asimd", "bf16", "i8mm"})
    assert precision.parse_cpuinfo("") == ("", "", None)


def test_the_probe_is_bounded_and_leaves_the_global_seed_alone():
    ticks = iter(range(1000))
    fp32, bf16 = precision.matmul_probe(n=16, budget_s=0.5, clock=lambda: float(next(ticks)))
    assert next(ticks) == 4  # one product per precision: each ran past the budget (one clock tick)
    assert fp32 == bf16 == 2 * 16 ** 3 / 1e9
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    precision.matmul_probe(n=16, budget_s=0.0)
    assert torch.equal(torch.rand(3), want)


def test_the_memory_estimate_counts_a_bf16_copy_only_where_fast_picks_bf16(cpu):
    from rlvr.models.loader import BUNDLED_CONFIGS
    from rlvr.recipes.preflight import run_sizes
    from rlvr.utils.memory import ModelShape

    cfg = load_config(RunConfig, str(ROOT / "configs" / "arithmetic_grpo.yaml"), ["model.device=cpu"])
    shape = ModelShape.from_config(BUNDLED_CONFIGS["smollm2-135m-instruct"])
    assert (run_sizes(cfg, shape, 64).sampler_bytes, run_sizes(cfg, shape, 64).kv_bytes) == (0, 4)
    cpu.set(AMX)
    assert (run_sizes(cfg, shape, 64).sampler_bytes, run_sizes(cfg, shape, 64).kv_bytes) == (2, 2)
