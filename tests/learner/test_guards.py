"""Guards of the training loop: non-finite rewards, advantages and gradients never reach the weights.

Each case trains the tiny model through ``rlvr.recipes.rl.train`` with an injected component that
produces the bad number, and checks that the step is skipped and counted, that a warning names
the source, that ``train.max_bad_steps`` stops the run keeping the last good checkpoint, and that
no checkpoint is ever written with non-finite weights.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

from conftest import make_model, tiny_run_config
from rlvr.envs import ENVIRONMENTS, Environment, Reply
from rlvr.learner.checkpoint import NonFiniteWeightsError, latest_checkpoint, save_checkpoint
from rlvr.learner.guards import (NonFiniteError, StepGuard, TrainingDiverged, VerifierFailed, nonfinite_advantages,
                                 nonfinite_groups, nonfinite_rewards, require_finite_norm)
from rlvr.recipes.rl import RLRecipe, train
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Sample, Verdict

PROBS = ([Problem(f"t{i}", prompt=f"{i}+1", answer=str(i + 1)) for i in range(8)],
         [Problem(f"h{i}", prompt=f"{i}+2", answer=str(i + 2)) for i in range(2)])


def _parity(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


class NanAfter(Environment):
    """One turn scored by parity, whose reward is NaN from call ``after`` on (every call when 0)."""

    single_turn = False
    calls = 0

    def __init__(self, after: int):
        self.after = after

    def step(self, state, text):
        NanAfter.calls += 1
        v = _parity(text, state.problem.answer)
        reward = float("nan") if NanAfter.calls > self.after else v.score
        return Reply(done=True, reward=reward, verdict=v)


@pytest.fixture
def nan_env():
    NanAfter.calls = 0
    ENVIRONMENTS.add("test_nan_after", lambda verifier, tokenizer, after=0: NanAfter(after),
                     doc="NaN rewards after a number of calls (tests)")
    yield "test_nan_after"
    ENVIRONMENTS.unregister("test_nan_after")


def _finite(model) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_nan_rewards_skip_both_steps_and_leave_finite_weights(tmp_path, tiny_tokenizer, nan_env, caplog):
    """The reported case: an environment returning reward=nan trained to the end, logged null rewards and wrote
    a checkpoint of NaN weights.  Now both steps are skipped, counted and named, and the weights are untouched."""
    model = make_model(tiny_tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with caplog.at_level(logging.WARNING):
        summary = train(tiny_run_config(tmp_path, "train.steps=2", f"env.name={nan_env}", "train.warmup_steps=4"),
                        model=model,
                        tokenizer=tiny_tokenizer, problems=PROBS, verifier=_parity)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["skipped_step"] for r in rows] == [1.0, 1.0] and rows[-1]["skipped_steps"] == 2.0
    assert [(r["dropped_groups"], r["nonfinite_rewards"]) for r in rows] == [(2.0, 8.0)] * 2  # nothing finite left
    assert [r["lr"] for r in rows] == pytest.approx([0.005, 0.0075])  # the warm-up still advances a step per step
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no update reached the weights
    warnings = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warnings) == 2
    assert f"the environment (env.name={nan_env}) returned reward nan" in warnings[0]
    assert "problem 't" in warnings[0] and "completion" in warnings[0]  # one example
    from safetensors.torch import load_file

    weights = load_file(next((latest_checkpoint(tmp_path) / "model").glob("*.safetensors")))
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())
    assert summary["steps"] == 2


def test_max_bad_steps_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, tiny_tokenizer, nan_env):
    model = make_model(tiny_tokenizer)
    cfg = tiny_run_config(tmp_path, "train.steps=6", f"env.name={nan_env}", "env.params={after: 16}",
                          "train.save_every=1", "train.keep_checkpoints=2", "train.max_bad_steps=2")
    with pytest.raises(TrainingDiverged, match=r"2 steps in a row were skipped .*Stopped; the latest checkpoint is "
                                               r"\S*step-000002; train.resume=true continues from it$"):
        train(cfg, model=model, tokenizer=tiny_tokenizer, problems=PROBS, verifier=_parity)
    rows = read_metrics(tmp_path / "metrics.jsonl")  # 8 episodes a step: steps 1-2 good, 3-4 NaN
    assert [r.get("skipped_step", 0.0) for r in rows] == [0.0, 0.0, 1.0, 1.0]
    assert latest_checkpoint(tmp_path).name == "step-000002" and _finite(model)


def test_a_non_finite_gradient_skips_the_update(tmp_path, tiny_tokenizer, caplog):
    """Finite rewards and advantages, but a NaN gradient (here injected by a hook): the optimizer never steps."""
    model = make_model(tiny_tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.model.norm.weight.register_hook(lambda g: g * float("nan"))
    with caplog.at_level(logging.WARNING):
        train(tiny_run_config(tmp_path, "train.steps=2"), model=model, tokenizer=tiny_tokenizer,
              problems=PROBS, verifier=_parity)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    skipped = [r for r in rows if r.get("skipped_step")]
    assert skipped, "a step with advantages must have produced the NaN gradient"
    assert any("policy gradient norm is nan" in r.getMessage() for r in caplog.records)
    assert all(r.get("skipped_step") or r["learner_seqs"] == 0 for r in rows)  # every update was stopped
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_require_finite_norm_and_the_update_leaves_weights_alone(tiny_tokenizer):
    from rlvr.learner.batching import collate
    from rlvr.learner.update import update_policy

    require_finite_norm(3.0)
    with pytest.raises(NonFiniteError, match="critic gradient norm is inf"):
        require_finite_norm(math.inf, "critic")
    model = make_model(tiny_tokenizer)
    cfg = tiny_run_config("unused")
    ids = tiny_tokenizer("1+1=2")["input_ids"]
    samples = [Sample("p", ids[:3], ids[3:], [-1.0] * (len(ids) - 3), "=2", "stop") for _ in range(2)]
    batch = collate(samples, torch.tensor([1.0, -1.0]), tiny_tokenizer.pad_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.lm_head.weight.register_hook(lambda g: g * float("nan"))
    with pytest.raises(NonFiniteError):
        update_policy(model, opt, batch, cfg.learner_settings())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and not opt.state


def test_no_checkpoint_is_written_with_non_finite_weights(tmp_path, tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path, 1, model, tiny_tokenizer, opt, None, {})
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=r"1 of \d+ weight tensors hold NaN or inf "
                                                    r"\(model.layers.0.mlp.up_proj.weight\)"):
        save_checkpoint(tmp_path, 2, model, tiny_tokenizer, opt, None, {})
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-000001"]  # nothing half-written


def test_reward_and_advantage_checks_name_the_source():
    names = {"verifier": "numeric", "env": "single_turn", "source": "verifier"}
    samples = [Sample(f"p{i}", [1], [2], [0.0], f"text {i}", "stop", env_return=1.0) for i in range(3)]
    verdicts = [Verdict(1.0), Verdict(float("nan")), Verdict(0.0)]
    assert nonfinite_rewards(torch.tensor([1.0, 0.0, 1.0]), samples, verdicts[:1] * 3, **names) is None
    msg = nonfinite_rewards(torch.tensor([1.0, float("nan"), 0.0]), samples, verdicts, **names, prompts={"p1": "What?"})
    assert "1 of 3 samples" in msg and "the verifier (reward.verifier=numeric) gave score nan" in msg
    assert "problem 'p1' 'What?' -> completion 'text 1'" in msg
    samples[2].env_return = float("inf")
    msg = nonfinite_rewards(torch.tensor([1.0, 0.0, float("inf")]), samples, [Verdict(1.0)] * 3, **names)
    assert "the environment (env.name=single_turn) returned reward inf" in msg
    msg = nonfinite_advantages(torch.zeros(3), torch.tensor([0.0, float("nan"), 0.0]), samples, estimator="grpo")
    assert "advantage estimator (algorithm.advantage=grpo)" in msg and "'p1'" in msg
    assert nonfinite_advantages(torch.zeros(3), torch.zeros(3, 4), samples, estimator="grpo") is None


def test_step_guard_counts_and_stops():
    g = StepGuard(max_bad_steps=2)
    assert g.metrics(skipped=False) == {}  # a healthy run's rows are unchanged
    g.skip(1, "x")
    g.stop_if_diverged(1, "x")
    g.passed()
    g.skip(3, "y")  # not in a row with step 1
    g.stop_if_diverged(3, "y")
    g.skip(4, "z")
    with pytest.raises(TrainingDiverged, match="2 steps in a row .* step 4: z"):
        g.stop_if_diverged(4, "z")
    assert g.metrics(skipped=True) == {"skipped_step": 1.0, "skipped_steps": 3.0}


def nan_verifier(completion: str, reference: str) -> Verdict:
    """Module level, so the generator process can unpickle it."""
    return Verdict(float("nan"), None, "nan")


@pytest.mark.slow  # starts a generator process (~30 s alone, more on a busy machine)
def test_skipped_steps_release_the_generator_process(tmp_path, tiny_tokenizer):
    """With rollouts from a generator process, a skipped step still publishes its policy version (the generator
    waits for it): the run ends instead of hanging."""
    model = make_model(tiny_tokenizer)
    train(tiny_run_config(tmp_path, "train.steps=3", "train.rollout_worker=true", "train.max_bad_steps=4"),
          model=model, tokenizer=tiny_tokenizer, problems=PROBS, verifier=nan_verifier)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["skipped_step"] for r in rows] == [1.0, 1.0, 1.0] and _finite(model)


class SeenAdvantages(RLRecipe):
    """Records what every step's advantages were computed from and what the learner was given."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: list[tuple[list[str], torch.Tensor, torch.Tensor]] = []

    def advantages(self, ro):
        scored = super().advantages(ro)
        self.seen.append(([s.problem_id for s in ro.samples], scored.rewards.clone(), scored.batch.advantages.clone()))
        return scored


