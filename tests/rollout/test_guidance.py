"""Guidance for all-fail groups: hint levels grow until a sample succeeds, hints are prompt (never trained on),
demonstrations join the group off-policy, the budget counts every extra completion, guidance off changes nothing,
and the combinations it cannot run are refused when the config loads."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from conftest import make_model, make_tokenizer
from rl_harness import Recorder
from rlvr.engines.base import EngineBase
from rlvr.config import ConfigError, load_config
from rlvr.engines.hf import HFEngine, format_prompt
from rlvr.learner.batching import collate
from rlvr.recipes.config import RunConfig
from rlvr.rollout.collect import CollectSettings, collect_rollouts
from rlvr.rollout.guidance import hint_lengths, reference_solution
from rlvr.tasks.arithmetic import ArithmeticSpec, arithmetic_split
from rlvr.tasks.registry import multiply_task
from rlvr.tasks.sampler import PromptSampler
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Sample, Verdict
from rlvr.verifiers import get_verifier

G = 4
SOLUTION = "12 + 7 = 19. The answer is RIGHT."  # 33 characters: 33 tokens of the character-level tokenizer


class Scripted(EngineBase):
    """A fake engine: every sample's text is "wrong", except that a prefix of at least ``need[problem id]`` tokens
    makes sample 0 of the group answer "RIGHT" (``need`` 0: right without a hint; absent: never)."""

    def __init__(self, tok, need: dict[str, int]):
        super().__init__(tok)
        self.need, self.calls = need, []

    def generate(self, problems, params, prefixes=None):
        self.calls.append([len(p) for p in prefixes] if prefixes is not None else None)
        out = []
        for i, p in enumerate(problems):
            pre = list(prefixes[i]) if prefixes is not None else []
            prompt = format_prompt(self.tokenizer, p) + pre
            group = []
            for g in range(params.n):
                ok = p.id in self.need and len(pre) >= self.need[p.id] and g == 0
                text = "RIGHT" if ok else "wrong"
                ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
                group.append(Sample(p.id, prompt, ids, [-0.5] * len(ids), text, "stop", g))
            out.append(group)
        return out


class Seen:
    """A verifier that records what it was shown: correct iff the text contains RIGHT."""

    def __init__(self):
        self.texts = []

    def __call__(self, completion, reference):
        self.texts.append(completion)
        return Verdict(1.0 if "RIGHT" in completion else 0.0, None, "seen")


def _cfg(*extra, out="unused"):
    return load_config(RunConfig, None, [f"train.output_dir={out}", "train.prompts_per_step=2",
                                         f"rollout.group_size={G}", "rollout.max_new_tokens=40", *extra])


def _problems(solutions=(SOLUTION, SOLUTION)):
    return [Problem(f"p{i}", prompt=f"What is {i}?", answer="19", metadata={} if s is None else {"solution": s})
            for i, s in enumerate(solutions)]


def _collect(engine, problems, cfg, verifier, step=0, **kw):
    return collect_rollouts(engine, PromptSampler(problems, seed=0), verifier, _params(cfg), cfg.collect_settings(),
                            step, **kw)


def _params(cfg):
    from rlvr.engines import SamplingParams

    return SamplingParams(n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens)


def _by_id(samples):
    groups = {}
    for s in samples:
        groups.setdefault(s.problem_id, []).append(s)
    return groups


# --------------------------------------------------------------------------- hints
def test_hint_levels_grow_until_a_sample_succeeds_and_the_hint_is_prompt_not_completion():
    tok = make_tokenizer()
    n = len(tok.encode(SOLUTION, add_special_tokens=False))
    lengths = [math.ceil(f * n) for f in (0.25, 0.5, 0.75)]
    eng = Scripted(tok, {"p0": lengths[1], "p1": 0})  # p0: needs the second level; p1: right on its own
    seen = Seen()
    ro = _collect(eng, _problems(), _cfg("guidance.hints=true"), seen)
    samples, rewards, generated, m = ro.samples, ro.rewards, ro.generated, ro.guidance_metrics
    # one plain call, then levels 1 and 2 for p0 alone; p1 had a success and was never hinted
    assert eng.calls == [None, [lengths[0]], [lengths[1]]]
    groups = _by_id(samples)
    hint_ids = tok.encode(SOLUTION, add_special_tokens=False)[:lengths[1]]
    hint_text = tok.decode(hint_ids)
    for s in groups["p0"]:
        assert s.info["guidance"] == "hint" and s.info["hint_tokens"] == lengths[1]
        assert s.prompt_ids[-lengths[1]:] == hint_ids  # the hint ends the prompt ...
        assert s.completion_ids == tok.encode(s.text, add_special_tokens=False) + [tok.eos_token_id]  # ... not here
    assert all("guidance" not in s.info for s in groups["p1"])
    assert hint_text + "RIGHT" in seen.texts  # scored on hint + completion
    assert rewards.tolist() == [float(s.text == "RIGHT") for s in samples]
    # budget: the plain round plus two hinted groups
    assert generated == 2 * G + 2 * G
    assert m["guidance/guided_groups"] == 0.5 and m["guidance/hint_success"] == 1.0
    assert m["guidance/hint_tokens"] == lengths[1] and m["guidance/rollouts_extra"] == 2 * G
    # the learner's batch: hint tokens are prompt (completion_mask 0), the completion is what is trained on
    batch = collate(groups["p0"], torch.zeros(G), tok.pad_token_id)
    assert int(batch.completion_mask[0].sum()) == len(groups["p0"][0].completion_ids)
    assert batch.off_policy is None


def test_no_level_succeeds_keeps_the_original_group_and_counts_the_budget():
    tok = make_tokenizer()
    eng = Scripted(tok, {})
    problems = _problems()
    ro = _collect(eng, problems, _cfg("guidance.hints=true"), Seen())
    samples, generated, m = ro.samples, ro.generated, ro.guidance_metrics
    assert eng.calls[1:] == [[k, k] for k in hint_lengths(len(SOLUTION), [0.25, 0.5, 0.75])]  # both, every level
    prompts = {p.id: format_prompt(tok, p) for p in problems}
    assert all("guidance" not in s.info and s.prompt_ids == prompts[s.problem_id] for s in samples)
    assert m["guidance/guided_groups"] == 1.0 and m["guidance/hint_success"] == 0.0
    assert m["guidance/rollouts_extra"] == 3 * 2 * G and generated == 2 * G + 3 * 2 * G


def test_problems_without_a_solution_are_never_guided_and_counted():
    tok = make_tokenizer()
    eng = Scripted(tok, {"p1": 1})
    m = _collect(eng, _problems((None, SOLUTION)), _cfg("guidance.hints=true"), Seen()).guidance_metrics
    assert [c for c in eng.calls[1:]] == [[math.ceil(0.25 * len(SOLUTION))]]  # p1 hinted once, p0 not at all
    assert m["guidance/no_solution"] == 0.5 and m["guidance/failed_groups"] == 1.0
    assert m["guidance/guided_groups"] == 0.5


def test_hint_lengths_are_token_counts_cut_at_token_boundaries():
    assert hint_lengths(10, [0.25, 0.5, 0.75]) == [3, 5, 8]
    assert hint_lengths(3, [0.25, 0.5, 0.75]) == [1, 2]  # a level revealing no more is dropped; never all n
    assert hint_lengths(1, [0.5]) == []


def test_the_difficulty_filter_sees_the_policys_own_pass_rate():
    from rlvr.algorithms.sampling import DifficultyFilter

    tok = make_tokenizer()
    dfilter = DifficultyFilter(0.0, 1.0)
    _collect(Scripted(tok, {"p0": 1, "p1": 0}), _problems(), _cfg("guidance.hints=true"), Seen(), dfilter=dfilter)
    assert dfilter.pass_rate("p0") == 0.0 and dfilter.pass_rate("p1") == 1 / G  # p0 succeeded with a hint only


# --------------------------------------------------------------------------- demonstrations
def test_a_demonstration_replaces_the_last_sample_off_policy_and_gets_a_positive_advantage():
    tok = make_tokenizer()
    eng = Scripted(tok, {"p1": 0})
    ro = _collect(eng, _problems(), _cfg("guidance.demonstrations=true"), Seen())
    samples, rewards = ro.samples, ro.rewards
    groups = _by_id(samples)
    demo = groups["p0"][-1]
    assert demo.info["off_policy"] is True and demo.info["guidance"] == "demo" and demo.group_index == G - 1
    assert demo.completion_ids == tok.encode(SOLUTION, add_special_tokens=False) + [tok.eos_token_id]
    assert demo.logprobs == [0.0] * len(demo.completion_ids)  # behaviour probability 1
    assert demo.prompt_ids == groups["p0"][0].prompt_ids and demo.verdict.correct
    assert not any(s.info.get("off_policy") for s in groups["p0"][:-1] + groups["p1"])
    assert ro.guidance_metrics["guidance/demo_groups"] == 0.5
    from rlvr.algorithms import grpo_advantages

    adv = grpo_advantages(rewards, G)
    i = samples.index(demo)
    assert adv[i] > 0 and all(adv[j] < 0 for j in range(G * (i // G), i))
    batch = collate(samples, adv, tok.pad_token_id)  # the flag reaches the learner's batch
    assert batch.off_policy.tolist() == [bool(s.info.get("off_policy")) for s in samples]
    row = batch.sampler_logprobs[i][batch.completion_mask[i].bool()]
    assert torch.equal(row, torch.zeros_like(row))


def test_demonstrations_that_fail_the_verifier_or_the_length_cap_are_not_inserted():
    tok = make_tokenizer()
    cfg = _cfg("guidance.demonstrations=true")
    ro = _collect(Scripted(tok, {}), _problems(("wrong too", SOLUTION)), cfg, Seen())
    assert sum(bool(s.info.get("off_policy")) for s in ro.samples) == 1
    assert ro.guidance_metrics["guidance/demo_rejected"] == 1.0
    cfg = _cfg("guidance.demonstrations=true", "rollout.max_new_tokens=8")
    ro = _collect(Scripted(tok, {}), _problems(), cfg, Seen())
    assert not any(s.info.get("off_policy") for s in ro.samples)
    assert ro.guidance_metrics["guidance/demo_rejected"] == 2.0


def test_hints_first_then_a_demonstration_when_no_level_succeeds():
    tok = make_tokenizer()
    eng = Scripted(tok, {"p1": 5})
    ro = _collect(eng, _problems(), _cfg("guidance.hints=true", "guidance.demonstrations=true"), Seen())
    groups = _by_id(ro.samples)
    assert groups["p0"][-1].info.get("off_policy") and all(s.info["guidance"] == "hint" for s in groups["p1"])
    assert ro.guidance_metrics["guidance/demo_groups"] == 0.5


# --------------------------------------------------------------------------- off: nothing changes
def test_guidance_off_or_unneeded_returns_the_same_samples_and_rewards():
    tok = make_tokenizer()
    problems = [Problem(f"p{i}", prompt=f"What is {i} + {i}?", answer=str(2 * i), metadata={"solution": "x \\boxed{1}"})
                for i in range(5)]
    parity = lambda c, r: Verdict(float(len(c) % 2 == 0), None, "parity")  # noqa: E731

    def run(cfg, verifier=parity):
        settings = cfg if isinstance(cfg, CollectSettings) else cfg.collect_settings()
        eng = HFEngine(make_model(tok), tok, batch_size=16)
        eng.generator.manual_seed(3)
        return collect_rollouts(eng, PromptSampler(problems, seed=1), verifier, _params(base), settings, 0)

    base = _cfg("rollout.max_new_tokens=6", "algorithm.dynamic_sampling=true")
    plain = dataclasses.replace(base.collect_settings(), guidance=None)  # collection without the guidance section
    ref = run(plain)
    ro = run(base)  # off (its other options, which could not act, are refused at load: tests/recipes)
    assert ro.samples == ref.samples and ro.verdicts == ref.verdicts and torch.equal(ro.rewards, ref.rewards)
    assert (ro.rounds, ro.generated) == (ref.rounds, ref.generated) and not ro.guidance_metrics
    # on, but every group has a success (a verifier accepting all): nothing is guided, nothing changes
    always = lambda c, r: Verdict(1.0, None, "yes")  # noqa: E731
    ref = run(plain, always)
    ro = run(_cfg("rollout.max_new_tokens=6", "algorithm.dynamic_sampling=true", "guidance.hints=true",
                  "guidance.demonstrations=true"), always)
    assert ro.samples == ref.samples and torch.equal(ro.rewards, ref.rewards)
    assert ro.guidance_metrics["guidance/guided_groups"] == 0.0


# --------------------------------------------------------------------------- reference solutions
def test_generated_tasks_carry_worked_solutions_the_verifier_accepts_without_changing_the_problems():
    verify = get_verifier("numeric")
    spec = ArithmeticSpec(num_operands=3, min_value=-9, max_value=20, operators=("+", "-", "*"))
    train, held = arithmetic_split(spec, 200, 20, seed=5)
    mtrain, mheld = multiply_task(num_train=50, num_heldout=5, seed=2)
    for p in train + held + mtrain + mheld:
        sol = reference_solution(p)
        assert verify(sol, p.answer).correct, (p.prompt, sol)
        assert sol not in p.prompt
    # the prompts, answers and ids are the generator's: the same seed gives the same problems as before
    assert train[0].metadata["solution"].startswith(train[0].metadata["expression"] + " = ")
    assert reference_solution(Problem("g", prompt="q", answer="72", metadata={
        "solution": "Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72"})) == \
        "Natalia sold 48/2 = 24 clips.\nThe answer is \\boxed{72}."
    assert reference_solution(Problem("n", prompt="q", answer="1")) is None


# --------------------------------------------------------------------------- the recipe
PROBS = ([Problem(f"t{i}", prompt=f"What is {i} * 7?", answer=str(9131 + i),
                  metadata={"solution": f"\\boxed{{{9131 + i}}}"}) for i in range(6)],
         [Problem(f"h{i}", prompt=f"What is {i} * 9?", answer=str(9181 + i)) for i in range(2)])


def _train(out: Path, *extra):
    tok = make_tokenizer()
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={out}", "train.steps=2", "train.prompts_per_step=2", f"rollout.group_size={G}",
        "rollout.max_new_tokens=16", "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=0", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", *extra])
    r = Recorder(cfg, model=make_model(tok), tokenizer=tok, problems=PROBS)
    r.train()
    return r, read_metrics(out / "metrics.jsonl")


def test_training_with_hints_logs_the_guidance_metrics(tmp_path):
    r, rows = _train(tmp_path, "guidance.hints=true")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert {"guidance/guided_groups", "guidance/hint_tokens", "guidance/hint_success",
                "guidance/rollouts_extra", "guidance/accuracy_with_guidance"} <= set(row)
        assert 0 <= row["guidance/guided_groups"] <= 1 and row["guidance/rollouts_extra"] % G == 0
    assert rows[-1]["rollouts"] == 2 * 2 * G + sum(row["guidance/rollouts_extra"] for row in rows)
    assert any(row["guidance/guided_groups"] > 0 for row in rows)


def test_training_with_demonstrations_puts_off_policy_rows_in_the_batch(tmp_path):
    r, rows = _train(tmp_path, "guidance.demonstrations=true")
    assert all(row["guidance/demo_groups"] > 0 and math.isfinite(row["loss"]) for row in rows)
    for ro, scored in r.seen:
        flags = [bool(s.info.get("off_policy")) for s in ro.samples]
        assert scored.batch.off_policy.tolist() == flags
        assert all(scored.advantages[i] > 0 for i, f in enumerate(flags) if f)
    # the policy's own accuracy does not count demonstrations
    assert all(row["accuracy"] <= row["guidance/accuracy_with_guidance"] for row in rows)


@pytest.mark.parametrize("extra, match", [
    (["env.name=retry"], "env.name=single_turn"),
    (["train.async_steps=1", "algorithm.is_correction=tis"], "train.async_steps"),
    (["train.rollout_worker=true"], "train.rollout_worker"),
    (["distributed.backend=ray"], "distributed.backend=ray"),
    (["distributed.fsdp=true"], "distributed.fsdp"),
    (["reward.source=majority_vote"], "reward.source=verifier"),
    (["guidance.hint_fractions=[0.5, 0.5]"], "strictly increasing"),
    (["guidance.hint_fractions=[0.5, 1.0]"], "guidance.hint_fractions"),
    (["guidance.shaping_gamma=0"], "guidance.shaping_gamma"),
])
@pytest.mark.parametrize("on", ["guidance.hints=true", "guidance.demonstrations=true"])
def test_config_refuses_what_guidance_cannot_run(on, extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [on, *extra])


@pytest.mark.parametrize("loss", ["ppo_clip", "dual_clip", "gspo", "topr"])
def test_demonstrations_train_with_every_policy_loss(tmp_path, loss):
    r, rows = _train(tmp_path, "guidance.demonstrations=true", f"algorithm.policy_loss={loss}", "train.steps=1",
                     "algorithm.loss_agg=seq_mean_token_mean", "algorithm.mini_batches=2")
    assert rows[0]["guidance/demo_groups"] > 0 and rows[0]["learner_seqs"] > 0 and math.isfinite(rows[0]["loss"])


def test_scoring_a_guided_sample_in_a_raising_environment_fails_only_that_sample():
    from rlvr.envs import SingleTurnEnvironment
    from rlvr.rollout.guidance import _score

    class Broken(SingleTurnEnvironment):
        def step(self, state, text):
            raise RuntimeError("checker crashed")

    s = Sample("p", [1], [5, 6], [0.0, 0.0], "x", "stop", 0)
    _score(Broken(lambda text, ref: None), Problem("p", prompt="q", answer="1"), s, "x")
    assert s.env_return == 0.0 and s.info["env_errors"] == 1 and not s.verdict.correct
    assert "environment error: RuntimeError: checker crashed" in s.verdict.reason
