"""A verifiers 0.4 taskset with its own two-turn Env for the tests: name a number, then double it.

The Env's program opens an interaction with the agent: the first turn answers the task's prompt,
the second answers "Now double it."; the task's reward reads both replies.
"""

import verifiers.v1 as vf

FOLLOW_UP = "Now double it."


class NumData(vf.TaskData):
    answer: str = ""


class NumConfig(vf.TasksetConfig):
    num_tasks: int = 4


class NumTask(vf.Task[NumData]):
    @vf.reward
    async def both(self, task, trace) -> float:
        replies = [(m.content or "").strip() for m in trace.assistant_messages]
        first = float(len(replies) > 0 and replies[0] == task.answer)
        second = float(len(replies) > 1 and replies[1] == str(2 * int(task.answer)))
        return (first + second) / 2


class NumTaskset(vf.Taskset[NumTask, NumConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            yield NumTask(NumData(prompt=f"Say the number {i + 3}.", answer=str(i + 3)), self.config.task)


class TwoTurnEnv(vf.Env[vf.SingleAgentEnvConfig]):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            await chat.turn()
            await chat.turn(FOLLOW_UP)

    async def finalize(self, task, episode):
        for trace in episode.traces:
            trace.record_metric("turns_seen", float(trace.num_turns))


__all__ = ["NumTaskset", "TwoTurnEnv"]
