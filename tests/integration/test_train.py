"""End-to-end GRPO on a tiny random model: metrics, checkpoints, exact resume, kill -9 and Ctrl-C."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import TrainingInterrupted, train
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict

from conftest import make_model, tiny_run_config

REQUIRED_METRICS = {"step", "reward_mean", "reward_std", "accuracy", "response_length", "clip_frac", "entropy",
                    "tokens_per_s", "step_time", "gen_time", "learn_time", "lr", "grad_norm",
                    "zero_variance_groups", "logprob_mismatch"}


def parity_verifier(completion: str, reference: str) -> Verdict:
    """Rewards completions of even length: a signal a random tiny model can learn from."""
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _problems(n: int, prefix: str) -> list[Problem]:
    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


def _cfg(out: Path, *extra: str) -> RunConfig:
    return tiny_run_config(out, "train.micro_batch_size=3", "train.save_every=2", "eval.before_training=true",
                           "eval.after_training=true", "eval.num_problems=4", "eval.max_new_tokens=6", *extra)


def _run(tok, out, *extra, model=None, on_step=None):
    model = model or make_model(tok)
    summary = train(_cfg(out, *extra), model=model, tokenizer=tok, problems=(_problems(10, "t"), _problems(4, "h")),
                    verifier=parity_verifier, on_step=on_step)
    return model, summary


def test_two_steps_end_to_end(tmp_path, tiny_tokenizer):
    model0 = make_model(tiny_tokenizer)
    model, summary = _run(tiny_tokenizer, tmp_path, "train.steps=2")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert REQUIRED_METRICS <= set(rows[0]), REQUIRED_METRICS - set(rows[0])
    assert all(0 <= r["accuracy"] <= 1 and r["response_length"] <= 8 for r in rows)
    # parameters moved (some groups had non-zero advantages)
    assert any(r["learner_seqs"] > 0 for r in rows)
    changed = any(not torch.equal(a, b.cpu()) for a, b in zip(model0.state_dict().values(), model.state_dict().values()))
    assert changed
    # first PPO epoch is exactly on-policy and the sampler agrees with the learner
    assert all(abs(r["ratio_mean"] - 1.0) < 1e-6 for r in rows if r["learner_seqs"])
    assert all(r["logprob_mismatch"] < 1e-4 for r in rows if r["learner_seqs"])
    assert all(r["logprob_mismatch"] <= r["logprob_mismatch_max"] < 1e-4 and r["sampler_ratio_outside"] == 0
               for r in rows if r["learner_seqs"])
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step-000002" and (ckpt / "model" / "model.safetensors").is_file()
    assert (tmp_path / "eval_before.json").is_file() and "eval_after" in summary
    assert (tmp_path / "config.yaml").is_file()


@pytest.mark.parametrize("optimizer", ["adamw", "adamw_bf16"])
def test_resume_matches_uninterrupted_run(tmp_path, tiny_tokenizer, optimizer):
    opt = f"train.optimizer={optimizer}"
    full_model, _ = _run(tiny_tokenizer, tmp_path / "full", opt)

    def interrupt_after_two(row):
        if row["step"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        _run(tiny_tokenizer, tmp_path / "split", opt, on_step=interrupt_after_two)
    assert latest_checkpoint(tmp_path / "split").name == "step-000002"
    resumed_model, _ = _run(tiny_tokenizer, tmp_path / "split", opt, "train.resume=true")

    for (k, a), b in zip(full_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), k
    full = read_metrics(tmp_path / "full" / "metrics.jsonl")
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    assert [r["step"] for r in split] == [1, 2, 3, 4]
    assert any(r["learner_seqs"] > 0 for r in split[2:])  # the resumed half really trained
    for a, b in zip(full, split):
        assert a["reward_mean"] == b["reward_mean"] and a["response_length"] == b["response_length"]
        assert a.keys() == b.keys()
        assert a.get("loss", 0.0) == pytest.approx(b.get("loss", 0.0), abs=1e-6)



@pytest.mark.parametrize("calls_before_interrupt", [0, 2])
def test_interrupt_between_steps_claims_no_unrun_step(tmp_path, tiny_tokenizer, monkeypatch, calls_before_interrupt):
    """Ctrl-C before the first step or between two steps (here: while the next step's sampling
    state is being snapshotted) checkpoints exactly the steps whose log line was written."""
    from rlvr.recipes.rl import RLRecipe

    real, calls = RLRecipe.snapshot, []

    def snapshot(self):
        calls.append(1)
        if len(calls) > calls_before_interrupt:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(RLRecipe, "snapshot", snapshot)
    with pytest.raises(TrainingInterrupted):
        _run(tiny_tokenizer, tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, calls_before_interrupt + 1))
    ck = latest_checkpoint(tmp_path)
    assert torch.load(ck / "state.pt", weights_only=False)["step"] == calls_before_interrupt
    monkeypatch.setattr(RLRecipe, "snapshot", real)
    _run(tiny_tokenizer, tmp_path, "train.resume=true")
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]


SCRIPT = textwrap.dedent("""
    import signal
    import sys
    from rlvr.verifiers import register_verifier

    # a test run started in the background (`cmd &` in a non-interactive shell) inherits SIGINT ignored,
    # and Python keeps it ignored: Ctrl-C must mean Ctrl-C here, as it does at a terminal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from rlvr.types import Verdict

    @register_verifier("parity")
    def _factory():
        return lambda c, r: Verdict(1.0 if len(c) % 2 == 0 else 0.0, str(len(c)), "parity")

    from rlvr.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _cli_args(model_dir, out, data, steps, *extra):
    return ["train", f"model.name={model_dir}", "task.name=jsonl", f"task.path={data}", "task.num_heldout=2",
            "reward.verifier=parity", f"train.output_dir={out}", f"train.steps={steps}", "train.prompts_per_step=2",
            "rollout.group_size=4", "rollout.max_new_tokens=8", "train.lr=1e-2", "train.warmup_steps=0",
            "train.save_every=1", "train.keep_checkpoints=10", "eval.before_training=false",
            "eval.after_training=false", "train.seed=5", "train.threads=1", *extra]


