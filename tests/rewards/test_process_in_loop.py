"""Process rewards in the training loop: PRM step scores -> token advantages by hand, and 2-step runs with a tiny
PRM trained by `rlvr rm train` (GRPO with min-form credit and the disagreement filter; PPO)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from conftest import make_model, make_tokenizer, tiny_run_config
from rl_harness import Recorder
from rlvr.recipes.config import RunConfig
from rlvr.recipes.reward_sources import prm_step_inputs
from rlvr.rewards.settings import RewardConfig
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Sample, Verdict


def _cfg(out: Path, *extra: str) -> RunConfig:
    return tiny_run_config(out, "train.steps=2", *extra)


class StubPRM:
    """Scores each step by hand: 0.9 if it contains 'a' or has an odd length, else 0.2."""

    def score_steps(self, problem, steps):
        self.calls = getattr(self, "calls", []) + [(problem.prompt, list(steps))]
        return [0.9 if "a" in s or len(s) % 2 else 0.2 for s in steps]


def _sample(prompt_len: int, text: str, tok) -> Sample:
    ids = tok.encode(text, add_special_tokens=False)
    return Sample("p", list(range(4, 4 + prompt_len)), ids, [0.0] * len(ids), text, "stop")


def test_prm_step_inputs_find_each_steps_last_token(tiny_tokenizer):
    from rlvr.learner.batching import collate

    samples = [_sample(3, "ab\n\ncd", tiny_tokenizer), _sample(2, "xyz", tiny_tokenizer)]
    batch = collate(samples, torch.zeros(2), tiny_tokenizer.pad_token_id)
    prm = StubPRM()
    scores, ends, smask = prm_step_inputs(prm, "\n\n", samples, {"p": "Q?"}, tiny_tokenizer, batch)
    # completions start at column 3 (the longest prompt); the char tokenizer has one token per character
    torch.testing.assert_close(scores, torch.tensor([[0.9, 0.2], [0.9, 0.0]]))
    assert ends[0].tolist() == [3 + 1, 3 + 5] and ends[1, 0].item() == 3 + 2
    assert smask.tolist() == [[True, True], [True, False]]
    assert prm.calls[0] == ("Q?", ["ab", "cd"])


def _R(**kw) -> RewardConfig:
    """A reward section with process rewards, no baseline, and ``kw``."""
    return RewardConfig(process_baseline="none", **kw)


def shape_advantages(rcfg: RewardConfig, outcome, rewards, steps, mask, group_size, *, values=None, token_kl=None,
                     kl_coef=0.0, gae_params=None):
    """The credit stage's process credit for the reward section ``rcfg`` (what the recipe hands it)."""
    from rlvr.credit import CreditSettings, CreditStage, ProcessSettings

    process = ProcessSettings(transforms=tuple(rcfg.process_transform_list()), credit=rcfg.process_credit,
                              credit_params=dict(rcfg.process_credit_params), filter=rcfg.process_filter,
                              filter_params=dict(rcfg.process_filter_params), baseline=rcfg.process_baseline,
                              process_coef=rcfg.process_coef, outcome_coef=rcfg.outcome_coef)
    stage = CreditStage(CreditSettings(group_size=group_size, advantage="gae" if values is not None else "grpo",
                                       advantage_params=dict(gae_params or {}), kl_coef=kl_coef, process=process))
    return stage.process_credit(outcome, rewards, steps, mask, values=values, token_kl=token_kl)


