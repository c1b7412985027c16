"""Training/held-out problems from the task config, and a resumable prompt order."""

from __future__ import annotations

import random
from typing import Sequence

from rlvr.tasks import ArithmeticSpec, arithmetic_split, load_benchmark, load_gsm8k, load_jsonl_problems
from rlvr.recipes.config import TaskConfig
from rlvr.types import Problem

__all__ = ["build_task", "PromptSampler"]


def build_task(cfg: TaskConfig) -> tuple[list[Problem], list[Problem]]:
    """(train, held-out) problems for a task config.

    Arithmetic problems are generated with disjoint splits; GSM8K trains on its
    train file and holds out its test file; other file tasks (evaluation sets
    with no train split) hold out the last ``num_heldout`` problems of a seeded
    shuffle and train on the rest.
    """
    if cfg.name == "arithmetic":
        spec = ArithmeticSpec(num_operands=cfg.num_operands, min_value=cfg.min_value, max_value=cfg.max_value,
                              operators=tuple(cfg.operators))
        return arithmetic_split(spec, cfg.num_train, cfg.num_heldout, seed=cfg.seed, template=cfg.template)
    if cfg.name == "gsm8k" and cfg.path is None:  # a real train split exists: never train on test
        return load_gsm8k(split="train"), load_gsm8k(split="test", limit=cfg.num_heldout)
    if cfg.name == "jsonl":
        if not cfg.path:
            raise ValueError("task.name=jsonl needs task.path=<file.jsonl>")
        problems = load_jsonl_problems(cfg.path, prompt_field=cfg.prompt_field, answer_field=cfg.answer_field)
    else:
        problems = load_benchmark(cfg.name, path=cfg.path)
    order = list(range(len(problems)))
    random.Random(cfg.seed).shuffle(order)
    n_held = min(cfg.num_heldout, len(problems))
    held = [problems[i] for i in order[len(order) - n_held:]]
    train = [problems[i] for i in order[: len(order) - n_held]]
    return train, held


class PromptSampler:
    """Walks over the training problems in seeded, reshuffled-every-epoch order.

    The whole state is ``position`` (prompts consumed so far), so a resumed run
    that restores it sees exactly the prompts an uninterrupted run would.
    """

    def __init__(self, problems: Sequence[Problem], seed: int = 0, position: int = 0):
        if not problems:
            raise ValueError("no training problems")
        self.problems = list(problems)
        self.seed = seed
        self.position = position

    def _order(self, epoch: int) -> list[int]:
        if getattr(self, "_epoch", None) != epoch:
            order = list(range(len(self.problems)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._epoch, self._cached = epoch, order
        return self._cached

    def next(self, k: int) -> list[Problem]:
        out = []
        for _ in range(k):
            epoch, i = divmod(self.position, len(self.problems))
            out.append(self.problems[self._order(epoch)[i]])
            self.position += 1
        return out