@pytest.fixture
def cli_setup(tmp_path, tiny_model_dir):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i}?", "answer": str(i)}) + "\n" for i in range(12)))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    import rlvr

    env = {**os.environ, "PYTHONPATH": str(Path(rlvr.__file__).resolve().parents[1])}
    return tmp_path, tiny_model_dir, data, script, env


def _weights(ckpt: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(ckpt / "model" / "model.safetensors")


def test_kill_9_loses_at_most_the_steps_since_the_last_checkpoint(cli_setup):
    tmp, model_dir, data, script, env = cli_setup
    steps = 12
    # uninterrupted reference
    ref = subprocess.run([sys.executable, str(script), *_cli_args(model_dir, tmp / "ref", data, steps)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    # killed with SIGKILL as soon as step 3's checkpoint is complete
    proc = subprocess.Popen([sys.executable, str(script), *_cli_args(model_dir, tmp / "run", data, steps)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        ck = latest_checkpoint(tmp / "run")
        if ck is not None and int(ck.name.split("-")[1]) >= 3:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    ck = latest_checkpoint(tmp / "run")
    assert ck is not None and int(ck.name.split("-")[1]) < steps, "the run finished before it could be killed"
    res = subprocess.run([sys.executable, str(script), *_cli_args(model_dir, tmp / "run", data, steps), "--resume"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    a, b = _weights(latest_checkpoint(tmp / "ref")), _weights(latest_checkpoint(tmp / "run"))
    assert latest_checkpoint(tmp / "run").name == f"step-{steps:06d}"
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    rows = read_metrics(tmp / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))


def test_ctrl_c_writes_a_checkpoint(cli_setup):
    tmp, model_dir, data, script, env = cli_setup
    proc = subprocess.Popen([sys.executable, str(script), *_cli_args(model_dir, tmp / "run", data, 500,
                                                                     "train.save_every=0")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (tmp / "run" / "metrics.jsonl").exists():
        time.sleep(0.05)
    while time.time() < deadline and not read_metrics(tmp / "run" / "metrics.jsonl"):
        time.sleep(0.05)
    assert latest_checkpoint(tmp / "run") is None  # save_every=0: nothing saved yet
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:]
    assert "checkpoint written" in out
    ck = latest_checkpoint(tmp / "run")
    assert ck is not None
    state = torch.load(ck / "state.pt", weights_only=False)
    logged = read_metrics(tmp / "run" / "metrics.jsonl")
    assert state["step"] == logged[-1]["step"]  # the checkpoint is the last finished step


def test_bf16_autocast_trains_fp32_master_weights(tmp_path, tiny_tokenizer):
    model0 = make_model(tiny_tokenizer)
    model, _ = _run(tiny_tokenizer, tmp_path, "train.steps=2", "train.autocast=bfloat16")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert any(r["learner_seqs"] > 0 for r in rows)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(a, b.cpu()) for a, b in zip(model0.state_dict().values(), model.state_dict().values()))
    # the fp32 sampler and the bf16 learner disagree a little: the mismatch metric must see it
    assert any(r["logprob_mismatch"] > 1e-5 for r in rows if r["learner_seqs"])


@pytest.mark.parametrize("extra", [
    ("algorithm.advantage=rloo", "algorithm.policy_loss=dual_clip", "algorithm.mini_batches=2"),
    ("algorithm.advantage=passk", "algorithm.advantage_params.k=2", "rollout.group_size=8",
     "algorithm.policy_loss=gspo",
     "algorithm.loss_agg=seq_mean_token_mean"),
    ("algorithm.advantage=w_reinforce", "algorithm.policy_loss=topr", "algorithm.entropy_coef=0.01",
     "algorithm.mini_batches=2"),
    ("algorithm.advantage=noisy_backward", "algorithm.advantage_params={rho0: 0.1, rho1: 0.1}",
     "algorithm.is_correction=tis", "rollout.dtype=bfloat16", "reward.shaping={overlong: {cache_len: 4}}"),
    ("train.logprob_chunk_size=5", "train.micro_batch_tokens=40", "train.activation_checkpointing=true",
     "algorithm.kl_coef=0.05", "algorithm.entropy_coef=0.01", "train.autocast=bfloat16"),
    ("train.micro_batch_tokens=40", "train.share_prompts=true", "algorithm.kl_coef=0.05",
     "algorithm.entropy_coef=0.01"),
    ("algorithm.advantage=entropy_guided", "train.logprob_chunk_size=7"),
])
def test_algorithm_variants_train(tmp_path, tiny_tokenizer, extra):
    model0 = make_model(tiny_tokenizer)
    model, _ = _run(tiny_tokenizer, tmp_path, "train.steps=2", "eval.before_training=false",
                    "eval.after_training=false", *extra, model=make_model(tiny_tokenizer))
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert {"adv_mean", "adv_std", "sampling_rounds"} <= set(rows[0])
    trained = [r for r in rows if r["learner_seqs"] > 0]
    assert trained and all({"clip_frac_low", "clip_frac_high", "loss"} <= set(r) for r in trained)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows if "loss" in r)
    assert any(not torch.equal(a, b.cpu()) for a, b in zip(model0.state_dict().values(), model.state_dict().values()))


def test_dynamic_sampling_refills_with_informative_groups(tmp_path, tiny_tokenizer):
    def half_constant(completion: str, reference: str) -> Verdict:
        # odd-numbered problems: always right (a zero-variance group); the rest: parity
        return Verdict(1.0 if int(reference) % 4 == 3 or len(completion) % 2 == 0 else 0.0, None, "")

    cfg = _cfg(tmp_path, "train.steps=3", "algorithm.dynamic_sampling=true", "algorithm.max_sampling_rounds=6",
               "eval.before_training=false", "eval.after_training=false")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer,
          problems=(_problems(10, "t"), []), verifier=half_constant)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert any(r["sampling_rounds"] > 1 for r in rows)
    for r in rows:
        if r["sampling_rounds"] < 6:  # filled: every kept group is informative
            assert r["zero_variance_groups"] == 0


def test_reward_noise_injection_changes_rewards_not_accuracy(tmp_path, tiny_tokenizer):
    never = lambda completion, reference: Verdict(0.0, None, "no")  # noqa: E731
    cfg = _cfg(tmp_path, "train.steps=2", "reward.flip_false_positive=0.95", "eval.before_training=false",
               "eval.after_training=false")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(_problems(10, "t"), []),
          verifier=never)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all(r["accuracy"] == 0 for r in rows)
    assert sum(r["reward_mean"] for r in rows) / len(rows) > 0.8  # 16 samples per step, p = 0.95


def test_config_rejects_unknown_estimators():
    with pytest.raises(Exception, match="registered: .*rloo"):
        load_config(RunConfig, None, ["algorithm.advantage=nope"]).check()
    load_config(RunConfig, None, ["algorithm.advantage=gae"]).check()  # PPO's critic: tests/integration/test_ppo_critic.py


def test_rollout_budget_and_periodic_heldout_eval(tmp_path, tiny_tokenizer):
    # 2 prompts x 4 samples = 8 completions per step: a budget of 20 stops after 3 steps
    _run(tiny_tokenizer, tmp_path, "train.steps=10", "train.max_rollouts=20", "eval.every=2",
         "eval.before_training=false", "eval.after_training=false")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["rollouts"] for r in rows] == [8, 16, 24]
    assert latest_checkpoint(tmp_path).name == "step-000003"
    held = read_metrics(tmp_path / "heldout.jsonl")
    assert [(r["step"], r["rollouts"]) for r in held] == [(2, 16), (3, 24)]  # every 2 steps, and at the end
    assert 0 <= held[0]["heldout_ci_low"] <= held[0]["heldout_accuracy"] <= held[0]["heldout_ci_high"] <= 1
    assert held[0]["heldout_n"] == 4


def test_wall_clock_budget_stops_before_the_next_step(tmp_path, tiny_tokenizer, monkeypatch):
    import rlvr.recipes.rl as grpo

    now = [0.0]  # a clock that moves 40 s per training step and not otherwise
    monkeypatch.setattr(grpo.time, "perf_counter", lambda: now[0])

    def tick(row):
        now[0] += 40.0

    _run(tiny_tokenizer, tmp_path, "train.steps=10", "train.max_minutes=1", "train.save_every=0",
         "eval.before_training=false", "eval.after_training=false", on_step=tick)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 2  # 40 s < 1 min: a second step; 80 s >= 1 min: no third
    with pytest.raises(Exception, match="train.max_minutes"):
        load_config(RunConfig, None, ["train.max_minutes=-1"]).check()


def test_rollout_budget_counts_every_dynamic_sampling_round(tmp_path, tiny_tokenizer):
    def half_constant(completion: str, reference: str) -> Verdict:
        return Verdict(1.0 if int(reference) % 4 == 3 or len(completion) % 2 == 0 else 0.0, None, "")

    cfg = _cfg(tmp_path, "train.steps=10", "train.max_rollouts=40", "algorithm.dynamic_sampling=true",
               "algorithm.max_sampling_rounds=6", "eval.before_training=false", "eval.after_training=false")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(_problems(10, "t"), []),
          verifier=half_constant)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    per_step = [b["rollouts"] - a for a, b in zip([0] + [r["rollouts"] for r in rows], rows)]
    assert per_step == [8 * r["sampling_rounds"] for r in rows]
    assert rows[-1]["rollouts"] == 40  # extra rounds never overshoot the budget (one round is 8)
    assert any(r["sampling_rounds"] > 1 for r in rows)


def test_difficulty_filter_skips_prompts_outside_the_band(tmp_path, tiny_tokenizer, monkeypatch):
    import rlvr.recipes.rl as grpo

    problems = _problems(6, "t")  # answers 1, 3, 5, 7, 9, 11
    always = {"t0", "t3"}  # answers 1 and 7: always right, pass rate 1.0 > difficulty_high after one sight

    def verifier(completion: str, reference: str) -> Verdict:
        return Verdict(1.0 if reference in {"1", "7"} or len(completion) % 2 == 0 else 0.0, None, "")

    seen: list[str] = []
    orig = grpo.collect_rollouts

    def spy(engine, sampler, verifier_, params, cfg_, step, dfilter=None, **kw):
        out = orig(engine, sampler, verifier_, params, cfg_, step, dfilter, **kw)
        seen.extend(s.problem_id for s in out.samples[:: params.n])
        return out

    monkeypatch.setattr(grpo, "collect_rollouts", spy)
    cfg = _cfg(tmp_path, "train.steps=6", "algorithm.difficulty_filter=true", "algorithm.difficulty_high=0.9",
               "eval.before_training=false", "eval.after_training=false")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(problems, []),
          verifier=verifier)
    first_epoch, later = seen[:6], seen[6:]
    assert sorted(first_epoch) == sorted(p.id for p in problems)  # unseen prompts are all tried once
    assert len(later) == 6 and not (set(later) & always)  # always-solved prompts are never generated again
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[-1]["filter_tracked_prompts"] == 6


