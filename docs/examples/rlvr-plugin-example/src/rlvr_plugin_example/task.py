"""The ``guess_targets`` task: a hidden number per problem (its answer)."""

import random

from rlvr.tasks.registry import TASKS
from rlvr.types import Problem


@TASKS.register("guess_targets")
def guess_targets(num_train: int = 200, num_heldout: int = 50, seed: int = 0, low: int = 1, high: int = 100):
    """Hidden numbers from ``low`` to ``high`` to guess; training and held-out targets drawn apart.

    ``num_heldout`` and ``seed`` come from the task.* keys; ``num_train``, ``low`` and
    ``high`` from task.params.
    """
    rng = random.Random(seed)
    prompt = f"I am thinking of a number from {low} to {high}. Guess it: reply with one number."
    problems = [Problem(id=f"guess-{i}", prompt=prompt, answer=str(rng.randint(low, high)))
                for i in range(num_train + num_heldout)]
    return problems[:num_train], problems[num_train:]
