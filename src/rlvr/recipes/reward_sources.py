"""Process rewards in the RL recipe: the PRM of ``reward.process_prm`` and its step scores of a batch.

Each completion is split into steps at the PRM's delimiter, the PRM scores the steps
(:class:`rlvr.rewards.models.ProcessRewardModel`), each step's last token is found in the
completion's tokens (:func:`rlvr.algorithms.process.step_end_tokens`), and the credit stage
turns the step scores into token-level advantages
(:meth:`rlvr.credit.stage.CreditStage.process_credit`).  Reward sources computed from
the policy are :mod:`rlvr.learner.passes`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

from rlvr.algorithms.process import step_end_tokens, token_pieces
from rlvr.rewards.settings import RewardConfig
from rlvr.types import Batch, Problem, Sample

__all__ = ["load_process_scorer", "prm_step_inputs"]


# --------------------------------------------------------------------------- process rewards
def load_process_scorer(rcfg: RewardConfig, device: str = "cpu"):
    """The PRM of ``reward.process_prm`` with its input format from ``rlvr_reward_model.json`` (what ``rlvr rm
    train`` wrote), overridden by ``reward.process_prm_params``; returns ``(scorer, delimiter)``."""
    from rlvr.rewards.models import ProcessRewardModel, check_reward_model_dir

    check_reward_model_dir(rcfg.process_prm, "prm")
    meta_file = Path(rcfg.process_prm) / "rlvr_reward_model.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    opts = {"step_tag": meta.get("step_tag", "ки"), "good": meta.get("good", "+"), "bad": meta.get("bad", "-"),
            "delimiter": meta.get("delimiter", "\n\n")}
    opts.update(rcfg.process_prm_params)
    scorer = ProcessRewardModel(rcfg.process_prm, step_tag=opts["step_tag"], good=opts["good"], bad=opts["bad"],
                                delimiter=opts["delimiter"], device=str(device))
    return scorer, opts["delimiter"]


def prm_step_inputs(scorer, delimiter: str, samples: Sequence[Sample], prompts: dict[str, str], tokenizer,
                    batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(step_scores [B, K], step_ends [B, K], step_mask [B, K])`` of the batch's completions.

    A completion's text is the concatenation of its tokens' pieces
    (:func:`~rlvr.algorithms.process.token_pieces`), so the PRM's steps and the
    step-end tokens are found in the same string; ``step_ends`` are column indices
    of the [B, T] batch (completions start at the longest prompt's length).
    """
    from rlvr.rewards.models import split_steps

    P = max(len(s.prompt_ids) for s in samples)
    scores, ends = [], []
    for s in samples:
        if not s.completion_ids:
            scores.append([]), ends.append([])  # noqa: E702
            continue
        pieces = token_pieces(tokenizer, s.completion_ids)
        steps = split_steps("".join(pieces), delimiter)
        idx = step_end_tokens(pieces, delimiter)
        sc = scorer.score_steps(Problem(s.problem_id, prompt=prompts.get(s.problem_id, "")), steps) if steps else []
        if len(sc) != len(idx):  # pragma: no cover - split_steps and step_end_tokens split alike
            raise RuntimeError(f"{len(sc)} step scores for {len(idx)} step ends")
        scores.append([float(x) for x in sc])
        ends.append([P + i for i in idx])
    B, K = len(samples), max([len(x) for x in scores] + [1])
    step_scores = torch.zeros(B, K)
    step_ends = torch.zeros(B, K, dtype=torch.long)
    step_mask = torch.zeros(B, K, dtype=torch.bool)
    for i, (sc, en) in enumerate(zip(scores, ends)):
        step_scores[i, :len(sc)] = torch.tensor(sc, dtype=step_scores.dtype)
        step_ends[i, :len(en)] = torch.tensor(en, dtype=torch.long)
        step_mask[i, :len(sc)] = True
    return step_scores, step_ends, step_mask
