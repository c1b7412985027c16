"""The execution-feedback environment: failing tests come back as feedback, rewards are discounted per attempt."""

from __future__ import annotations

import json
import re
import threading

import pytest

from conftest import make_model, make_tokenizer, tiny_run_config
from rlvr.engines.base import EngineBase
from rlvr.engines import SamplingParams
from rlvr.envs import build_environment
from rlvr.envs.code_feedback import RETRY_INSTRUCTION, feedback_message
from rlvr.rollout.episodes import episode_metrics, run_episodes
from rlvr.tasks.code_functions import code_function_problems
from rlvr.types import Problem, Sample, Verdict
from rlvr.verifiers import get_verifier

REF = json.dumps({"entry_point": "double", "prompt": "", "test": (
    "def check(candidate):\n"
    "    for x, want in [(1, 2), (3, 6), (10, 20)]:\n"
    "        got = candidate(x)\n"
    "        assert got == want, f'double({x!r}) returned {got!r}, expected {want!r}'\n")})
RIGHT = "def double(x):\n    return 2 * x\n"
WRONG = "def double(x):\n    return x + 2\n"  # right for 2 only: fails double(1)
BROKEN = "def double(x):\n    return 2 * y\n"
NO_COMPILE = "def double(x)\n    return 2 * x\n"


class ScriptedEngine(EngineBase):
    """Returns scripted texts: turn k of every episode of problem p is ``script[p][k]`` (token ids are one
    placeholder id per character; the environment's ids are appended by the runner)."""

    def __init__(self, tokenizer, script: dict[str, list[str]]):
        super().__init__(tokenizer)
        self.script, self.turn, self.calls = script, 0, []

    def generate(self, problems, params, prefixes=None, **kw):
        self.calls.append(list(prefixes) if prefixes is not None else None)
        k, self.turn = self.turn, self.turn + 1
        out = []
        for p in problems:
            text = self.script[p.id][min(k, len(self.script[p.id]) - 1)]
            ids = [5] * len(text)
            out.append([Sample(p.id, [1, 2], ids, [-0.5] * len(ids), text, "stop", group_index=g)
                        for g in range(params.n)])
        return out


def _env(attempts=3, discount=0.5, workers=1):
    return build_environment("code_feedback", get_verifier("code_humaneval", timeout=5), make_tokenizer(),
                             attempts=attempts, discount=discount, workers=workers)


def test_feedback_shows_the_failing_call_or_the_error():
    verify = get_verifier("code_humaneval", timeout=5)
    msg = feedback_message(verify(WRONG, REF))
    assert msg.startswith("Your function failed a test: double(1) returned 3, expected 2.") and RETRY_INSTRUCTION in msg
    msg = feedback_message(verify(BROKEN, REF))
    assert msg.startswith("Your code raised an error: NameError: name 'y' is not defined"), msg
    msg = feedback_message(verify(NO_COMPILE, REF))
    assert msg.startswith("Your code raised an error: SyntaxError"), msg
    assert feedback_message(Verdict(0.0, None, "timeout: after 5.0 s")).startswith("Your code ran out of time")
    assert feedback_message(Verdict(0.0, None, "no code found")).startswith("I found no code")


@pytest.mark.parametrize("workers", [1, 4])
def test_episodes_get_feedback_and_discounted_rewards(workers):
    tok = make_tokenizer()
    script = {"first": [RIGHT], "second": [WRONG, RIGHT], "third": [BROKEN, NO_COMPILE, RIGHT],
              "never": [WRONG, WRONG, WRONG, RIGHT]}
    problems = [Problem(pid, prompt="Write double.", answer=REF) for pid in script]
    eng = ScriptedEngine(tok, script)
    groups = run_episodes(eng, _env(workers=workers), problems, SamplingParams(n=2, max_new_tokens=64))
    got = {g[0].problem_id: g for g in groups}
    assert [s.env_return for s in got["first"]] == [1.0, 1.0]
    assert [s.env_return for s in got["second"]] == [0.5, 0.5]
    assert [s.env_return for s in got["third"]] == [0.25, 0.25]
    assert [s.env_return for s in got["never"]] == [0.0, 0.0]  # three attempts, all wrong
    assert got["never"][0].verdict.reason.startswith("wrong answer")
    assert [s.info["turns"] for g in groups for s in g[:1]] == [1, 2, 3, 3]
    # token in, token out: the policy's ids keep their log-probs, the feedback's ids are masked with 0
    s = got["second"][0]
    n_policy = len(WRONG) + len(RIGHT)
    assert sum(s.mask) == n_policy and s.logprobs.count(-0.5) == n_policy
    env_ids = [t for t, m in zip(s.completion_ids, s.mask) if not m]
    assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.mask) if not m)
    assert "double(1) returned 3, expected 2" in tok.decode(env_ids)
    # the later turn continued exactly the trajectory: first turn's ids + the feedback's ids
    second_call = eng.calls[1]
    assert any(p == s.completion_ids[:len(p)] and len(p) == len(WRONG) + len(env_ids) for p in second_call)
    m = episode_metrics([s for g in groups for s in g])
    assert m["env/correct_at_turn_1"] == pytest.approx(2 / 8) and m["env/attempts"] == pytest.approx(9 / 4)


