"""A verifiers 0.4 (``verifiers.v1``) taskset for the tests: add two numbers, scored by two weighted rewards.

A plain taskset (no Env of its own): verifiers plays it with ``SingleAgentEnv``, one turn.
"""

import verifiers.v1 as vf


class AddData(vf.TaskData):
    answer: str = ""


class AddConfig(vf.TasksetConfig):
    num_tasks: int = 8


class AddTask(vf.Task[AddData]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        words = trace.last_reply.replace(".", " ").split()
        return float(bool(words) and words[-1] == task.answer)

    @vf.reward(weight=0.5)
    async def short(self, trace) -> float:
        return float(len(trace.last_reply) <= 12)

    @vf.metric
    async def words(self, trace) -> float:
        return float(len(trace.last_reply.split()))


class AddTaskset(vf.Taskset[AddTask, AddConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            yield AddTask(AddData(prompt=f"What is {i} + {i + 1}?", system_prompt="Answer with the number only.",
                                  answer=str(2 * i + 1)), self.config.task)


__all__ = ["AddTaskset"]