def test_laser_bonus_rewards_short_correct_answers(tmp_path, tiny_tokenizer):
    always = lambda completion, reference: Verdict(1.0, None, "")  # noqa: E731
    # every completion is correct and at most 8 tokens: LASER with target 8 adds alpha to all
    cfg = _cfg(tmp_path, "train.steps=1", "reward.shaping={laser: {target_length: 8, alpha: 0.25}}",
               "eval.before_training=false", "eval.after_training=false")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(_problems(4, "t"), []),
          verifier=always)
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["reward_mean"] == pytest.approx(1.25)


def test_kl_in_reward_and_reference_reset(tmp_path, tiny_tokenizer):
    _run(tiny_tokenizer, tmp_path, "train.steps=4", "algorithm.kl_coef=0.1", "algorithm.kl_in_reward=true",
         "algorithm.ref_reset_every=2", "algorithm.advantage=rloo", "eval.before_training=false",
         "eval.after_training=false")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["ref_reset"] for r in rows] == [0, 1, 0, 1]
    # step 1 samples from the reference itself: the summed k1 is ~0 (sampler = learner = reference)
    assert abs(rows[0]["kl_in_reward"]) < 1e-4
    assert rows[1]["kl_in_reward"] != 0.0  # the policy moved away from the reference after one update
    assert "kl" not in rows[0]  # no KL loss term when it is folded into the reward
    state = torch.load(latest_checkpoint(tmp_path) / "state.pt", weights_only=False)
    assert state["ref_reset"]["last_reset"] == 4 and state["reference"] is not None


