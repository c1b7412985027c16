"""Procedural tasks from the ``reasoning-gym`` package: 100+ generators with their own scorers.

``task.name=reasoning_gym`` with ``task.params: {dataset: chain_sum, config: {min_terms: 2, max_terms: 4}}``
generates problems from that reasoning-gym dataset; ``config`` holds the
dataset's own difficulty knobs (its ``*Config`` dataclass fields), checked when
the config loads.  Score with ``reward.verifier=reasoning_gym``: it extracts the
answer (``<answer>...</answer>``, else ``\\boxed{}``, else the last line) and calls
the dataset's own ``score_answer``, so every dataset keeps its own notion of a
correct answer.  The reference answer of each problem is a JSON record carrying
what that scorer needs (the dataset name, the answer and the entry's metadata).

Train and held-out problems are generated from different seeds and held-out
questions that also occur in training are dropped.  ``pip install rlvr[procedural]``.
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.types import Problem
from rlvr.utils.extras import require_extra

__all__ = ["reasoning_gym_problems", "dataset_names", "check_dataset", "RG_INSTRUCTIONS", "RG_MISSING"]

RG_INSTRUCTIONS = "\n\nGive only the final answer inside <answer></answer> tags."
RG_MISSING = "task.name=reasoning_gym needs the reasoning-gym package: pip install 'rlvr[procedural]'"


def _rg():
    return require_extra("reasoning_gym", RG_MISSING)


def dataset_names() -> list[str]:
    """Every dataset name reasoning-gym registers."""
    from reasoning_gym.factory import DATASETS

    _rg()
    return sorted(DATASETS)


def check_dataset(dataset: str, config: dict[str, Any]) -> None:
    """Raise ValueError naming the problem when ``dataset`` is unknown or ``config`` does not fit it."""
    names = dataset_names()
    if dataset not in names:
        raise ValueError(f"unknown reasoning-gym dataset {dataset!r}; the {len(names)} datasets are: "
                         f"{', '.join(names)}")
    import dataclasses

    from reasoning_gym.factory import DATASETS

    cfg_cls = DATASETS[dataset][1]
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    bad = sorted(set(config) - fields)
    if bad:
        raise ValueError(f"reasoning-gym dataset {dataset!r} has no option(s) {', '.join(bad)}; its options: "
                         f"{', '.join(sorted(fields - {'seed', 'size'}))}")
    try:
        cfg_cls(**{**config, "size": 1, "seed": 0}).validate()
    except Exception as e:  # noqa: BLE001 - the dataset's own validation, reported with the key
        raise ValueError(f"reasoning-gym dataset {dataset!r} rejects config {config}: {e}") from None


def _problems(dataset: str, config: dict, size: int, seed: int, instructions: str, tag: str) -> list[Problem]:
    ds = _rg().create_dataset(dataset, size=size, seed=seed, **config)
    out = []
    for i in range(size):
        e = ds[i]
        ref = json.dumps({"dataset": dataset, "answer": e["answer"], "metadata": e["metadata"]}, default=str)
        out.append(Problem(f"{dataset}-{tag}{i}", prompt=e["question"] + instructions, answer=ref,
                           metadata={"dataset": dataset, "answer": e["answer"], "question": e["question"]}))
    return out


def reasoning_gym_problems(dataset: str, config: dict[str, Any], num_train: int, num_heldout: int, seed: int,
                           instructions: str = RG_INSTRUCTIONS) -> tuple[list[Problem], list[Problem]]:
    """``(train, held_out)`` problems of a reasoning-gym dataset; no held-out question occurs in training."""
    check_dataset(dataset, config)
    train = _problems(dataset, config, num_train, seed, instructions, "train") if num_train else []
    seen = {p.metadata["question"] for p in train}
    held = [p for p in _problems(dataset, config, 2 * num_heldout + 8, seed + 1_000_003, instructions, "heldout")
            if p.metadata["question"] not in seen]
    uniq, qs = [], set()
    for p in held:
        if p.metadata["question"] not in qs:
            qs.add(p.metadata["question"])
            uniq.append(p)
    return train, uniq[:num_heldout]