def test_shape_advantages_by_hand():
    # two samples of one group, 3 completion tokens each; sample 0 has steps ending at t=0 and t=2 with scores
    # 0.5 and 1.0, sample 1 one step (t=2) scored 0.2; outcomes 1 and 0; GRPO advantage of [1, 0]: +-1/sqrt(2)
    steps = (torch.tensor([[0.5, 1.0], [0.2, 0.0]]), torch.tensor([[0, 2], [2, 0]]),
             torch.tensor([[True, True], [True, False]]))
    mask = torch.ones(2, 3)
    rewards = torch.tensor([1.0, 0.0])
    a = 1 / math.sqrt(2)
    est = torch.tensor([a, -a])
    adv, ret, info = shape_advantages(_R(), est, rewards, steps, mask, 2)
    assert ret is None
    # sum credit, no baseline: returns-to-go 1.5, 1.0, 1.0 and 0.2, 0.2, 0.2
    torch.testing.assert_close(adv, torch.tensor([[a + 1.5, a + 1.0, a + 1.0], [-a + 0.2] * 3]), atol=1e-5, rtol=0)
    # min-form credit (PURE, T=0.1): weights softmin([0.5, 1.0] / 0.1) = [1/(1+e^-5), e^-5/(1+e^-5)]
    w0, w1 = 1 / (1 + math.exp(-5)), math.exp(-5) / (1 + math.exp(-5))
    adv, _, _ = shape_advantages(_R(process_credit="min"), est, rewards, steps, mask, 2)
    g1 = 1.0 * w1
    torch.testing.assert_close(adv, torch.tensor([[a + 0.5 * w0 + g1, a + g1, a + g1], [-a + 0.2] * 3]), atol=1e-5,
                               rtol=0)
    # disagreement filter with low=0.6: sample 0 is right but its weakest step (0.5) is below 0.6 -> advantage 0
    adv, _, info = shape_advantages(_R(process_filter="disagreement", process_filter_params={"low": 0.6}), est,
                                    rewards, steps, mask, 2)
    assert adv[0].abs().sum() == 0 and info["process/kept_share"] == 0.5
    torch.testing.assert_close(adv[1], torch.tensor([-a + 0.2] * 3), atol=1e-5, rtol=0)
    # PPO: GAE (gamma = lam = 1, zero values, unwhitened) of the token rewards = their returns-to-go + outcome
    adv, ret, _ = shape_advantages(_R(), None, rewards, steps, mask, 2, values=torch.zeros(2, 3),
                                   gae_params={"whiten": False})
    torch.testing.assert_close(adv, torch.tensor([[2.5, 2.0, 2.0], [0.2, 0.2, 0.2]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(ret, adv)


def _parity(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


PROBS = ([Problem(f"t{i}", prompt=f"What is {i}+3?", answer=str(i + 3)) for i in range(8)],
         [Problem(f"h{i}", prompt=f"What is {i}+7?", answer=str(i + 7)) for i in range(3)])


@pytest.fixture(scope="module")
def tiny_prm(tmp_path_factory):
    """A PRM trained by `rlvr rm train` (kind=prm) on the tiny model, as in tests/recipes/test_reward_model.py."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
    from test_reward_model import _samples_file

    from rlvr.recipes.reward_model import RMConfig, train_reward_model

    tmp = tmp_path_factory.mktemp("prm")
    tok = make_tokenizer()
    base = tmp / "base"
    make_model(tok).save_pretrained(base)
    tok.save_pretrained(base)
    out = tmp / "prm"
    train_reward_model(RMConfig(kind="prm", model=str(base), samples=str(_samples_file(tmp / "s.jsonl", 4)),
                                output_dir=str(out), verifier="numeric", step_tag="#", good="+", bad="-",
                                rollouts_per_step=2, max_new_tokens=4, samples_per_problem=2, lr=1e-3,
                                batch_size=2, max_updates=1, heldout_fraction=0.5, delimiter="a"))
    return out


@pytest.mark.parametrize("extra", [
    ("reward.process_credit=min", "reward.process_filter=disagreement", "reward.process_baseline=returns"),
    ("reward.process_transforms=[center, {clip_range: {c: 0.5}}]", "algorithm.advantage=rloo"),
    ("algorithm.advantage=gae",),
])
def test_prm_shaped_training_runs_two_steps(tmp_path, tiny_prm, extra):
    assert json.loads((tiny_prm / "rlvr_reward_model.json").read_text())["delimiter"] == "a"
    tok = make_tokenizer()
    r = Recorder(_cfg(tmp_path, f"reward.process_prm={tiny_prm}", *extra), model=make_model(tok), tokenizer=tok,
                 problems=PROBS, verifier=_parity)
    r.train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert 0.0 < row["process/step_score_mean"] < 1.0 and 0.0 <= row["process/kept_share"] <= 1.0
    for ro, scored in r.seen:
        assert scored.advantages.dim() == 2 and torch.isfinite(scored.advantages).all()
        assert (scored.advantages * (1 - scored.batch.completion_mask)).abs().sum() == 0


def test_process_advantages_in_the_loop_match_the_hand_formula(tmp_path):
    """A stub PRM injected into the recipe (step scores by hand, no baseline): each sample's advantage is the
    estimator's plus, on every token, the sum of the scores of the steps ending at or after it."""
    tok = make_tokenizer()
    (tmp_path / "prm").mkdir()
    (tmp_path / "prm" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    r = Recorder(_cfg(tmp_path / "run", f"reward.process_prm={tmp_path / 'prm'}", "train.steps=1",
                      "reward.process_baseline=none", "rollout.max_new_tokens=16"),
                 model=make_model(tok), tokenizer=tok, problems=PROBS, verifier=_parity)
    r.process_scorer = (StubPRM(), "2")  # injected: the directory above holds no weights
    r.train()
    ro, scored = r.seen[0]
    m = scored.batch.completion_mask
    expected = r.credit.estimator(ro.rewards, 4)[:, None] * m
    P = max(len(s.prompt_ids) for s in ro.samples)
    n_steps = 0
    for i, s in enumerate(ro.samples):
        # one character per token, special tokens (a sampled <pad>, the EOS) none: token index of each character
        chars = [(j, c) for j, t in enumerate(s.completion_ids) for c in tok.decode([t], skip_special_tokens=True)]
        text = "".join(c for _, c in chars)
        ends, start = [], 0  # the token of the last non-space character of each non-blank step
        for part in text.split("2"):
            if part.strip():
                ends.append((chars[start + len(part.rstrip()) - 1][0], 0.9 if "a" in part or len(part) % 2 else 0.2))
            start += len(part) + 1
        if ends:  # the last step ends on the last token (an EOS included)
            ends[-1] = (len(s.completion_ids) - 1, ends[-1][1])
        n_steps += len(ends)
        for e, score in ends:
            expected[i, :P + e + 1] += score * m[i, :P + e + 1]
    assert n_steps > len(ro.samples)  # some completions have several steps
    torch.testing.assert_close(scored.advantages, expected, atol=1e-5, rtol=0)


def test_process_prm_is_checked_when_the_config_loads(tmp_path, tiny_model_dir):
    with pytest.raises(ValueError, match="reward.process_prm: .*no config.json"):
        _cfg(tmp_path, f"reward.process_prm={tmp_path}")
    orm = tmp_path / "orm"
    orm.mkdir()
    (orm / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"]}))
    with pytest.raises(ValueError, match="causal LM"):
        _cfg(tmp_path, f"reward.process_prm={orm}")
    with pytest.raises(ValueError, match="process_credit"):
        _cfg(tmp_path, f"reward.process_prm={tiny_model_dir}", "reward.process_credit=max")
    with pytest.raises(ValueError, match="process_filter"):
        _cfg(tmp_path, f"reward.process_prm={tiny_model_dir}", "reward.process_filter=disagreement",
             "reward.process_filter_params={low: 0.9, high: 0.1}")
    with pytest.raises(ValueError, match="process_transforms"):
        _cfg(tmp_path, f"reward.process_prm={tiny_model_dir}", "reward.process_transforms=[centre]")
    with pytest.raises(ValueError, match="in-process recipe only"):
        _cfg(tmp_path, f"reward.process_prm={tiny_model_dir}", "train.rollout_worker=true")
    _cfg(tmp_path, f"reward.process_prm={tiny_model_dir}", "reward.process_credit=min")