def test_config_needs_a_reference_for_kl_in_reward():
    with pytest.raises(Exception, match="kl_coef > 0"):
        load_config(RunConfig, None, ["algorithm.kl_in_reward=true"]).check()


def test_entropy_guided_advantages_teach_from_zero_variance_groups(tmp_path, tiny_tokenizer):
    always = lambda completion, reference: Verdict(1.0, None, "")  # noqa: E731  every group: all correct
    for adv, expect_learning in (("grpo", False), ("entropy_guided", True)):
        model0 = make_model(tiny_tokenizer)
        model = make_model(tiny_tokenizer)
        out = tmp_path / adv
        cfg = _cfg(out, "train.steps=1", f"algorithm.advantage={adv}", "algorithm.advantage_params={alpha: 0.5}"
                   if adv == "entropy_guided" else "algorithm.advantage_params={}",
                   "eval.before_training=false", "eval.after_training=false")
        train(cfg, model=model, tokenizer=tiny_tokenizer, problems=(_problems(4, "t"), []), verifier=always)
        row = read_metrics(out / "metrics.jsonl")[0]
        moved = any(not torch.equal(a, b.cpu()) for a, b in zip(model0.state_dict().values(), model.state_dict().values()))
        assert (row["learner_seqs"] > 0) == expect_learning and moved == expect_learning, (adv, row)
        if expect_learning:  # all-correct groups: A = alpha * H >= 0, positive somewhere
            assert row["adv_mean"] > 0


