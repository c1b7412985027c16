"""Reward-model ensembles (Coste et al. 2024; Eisenstein et al. 2024): aggregates by hand, in the loop, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import close, make_tokenizer
from rl_harness import LOOP_PROBLEMS, train_recorded
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.rewards.functions.rm_ensemble import aggregate_ensemble


def test_aggregates_by_hand():
    s = torch.tensor([[0.2, 0.9], [0.6, 0.5], [0.7, 0.1]])  # 3 models x 2 completions
    close(aggregate_ensemble(s, "mean"), [0.5, 0.5])
    close(aggregate_ensemble(s, "median"), [0.6, 0.5])
    close(aggregate_ensemble(s, "min"), [0.2, 0.1])
    # population variances: (0.09 + 0.01 + 0.04) / 3 and (0.16 + 0 + 0.16) / 3
    close(aggregate_ensemble(s, "uwo", 2.0), [0.5 - 2 * 0.14 / 3, 0.5 - 2 * 0.32 / 3])
    close(aggregate_ensemble(s[:2], "median"), [0.4, 0.7])  # even M: the mean of the two middle scores
    with pytest.raises(ValueError, match="aggregate"):
        aggregate_ensemble(s, "max")


def _orm(path: Path, seed: int) -> Path:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tok = make_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, num_labels=1,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    model = LlamaForSequenceClassification(cfg)
    with torch.no_grad():
        model.score.weight.normal_(0, 0.1)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_the_worst_case_ensemble_trains_on_the_hand_computed_minimum(tmp_path):
    from rlvr.rewards.models import OutcomeRewardModel

    a, b = _orm(tmp_path / "rm_a", 11), _orm(tmp_path / "rm_b", 12)
    spec = (f"reward.functions=[verifier, {{kind: rm_ensemble, weight: 0.5, params: {{paths: ['{a}', '{b}'], "
            f"aggregate: min, device: cpu}}}}]")
    r = train_recorded(tmp_path / "run", spec)
    rms = [OutcomeRewardModel(str(p)) for p in (a, b)]
    by_id = {p.id: p for p in LOOP_PROBLEMS[0]}
    took_b = 0
    for ro, scored in r.seen:
        sa = torch.tensor([rms[0].score(by_id[s.problem_id], s.text) for s in ro.samples])
        sb = torch.tensor([rms[1].score(by_id[s.problem_id], s.text) for s in ro.samples])
        correct = torch.tensor([float(v.correct) for v in ro.verdicts])
        close(scored.rewards, correct + 0.5 * torch.minimum(sa, sb), tol=1e-5)
        took_b += int((sb < sa).sum())
    assert 0 < took_b < sum(len(ro.samples) for ro, _ in r.seen)  # each model was the minimum somewhere


@pytest.mark.parametrize("params,match", [
    ("{paths: ['A']}", "at least 2 reward models"),
    ("{paths: ['A', 'A']}", "listed twice"),
    ("{paths: ['A', 'B'], aggregate: max}", "aggregate"),
    ("{paths: ['A', 'B'], uwo_lambda: -1}", "uwo_lambda"),
])
def test_bad_ensembles_are_refused_at_load(tmp_path, params, match):
    a, b = _orm(tmp_path / "a", 1), _orm(tmp_path / "b", 2)
    params = params.replace("'A'", f"'{a}'").replace("'B'", f"'{b}'")
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path / 'run'}",
                                      f"reward.functions=[verifier, {{kind: rm_ensemble, params: {params}}}]"])


def test_a_directory_that_is_not_a_reward_model_is_refused_at_load(tmp_path):
    a = _orm(tmp_path / "a", 1)
    with pytest.raises(ConfigError, match="rm_ensemble"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path / 'run'}",
                                      f"reward.functions=[verifier, {{kind: rm_ensemble, params: "
                                      f"{{paths: ['{a}', '{tmp_path / 'missing'}']}}}}]"])
