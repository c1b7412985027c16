"""env.name=verifiers with the real verifiers 0.4 package, on tasksets written in its format (tests/envs/rlvr_test_vf_*)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from conftest import make_model, tiny_run_config  # noqa: E402
from rlvr.envs import build_environment  # noqa: E402
from rlvr.envs.verifiers_env import VerifiersEnvironment  # noqa: E402
from rlvr.recipes.rl import train  # noqa: E402
from rlvr.rollout.episodes import safe_step  # noqa: E402
from rlvr.tasks.registry import build_task  # noqa: E402
from rlvr.tasks.settings import TaskConfig  # noqa: E402
from rlvr.trackers import read_metrics  # noqa: E402
from rlvr.types import Problem  # noqa: E402

HERE = str(Path(__file__).resolve().parent)


@pytest.fixture(autouse=True)
def _plugins_importable(monkeypatch):
    monkeypatch.syspath_prepend(HERE)  # the test tasksets are modules next to this file


def _problems(taskset: str, **params):
    return build_task(TaskConfig(name="verifiers", params={"taskset": taskset, **params}, num_heldout=2))


def test_the_taskset_becomes_problems():
    train_set, held = _problems("rlvr_test_vf_add", taskset_args={"num_tasks": 6})
    assert len(train_set) == 4 and len(held) == 2
    p = next(q for q in train_set + held if q.id == "rlvr_test_vf_add/4")
    assert p.messages == [{"role": "system", "content": "Answer with the number only."},
                          {"role": "user", "content": "What is 4 + 5?"}]
    assert p.answer == "9" and p.metadata["verifiers"]["index"] == 4
    assert len(_problems("rlvr_test_vf_add", num_train=3)[0]) == 3


@pytest.mark.parametrize("text, correct, short", [("9", 1.0, 1.0), ("The answer is 9.", 1.0, 0.0), ("8", 0.0, 1.0),
                                                  ("I think it is eight", 0.0, 0.0)])
def test_reward_is_the_rubric_weighted_sum(text, correct, short):
    """Rubric: correct (weight 1) + short (weight 0.5), computed by hand for each completion."""
    env = build_environment("verifiers", None, None)
    p = next(q for q in sum(_problems("rlvr_test_vf_add"), []) if q.answer == "9")
    state = env.reset(p)
    assert state.messages == p.messages
    reply = env.step(state, text)
    assert reply.done and reply.reward == pytest.approx(1.0 * correct + 0.5 * short)
    assert reply.verdict.score == reply.reward
    assert reply.info["vf/correct"] == correct and reply.info["vf/short"] == short
    assert reply.info["vf_metric/words"] == len(text.split())


def test_a_two_turn_env_program_maps_onto_steps():
    env = build_environment("verifiers", None, None, max_turns=2)
    p = _problems("rlvr_test_vf_twoturn")[0][0]
    n = int(p.answer)
    state = env.reset(p)
    assert state.messages == [{"role": "user", "content": f"Say the number {n}."}]
    first = env.step(state, str(n))
    assert not first.done and first.observation == "Now double it." and first.role == "user"
    last = env.step(state, str(2 * n))
    assert last.done and last.reward == 1.0 and last.info["vf_metric/turns_seen"] == 2.0  # the Env's finalize ran
    # half right: the task's reward reads both replies
    state = env.reset(p)
    env.step(state, str(n))
    assert env.step(state, "no").reward == 0.5
    # each episode copy (the n samples of one reset) runs its own program
    a, b = env.reset(p), None
    import dataclasses
    b = dataclasses.replace(a, data=dict(a.data))
    env.step(a, str(n)), env.step(b, "wrong")
    assert env.step(a, str(2 * n)).reward == 1.0 and env.step(b, str(2 * n)).reward == 0.5
    # an episode cut off by rlvr's limits is closed with 0
    state = env.reset(p)
    env.step(state, str(n))
    assert env.close(state, "max_turns=1 reached").reward == 0.0


def test_refusals_and_bad_input():
    env = build_environment("verifiers", None, None, max_turns=4)
    with pytest.raises(ValueError, match="not a verifiers task"):
        env.reset(Problem("x", prompt="hi"))
    # user-sim's simulated user is a second, non-policy seat: it would need a model of its own
    p = _problems("rlvr_test_vf_add", env="user-sim")[0][0]
    with pytest.raises(RuntimeError, match="seat 'user' is not the policy"):
        env.reset(p)
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        build_environment("verifiers", None, None, max_turns=0)
    # a failing rubric ends the episode with reward 0 and the error as the reason (the runner's guard)
    q = _problems("rlvr_test_vf_add")[0][0]
    state = env.reset(q)
    broken = VerifiersEnvironment(max_turns=1, max_total_tokens=0, workers=1)
    from rlvr.tasks.verifiers_taskset import load_vf_env

    task = load_vf_env("rlvr_test_vf_add").tasks[q.metadata["verifiers"]["index"]]

    async def boom(trace):
        raise ArithmeticError("rubric broke")

    boom.reward, boom._vf_weight = True, 1.0
    task.hooks = lambda attr, _orig=task.hooks: _orig(attr) + ([boom] if attr == "reward" else [])
    try:
        reply = safe_step(broken, state, "9")
    finally:
        del task.hooks
    assert reply.done and reply.reward == 0.0 and "rubric broke" in reply.verdict.reason


def test_config_errors_at_load(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="verifiers taskset 'no_such_taskset'.*not found") as e:
        tiny_run_config(tmp_path, "task.name=verifiers", "task.params={taskset: no_such_taskset}",
                        "env.name=verifiers")
    assert "\n" not in str(e.value).strip()
    with pytest.raises(ValueError, match="verifiers taskset 'rlvr_test_vf_add' / env 'no_such_env'.*not found"):
        tiny_run_config(tmp_path, "task.name=verifiers", "task.params={taskset: rlvr_test_vf_add, env: no_such_env}")
    with pytest.raises(ValueError, match="set task.name=verifiers"):
        tiny_run_config(tmp_path, "env.name=verifiers")
    # a taskset that serves tools (MCP toolsets) needs tool servers and a harness: refused
    (tmp_path / "rlvr_test_vf_tools.py").write_text(
        "import verifiers.v1 as vf\n"
        "from rlvr_test_vf_add import AddConfig, AddTask, AddTaskset\n"
        "class ToolTaskset(AddTaskset):\n"
        "    @classmethod\n"
        "    def toolsets(cls, config):\n"
        "        return []\n"
        "__all__ = ['ToolTaskset']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="serves tools or needs a container"):
        tiny_run_config(tmp_path, "task.name=verifiers", "task.params={taskset: rlvr_test_vf_tools}",
                        "env.name=verifiers")
    # the number of turns is read from env.params (1: a single-turn episode, the runner's multi-turn rules off)
    cfg = tiny_run_config(tmp_path, "task.name=verifiers", "task.params={taskset: rlvr_test_vf_twoturn}",
                          "env.name=verifiers", "env.params={max_turns: 2}")
    from rlvr.envs import environment_traits

    assert environment_traits("verifiers", cfg.env.params).multi_turn
    assert not environment_traits("verifiers", {}).multi_turn
    with pytest.raises(ValueError, match="num_tasks"):
        tiny_run_config(tmp_path, "task.name=verifiers",
                        "task.params={taskset: rlvr_test_vf_add, taskset_args: {num_tasks: many}}")
    # the package missing: one line naming the extra
    for name in [m for m in sys.modules if m == "verifiers" or m.startswith("verifiers.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(ValueError, match=r"pip install 'rlvr\[verifiers\]'") as e:
        tiny_run_config(tmp_path, "task.name=verifiers", "task.params={taskset: rlvr_test_vf_add}",
                        "env.name=verifiers")
    assert "\n" not in str(e.value).strip()


@pytest.mark.parametrize("taskset, turns", [("rlvr_test_vf_add", 1), ("rlvr_test_vf_twoturn", 2)])
def test_two_step_train_run(tmp_path, tiny_tokenizer, taskset, turns):
    cfg = tiny_run_config(tmp_path, "train.steps=2", "task.name=verifiers", f"task.params={{taskset: {taskset}}}",
                          "task.num_heldout=1", "env.name=verifiers", f"env.params={{max_turns: {turns}}}",
                          "rollout.max_new_tokens=4",
                          "eval.after_training=true", "eval.num_problems=1", "eval.max_new_tokens=4")
    summary = train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and summary["output_dir"] == str(tmp_path)
    key = "env/vf/correct" if turns == 1 else "env/vf/both"
    assert all(key in r and 0 <= r[key] <= 1 for r in rows)
    assert all(r["env/turns"] == turns for r in rows)
    assert 0 <= summary["eval_after"]["greedy"]["accuracy"] <= 1  # held-out episodes played the same program


def test_the_two_turn_program_trains_with_async_rollouts(tmp_path, tiny_tokenizer):
    """The generator process (train.async_steps) builds the verifiers environment itself and plays its program."""
    cfg = tiny_run_config(tmp_path, "train.steps=2", "task.name=verifiers", "task.params={taskset: rlvr_test_vf_twoturn}",
                          "task.num_heldout=1", "env.name=verifiers", "env.params={max_turns: 2}",
                          "rollout.max_new_tokens=4", "train.async_steps=1", "algorithm.is_correction=tis")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and [r["staleness"] for r in rows] == [0, 1]
    assert all(r["env/turns"] == 2 and 0 <= r["env/vf/both"] <= 1 for r in rows)


def test_the_shipped_example_taskset(monkeypatch):
    """docs/examples/vf_arithmetic.py: distinct tasks whose answers are the sums, scored by verifiers' strict box."""
    monkeypatch.syspath_prepend(str(Path(HERE).parents[1] / "docs" / "examples"))
    train_set, held = build_task(TaskConfig(name="verifiers", num_heldout=50, params={
        "taskset": "vf_arithmetic", "taskset_args": {"num_tasks": 300, "low": 1, "high": 20}}))
    prompts = [p.messages[-1]["content"] for p in train_set + held]
    assert len(train_set) == 250 and len(set(prompts)) == 300  # 300 of the 400 pairs, none twice
    for p in train_set + held:
        a, b = (int(x) for x in p.messages[-1]["content"].split("?")[0].removeprefix("What is ").split(" + "))
        assert p.answer == str(a + b) and 1 <= a <= 20 and 1 <= b <= 20
    env = build_environment("verifiers", None, None)
    p = held[0]
    for text, reward, boxed in [(f"The answer is \\boxed{{{p.answer}}}.", 1.0, 1.0), (p.answer, 0.0, 0.0),
                                (f"\\boxed{{{int(p.answer) + 1}}}", 0.0, 1.0), ("\\boxed{}", 0.0, 0.0)]:
        reply = env.step(env.reset(p), text)
        assert (reply.reward, reply.info["vf_metric/boxed"]) == (reward, boxed), text
    with pytest.raises(ValueError, match="only 400 distinct tasks"):
        build_task(TaskConfig(name="verifiers", num_heldout=5, params={
            "taskset": "vf_arithmetic", "taskset_args": {"num_tasks": 401, "high": 20}}))
    with pytest.raises(ValueError, match=r"operators '\*'"):  # an operator it cannot compute: no wrong golds
        build_task(TaskConfig(name="verifiers", num_heldout=5, params={
            "taskset": "vf_arithmetic", "taskset_args": {"num_tasks": 10, "operators": "*"}}))