def test_policy_entropy_is_aligned_with_completion_tokens(tiny_tokenizer):
    from rlvr.learner.batching import collate
    from rlvr.learner.update import policy_entropy as _policy_entropy
    from rlvr.types import Sample

    model = make_model(tiny_tokenizer).eval()
    samples = [Sample("a", [5, 6, 7], [8, 9], [0.0, 0.0], "", "stop"),
               Sample("b", [5], [10, 11, 12, 13], [0.0] * 4, "", "length"),
               Sample("c", [5, 6], [14], [0.0], "", "stop")]
    batch = collate(samples, torch.zeros(3), pad_id=0)
    cfg = _cfg(Path("/tmp"), "train.micro_batch_size=2")
    ent = _policy_entropy(model, batch, cfg.learner_settings(), torch.device("cpu"))
    assert torch.equal(ent != 0, batch.completion_mask.bool())
    for i, s in enumerate(samples):  # each row against an unpadded forward pass of that sample alone
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(s.prompt_ids) - 1:-1].float()
        p = logits.log_softmax(-1)
        want = -(p.exp() * p).sum(-1)
        got = ent[i][batch.completion_mask[i].bool()]
        assert torch.allclose(got, want, atol=1e-4), (i, got, want)


def test_every_step_logs_the_verdict_histogram_and_hack_flags(tmp_path, tiny_tokenizer):
    """The hack monitor (rlvr.rewards.monitors) runs in the recipe: shares of verdict reasons, flags, resume."""
    _run(tiny_tokenizer, tmp_path, "train.steps=2")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all(r["verdict/parity"] == 1.0 for r in rows)  # parity_verifier gives one reason to every sample
    assert all(r["hack/flags"] == 0.0 and "hack/restatement_share" in r for r in rows)
    state = torch.load(latest_checkpoint(tmp_path) / "state.pt", weights_only=False)
    assert state["hack_monitor"]["steps"] == 2  # checkpointed, so a resumed run keeps its rolling window


