"""``env.name=verifiers``: play and score the tasks of a verifiers (0.4, ``verifiers.v1``) taskset.

The problems come from ``task.name=verifiers`` (:mod:`rlvr.tasks.verifiers_taskset`): each names its
taskset, its Env and its task.  An episode runs the verifiers ``Env``'s own program on the task --
``setup(agents)``, ``run(task, agents)``, then ``finalize(task, episode)`` -- with the seats
(``agents.<name>``) answered by rlvr's policy instead of a model endpoint:

* ``await agents.agent.run(task)`` (``SingleAgentEnv``, every plain taskset) is one policy turn on the
  task's messages (its system prompt, then its prompt);
* ``async with agents.X.interaction(task) as chat`` with ``await chat.turn(message)`` is a multi-turn
  protocol: each ``turn(message)`` appends ``message`` as a user message (rlvr shows it to the policy as
  the observation of its previous turn) and waits for the policy's next turn, returned as a ``vf.Segment``.
  A seat's ``max_turns`` ends the exchange with a terminated segment, as in verifiers.

When the program ends, each policy trace (a ``vf.Trace`` built from the conversation: prompt
messages, then the policy's sampled assistant turns) is scored by the task's own ``Task.score``:
its ``@vf.reward`` functions (async, run concurrently on the loop, each weighted by its
``weight``), its ``@vf.metric`` functions, the rewards and judges plugged in through the taskset's
``task`` config; functions that need a runtime (a sandbox) are skipped, as verifiers does offline.
The episode's reward is ``trace.reward`` (the weighted sum, after the Env's ``finalize``); ``info``
carries each reward's unweighted score as ``vf/<name>`` and each metric as ``vf_metric/<name>``
(logged as ``env/vf/<name>``).

What runs in-process only: a seat that is not the policy (``trainable = False`` after ``setup``, e.g.
``user-sim``'s simulated user) needs a model of its own and is refused, as is a second trainable seat
or a second interaction of the policy's seat in one episode; harness programs (``bash``, code agents),
tools and sandboxes are not run (a ``vf.ToolEnv`` taskset with ``toolsets`` is refused at load).

The coroutines run on one shared event loop (:mod:`rlvr.envs.async_loop`); ``reset`` and ``step``
block on them, each within ``env.timeout_s``.  ``reset`` runs the program up to the policy's first
turn to learn its messages and stops it; each episode then runs the program afresh from its first
step (the ``n`` episodes of a problem share one ``reset``), so a program's opening must not depend on
chance.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from typing import Any

from rlvr.envs import async_loop
from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply
from rlvr.tasks.verifiers_taskset import INSTALL_HINT, METADATA_KEY, import_verifiers, load_vf_env, task_messages
from rlvr.types import Problem, Verdict

__all__ = ["VerifiersEnvironment"]


class _Refused(RuntimeError):
    """What the program asked for that rlvr cannot play (a second policy seat, a model-backed seat, ...)."""


class _Run:
    """One episode of a verifiers Env program on the shared loop, driven from rlvr's thread by ``start`` and
    ``send``: each returns the program's next event, ``("turn", new messages)`` or ``("done", trace list)``."""

    def __init__(self, loaded, task):
        self.loaded, self.task = loaded, task
        self.events: queue.Queue = queue.Queue()
        self.pending: asyncio.Future | None = None
        self.policy: str | None = None
        self.traces: list = []
        self.future = None
        self.opened = False

    # ---------------------------------------------------------------- rlvr's side (any thread)
    def start(self):
        self.future = async_loop.submit(self._main())
        return self._next()

    def send(self, text: str):
        loop, fut = async_loop.loop(), self.pending
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(text))
        return self._next()

    def cancel(self) -> None:
        if self.future is not None:
            self.future.cancel()

    def _next(self):
        kind, value = self.events.get()
        if kind == "error":
            raise value
        return kind, value

    # ---------------------------------------------------------------- the loop's side
    async def _main(self) -> None:
        vf = import_verifiers()
        env, task = self.loaded.env, self.task
        try:
            agents = vf.Agents(env.config, lambda name, spec: _Seat(self, name, spec))
            await env.setup(agents)
            await env.run(task, agents)
            if not self.traces:
                raise _Refused(f"{type(env).__name__}.run() never asked the policy for a turn")
            episode = vf.Episode(env=vf.EnvInfo(id=env.config.env_id),
                                 task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key,
                                                   hash=task.hash))
            episode.traces.extend(self.traces)
            await env.finalize(task, episode)
            self.events.put(("done", self.traces))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - handed to rlvr's thread, which ends the episode with it
            self.events.put(("error", e))

    async def policy_turn(self, new_messages: list[dict[str, str]]) -> str:
        self.pending = asyncio.get_running_loop().create_future()
        self.events.put(("turn", new_messages))
        return await self.pending


