"""The pure parts of benchmarks/race_vs_trl.py: the budget clock, time-to-reach, the time split, the reward.

No model is loaded: the script imports torch / transformers / trl only inside the functions that train.
"""

from __future__ import annotations

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def race():
    return load_benchmark("race_vs_trl")


class FakeTime:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_clock_checkpoints_at_marks_and_stops_after_the_budget(race):
    now = FakeTime()
    clock = race.BudgetClock(60.0, 3, now=now)  # marks at 20, 40, 60 s
    assert clock.marks == [20.0, 40.0, 60.0]
    clock.start()
    decisions = []
    for dt in (15, 10, 30, 10):  # steps ending at 15, 25, 55, 65 s
        now.t += dt
        decisions.append((clock.elapsed(), clock.after_step()))
    assert decisions == [(15, (False, False)), (25, (True, False)),
                         (55, (True, False)),  # 40 s passed (one save even if two marks had passed)
                         (65, (True, True))]


def test_clock_pause_is_not_training_time(race):
    now = FakeTime()
    clock = race.BudgetClock(10.0, 1, now=now)
    clock.start()
    now.t += 4
    with clock.pause():
        now.t += 100  # a checkpoint save
    now.t += 3
    assert clock.elapsed() == pytest.approx(7.0)
    assert clock.after_step() == (False, False)
    now.t += 3
    assert clock.after_step() == (True, True)


def test_clock_stops_with_a_checkpoint_at_the_step_limit_before_the_budget(race):
    now = FakeTime()
    clock = race.BudgetClock(60.0, 3, now=now, max_steps=3)  # marks at 20, 40, 60 s; at most 3 steps
    clock.start()
    decisions = []
    for _ in range(3):  # steps ending at 5, 10, 15 s: the third is the limit, before any mark
        now.t += 5
        decisions.append(clock.after_step())
    assert decisions == [(False, False), (False, False), (True, True)]


def test_clock_rejects_a_bad_budget_and_an_unstarted_read(race):
    with pytest.raises(ValueError):
        race.BudgetClock(0, 3)
    with pytest.raises(ValueError):
        race.BudgetClock(60, 3, max_steps=0)
    with pytest.raises(RuntimeError):
        race.BudgetClock(1, 1).elapsed()


def point(tag, train_s, greedy, t1, steps=0):
    ev = {"greedy": {"accuracy": greedy, "ci_low": greedy - 0.05, "ci_high": greedy + 0.05, "n": 256},
          "T=1.0": {"accuracy": t1, "ci_low": t1 - 0.05, "ci_high": t1 + 0.05, "n": 256}}
    return {"tag": tag, "train_s": train_s, "steps": steps, "completions": 64 * steps, "eval": ev}


def test_first_reaching_is_the_earliest_checkpoint_at_or_above(race):
    pts = [point("c2", 200, 0.6, 0.3), point("initial", 0, 0.2, 0.1), point("c1", 100, 0.6, 0.2)]
    assert race.first_reaching(pts, "greedy", 0.6)["tag"] == "c1"
    assert race.first_reaching(pts, "T=1.0", 0.25)["tag"] == "c2"
    assert race.first_reaching(pts, "greedy", 0.2)["tag"] == "initial"
    assert race.first_reaching(pts, "greedy", 0.61) is None


def test_race_summary_ratio_per_eval_key(race):
    trl = [point("initial", 0, 0.2, 0.1), point("t1", 600, 0.5, 0.3, 5), point("t2", 1200, 0.55, 0.4, 10)]
    rlvr = [point("initial", 0, 0.2, 0.1), point("r1", 300, 0.6, 0.35, 12), point("r2", 600, 0.7, 0.5, 24)]
    s = race.race_summary(trl, rlvr)
    g = s["greedy"]
    assert g["trl_final_accuracy"] == 0.55
    assert g["trl_reach"]["tag"] == "t2" and g["rlvr_reach"]["tag"] == "r1"
    assert g["ratio_rlvr_over_trl"] == pytest.approx(300 / 1200)
    assert g["ratio_rlvr_over_trl_total"] == pytest.approx(300 / 1200)
    assert g["target_met"] is True
    t = s["T=1.0"]
    assert t["rlvr_reach"]["tag"] == "r2" and t["ratio_rlvr_over_trl"] == pytest.approx(0.5)
    assert t["target_met"] is False
    lines = race.format_summary(s)
    assert "rlvr / TRL = 0.25 (meets" in lines[0] and "misses" in lines[1]