def test_sleep_while_learning_changes_no_number(tmp_path, tiny_tokenizer):
    """Freeing the bf16 sampler copy during the learner step and refilling it at the sync: same run, bit for bit."""
    timing = {"tokens_per_s", "step_time", "gen_time", "learn_time", "verify_time", "sync_time", "wait_time",
              "peak_rss_mb", "rss_mb", "time", "verify_share"}
    base, _ = _run(tiny_tokenizer, tmp_path / "a", "rollout.dtype=bfloat16", "train.steps=3")
    slept, _ = _run(tiny_tokenizer, tmp_path / "b", "rollout.dtype=bfloat16", "train.steps=3",
                    "rollout.sleep_while_learning=true")
    ra, rb = read_metrics(tmp_path / "a" / "metrics.jsonl"), read_metrics(tmp_path / "b" / "metrics.jsonl")
    assert len(ra) == len(rb) == 3 and any(r["learner_seqs"] > 0 for r in ra)
    for a, b in zip(ra, rb):
        assert {k: v for k, v in a.items() if k not in timing and not k.endswith("_s")} == \
            {k: v for k, v in b.items() if k not in timing and not k.endswith("_s")}
    for a, b in zip(base.state_dict().values(), slept.state_dict().values()):
        assert torch.equal(a, b)
    assert all(p.grad is None for p in slept.parameters())  # freed after the last step, not kept until the next


