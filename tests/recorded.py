"""Numbers recorded on one platform and compared on any (the fixtures of "this path computes what it computed").

Floating point results depend on the CPU's kernels: MKL and oneDNN pick other code on an Intel chip with AMX
than on an AMD one, and the last bits of a sum move.  A recording therefore names its platform
(:func:`platform_key`: architecture, CPU vendor, the vector-instruction families that select kernels, the torch
version), and a fixture file holds one recording per platform::

    {"recordings": {"<platform key>": <data>, ...}}

:func:`assert_matches` compares the numbers of a run with the recording of the platform it runs on, **exactly**
(float for float); on a platform with no recording of its own it compares them with the first recording,
exactly for everything that is not a float (counts, booleans, strings: the samples drawn, so the same
trajectory) and within float rounding (relative 1e-4, absolute 1e-6) for floats, 5% for the statistics of a
bf16 sampler against the fp32 learner (:data:`BF16_STATS`).  A change that is meant to move
the numbers re-records every platform it can run on (each test module's ``__main__`` writes the recording of
the platform it runs on).
"""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import Any

_KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
REL_TOL, ABS_TOL = 1e-4, 1e-6
BF16_STATS = {"logprob_mismatch", "logprob_mismatch_max", "sampler_ratio_outside"}
"""Statistics of a bf16 sampler against the fp32 learner: bf16 kernels differ between platforms (AMX vs
AVX-512 BF16) by about 1%, so across platforms these are compared within 5%."""
BF16_REL_TOL = 5e-2


def _cpu() -> tuple[str, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown", set()
    vendor, flags = "unknown", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            vendor = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return vendor, flags


def platform_key() -> str:
    """``x86_64 GenuineIntel amx_bf16+avx2+avx512_bf16+avx512f torch 2.13.0+cpu``: what selects the kernels."""
    import torch

    vendor, flags = _cpu()
    isa = "+".join(sorted(f for f in _KERNEL_FLAGS if f in flags)) or "-"
    return f"{platform.machine()} {vendor} {isa} torch {torch.__version__}"


def load(path: Path) -> tuple[Any, str, bool]:
    """``(data, recorded_on, exact)``: this platform's recording (exact) or else the file's first one."""
    recordings = json.loads(Path(path).read_text())["recordings"]
    here = platform_key()
    if here in recordings:
        return recordings[here], here, True
    first = next(iter(recordings))
    return recordings[first], first, False


def differences(now: Any, then: Any, exact: bool, where: str = "") -> list[str]:
    """Where ``now`` and ``then`` differ (see the module docstring for what counts as equal)."""
    if isinstance(now, dict) and isinstance(then, dict):
        out = [f"{where}.{k}: only in {'the run' if k in now else 'the recording'}" for k in set(now) ^ set(then)]
        for k in then:
            if k in now:
                out += differences(now[k], then[k], exact, f"{where}.{k}")
        return out
    if isinstance(now, list) and isinstance(then, list):
        if len(now) != len(then):
            return [f"{where}: {len(now)} items, recorded {len(then)}"]
        return [d for i, (a, b) in enumerate(zip(now, then)) for d in differences(a, b, exact, f"{where}[{i}]")]
    if isinstance(now, float) and isinstance(then, float):
        if (math.isnan(now) and math.isnan(then)) or now == then:
            return []
        rel = BF16_REL_TOL if where.rsplit(".", 1)[-1] in BF16_STATS else REL_TOL
        if not exact and math.isclose(now, then, rel_tol=rel, abs_tol=ABS_TOL):
            return []
        return [f"{where}: {now!r}, recorded {then!r}"]
    return [] if now == then and type(now) is type(then) else [f"{where}: {now!r}, recorded {then!r}"]


def assert_matches(now: Any, path: Path, key: str | None = None) -> None:
    """``now`` equals the recording in ``path`` (its item ``key`` when given) as the module docstring says."""
    then, recorded_on, exact = load(path)
    if key is not None:
        then = then[key]
    diffs = differences(now, then, exact, key or "")
    assert not diffs, (f"{len(diffs)} differences from {Path(path).name} ({'exact' if exact else 'within rounding'}: "
                       f"recorded on {recorded_on}, running on {platform_key()}): " + "; ".join(diffs[:8]))


def record(path: Path, data: Any) -> str:
    """Write ``data`` as this platform's recording in ``path`` (other platforms' recordings are kept)."""
    path = Path(path)
    recordings = json.loads(path.read_text())["recordings"] if path.is_file() else {}
    key = platform_key()
    recordings[key] = data
    path.write_text(json.dumps({"recordings": recordings}, indent=1) + "\n")
    return key