def test_race_summary_when_trl_peaks_early_or_rlvr_never_gets_there(race):
    # TRL's accuracy dips at the end: its time to reach its final accuracy is the earlier checkpoint
    trl = [point("initial", 0, 0.2, 0.1), point("t1", 600, 0.5, 0.3), point("t2", 1200, 0.45, 0.3)]
    rlvr = [point("initial", 0, 0.2, 0.1), point("r1", 600, 0.4, 0.1)]
    s = race.race_summary(trl, rlvr)
    assert s["greedy"]["trl_reach"]["tag"] == "t1"
    assert s["greedy"]["rlvr_reach"] is None and s["greedy"]["ratio_rlvr_over_trl"] is None
    assert "never within its budget" in race.format_summary(s)[0]
    # TRL no better than the untrained model: both reach it at 0 s, no ratio
    trl = [point("initial", 0, 0.2, 0.1), point("t1", 600, 0.2, 0.05)]
    s = race.race_summary(trl, rlvr)
    assert s["T=1.0"]["trl_reach"]["train_s"] == 0 and s["T=1.0"]["ratio_rlvr_over_trl"] is None
    assert "already scores" in race.format_summary(s)[1]


def test_time_split_totals_and_shares(race):
    steps = [{"generate": 3.0, "learn": 1.0, "other": 0.0}, {"generate": 2.0, "learn": 2.0, "other": 2.0}]
    split = race.time_split(steps, ("generate", "learn", "other", "sync"))
    assert split["generate"] == {"seconds": 5.0, "share": 0.5}
    assert split["other"]["share"] == pytest.approx(0.2) and split["sync"]["seconds"] == 0.0
    assert race.format_split(split).startswith("generate 5.0 s (50%)")
    assert "100" in race.format_points([point("initial", 0, 0.2, 0.1), point("c1", 100, 0.5, 0.3, 3)])[2]


def test_reward_function_is_the_verifier(race):
    from rlvr.verifiers import get_verifier

    reward = race.reward_function(get_verifier("numeric"), correct_reward=1.0, wrong_reward=0.0)
    completions = [[{"role": "assistant", "content": "23 + 19 = \\boxed{42}"}],
                   [{"role": "assistant", "content": "\\boxed{41}"}], "the answer is \\boxed{42}"]
    assert reward(completions=completions, answer=["42", "42", "42"], prompts=None) == [1.0, 0.0, 1.0]


def test_seeds_summary_over_races(race):
    def result(seed, trl, rlvr):
        return {"args": {"seed": seed}, "summary": race.race_summary(trl, rlvr),
                "points": {"trl": trl, "rlvr": rlvr}}

    trl = [point("initial", 0, 0.2, 0.1), point("t1", 600, 0.5, 0.3), point("t2", 1200, 0.6, 0.5)]
    races = [result(0, trl, [point("initial", 0, 0.2, 0.1), point("r1", 300, 0.6, 0.5), point("r2", 1200, 0.7, 0.6)]),
             result(1, trl, [point("initial", 0, 0.2, 0.1), point("r1", 600, 0.65, 0.4), point("r2", 1200, 0.5, 0.3)]),
             result(2, trl, [point("initial", 0, 0.2, 0.1), point("r1", 1200, 0.55, 0.45)])]
    s = race.seeds_summary(races)
    g = s["greedy"]
    assert [r["rlvr_s"] for r in g["races"]] == [300, 600, None]
    assert [r["ratio"] for r in g["races"]] == [pytest.approx(0.25), pytest.approx(0.5), None]
    assert [r["rlvr_final_accuracy"] for r in g["races"]] == [0.7, 0.5, 0.55]
    assert g["stats"]["ratio"] == {"n": 2, "median": pytest.approx(0.375), "min": pytest.approx(0.25),
                                   "max": pytest.approx(0.5)}
    assert g["stats"]["rlvr_final_accuracy"]["median"] == 0.55
    assert g["rlvr_never"] == 1 and g["target_met"] == 1
    t = s["T=1.0"]  # TRL's final 0.5: rlvr reaches it at 300 s in race 0 only
    assert [r["rlvr_s"] for r in t["races"]] == [300, None, None] and t["rlvr_never"] == 2
    lines = race.format_seeds_summary(s)
    assert lines[0] == "greedy:" and "never" in lines[4]
    assert any("median 0.38, min 0.25, max 0.50 over 2" in ln for ln in lines)
    assert any("never reached TRL's final accuracy in 1 of 3" in ln for ln in lines)