def test_an_environment_that_raises_ends_only_its_episode(monkeypatch, caplog):
    """One episode's step raises (in a worker thread): that episode ends with reward 0 and the error, the others
    carry on to their own outcomes."""
    tok = make_tokenizer()
    env = _env(workers=3)
    real = env.step
    lock = threading.Lock()
    raised = []

    def flaky(state, text):
        if state.problem.id == "bad" and state.turn == 1:
            with lock:
                raised.append(1)
            raise RuntimeError("sandbox exploded")
        return real(state, text)

    monkeypatch.setattr(env, "step", flaky)
    script = {"good": [WRONG, RIGHT], "bad": [WRONG, RIGHT], "fine": [RIGHT]}
    problems = [Problem(pid, prompt="Write double.", answer=REF) for pid in script]
    groups = run_episodes(ScriptedEngine(tok, script), env, problems, SamplingParams(n=2, max_new_tokens=64))
    got = {g[0].problem_id: g for g in groups}
    assert len(raised) == 2
    assert all(s.env_return == 0.0 and "environment error: RuntimeError: sandbox exploded"
               in s.verdict.reason for s in got["bad"])
    assert [s.env_return for s in got["good"]] == [0.5, 0.5] and [s.env_return for s in got["fine"]] == [1, 1]
    assert "sandbox exploded" in caplog.text


def test_bad_params_are_refused_at_load():
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    for override, key in (("env.params={attempts: 0}", "attempts"), ("env.params={discount: 2}", "discount"),
                          ("env.params={atempts: 2}", "env.params.atempts"),
                          # 4 attempts show 3 hidden cases; the task's hidden tests are decisive for 2 by default
                          ("env.params={attempts: 4}", "task.params.reveal_safe=2")):
        with pytest.raises(ValueError, match=key):
            load_config(RunConfig, None, ["env.name=code_feedback", "task.name=code_functions",
                                          "reward.verifier=code_humaneval", override])
    load_config(RunConfig, None, ["env.name=code_feedback", "task.name=code_functions", "reward.verifier=code_humaneval",
                                  "env.params={attempts: 4}", "task.params={reveal_safe: 3}"])  # covered: accepted


def test_code_task_trains_with_execution_feedback(tmp_path, tiny_tokenizer):
    """The recipe end to end on the code task: a step with feedback episodes, per-step verification time and
    its share, failure-kind shares and the hack monitors on the code verdicts, accuracy per attempt."""
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    train_p, held = code_function_problems(steps=1, num_train=8, num_heldout=2, seed=0)
    cfg = tiny_run_config(tmp_path, "task.name=code_functions", "reward.verifier=code_humaneval",
                          "reward.verifier_params={timeout: 5}", "env.name=code_feedback",
                          "env.params={attempts: 2, workers: 2}", "train.steps=1", "rollout.max_new_tokens=6",
                          "eval.after_training=true", "eval.num_problems=2", "eval.max_new_tokens=6")
    summary = train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(train_p, held))
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    for r in rows:
        assert r["verify_time"] > 0 and 0 < r["verify_share"] < 1
        assert r["env/turns"] == 2  # a random tiny model never passes: every episode gets its second attempt
        kinds = {k for k in r if k.startswith("verdict/")}
        assert kinds and kinds <= {"verdict/syntax_error", "verdict/runtime_error", "verdict/wrong_answer",
                                   "verdict/no_code_found", "verdict/other"}, kinds
        assert sum(r[k] for k in kinds) == pytest.approx(1.0)
        assert "hack/flags" in r
    assert len(summary["eval_after"]["greedy"]["episodes"]["accuracy_by_turn"]) == 2


class TableEngine(EngineBase):
    """The hard-coding adversary as a policy: each turn writes a function that returns the visible examples'
    outputs for their inputs, every hidden case the feedback has shown so far (read back from the trajectory's
    tokens) for its input, and ``default`` otherwise."""

    _SHOWN = re.compile(r"failed a test: \w+\((.*)\) returned .*?, expected (.*)\.\n")

    def __init__(self, tokenizer, default: str):
        super().__init__(tokenizer)
        self.default = default

    def generate(self, problems, params, prefixes=None, **kw):
        out = []
        for i, p in enumerate(problems):
            table = [(repr(x), repr(y)) for x, y in p.metadata["examples"]]
            if prefixes is not None:
                table += self._SHOWN.findall(self.tokenizer.decode(prefixes[i]))
            lines = [f"def {p.metadata['entry_point']}(x):"]
            lines += [f"    if x == {x}:\n        return {y}" for x, y in table]
            text = "```python\n" + "\n".join(lines + [f"    return {self.default}"]) + "\n```"
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append([Sample(p.id, [1, 2], ids, [-0.5] * len(ids), text, "stop", group_index=g)
                        for g in range(params.n)])
        return out


def _table_rewards(reveal_safe: int, problems: int = 24):
    from rlvr.tasks.code_functions import code_function_problems

    _, held = code_function_problems(steps=2, num_train=0, num_heldout=problems, seed=7, reveal_safe=reveal_safe)
    tok = make_tokenizer()
    rewards, turns = [], []
    for default in ("0", "None", "x"):
        groups = run_episodes(TableEngine(tok, default), _env(attempts=3, workers=2), held,
                              SamplingParams(n=1, max_new_tokens=400))
        rewards += [s.env_return for g in groups for s in g]
        turns += [s.info["turns"] for g in groups for s in g]
    return rewards, turns


def test_hardcoding_what_the_feedback_shows_earns_nothing():
    """Through the environment and the sandbox: the adversary gets three attempts and the failing hidden case
    after each, and earns nothing on problems generated with the default reveal_safe (2 = attempts - 1)."""
    rewards, turns = _table_rewards(reveal_safe=2)
    assert rewards and all(r == 0.0 for r in rewards)
    assert all(t == 3 for t in turns)  # it really got all three attempts, two of them with feedback


def test_the_table_adversary_passes_when_hidden_tests_are_not_reveal_safe():
    """The adversary is real: on problems whose hidden tests only need to beat a constant without shown cases
    (reveal_safe 0), some of its episodes pass at a later attempt."""
    rewards, _ = _table_rewards(reveal_safe=0, problems=24)
    assert any(r > 0 for r in rewards)
