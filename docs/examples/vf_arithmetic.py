"""A verifiers 0.4 taskset, written in that library's format and scored by its own helpers: add or subtract.

Nothing here imports rlvr: verifiers' ``SingleAgentEnv`` plays each task in one turn, and the reward is
verifiers' ``extract_boxed_answer`` (strict: no box, no answer) compared with the exact integer. rlvr
trains on it through ``env.name=verifiers`` with the module on ``PYTHONPATH``:

    PYTHONPATH=docs/examples rlvr train configs/arithmetic_grpo.yaml task.name=verifiers \
        'task.params={taskset: vf_arithmetic, taskset_args: {num_tasks: 2256}}' env.name=verifiers

The tasks are distinct, drawn from a seeded generator (``seed``): two operands in [``low``, ``high``] joined by one of
``operators`` (``+``, ``-``).
"""

import random

import verifiers.v1 as vf

INSTRUCTION = "Put the final answer in \\boxed{}."


class ArithmeticData(vf.TaskData):
    answer: str = ""


class ArithmeticConfig(vf.TasksetConfig):
    num_tasks: int = 1000
    seed: int = 0
    low: int = 1
    high: int = 50
    operators: str = "+"


class ArithmeticTask(vf.Task[ArithmeticData]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        boxed = vf.extract_boxed_answer(trace.last_reply or "", strict=True).strip()
        return float(boxed == task.answer)

    @vf.metric
    async def boxed(self, trace) -> float:
        return float(bool(vf.extract_boxed_answer(trace.last_reply or "", strict=True)))


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, ArithmeticConfig]):
    def load(self):
        rng, low, high, ops = random.Random(self.config.seed), self.config.low, self.config.high, self.config.operators
        if not ops or set(ops) - set("+-") or low > high:
            raise ValueError(f"operators {ops!r} (one or both of + -), low {low}, high {high} (low <= high)")
        distinct = len(set(ops)) * (high - low + 1) ** 2
        if self.config.num_tasks > distinct:
            raise ValueError(f"num_tasks {self.config.num_tasks}: only {distinct} distinct tasks")
        seen = set()
        while len(seen) < self.config.num_tasks:  # distinct tasks, so that no held-out task is also trained on
            a, b, op = rng.randint(low, high), rng.randint(low, high), rng.choice(ops)
            if (a, op, b) in seen:
                continue
            seen.add((a, op, b))
            value = a + b if op == "+" else a - b
            data = ArithmeticData(prompt=f"What is {a} {op} {b}? {INSTRUCTION}", answer=str(value))
            yield ArithmeticTask(data, self.config.task)


__all__ = ["ArithmeticTaskset"]