def test_a_few_nan_rewards_leave_out_their_groups_not_the_step(tmp_path, tiny_tokenizer, caplog):
    """A verifier giving NaN on 2 of 64 samples (3%) once had 2 of 4 steps skipped: now every step trains, on the
    groups without a NaN; the NaN sample's group reaches neither the advantages nor the loss."""
    calls, nan_on = [], {5, 40}

    def verify(completion: str, reference: str) -> Verdict:
        calls.append(reference)
        return Verdict(float("nan"), None, "nan") if len(calls) in nan_on else _parity(completion, reference)

    model = make_model(tiny_tokenizer)
    recipe = SeenAdvantages(tiny_run_config(tmp_path, "train.prompts_per_step=4"), model=model,
                            tokenizer=tiny_tokenizer, problems=PROBS, verifier=verify)
    with caplog.at_level(logging.WARNING):
        recipe.train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and not any("skipped_step" in r for r in rows)
    nan_problems = {(n - 1) // 16: f"t{int(calls[n - 1]) - 1}" for n in nan_on}  # step index -> its NaN problem
    for i, (row, (ids, rewards, advantages)) in enumerate(zip(rows, recipe.seen)):
        if i in nan_problems:
            assert (row["dropped_groups"], row["nonfinite_rewards"]) == (1.0, 1.0)
            assert len(ids) == 12 and nan_problems[i] not in ids  # 3 of 4 groups trained on
        else:
            assert "dropped_groups" not in row and len(ids) == 16
        assert bool(torch.isfinite(rewards).all()) and bool(torch.isfinite(advantages).all())
        assert row["learner_seqs"] <= len(ids) and math.isfinite(row["reward_mean"])
    warned = [r.getMessage() for r in caplog.records if "left out of the update" in r.getMessage()]
    assert len(warned) == 2 and "1 of 4 groups left out of the update (the step trains on the rest): non-finite " \
        "reward on 1 of 16 samples: the verifier (reward.verifier=numeric) gave score nan" in warned[0]
    assert _finite(model)


def test_nonfinite_groups():
    r = torch.tensor([1.0, 0.0, float("nan"), 1.0, 0.0, 0.0, float("inf"), float("nan")])
    assert nonfinite_groups(r, 2) == [1, 3] and nonfinite_groups(r, 4) == [0, 1] and nonfinite_groups(r[:2], 2) == []


def test_a_verifier_failing_on_every_call_stops_the_run(tmp_path, tiny_tokenizer):
    def broken(completion: str, reference: str) -> Verdict:
        raise KeyError("no such judge")

    cfg = tiny_run_config(tmp_path, "train.steps=6", "train.save_every=1")
    with pytest.raises(VerifierFailed, match=r"^the verifier broken \(\S*test_guards\) failed on every call \(8 of 8 "
                                             r"verdicts are verifier errors\) in 3 steps in a row, the last step 3 "
                                             r"\(reward.max_verifier_failed_steps=3\); its first error: verifier "
                                             r"error: KeyError: 'no such judge'; on problem 't.*Stopped; the latest "
                                             r"checkpoint is \S*step-000002; train.resume=true continues from it$"):
        train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=PROBS, verifier=broken)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_verifier_failures_count_steps_in_a_row():
    ok, err = Verdict(1.0, None, "ok"), Verdict(0.0, None, "verifier error: ValueError: x")
    samples = [Sample("p", [1], [2], [0.0], "t", "stop")] * 2
    g = StepGuard(max_bad_steps=3)
    assert g.verifier_failures(1, [err, err], samples, "'v'", 2) is None
    assert g.verifier_failures(2, [err, ok], samples, "'v'", 2) is None  # one call worked: the count restarts
    assert g.verifier_failures(3, [err, err], samples, "'v'", 2) is None
    assert "in 2 steps in a row, the last step 4" in g.verifier_failures(4, [err, err], samples, "'v'", 2)
    assert g.verifier_failures(5, [err, err], samples, "'v'", 0) is None  # 0: never
    short = StepGuard(max_bad_steps=3)  # a run shorter than the limit: stopped at its last step
    assert short.verifier_failures(1, [err], samples, "'v'", 5) is None
    assert "in 2 steps in a row" in short.verifier_failures(2, [err], samples, "'v'", 5, last=True)
    mixed = StepGuard(max_bad_steps=3)
    mixed.verifier_failures(1, [ok], samples, "'v'", 5)
    assert mixed.verifier_failures(2, [err], samples, "'v'", 5, last=True) is None  # step 1 had a verdict