def test_share_prompts_with_a_kernel_without_custom_masks_fails_before_sampling(tmp_path, tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    model.config._attn_implementation = "flash_attention_2"
    sampled = []
    with pytest.raises(ValueError, match="train.share_prompts needs sdpa or eager"):
        _run(tiny_tokenizer, tmp_path, "train.steps=1", "train.micro_batch_tokens=40", "train.share_prompts=true",
             model=model, on_step=sampled.append)
    assert not sampled and not (tmp_path / "metrics.jsonl").exists()


def test_deterministic_mode_holds_during_the_run_and_is_restored(tmp_path, tiny_tokenizer):
    seen = []
    _run(tiny_tokenizer, tmp_path, "train.steps=1", "train.deterministic=error", on_step=lambda row: seen.append(
        (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())))
    assert seen == [(True, False)]  # every op of the step ran under the mode without raising
    assert not torch.are_deterministic_algorithms_enabled()


def _trajectory(tmp_path, tok, name, *extra):
    """The per-step rewards, lengths and learner losses of a 4-step run (timing columns left out)."""
    _run(tok, tmp_path / name, "train.steps=4", "train.save_every=0", *extra)
    keys = ("reward_mean", "response_length", "loss", "grad_norm", "accuracy")
    return [tuple(r.get(k) for k in keys) for r in read_metrics(tmp_path / name / "metrics.jsonl")]


def test_evaluation_leaves_the_training_trajectory_alone(tmp_path, tiny_tokenizer):
    """An evaluation seeds the engine with eval.seed; training must continue from its own stream: the same
    run with or without the evaluation before training and every step samples the same completions."""
    plain = _trajectory(tmp_path, tiny_tokenizer, "plain", "eval.before_training=false", "eval.every=0")
    evaluated = _trajectory(tmp_path, tiny_tokenizer, "evaluated", "eval.before_training=true", "eval.every=1",
                            "eval.temperature=1.0")
    assert plain == evaluated
    # and train.seed reaches sampling even when an evaluation runs first
    other = _trajectory(tmp_path, tiny_tokenizer, "other", "eval.before_training=true", "train.seed=4")
    assert other != evaluated


def test_bf16_sampler_mismatch_is_measured_per_token(tmp_path, tiny_tokenizer):
    """A bf16 sampler against the fp32 learner: the step's largest |log-prob difference| bounds its mean, and the
    share of tokens whose ratio leaves [0.9, 1.1] is a fraction that is nonzero only with a mismatch that large."""
    _run(tiny_tokenizer, tmp_path, "train.steps=2", "rollout.dtype=bfloat16")
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["learner_seqs"]]
    assert rows
    for r in rows:
        assert 0 < r["logprob_mismatch"] <= r["logprob_mismatch_max"]
        assert 0 <= r["sampler_ratio_outside"] <= 1
        if r["logprob_mismatch_max"] < math.log(1.1) * 0.9:
            assert r["sampler_ratio_outside"] == 0


def test_eval_batch_size_holds_in_evaluations_only(tmp_path, tiny_tokenizer, monkeypatch):
    """eval.batch_size is the engine's chunk size in every held-out evaluation; rollouts keep rollout.batch_size."""
    import rlvr.recipes.rl as rl
    from rlvr.engines.hf import HFEngine

    seen = {"eval": [], "rollout": []}
    in_eval = [False]
    evaluate, generate = rl.evaluate_accuracy, HFEngine.generate

    def evaluating(*a, **k):
        in_eval[0] = True
        try:
            return evaluate(*a, **k)
        finally:
            in_eval[0] = False

    def generating(self, *a, **k):
        seen["eval" if in_eval[0] else "rollout"].append(self.batch_size)
        return generate(self, *a, **k)

    monkeypatch.setattr(rl, "evaluate_accuracy", evaluating)
    monkeypatch.setattr(HFEngine, "generate", generating)
    _run(tiny_tokenizer, tmp_path, "train.steps=2", "eval.every=1", "eval.batch_size=3", "rollout.batch_size=8")
    assert seen["eval"] and set(seen["eval"]) == {3}  # before, every step, after
    assert seen["rollout"] and set(seen["rollout"]) == {8}
    with pytest.raises(Exception, match="eval.batch_size"):
        _cfg(tmp_path, "eval.batch_size=-1")
