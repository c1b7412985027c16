"""rlvr.registry: typed options, needs, errors; and one-file extension of every component kind.

The last test registers a throw-away advantage estimator, policy loss, verifier, task
and rollout engine from this module alone (no edit anywhere else), names them in a
config and trains one step with them.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from conftest import make_model, make_tokenizer
from rlvr.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from rlvr.algorithms.losses import aggregate_loss
from rlvr.config import ConfigError, load_config
from rlvr.engines.registry import ENGINES, hf_engine
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import train
from rlvr.registry import Registry, RegistryError
from rlvr.tasks.registry import TASKS
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict
from rlvr.verifiers import VERIFIERS, register_verifier


def test_options_from_signature_needs_and_errors():
    reg: Registry = Registry("widget", skip=1)

    @reg.register("w", needs={"mask"}, inputs={"kl"})
    def w(x, *, mask, kl=None, scale: float = 1.0, mode: str = "a"):
        """A widget."""
        return x * scale

    e = reg.entry("w")
    assert e.options() == ["scale", "mode"] and e.needs == {"mask"} and e.inputs == {"kl"} and e.doc == "A widget."
    assert reg.validate_params("w", {"scale": 2}) == {"scale": 2.0}
    with pytest.raises(RegistryError, match=r"k\.scal: not an option \(the widget 'w' accepts: scale, mode\)"):
        reg.validate_params("w", {"scal": 2}, key="k")
    with pytest.raises(RegistryError, match="k.scale: .*valid number"):
        reg.validate_params("w", {"scale": "big"}, key="k")
    with pytest.raises(RegistryError, match="unknown widget 'v'; registered: w"):
        reg.entry("v")
    with pytest.raises(ValueError, match="already registered"):
        reg.add("w", lambda x: x)
    reg.add("w", w)  # the same object again (a module reload) is fine


def test_declared_params_model_and_check():
    reg: Registry = Registry("thing")

    class P(BaseModel):
        model_config = ConfigDict(extra="forbid")
        k: int = 2

    def check(params, group_size):
        if params.get("k", 2) > group_size:
            raise ValueError("k too large")

    reg.add("t", lambda **kw: kw, params=P, check=check)
    reg.check("t", {"k": 2}, key="x", group_size=2)
    with pytest.raises(RegistryError, match="x: k too large"):
        reg.check("t", {"k": 3}, key="x", group_size=2)


def test_bad_options_fail_when_the_config_loads_before_any_model():
    with pytest.raises(ConfigError, match=r"algorithm.advantage_params.kk: not an option .*'passk' accepts: k"):
        load_config(RunConfig, None, ["algorithm.advantage=passk", "algorithm.advantage_params={kk: 4}"])
    with pytest.raises(ConfigError, match="algorithm.advantage_params.kk: not an option .*'grpo' accepts: none"):
        load_config(RunConfig, None, ["algorithm.advantage_params={kk: 4}"])
    with pytest.raises(ConfigError, match="rollout.engine: unknown rollout engine 'hff'.*did you mean 'hf'"):
        load_config(RunConfig, None, ["rollout.engine=hff"])


# --------------------------------------------------------------------------- one file per component
CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def sign_advantages(rewards: torch.Tensor, group_size: int, *, scale: float = 1.0) -> torch.Tensor:
    """+scale for rewards above the group mean, -scale below."""
    _count("estimator")
    g = rewards.view(-1, group_size)
    return (torch.sign(g - g.mean(-1, keepdim=True)) * scale).view(-1)


def vanilla_pg_loss(logp, old_logp, advantages, mask, *, agg="token_mean", max_len=None, is_weights=None,
                    temperature_ratio: float = 1.0):
    """-A * ratio (no clipping)."""
    _count("loss")
    ratio = torch.exp(logp - old_logp) * temperature_ratio
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    return aggregate_loss(-adv * ratio, mask, agg, max_len), {}


def length_verifier(min_chars: int = 2):
    def verify(completion: str, reference: str) -> Verdict:
        _count("verifier")
        return Verdict(float(len(completion) >= min_chars), None, "length")
    return verify


def echo_task(count: int = 6, num_heldout: int = 2, seed: int = 0):
    _count("task")
    problems = [Problem(id=f"e{i}", prompt=f"Say {i}", answer=str(i)) for i in range(count)]
    return problems[:-num_heldout], problems[-num_heldout:]


def counting_engine(model, tokenizer, ctx, *, tag: str = "x"):
    _count(f"engine:{tag}")
    return hf_engine(model, tokenizer, ctx)


@pytest.fixture
def throwaway_components():
    ADVANTAGE_ESTIMATORS.add("test_sign", sign_advantages)
    POLICY_LOSSES.add("test_vanilla_pg", vanilla_pg_loss, inputs={"agg", "max_len", "is_weights"})
    register_verifier("test_length")(length_verifier)
    TASKS.add("test_echo", echo_task)
    ENGINES.add("test_engine", counting_engine)
    CALLS.clear()
    yield
    for reg, name in ((ADVANTAGE_ESTIMATORS, "test_sign"), (POLICY_LOSSES, "test_vanilla_pg"),
                      (VERIFIERS, "test_length"), (TASKS, "test_echo"), (ENGINES, "test_engine")):
        reg.unregister(name)


def test_components_registered_from_a_test_module_train_one_step(tmp_path, throwaway_components):
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={tmp_path}", "train.steps=1", "train.prompts_per_step=2", "rollout.group_size=2",
        "rollout.max_new_tokens=4", "train.progress=false", "eval.before_training=false",
        "eval.after_training=false", "algorithm.advantage=test_sign", "algorithm.advantage_params={scale: 2}",
        "algorithm.policy_loss=test_vanilla_pg", "algorithm.policy_loss_params={temperature_ratio: 1.0}",
        "reward.verifier=test_length", "reward.verifier_params={min_chars: 3}", "task.name=test_echo",
        "task.params={count: 8}", "task.num_heldout=2", "algorithm.skip_zero_advantage=false",
        "rollout.engine=test_engine", "rollout.engine_params={tag: t1}"])
    with pytest.raises(ConfigError, match="task.params.cnt: not an option"):
        load_config(RunConfig, None, ["task.name=test_echo", "task.params={cnt: 8}"])
    tok = make_tokenizer()
    train(cfg, model=make_model(tok), tokenizer=tok)
    assert CALLS["task"] >= 1 and CALLS["engine:t1"] == 1
    assert CALLS["verifier"] == 4 and CALLS["estimator"] == 1 and CALLS["loss"] >= 1
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1] and rows[0]["adv_abs_mean"] in (0.0, 2.0)