class _Seat:
    """``agents.<name>`` inside one episode: the policy when trainable, refused otherwise."""

    def __init__(self, run: _Run, name: str, spec):
        self.run_, self.name, self.spec = run, name, spec
        self.trainable = True

    def _claim(self) -> None:
        r = self.run_
        if not self.trainable:
            raise _Refused(f"seat {self.name!r} is not the policy (trainable=False) and needs a model of its own: "
                           "env.name=verifiers plays only the policy's seat")
        if r.policy not in (None, self.name):
            raise _Refused(f"seats {r.policy!r} and {self.name!r} are both trainable: env.name=verifiers plays one "
                           "policy seat per episode")
        if r.opened:
            raise _Refused(f"seat {self.name!r} opened a second run in one episode: env.name=verifiers plays one "
                           "conversation per episode")
        r.policy, r.opened = self.name, True

    @contextlib.asynccontextmanager
    async def interaction(self, task, **_: Any):
        self._claim()
        chat = _Chat(self.run_, task, self.spec)
        try:
            yield chat
        except BaseException:
            chat.closed = True  # cancelled or failed: nothing to score
            raise
        await chat.close()

    async def run(self, task, **_: Any):
        async with self.interaction(task) as chat:
            await chat.turn()
        return chat.trace


class _Chat:
    """A verifiers ``Interaction`` whose model is rlvr's policy: ``turn(message)`` asks the policy for one turn."""

    def __init__(self, run: _Run, task, spec):
        vf = import_verifiers()
        from verifiers.v1.state import state_cls

        self.run_, self.task = run, task
        self.max_turns = getattr(spec, "max_turns", None)
        self.trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key,
                                                hash=task.hash),
                              state=state_cls(type(task))(), agent=vf.AgentInfo(config=vf.AgentConfig(),
                                                                                name=run.policy or "agent"))
        self.unsent = task_messages(task.data)  # shown to the policy with its next turn
        self.turns = 0
        self.closed = False
        for m in self.unsent:
            self._add(m, sampled=False)

    def _add(self, msg: dict[str, str], sampled: bool) -> None:
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

        cls = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}[msg["role"]]
        parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
        self.trace.nodes.append(MessageNode(parent=parent, message=cls(content=msg["content"]), sampled=sampled))

    async def turn(self, message=None):
        vf = import_verifiers()
        if self.closed or (self.max_turns is not None and self.turns >= self.max_turns):
            return vf.Segment(messages=[], terminated=True)
        if message is not None:
            from verifiers.v1.types import content_text

            for m in ([{"role": "user", "content": message}] if isinstance(message, str) else
                      [{"role": getattr(x, "role", None) or x["role"],
                        "content": content_text(getattr(x, "content", None) if not isinstance(x, dict)
                                                else x.get("content"))} for x in message]):
                self.unsent.append(m)
                self._add(m, sampled=False)
        new, self.unsent = self.unsent, []
        text = await self.run_.policy_turn(new)
        self.turns += 1
        self._add({"role": "assistant", "content": text}, sampled=True)
        return vf.Segment(messages=[self.trace.nodes[-1].message])

    async def close(self):
        if self.closed:
            return self.trace
        self.closed = True
        if self.trace.stop_condition is None:
            self.trace.stop("user_closed")
        await self.task.score(self.trace)
        self.trace.is_completed = self.trace.ok = True
        self.run_.traces.append(self.trace)
        return self.trace


def _content(messages: list[dict[str, str]]) -> str:
    return "\n\n".join(m["content"] for m in messages if m.get("content"))


