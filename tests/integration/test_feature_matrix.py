"""Every registered advantage estimator x {in-process, async, FSDP}: trains one step or is refused at config load.

A refusal must come from ``load_config`` (before any model is built) and say why;
a combination that loads must train one step on the tiny model.  Estimators added
to the registry later are walked too: a new one that needs an input some mode does
not compute must be refused by that mode's config check, or this test fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from conftest import make_model, make_tokenizer
from rlvr.algorithms import ADVANTAGE_ESTIMATORS
from rlvr.config import ConfigError, load_config
from rlvr.trackers import read_metrics
from rlvr.recipes.config import RunConfig
from rlvr.recipes.run import train
from rlvr.types import Problem, Verdict

# options some estimators need here: required ones (the registry refuses them without), and pass@k's k,
# whose default (4) does not fit the 2 samples per group used below
REQUIRED = {"noisy_backward": "{rho0: 0.1, rho1: 0.1}", "noisy_forward": "{rho1: 0.1}", "passk": "{k: 2}",
            "maxk": "{k: 1}"}  # groups of 2: maxk needs k <= G - 1
WITH = {"online_dpo": ["algorithm.loss_agg=seq_mean_token_sum"],  # DPO's gradient needs sequence sums
        "tree": ["rollout.branches=1"]}  # tree credit needs branched groups
"""Settings an estimator needs beside it (refused at load without them)."""
MODES = {
    "in_process": [],
    "async": ["train.async_steps=1", "algorithm.is_correction=tis"],
    "fsdp": ["distributed.fsdp=true", "distributed.mixed_precision=none"],
}


def _verifier(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, None, "parity")


def _problems() -> list[Problem]:
    return [Problem(id=f"t{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(6)]


def _overrides(out: Path, estimator: str, mode: str) -> list[str]:
    extra = [f"algorithm.advantage_params={REQUIRED[estimator]}"] if estimator in REQUIRED else []
    return [f"train.output_dir={out}", "train.steps=1", "train.prompts_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=4", "train.micro_batch_size=4", "train.warmup_steps=0", "train.save_every=0",
            "train.progress=false", "eval.before_training=false", "eval.after_training=false", "train.seed=1",
            f"algorithm.advantage={estimator}", *extra, *WITH.get(estimator, []), *MODES[mode]]


def _train_one_step(cfg: RunConfig, mode: str) -> None:
    tok = make_tokenizer()
    kwargs = dict(model=make_model(tok), tokenizer=tok, problems=(_problems(), []), verifier=_verifier)
    if mode != "fsdp":
        train(cfg, **kwargs)
        return
    store = Path(cfg.train.output_dir).parent / "store"  # beside the run directory: not a file of the run
    store.parent.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        train(cfg, **kwargs)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS.names())
def test_each_estimator_trains_or_is_refused_at_load(tmp_path, estimator, mode):
    torch.manual_seed(0)
    try:
        cfg = load_config(RunConfig, None, _overrides(tmp_path / "run", estimator, mode))
    except ConfigError as e:
        msg = str(e)
        assert estimator in msg or "algorithm" in msg, msg  # a refusal names what it refuses
        assert mode != "in_process", f"the in-process recipe refuses {estimator}: {msg}"
        return
    _train_one_step(cfg, mode)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    assert all(torch.isfinite(torch.tensor(float(r[k]))) for r in rows for k in ("loss", "adv_abs_mean") if k in r)


def test_fsdp_refuses_estimators_that_need_inputs_it_does_not_compute(tmp_path):
    with pytest.raises(ConfigError, match="entropy_guided .*needs entropy, mask"):
        load_config(RunConfig, None, _overrides(tmp_path, "entropy_guided", "fsdp"))


def test_options_that_cannot_fit_the_run_are_refused_at_load(tmp_path):
    over = _overrides(tmp_path, "passk", "in_process")
    with pytest.raises(ConfigError, match="algorithm.advantage_params: k=4 .*rollout.group_size=2"):
        load_config(RunConfig, None, [o for o in over if not o.startswith("algorithm.advantage_params")])
    with pytest.raises(ConfigError, match="noisy_backward.*rho0"):
        load_config(RunConfig, None, [o for o in _overrides(tmp_path, "noisy_backward", "in_process")
                                      if not o.startswith("algorithm.advantage_params")])
