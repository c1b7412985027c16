"""The sampler's precision for ``rollout.dtype: fast``: bfloat16 where the hardware multiplies bf16 natively,
float32 elsewhere.

A bf16 copy of the policy halves the bytes each decode step reads and, on a CPU with AVX-512 BF16 or AMX (or a
CUDA GPU), runs its matrix products 2-3x faster than float32.  A CPU without them (an AVX2-only x86, as in most
laptops) has PyTorch emulate bf16 instead: on an AVX2 AMD EPYC a 1024^3 bf16 matmul ran at 0.8 GFLOP/s against
46 GFLOP/s in float32, so a bf16 sampler there is tens of times slower, not faster.

How a CPU is judged (:func:`cpu_bf16`):

* where its flags can be read (``/proc/cpuinfo``, or torch's own CPU checks on x86), bf16 is native when it has
  ``avx512_bf16`` or ``amx_bf16`` (x86) or ``bf16`` (Arm), and only then; such a CPU samples in bf16 whatever the
  probe measures, exactly as with ``rollout.dtype: bfloat16``;
* where no flags can be read (macOS, other systems) the probe decides: bf16 when its matmul ran faster than
  float32's.

The probe (:func:`matmul_probe`) times a 256^3 matmul in each precision for about 0.15 s each (past its budget it
stops after the product it is running: a fraction of a second even where bf16 is emulated) and runs once per
CPU kind, for the record and the start-up line.  Verdicts are kept in ``<cache>/cpu_precision.json`` (the cache is
``$RLVR_CACHE`` or ``~/.cache/rlvr``), one per CPU kind (:func:`cpu_kind`: architecture, vendor and model, the
bf16 flags, the torch version), so each machine measures once.  :func:`fast_dtype` prints which precision it chose
and why, once per process.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from rlvr.utils.cache import cache_dir

__all__ = ["NATIVE_BF16_FLAGS", "Bf16Capability", "CpuInfo", "cpu_info", "parse_cpuinfo", "cpu_kind",
           "matmul_probe", "cpu_bf16", "fast_dtype", "CACHE_FILE"]

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""CPU flags of native bf16 arithmetic: AVX-512 BF16 and AMX (x86 ``flags``), BF16 (Arm ``Features``)."""
CACHE_FILE = "cpu_precision.json"
PROBE_N = 256
PROBE_BUDGET_S = 0.15
_PROBE_MAX_REPS = 64


@dataclass(frozen=True)
class CpuInfo:
    """What identifies a CPU's bf16 support: architecture, vendor, model name and its native-bf16 flags
    (``flags`` None: unknown, no flags could be read)."""

    machine: str
    vendor: str
    model: str
    flags: frozenset[str] | None


@dataclass(frozen=True)
class Bf16Capability:
    """One CPU kind's verdict: whether bf16 is native, why, and the probe's matmul rates (GFLOP/s)."""

    kind: str
    native: bool
    reason: str
    fp32_gflops: float
    bf16_gflops: float

    def slowdown(self) -> float:
        """How many times slower the probe's bf16 matmul ran than float32's (below 1: faster)."""
        return self.fp32_gflops / max(self.bf16_gflops, 1e-12)


def parse_cpuinfo(text: str) -> tuple[str, str, set[str] | None]:
    """``(vendor, model name, flags)`` of the first processor in a ``/proc/cpuinfo`` text (x86 ``flags``, Arm
    ``Features``; None when it lists neither)."""
    vendor = model = ""
    flags: set[str] | None = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in ("vendor_id", "CPU implementer") and not vendor:
            vendor = value
        elif key in ("model name", "Model", "cpu model", "Hardware") and not model:
            model = value
        elif key in ("flags", "Features") and flags is None:
            flags = set(value.split())
    return vendor, model, flags


def cpu_info() -> CpuInfo:
    """This machine's :class:`CpuInfo`, from ``/proc/cpuinfo`` and, on x86, torch's own CPU checks."""
    machine = platform.machine().lower()
    try:
        vendor, model, flags = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        vendor, model, flags = "", "", None
    checks = {"avx512_bf16": getattr(torch.cpu, "_is_avx512_bf16_supported", None),
              "amx_bf16": getattr(torch.cpu, "_is_amx_tile_supported", None)}
    if machine in ("x86_64", "amd64", "i386", "i686") and all(checks.values()):
        found = {name for name, check in checks.items() if _safe(check)}
        flags = (flags or set()) | found
    native = None if flags is None else frozenset(f for f in NATIVE_BF16_FLAGS if f in flags)
    return CpuInfo(machine, vendor, model or platform.processor() or "unknown", native)


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:  # a torch without the check's kernels: no evidence either way
        return False


def cpu_kind(info: CpuInfo | None = None) -> str:
    """The key a verdict is kept under: ``x86_64 AuthenticAMD AMD EPYC bf16:- torch 2.13.0+cpu``."""
    info = info or cpu_info()
    flags = "?" if info.flags is None else ("+".join(sorted(info.flags)) or "-")
    return f"{info.machine} {info.vendor or '-'} {info.model} bf16:{flags} torch {torch.__version__}"


