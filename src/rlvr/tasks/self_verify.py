"""Verification problems made from stored solutions: "is this solution correct?", labelled by the verifier.

Joint solve-and-verify RL (RISE, Liu et al. 2025, "Trust, but Verify: A Self-Verification Approach to
Reinforcement Learning with Verifiable Rewards", arXiv 2505.13445; PAG, LaSeR) trains one policy both to solve
problems and to judge solutions, the judgement rewarded by agreement with the outcome verifier.  RISE makes its
verification prompts online from the step's own solutions; this task makes them from a samples file written by
``rlvr eval`` (solutions of the model it is given, typically the policy before training): each stored solution
becomes the problem "here is a problem and a proposed solution; is it correct? answer \\boxed{yes} or
\\boxed{no}", its reference ``yes`` or ``no`` by the task's verifier.  Joint training is a task mixture of the
solving task and this one (the ``math`` verifier scores the yes/no answers and refuses a hedge).  With ``balance``
the larger class is subsampled to the smaller's size, so always answering one way earns half.  Held-out
verification problems come from held-out questions only.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from rlvr.tasks.jsonl import DatasetError, read_jsonl
from rlvr.types import Problem

__all__ = ["VERIFY_TEMPLATE", "verification_split"]

VERIFY_TEMPLATE = ("Here is a problem and a proposed solution.\n\nProblem: {question}\n\nProposed solution: {solution}"
                   "\n\nIs the proposed solution's final answer correct? Answer \\boxed{{yes}} or \\boxed{{no}}.")
"""The verification prompt (``{question}``, ``{solution}``)."""


def _records(path: str) -> list[dict[str, Any]]:
    rows = list(read_jsonl(path))
    if not rows or "rlvr_samples" not in rows[0][1]:
        raise DatasetError(f"{path}:1: not a samples file of rlvr eval (no rlvr_samples header)")
    out = []
    for line, rec in rows[1:]:
        if not isinstance(rec.get("samples"), list) or "answer" not in rec or "id" not in rec:
            raise DatasetError(f"{path}:{line}: a record needs id, answer and samples")
        out.append(rec)
    return out


def verification_split(path: str, verifier: str = "math", num_heldout: int = 64, seed: int = 0,
                       balance: bool = True, max_chars: int = 4000) -> tuple[list[Problem], list[Problem]]:
    """``(train, held_out)`` verification problems from the samples file ``path``; questions are split first (the
    last ``num_heldout`` questions of a seeded shuffle are held out), then each question's solutions become
    problems labelled by ``verifier``; solutions longer than ``max_chars`` are left out."""
    from rlvr.verifiers import get_verifier, safe_verify

    if not Path(path).is_file():
        raise DatasetError(f"{path}: file not found")
    recs = _records(path)
    order = list(range(len(recs)))
    random.Random(seed).shuffle(order)
    n_held = min(num_heldout, max(0, len(recs) - 1))
    held_ids = {recs[i]["id"] for i in order[len(recs) - n_held:]} if n_held else set()
    verify = get_verifier(verifier)
    out: dict[bool, list[Problem]] = {True: [], False: []}
    for rec in recs:
        question = rec.get("prompt") or str(rec.get("metadata", {}).get("question", ""))
        for j, s in enumerate(rec["samples"]):
            text = str(s.get("text", ""))
            if not text.strip() or len(text) > max_chars:
                continue
            label = bool(safe_verify(verify, text, str(rec["answer"])).correct)
            held = rec["id"] in held_ids
            out[held].append(Problem(f"verify/{rec['id']}/{j}", prompt=VERIFY_TEMPLATE.format(question=question,
                                                                                               solution=text),
                                     answer="yes" if label else "no",
                                     metadata={"source": rec["id"], "sample": j, "label": label}))
    rng = random.Random(seed + 1)
    split = []
    for held in (False, True):
        probs = out[held]
        if balance:
            yes = [p for p in probs if p.answer == "yes"]
            no = [p for p in probs if p.answer == "no"]
            k = min(len(yes), len(no))
            probs = sorted(rng.sample(yes, k) + rng.sample(no, k), key=lambda p: p.id)
        split.append(probs)
    if not split[0]:
        raise DatasetError(f"{path}: no training verification problems (balance needs both right and wrong "
                           "solutions among the training questions)")
    return split[0], split[1]
