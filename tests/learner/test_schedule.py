"""The learning-rate schedules (``train.schedule``, ``train.warmup_steps``): the rate each optimizer step uses, by
hand, against transformers' own schedules, and through the real wiring (config -> recipe -> metrics rows).

The demo (``configs/arithmetic_grpo.yaml``) ships cosine decay: linear warm-up over ``w`` steps, then
``lr * 0.5 * (1 + cos(pi * (k - w) / (T - w)))`` for the 0-based step ``k`` of ``T`` (Loshchilov & Hutter,
"SGDR", 2017, without restarts; the form of ``transformers.get_cosine_schedule_with_warmup``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import make_model, make_tokenizer, tiny_run_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# warm-up 2 of 6 steps, lr 1: the factor each 0-based step k uses, by hand
#   k = 0, 1: warm-up (k + 1) / 2            -> 0.5, 1
#   k = 2..5: 0.5 (1 + cos(pi (k - 2) / 4))  -> 1, (1 + 1/sqrt 2) / 2, 0.5, (1 - 1/sqrt 2) / 2
COSINE_BY_HAND = [0.5, 1.0, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627]
LINEAR_BY_HAND = [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]


def _rates_used(kind: str, warmup: int = 2, total: int = 6) -> list[float]:
    """The lr of each optimizer step of a ``make_scheduler`` schedule (read before the step, as the step uses it)."""
    from rlvr.learner.settings import ScheduleSettings
    from rlvr.learner.update import make_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make_scheduler(opt, ScheduleSettings(warmup_steps=warmup, total_steps=total, kind=kind))
    rates = []
    for _ in range(total):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


def test_cosine_and_linear_decay_by_hand():
    assert _rates_used("cosine") == pytest.approx(COSINE_BY_HAND, abs=1e-12)
    assert _rates_used("linear") == pytest.approx(LINEAR_BY_HAND, abs=1e-12)
    assert _rates_used("constant") == pytest.approx([0.5, 1, 1, 1, 1, 1], abs=1e-12)


@pytest.mark.parametrize("kind, reference", [("cosine", "get_cosine_schedule_with_warmup"),
                                             ("linear", "get_linear_schedule_with_warmup")])
@pytest.mark.parametrize("warmup, total", [(2, 40), (0, 7), (3, 4)])
def test_schedules_equal_transformers_schedules(kind, reference, warmup, total):
    """Same factors as transformers' schedules, except inside the warm-up: transformers starts at 0 (``k / w``),
    rlvr at ``1 / w`` (``(k + 1) / w``) so that no step is spent at lr 0."""
    import transformers

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = getattr(transformers, reference)(opt, num_warmup_steps=warmup, num_training_steps=total)
    want = []
    for _ in range(total):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    got = _rates_used(kind, warmup, total)
    assert got[warmup:] == pytest.approx(want[warmup:], abs=1e-12)
    assert got[:warmup] == pytest.approx([(k + 1) / warmup for k in range(warmup)], abs=1e-12)


def test_the_demo_ships_cosine_decay_after_its_warm_up():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    cfg = load_config(RunConfig, str(ROOT / "configs" / "arithmetic_grpo.yaml"), [])
    s = cfg.schedule_settings()
    assert (s.kind, s.warmup_steps, s.total_steps, cfg.train.lr) == ("cosine", 2, 40, 1e-5)


def test_the_rate_reaches_the_optimizer_and_the_metrics_rows(tmp_path):
    """Through the recipe: each step's update uses the hand-computed rate (the AdamW step of a parameter moves it
    by about ``lr`` on the first step), and the row's ``lr`` is the rate after that step's schedule advance (the
    next step's rate: 0 after the last step), the convention of transformers' Trainer logs."""
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics
    from rlvr.types import Problem, Verdict

    used = []

    def verifier(completion: str, reference: str):
        return Verdict(float(sum(map(ord, completion)) % 2 == 0), completion, "parity")

    problems = [Problem(id=f"t{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(10)]
    tok = make_tokenizer()
    cfg = tiny_run_config(tmp_path, "train.steps=6", "train.warmup_steps=2", "train.schedule=cosine", "train.lr=1e-2",
                          "train.threads=1")
    real_step = torch.optim.AdamW.step

    def spy_step(self, *a, **k):
        used.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **k)

    torch.optim.AdamW.step = spy_step
    try:
        train(cfg, model=make_model(tok), tokenizer=tok, problems=(problems, []), verifier=verifier)
    finally:
        torch.optim.AdamW.step = real_step
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 6
    by_hand = [1e-2 * f for f in COSINE_BY_HAND]
    assert used == pytest.approx(by_hand, abs=1e-15)  # one AdamW step per rollout batch, at the scheduled rate
    assert [r["lr"] for r in rows] == pytest.approx(by_hand[1:] + [0.0], abs=1e-15)
    assert math.isclose(rows[-1]["lr"], 0.0, abs_tol=1e-15)