def matmul_probe(n: int = PROBE_N, budget_s: float = PROBE_BUDGET_S,
                 clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """GFLOP/s of an ``n`` x ``n`` x ``n`` matmul on the CPU in float32 and in bfloat16: each repeated until
    ``budget_s`` has passed (at least once, at most 64 times), after one product of 8 rows that builds the
    kernels.  Bounded: past the budget it stops after the product in flight (at 256^3 and an emulated 0.8 GFLOP/s,
    0.04 s).  Uses its own random generator: the global torch seed is left alone."""
    g = torch.Generator().manual_seed(0)
    a32, b32 = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    rates = []
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            a, b = a32.to(dtype), b32.to(dtype)
            a[:8] @ b
            reps, t0 = 0, clock()
            while True:
                a @ b
                reps += 1
                elapsed = clock() - t0
                if elapsed >= budget_s or reps >= _PROBE_MAX_REPS:
                    break
            rates.append(2 * n ** 3 * reps / max(elapsed, 1e-9) / 1e9)
    return rates[0], rates[1]


_VERDICTS: dict[tuple[str, str], Bf16Capability] = {}


def cpu_bf16(cache: str | Path | None = None, refresh: bool = False) -> Bf16Capability:
    """Whether this CPU multiplies bf16 natively (see the module's doc), measured once per CPU kind and kept in
    ``<cache>/cpu_precision.json`` (``cache``: the directory; default ``$RLVR_CACHE`` or ``~/.cache/rlvr``).
    ``refresh`` measures again.  A cache that cannot be written keeps the verdict for this process only."""
    info = cpu_info()
    kind = cpu_kind(info)
    path = cache_dir(cache) / CACHE_FILE
    key = (str(path), kind)
    if not refresh and key in _VERDICTS:
        return _VERDICTS[key]
    from rlvr.utils.files import atomic_write_json, read_json_or_none

    stored = read_json_or_none(path)
    stored = stored if isinstance(stored, dict) and isinstance(stored.get("cpus"), dict) else {"cpus": {}}
    rec = stored["cpus"].get(kind)
    if not refresh and isinstance(rec, dict):
        try:
            cap = Bf16Capability(kind=kind, native=bool(rec["native"]), reason=str(rec["reason"]),
                                 fp32_gflops=float(rec["fp32_gflops"]), bf16_gflops=float(rec["bf16_gflops"]))
        except (KeyError, TypeError, ValueError):
            cap = None
        if cap is not None:
            _VERDICTS[key] = cap
            return cap
    fp32, bf16 = matmul_probe()
    if info.flags is None:
        native = bf16 > fp32
        speed = f"{bf16 / fp32:.1f}x as fast as" if native else f"{fp32 / max(bf16, 1e-12):.1f}x slower than"
        reason = f"no CPU flags readable; the probe's bf16 matmul ran {speed} float32"
    elif info.flags:
        native, reason = True, "+".join(sorted(info.flags))
    else:
        arm = info.machine.startswith(("arm", "aarch"))
        native, reason = False, "no bf16 feature" if arm else "no avx512_bf16 or amx_bf16 flag"
    cap = Bf16Capability(kind=kind, native=native, reason=reason, fp32_gflops=fp32, bf16_gflops=bf16)
    stored["cpus"][kind] = {**{k: v for k, v in asdict(cap).items() if k != "kind"},
                            "threads": torch.get_num_threads(), "measured": time.strftime("%Y-%m-%d")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, stored, indent=1)
    except OSError:
        pass  # a read-only cache: measured again by the next process
    _VERDICTS[key] = cap
    return cap


_ANNOUNCED: set[str] = set()


def fast_dtype(device: str | torch.device | None = None, *, announce: bool = True,
               out: Callable[[str], object] = print) -> str:
    """``rollout.dtype: fast`` on ``device`` (None: CUDA when available, else the CPU): ``bfloat16`` on a CUDA
    device with bf16 and on a CPU with native bf16 (:func:`cpu_bf16`), ``float32`` elsewhere.  With
    ``announce`` the choice and its reason go to ``out`` as one line, once per process."""
    from rlvr.utils.device import resolve_device

    dev = resolve_device("auto") if device is None else torch.device(device)
    if dev.type == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        name, why = ("bfloat16", "a CUDA device with bf16") if ok else ("float32", "this CUDA device has no bf16")
    elif dev.type == "cpu":
        cap = cpu_bf16()
        cpu = cpu_info().model
        if cap.native:
            name, why = "bfloat16", f"this CPU, {cpu}, multiplies bf16 natively: {cap.reason}"
        else:
            x = cap.slowdown()
            name, why = "float32", (f"this CPU, {cpu}, has no native bf16 [{cap.reason}]; a bf16 matmul took "
                                    f"{x:.{0 if x >= 10 else 1}f}x as long as in float32")
    else:
        name, why = "float32", f"bf16 speed on {dev.type} is unknown"
    line = f"sampler precision: {name} (rollout.dtype=fast: {why})"
    if announce and line not in _ANNOUNCED:
        _ANNOUNCED.add(line)
        out(line)
    return name
