"""Careless inputs, as a new user makes them, each answered by one clear line (or a warning) from the CLI.

Every case runs ``rlvr.cli.main`` and checks the exit status and the ``rlvr: error: ...`` line
(exactly one, unless a file has several bad keys: then one per key, with its line).  Inputs
that must fail *before any model loads* are given ``model.name=/nonexistent/model``: a check
that ran after loading would report the model instead.  Those cases also check that nothing
was written (no empty run directory).

Covered: config values and ranges, YAML files, data files, environments, verifiers and unknown
component names (the registries' "did you mean").  Runtime cases train the tiny test model for
two steps with components registered by this module.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.envs import ENVIRONMENTS, Environment, Limits, Reply
from rlvr.trackers import read_metrics
from rlvr.types import Verdict
from rlvr.verifiers import VERIFIERS

NO_MODEL = "model.name=/nonexistent/model"


# ----------------------------------------------------------------------------- components a user might write
class NanReward(Environment):
    """Returns reward=nan (the reported silent-corruption case)."""

    single_turn = False

    def step(self, state, text):
        return Reply(done=True, reward=float("nan"), verdict=Verdict(0.0, None, "nan"))


class ResetRaises(Environment):
    def reset(self, problem):
        raise RuntimeError("no board for this problem")

    def step(self, state, text):
        return Reply(done=True, reward=1.0, verdict=Verdict(1.0, None, "ok"))


class StepReturnsDict(Environment):
    def step(self, state, text):
        return {"done": True, "reward": 1.0}


class CloseRaises(Environment):
    limits = Limits(max_turns=2)

    def step(self, state, text):
        return Reply(observation="go on", role="user")

    def close(self, state, reason):
        raise KeyError("score table")


class ThreeTurns(Environment):
    """Multi-turn by its limits, registered without the ``multi_turn`` tag."""

    limits = Limits(max_turns=3)

    def step(self, state, text):
        return Reply(done=state.turn >= 2, reward=0.0, verdict=Verdict(0.0) if state.turn >= 2 else None,
                     observation=None if state.turn >= 2 else "again")


def _sized(verifier, tokenizer, *, size: int = 3):
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return ThreeTurns()


def _raises():
    def verify(completion, reference):
        raise ZeroDivisionError("reference parser broke")
    return verify


def _says_bool():
    def verify(completion, reference):
        return completion.strip() == reference
    return verify


def _nan_score():
    def verify(completion, reference):
        return Verdict(float("nan"), None, "nan")
    return verify


ENVS = {"test_nan_reward": lambda verifier, tokenizer: NanReward(),
        "test_reset_raises": lambda verifier, tokenizer: ResetRaises(),
        "test_step_dict": lambda verifier, tokenizer: StepReturnsDict(),
        "test_close_raises": lambda verifier, tokenizer: CloseRaises(),
        "test_three_turns": _sized}
VERIFIER_FACTORIES = {"test_raises": _raises, "test_says_bool": _says_bool, "test_nan_score": _nan_score}


@pytest.fixture(scope="module", autouse=True)
def components():
    for name, builder in ENVS.items():
        ENVIRONMENTS.add(name, builder, doc="a careless environment (tests)")
    for name, factory in VERIFIER_FACTORIES.items():
        VERIFIERS.add(name, factory, doc="a careless verifier (tests)")
    yield
    for name in ENVS:
        ENVIRONMENTS.unregister(name)
    for name in VERIFIER_FACTORIES:
        VERIFIERS.unregister(name)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from conftest import make_model, make_tokenizer

    tok = make_tokenizer()
    path = tmp_path_factory.mktemp("bad-input") / "tiny-model"
    make_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def tiny_train(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["train", f"model.name={model_dir}", f"train.output_dir={out}", "train.steps=2",
            "train.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "task.params.num_train=8",
            "task.num_heldout=2", "train.micro_batch_size=4", "eval.before_training=false",
            "eval.after_training=false", "train.progress=false", "train.save_every=0", "train.threads=1", *extra]


def errors_of(capsys, argv: list[str], rc: int) -> list[str]:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlvr: error:")]
    assert code == rc, err
    return lines


def one_error(capsys, argv: list[str], expect: str, rc: int = 2) -> str:
    lines = errors_of(capsys, argv, rc)
    assert len(lines) == 1, lines
    assert re.search(expect, lines[0]), lines[0]
    return lines[0]


# ----------------------------------------------------------------------------- config values, before any model
CONFIG_CASES = [
    # the four reported inputs: they loaded, then failed after the model with a 31-line traceback
    (["train.lr=-1e-3"], r"override 'train.lr=-1e-3': train.lr: must be > 0, got -0.001$"),
    (["rollout.top_p=2"], r"rollout.top_p: must be in \(0, 1\], got 2$"),
    (["rollout.max_new_tokens=0"], r"rollout.max_new_tokens: must be >= 1, got 0$"),
    (["rollout.temperature=-1"], r"rollout.temperature: must be >= 0, got -1$"),
    (["train.lr=.nan"], r"train.lr: must be a finite number, got nan"),
    (["train.lr=1e400"], r"train.lr: must be a finite number, got inf"),  # huge: overflows to inf
    (["rollout.group_size=0"], r"rollout.group_size: must be >= 1, got 0"),
    (["train.betas=[0.9]"], r"train.betas: needs 2 items, got 1"),
    (["reward.flip_false_positive=1.5"], r"reward.flip_false_positive: must be in \[0, 1\), got 1.5"),
    (["train.max_bad_steps=0"], r"train.max_bad_steps: must be >= 1, got 0"),
    (["reward.warn_verifier_errors=2"], r"reward.warn_verifier_errors: must be in \[0, 1\], got 2"),
    (["train.steps=1e12"], r"train.steps: expected int, got str '1e12'"),
    (["train.stepz=3"], r"unknown config key 'train.stepz'.*did you mean 'train.steps'\?"),
    (["train.steps=ten"], r"train.steps: expected int, got str 'ten'"),
    (["train.steps"], r"malformed override 'train.steps'"),
    (["train.lr=1e-3", "rollout.top_p=0", "train.steps=3"], r"^rlvr: error: override 'rollout.top_p=0': rollout.top_p"),
    # unknown component names, with a suggestion
    (["algorithm.advantage=grpoo"], r"algorithm.advantage: unknown advantage estimator 'grpoo'.*did you mean 'grpo'"),
    (["algorithm.policy_loss=ppo_clp"], r"unknown policy loss 'ppo_clp'.*did you mean 'ppo_clip'"),
    (["reward.verifier=numerc"], r"reward.verifier: unknown verifier 'numerc'.*did you mean 'numeric'"),
    (["env.name=tool"], r"env.name: unknown environment 'tool'.*did you mean 'tools'"),
    (["rollout.engine=hff"], r"rollout.engine: unknown .*'hff'.*did you mean 'hf'"),
    (["reward.source=majority"], r"unknown reward source 'majority'.*did you mean 'majority_vote'"),
    # task and environment options
    (["task.name=jsonl"], r"task.path: task.name=jsonl reads its problems from task.path: set task.path="),
    (["task.name=jsonl", "task.path=/nonexistent/data.jsonl"], r"task.path: /nonexistent/data.jsonl: no such file"),
    (["env.name=retry", "env.params={attempts: 0}"], r"env.params.attempts must be >= 1, got 0"),
    (["env.name=test_three_turns", "env.params={size: 0}"], r"env.params: size must be >= 1, got 0"),
    # multi-turn read from the environment's limits, not from a registry tag it lacks
    (["env.name=test_three_turns", "distributed.fsdp=true"],
     r"env.name=test_three_turns runs multi-turn episodes \(limits.max_turns=3\), which distributed.fsdp cannot"),
    (["env.name=test_reset_raises", "distributed.fsdp=true"],
     r"env.name=test_reset_raises runs its own reset/step, which distributed.fsdp cannot run"),
    (["env.max_concurrency=-1"], r"env.max_concurrency"),
]


@pytest.mark.parametrize("overrides,expect", CONFIG_CASES, ids=[" ".join(c[0]) for c in CONFIG_CASES])
def test_bad_config_value_is_one_line_before_the_model_loads(capsys, tmp_path, overrides, expect):
    out = tmp_path / "run"
    one_error(capsys, ["train", NO_MODEL, f"train.output_dir={out}", *overrides], expect)
    assert not out.exists()  # nothing written


def test_a_yaml_file_reports_every_bad_key_with_its_line(capsys, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"train:\n  output_dir: {tmp_path / 'run'}\n  lr: -1.0e-3\nrollout:\n  top_p: 2\n"
                   "  max_new_tokens: 0\n  temperature: -1\n")
    lines = errors_of(capsys, ["train", str(cfg), NO_MODEL], 2)
    assert lines == [f"rlvr: error: {cfg}:3: train.lr: must be > 0, got -0.001",
                     f"rlvr: error: {cfg}:5: rollout.top_p: must be in (0, 1], got 2",
                     f"rlvr: error: {cfg}:6: rollout.max_new_tokens: must be >= 1, got 0",
                     f"rlvr: error: {cfg}:7: rollout.temperature: must be >= 0, got -1"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text,expect", [
    ("train: [unclosed\n", r"bad.yaml:2: invalid YAML: while parsing a flow sequence expected ',' or ']'"),
    ("- 1\n- 2\n", r"the top level must be a mapping of config keys, got list"),
    ("train:\n  stepz: 3\n", r"bad.yaml:2: unknown config key 'train.stepz'.*did you mean 'train.steps'"),
])
def test_bad_yaml_file(capsys, tmp_path, text, expect):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    one_error(capsys, ["config", str(cfg)], expect)


# ----------------------------------------------------------------------------- data files, before any model
def _rows(n: int) -> str:
    return "".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(n))


DATA_CASES = [
    ("empty", "", r"empty.jsonl: empty file \(no JSON records\)"),
    ("malformed", '{"prompt": "1+1", "answer": "2"}\n{"prompt": "2+2", "answer": \n',
     r"malformed.jsonl:2: malformed JSON"),
    ("missing_field", '{"prompt": "1+1", "solution": "2"}\n', r"missing_field.jsonl:1: missing answer field 'answer' "
                                                               r"\(the line has: 'prompt', 'solution'\)"),
    ("wrong_type", '{"prompt": 12, "answer": "12"}\n', r"wrong_type.jsonl:1: prompt field 'prompt' must be a string, "
                                                       r"got int"),
    ("huge_answer", '{"prompt": "big", "answer": 1e400}\n', r"huge_answer.jsonl:1: answer field 'answer' is not a "
                                                            r"finite number \(inf\)"),
    ("not_object", '["1+1", "2"]\n', r"not_object.jsonl:1: expected a JSON object, got list"),
    # the reported case: fewer rows than task.num_heldout (256) left nothing to train on, said as "no training problems"
    ("too_small", _rows(10), r"task.num_heldout: all 10 problems of task.name=jsonl \(task.path=.*too_small.jsonl\) "
                             r"are held out .*set task.num_heldout below 10, e.g. task.num_heldout=2$"),
]


@pytest.mark.parametrize("name,text,expect", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_bad_data_file_is_one_line_before_the_model_loads(capsys, tmp_path, name, text, expect):
    data = tmp_path / f"{name}.jsonl"
    data.write_text(text)
    out = tmp_path / "run"
    one_error(capsys, ["train", NO_MODEL, "task.name=jsonl", f"task.path={data}", f"train.output_dir={out}"], expect)
    assert not out.exists()


def test_a_directory_as_data_file(capsys, tmp_path):
    one_error(capsys, ["train", NO_MODEL, "task.name=jsonl", f"task.path={tmp_path}"],
              rf"task.path: {re.escape(str(tmp_path))}: not a file")


# ----------------------------------------------------------------------------- post-training commands, before any model
def test_sft_file_without_a_completion_field(capsys, tmp_path):
    data = tmp_path / "chats.jsonl"
    data.write_text('{"prompt": "What is 1 + 1?", "completion": "2"}\n{"prompt": "What is 2 + 2?", "answer": "4"}\n')
    out = tmp_path / "run"
    line = one_error(capsys, ["sft", NO_MODEL, "data.source=jsonl", f"data.path={data}", f"train.output_dir={out}",
                              "eval.accuracy=false"], r"chats\.jsonl:2")
    assert "completion" in line and "answer" in line  # the field it wants and the fields the line has
    assert not out.exists()


@pytest.mark.parametrize("overrides,expect", [
    (["distill.teacher=/nonexistent/teacher", "distill.coef=-1"], r"distill.coef: must be >= 0, got -1"),
    (["distill.teacher=/nonexistent/teacher", "distill.coef=0"], r"distill.coef.*reward_coef.*0"),
    (["distill.chunk_size=0", "distill.teacher=/nonexistent/teacher"], r"distill.chunk_size: must be >= 1, got 0"),
])
def test_bad_distillation_values(capsys, tmp_path, overrides, expect):
    out = tmp_path / "run"
    one_error(capsys, ["train", NO_MODEL, f"train.output_dir={out}", *overrides], expect)
    assert not out.exists()


def test_a_teacher_that_does_not_exist_is_named_before_any_model_loads(capsys, tmp_path, model_dir):
    out = tmp_path / "run"
    one_error(capsys, tiny_train(model_dir, out, "distill.teacher=/nonexistent/teacher"),
              r"distill.teacher: .*/nonexistent/teacher")
    assert not (out / "checkpoints").exists()


@pytest.mark.parametrize("stages,expect", [
    ("[]", r"stages: the list is empty"),
    ("[{kind: sftt}]", r"unknown stage kind 'sftt'.*did you mean 'sft'"),
    ("[{kind: distill}]", r"stage 1, distill.*needs distill.teacher"),
])
def test_bad_pipeline_stage_lists(capsys, tmp_path, stages, expect):
    out = tmp_path / "pipe"
    one_error(capsys, ["pipeline", f"output_dir={out}", f"stages={stages}"], expect)
    assert not out.exists()


# ----------------------------------------------------------------------------- rlvr eval / verify options
def test_eval_unknown_verifier_before_the_model_loads(capsys):
    one_error(capsys, ["eval", "--task", "math500", "--verifier", "mth", "--model", "/nonexistent/model"],
              r"--verifier: unknown verifier 'mth'.*did you mean 'math'")


@pytest.mark.parametrize("flags,expect", [(["--n", "0"], r"--n: must be >= 1, got 0"),
                                          (["--top-p", "1.5"], r"--top-p: must be in \(0, 1\], got 1.5"),
                                          (["--temperature", "-0.5"], r"--temperature: must be >= 0"),
                                          (["--task", "jsonl"], r"--path: --task jsonl needs --path FILE.jsonl")])
def test_eval_bad_flags(capsys, flags, expect):
    one_error(capsys, ["eval", "--model", "/nonexistent/model", *flags], expect)


def test_verify_unknown_verifier(capsys, tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text('{"completion": "2", "reference": "2"}\n')
    one_error(capsys, ["verify", str(data), "--verifier", "nope", "--output", str(tmp_path / "v.jsonl")],
              r"unknown verifier 'nope'")


# ----------------------------------------------------------------------------- environments and verifiers, training
def test_nan_reward_environment_stops_after_max_bad_steps(capsys, tmp_path, model_dir, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        one_error(capsys, tiny_train(model_dir, out, "env.name=test_nan_reward", "train.max_bad_steps=2"),
                  r"2 steps in a row were skipped for non-finite values \(train.max_bad_steps=2\); the last, step 2: "
                  r"non-finite reward on 4 of 4 samples: the environment \(env.name=test_nan_reward\) returned reward "
                  r"nan; .*no checkpoint was written", rc=1)
    assert not (out / "checkpoints").exists()  # not one of NaN weights, not one at all
    assert [r["skipped_step"] for r in read_metrics(out / "metrics.jsonl")] == [1.0, 1.0]


def test_environment_returning_the_wrong_type_fails_at_its_first_call(capsys, tmp_path, model_dir):
    one_error(capsys, tiny_train(model_dir, tmp_path / "run", "env.name=test_step_dict"),
              r"environment 'test_step_dict': step returned dict \{'done': True, 'reward': 1.0\}, not an "
              r"rlvr.envs.Reply", rc=1)


def test_environment_whose_reset_raises_ends_only_its_episodes(capsys, tmp_path, model_dir, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        assert main(tiny_train(model_dir, out, "env.name=test_reset_raises")) == 0
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["env/env_errors"] for r in rows] == [1.0, 1.0] and all(r["reward_mean"] == 0.0 for r in rows)
    summary = [r.getMessage() for r in caplog.records if "ended with an error" in r.getMessage()]
    assert len(summary) == 2  # one line per step, not one per episode
    assert "environment 'test_reset_raises': 4 of 4 episodes ended with an error, scored 0 (errors in reset: 2); " \
           "first, on problem" in summary[0] and "RuntimeError: no board for this problem (in reset)" in summary[0]


def test_environment_whose_close_raises_ends_only_its_episodes(capsys, tmp_path, model_dir, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        assert main(tiny_train(model_dir, out, "env.name=test_close_raises", "train.steps=1")) == 0
    assert read_metrics(out / "metrics.jsonl")[0]["env/env_errors"] == 1.0
    assert any("(errors in close: 4)" in r.getMessage() and "KeyError: 'score table' (in close)" in r.getMessage()
               for r in caplog.records)


def test_verifier_that_always_raises_warns_then_stops_the_run(capsys, tmp_path, model_dir, caplog):
    """It once trained to the end on rewards of 0 and exited 0: now it warns at the first step and, every call of
    the two-step run having failed, stops at the last with exit status 1, naming the verifier and its error."""
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        one_error(capsys, tiny_train(model_dir, out, "reward.verifier=test_raises"),
                  r"the verifier 'test_raises' \(reward.verifier\) failed on every call \(4 of 4 verdicts are verifier "
                  r"errors\) in 2 steps in a row, the last step 2 \(reward.max_verifier_failed_steps=3\); its first "
                  r"error: verifier error: ZeroDivisionError: reference parser broke; on problem .*Stopped; no "
                  r"checkpoint was written, so train.resume=true would start from scratch$", rc=1)
    warned = [r.getMessage() for r in caplog.records if "verifier errors" in r.getMessage()]
    assert len(warned) == 1  # once while the rate stays above reward.warn_verifier_errors
    assert "step 1: 4 of 4 verdicts (100%) are verifier errors of reward.verifier=test_raises" in warned[0]
    assert "first: verifier error: ZeroDivisionError: reference parser broke" in warned[0]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]  # the failing step 2 is not trained


def test_verifier_that_always_raises_runs_on_when_told_never_to_stop(capsys, tmp_path, model_dir):
    assert main(tiny_train(model_dir, tmp_path / "run", "reward.verifier=test_raises",
                           "reward.max_verifier_failed_steps=0")) == 0


def test_verifier_returning_a_bool_fails_at_its_first_call(capsys, tmp_path, model_dir):
    one_error(capsys, tiny_train(model_dir, tmp_path / "run", "reward.verifier=test_says_bool"),
              r"verifier 'test_says_bool' returned bool (True|False): a verifier returns rlvr.types.Verdict", rc=1)


def test_verifier_with_a_nan_score_is_named(capsys, tmp_path, model_dir):
    one_error(capsys, tiny_train(model_dir, tmp_path / "run", "reward.verifier=test_nan_score",
                                 "train.max_bad_steps=1"),
              r"the verifier \(reward.verifier=test_nan_score\) gave score nan; e.g. problem", rc=1)
