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


# --------------------------------------------------------------------------- train.onednn_cache
ONEDNN_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def _clear_cache_vars(monkeypatch):
    for var in ONEDNN_VARS:  # set, then delete: monkeypatch restores the test process's own value afterwards
        monkeypatch.setenv(var, "1")
        monkeypatch.delenv(var)


def test_onednn_cache_capacity_sets_both_variables_and_leaves_a_users_own(monkeypatch):
    import os

    from rlvr.utils.accounting import set_onednn_cache_capacity

    _clear_cache_vars(monkeypatch)
    assert set_onednn_cache_capacity(128) == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "128", "LRU_CACHE_CAPACITY": "128"}
    assert [os.environ[v] for v in ONEDNN_VARS] == ["128", "128"]
    _clear_cache_vars(monkeypatch)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    assert set_onednn_cache_capacity(64) == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"}
    assert os.environ["LRU_CACHE_CAPACITY"] == "7"
    with pytest.raises(ValueError, match=">= 1"):
        set_onednn_cache_capacity(0)  # LRU_CACHE_CAPACITY=0 crashes ideep


def test_onednn_cache_option_reaches_the_recipe_before_the_model_runs(tmp_path, monkeypatch):
    """train.onednn_cache is applied in the recipe's set-up, before its first forward; 0 (default) sets nothing."""
    from conftest import make_model, make_tokenizer
    from rlvr.config import load_config
    from rlvr.recipes import rl
    from rlvr.recipes.config import RunConfig
    from rlvr.types import Problem

    calls = []
    forwards_before = []
    monkeypatch.setattr(rl, "set_onednn_cache_capacity", lambda n: calls.append(n) or {})
    tok = make_tokenizer()
    model = make_model(tok)
    model.register_forward_pre_hook(lambda *_: forwards_before.append(len(calls)))
    probs = ([Problem(f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(4)],
             [Problem("h0", prompt="What is 5 + 1?", answer="6")])
    for value, want in ((48, [48]), (0, [])):
        calls.clear()
        forwards_before.clear()
        cfg = load_config(RunConfig, None, [
            f"train.output_dir={tmp_path / str(value)}", "train.steps=1", "train.prompts_per_step=2",
            "rollout.group_size=2", "rollout.max_new_tokens=4", "train.save_every=0", "train.progress=false",
            "eval.before_training=false", "eval.after_training=false", f"train.onednn_cache={value}"])
        rl.RLRecipe(cfg, model=model, tokenizer=tok, problems=probs).train()
        assert calls == want
        assert forwards_before and all(n == len(want) for n in forwards_before)  # every forward came after it
    with pytest.raises(Exception, match="onednn_cache"):
        load_config(RunConfig, None, ["train.onednn_cache=-1"])
