"""Step accounting: phase timers, tokens/s, peak memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from rlvr.utils import accounting
from rlvr.utils.accounting import StepAccounting


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(accounting.time, "perf_counter", c)
    return c


def test_phases_tokens_and_step_time(clock):
    acct = StepAccounting()
    with acct.phase("generate"):
        clock.t += 2.0
    clock.t += 0.5  # outside any phase: counts only towards step_time
    with acct.phase("verify"):
        clock.t += 0.25
    with acct.phase("learn"):
        clock.t += 1.0
    with acct.phase("sync"):
        clock.t += 0.25
    with acct.phase("generate"):  # phases accumulate within a step
        clock.t += 2.0
    acct.add_tokens(300)
    acct.add_tokens(100)
    row = acct.row()
    assert row["gen_time"] == 4.0 and row["verify_time"] == 0.25 and row["learn_time"] == 1.0
    assert row["sync_time"] == 0.25 and row["wait_time"] == 0.0
    assert row["step_time"] == 6.0
    assert row["tokens_per_s"] == 100.0  # 400 tokens / 4 s of generation
    assert row["step_tokens_per_s"] == pytest.approx(400 / 6.0)

    acct.start_step()
    clock.t += 1.0
    row = acct.row()
    assert row["gen_time"] == 0.0 and row["step_time"] == 1.0 and row["tokens_per_s"] == 0.0


def test_time_from_another_process_and_bad_phases(clock):
    acct = StepAccounting()
    acct.add_time("generate", 3.0)
    acct.add_tokens(30)
    assert acct.row()["tokens_per_s"] == 10.0
    with pytest.raises(ValueError, match="unknown phase"):
        with acct.phase("think"):
            pass
    with pytest.raises(RuntimeError, match="inside phase"):
        with acct.phase("learn"):
            with acct.phase("sync"):
                pass
    # the failed nesting left no phase open
    with acct.phase("sync"):
        clock.t += 1.0
    assert acct.row()["sync_time"] == 1.0


def test_a_failing_block_still_charges_its_phase(clock):
    acct = StepAccounting()
    with pytest.raises(KeyError):
        with acct.phase("learn"):
            clock.t += 2.0
            raise KeyError("boom")
    assert acct.row()["learn_time"] == 2.0


def test_peak_rss_grows_with_a_large_allocation():
    # A fresh small process; Linux carries the forking parent's high-water mark across exec,
    # so allocate more than that mark to be sure the peak must move.
    code = textwrap.dedent("""
        from rlvr.utils.accounting import StepAccounting, peak_rss_mb
        before = peak_rss_mb()
        block = bytearray(int(before + 200) * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        print(before, StepAccounting().row()["peak_rss_mb"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    assert before > 1 and after >= before + 190


def test_real_clock_measures_sleep():
    acct = StepAccounting()
    with acct.phase("wait"):
        time.sleep(0.05)
    row = acct.row()
    assert 0.04 <= row["wait_time"] <= row["step_time"]