class VerifiersEnvironment(Environment):
    """The verifiers Env program of each problem's taskset, played by the policy (see the module doc)."""

    def __init__(self, *, max_turns: int, max_total_tokens: int, workers: int):
        self.limits = Limits(max_turns=max_turns, max_total_tokens=max_total_tokens)
        self.step_workers = workers

    @staticmethod
    def _task(problem: Problem):
        meta = (problem.metadata or {}).get(METADATA_KEY)
        if not meta:
            raise ValueError(f"problem {problem.id!r} is not a verifiers task: env.name=verifiers plays the problems "
                             "of task.name=verifiers")
        loaded = load_vf_env(meta["taskset"], meta.get("taskset_args"), meta.get("env", ""), meta.get("env_args"))
        return loaded, loaded.tasks[meta["index"]]

    def reset(self, problem: Problem) -> EpisodeState:
        loaded, task = self._task(problem)
        run = _Run(loaded, task)
        try:
            kind, value = run.start()
        finally:
            run.cancel()
        if kind != "turn":
            raise _Refused("the verifiers program ended before the policy's first turn")
        return EpisodeState(problem, [dict(m) for m in value])

    def step(self, state: EpisodeState, text: str) -> Reply:
        run = state.data.get("run")
        if run is None:  # this episode's own run of the program, fast-forwarded to its first turn
            loaded, task = self._task(state.problem)
            run = state.data["run"] = _Run(loaded, task)
            kind, _ = run.start()
            if kind != "turn":
                raise _Refused("the verifiers program ended before the policy's first turn")
        try:
            kind, value = run.send(text)
        except BaseException:
            run.cancel()
            raise
        if kind == "turn":
            return Reply(observation=_content(value), role="user")
        return self._outcome(value)

    @staticmethod
    def _outcome(traces: list) -> Reply:
        reward = sum(t.reward for t in traces)
        info: dict[str, float] = {}
        for t in traces:
            info.update({f"vf/{k}": float(r.score) for k, r in t.rewards.items() if r is not None})
            info.update({f"vf_metric/{k}": float(v) for k, v in t.metrics.items() if v is not None})
        parts = ", ".join(f"{k[3:]}={v:g}" for k, v in info.items() if k.startswith("vf/"))
        last = traces[-1].last_reply if traces else ""
        return Reply(done=True, reward=float(reward),
                     verdict=Verdict(float(reward), last[-200:] or None, reason=f"verifiers rubric: {parts}"),
                     info=info)

    def close(self, state: EpisodeState, reason: str) -> Reply:
        run = state.data.get("run")
        if run is not None:
            run.cancel()
        return Reply(done=True, reward=0.0, verdict=Verdict(0.0, None, reason=f"incomplete: {reason}"))


def _check(params: dict, *, task_options: dict | None = None, **_) -> None:
    try:
        import_verifiers()
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    if task_options is not None and "taskset" not in task_options:
        raise ValueError("env.name=verifiers plays the tasks of a verifiers taskset: set task.name=verifiers and "
                         "task.params.taskset=<taskset id>")
    if task_options and task_options.get("taskset"):
        _refuse_tools(task_options["taskset"])
    if params.get("max_turns", 1) < 1:
        raise ValueError("max_turns must be >= 1")
    if params.get("workers", 8) < 1 or params.get("max_total_tokens", 0) < 0:
        raise ValueError("workers must be >= 1 and max_total_tokens >= 0")


def _refuse_tools(taskset: str) -> None:
    """A taskset whose tasks (or itself) serve tools needs tool servers and a harness rlvr does not run."""
    from verifiers.v1.utils.loaders import taskset_class

    try:
        cls = taskset_class(taskset)
    except Exception:  # noqa: BLE001 - the task's own check names a missing taskset
        return
    task_cls = cls.task_type()
    if cls.toolsets.__func__ is not _base_toolsets("Taskset") or \
            task_cls.toolsets.__func__ is not _base_toolsets("Task") or getattr(task_cls, "NEEDS_CONTAINER", False):
        raise ValueError(f"verifiers taskset {taskset!r} serves tools or needs a container (toolsets / "
                         "NEEDS_CONTAINER): env.name=verifiers plays tool-less chat tasks only")


def _base_toolsets(kind: str):
    vf = import_verifiers()
    return getattr(vf, kind).toolsets.__func__


@ENVIRONMENTS.register("verifiers", check=_check,
                       doc="a verifiers 0.4 taskset's Env program played by the policy, scored by its tasks' "
                           "@vf.reward functions (pip install 'rlvr[verifiers]'); with task.name=verifiers; "
                           "params max_turns, max_total_tokens, workers")
def verifiers_env(verifier, tokenizer, *, max_turns: int = 1, max_total_tokens: int = 0,
                  workers: int = 8) -> Environment:
    """``max_turns``: policy turns per episode at most (the Env program's protocol; 1 for a plain taskset);
    ``workers``: steps of one turn in flight together (their scoring coroutines run concurrently)."""
    _check({"max_turns": max_turns, "workers": workers, "max_total_tokens": max_total_tokens})
    return VerifiersEnvironment(max_turns=max_turns, max_total_tokens=max_total_tokens, workers=workers)
