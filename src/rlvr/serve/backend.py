"""The endpoint's logic without the web framework: episodes, batching, sampling, recording.

A :class:`Backend` answers chat-completion requests (:meth:`Backend.complete`, a coroutine run on the web
server's event loop).  Requests are gathered into batches and sampled by ``engine.generate`` calls (one per
distinct sampling setting) on one worker thread, so that the event loop keeps answering while the engine
works (the HF engine on CPU).  A request of an episode is recorded token in / token out
(:mod:`rlvr.serve.recording`).

Batching.  While the engine works, the requests that arrive wait; when it is free, the waiting requests go
into one call as soon as one of these holds: every open episode has a request waiting (the episodes move in
lockstep, as the in-process runner's do), ``max_batch`` are waiting, or the oldest has waited ``batch_window_s``
(with episodes open: a quarter of the last call's time if longer, :data:`STRAGGLER_SHARE`) counted from its
arrival or from the end of the last call, whichever is later (so that the episodes just answered, and agents
still starting, can send their request in time to join the others).  Sending each window's requests to a
queue of calls instead split 32 episodes of 3 turns into 19 to 43 calls, against 3 in process; a fixed
0.05 s window still split them about one run in two, as agents took up to 0.6 s to start
(``benchmarks/endpoint_overhead.py`` prints the endpoint's batch sizes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rlvr.engines import SamplingParams
from rlvr.serve.chat import ApiError, ChatRequest, canonical, normalise_messages, split_tool_calls
from rlvr.serve.recording import EpisodeRecording, Plan
from rlvr.types import Problem, Sample

__all__ = ["Backend", "ServeOptions", "STRAGGLER_SHARE"]

STRAGGLER_SHARE = 0.25
"""While episodes are open, a request waits for the others up to this share of the last engine call's time (or
``batch_window_s`` if longer): the engine idles at most a quarter of a call for a batch that saves a call."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    """How the endpoint listens and batches (``env.params`` of ``env.name=agent``; flags of ``rlvr serve``)."""

    host: str = "127.0.0.1"
    port: int = 0
    """0: a free port."""
    batch_window_s: float = 0.05
    """Seconds a request waits for others to share its ``engine.generate`` call (while episodes are open, a
    quarter of the last call's time if longer; no wait once every open episode has a request waiting)."""
    max_batch: int = 64
    """Requests gathered into one call at most (a full batch is sampled at once)."""
    max_request_bytes: int = 1 << 20
    """Largest request body accepted (larger: 413)."""
    model_name: str = "rlvr-policy"
    """The model id ``/v1/models`` lists and responses carry."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.batch_window_s < 0 or self.max_batch < 1 or self.max_request_bytes < 1:
            raise ValueError("batch_window_s must be >= 0, max_batch and max_request_bytes >= 1")


@dataclass
class _Job:
    episode: EpisodeRecording | None
    plan: Plan
    params: SamplingParams
    stops: tuple[str, ...]
    future: asyncio.Future
    key: tuple = field(default=())
    since: float = 0.0


class Backend:
    """Chat completions from ``engine`` for the episodes opened with :meth:`open_episode`.

    ``params``: the run's sampling settings.  With ``episodes_only`` (training) a request must name an open
    episode, may not ask for another temperature / top-p than the run's (the learner's importance ratios need
    the sampler's distribution), must have ``n=1`` and gets at most ``params.max_new_tokens`` tokens; without
    it (``rlvr serve``) the plain ``/v1/chat/completions`` honours every setting and records nothing.
    """

    def __init__(self, engine, tokenizer=None, params: SamplingParams | None = None,
                 options: ServeOptions | None = None, *, episodes_only: bool = True, max_requests: int = 0):
        self.engine = engine
        self.tokenizer = tokenizer or engine.tokenizer
        self.params = params or SamplingParams()
        self.options = options or ServeOptions()
        self.episodes_only = episodes_only
        self.max_requests = max_requests
        self.eos_ids = {int(i) for i in engine.eos_ids}  # the engine contract (rlvr.engines.RolloutEngine)
        self.episodes: dict[str, EpisodeRecording] = {}
        self.stopped: str | None = None
        self.lock = threading.Lock()
        self.cache = engine.prefix_cache()  # None where the engine has none
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rlvr-serve-engine")
        self._pending: list[_Job] = []
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the web server's, known from the first request
        self._freed = 0.0  # event-loop time the last engine call ended
        self._last_call_s = 0.0  # how long it took
        self.generate_calls = 0
        self.batch_sizes: list[int] = []
        """Requests per ``engine.generate`` call, in order (read and cleared by the runner for its metrics)."""

    def use(self, engine, tokenizer=None, params: SamplingParams | None = None) -> None:
        """Serve ``engine`` (its tokenizer unless given) at ``params`` from now on; call it between episodes."""
        if engine is not self.engine:
            self.engine, self.tokenizer = engine, tokenizer or engine.tokenizer
            self.eos_ids = {int(i) for i in engine.eos_ids}
            self.cache = engine.prefix_cache()
        if params is not None:
            self.params = params

    # ------------------------------------------------------------------ episodes (called from any thread)
    def open_episode(self, problem: Problem, group_index: int = 0) -> str:
        """A new episode on ``problem``; returns its id (the agent's base URL ends with it)."""
        eid = uuid.uuid4().hex
        with self.lock:
            self.episodes[eid] = EpisodeRecording(eid, problem, group_index)
        return eid

    def close_episode(self, eid: str, reason: str = "finished") -> EpisodeRecording:
        """Stop taking requests for episode ``eid`` and return its recording (later requests: 410)."""
        with self.lock:
            rec = self.episodes[eid]
            rec.closed = rec.closed or reason
        if self._loop is not None and not self._loop.is_closed():  # the others may now all be waiting
            try:
                self._loop.call_soon_threadsafe(self._maybe_flush)
            except RuntimeError:  # the loop closed meanwhile
                pass
        return rec

    def forget(self, eids) -> None:
        """Drop closed episodes' recordings (their ids then count as unknown)."""
        with self.lock:
            for e in eids:
                self.episodes.pop(e, None)

    def stop(self, reason: str = "the run has stopped") -> None:
        """Refuse every request from now on (503), in-flight ones included."""
        self.stopped = reason

    def reset_cache(self) -> None:
        """Drop the engine's stored keys and values (the weights are about to change)."""
        if self.cache is not None:
            self.cache.clear()

    def shutdown(self) -> None:
        self.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ requests (the event loop)
    def _check_open(self) -> None:
        if self.stopped:
            raise ApiError(503, f"this endpoint no longer serves completions: {self.stopped}",
                           type="service_unavailable", code="stopped")

    def _sampling(self, req: ChatRequest, episode: bool) -> tuple[SamplingParams, tuple[str, ...]]:
        run = self.params
        stops = tuple([req.stop] if isinstance(req.stop, str) else (req.stop or ()))
        max_tokens = req.max_completion_tokens or req.max_tokens
        if episode or self.episodes_only:
            if req.temperature is not None and abs(req.temperature - run.temperature) > 1e-6:
                raise ApiError(400, f"temperature={req.temperature:g}: this endpoint samples the policy under "
                                    f"training at the run's temperature {run.temperature:g} (omit it)",
                               param="temperature")
            if req.top_p is not None and abs(req.top_p - run.top_p) > 1e-6:
                raise ApiError(400, f"top_p={req.top_p:g}: this endpoint samples at the run's top_p {run.top_p:g} "
                                    "(omit it)", param="top_p")
            if req.n != 1:
                raise ApiError(400, f"n={req.n}: an episode's requests take one completion each (n=1); the run's "
                                    "group size gives each problem several episodes", param="n")
            new = min(max_tokens or run.max_new_tokens, run.max_new_tokens)
            params = dataclasses.replace(run, n=1, max_new_tokens=new, stop=tuple(run.stop) + stops, seed=None,
                                         seeds=None)
        else:
            temperature = run.temperature if req.temperature is None else req.temperature
            top_p = run.top_p if req.top_p is None else req.top_p
            params = SamplingParams(n=req.n, max_new_tokens=max_tokens or run.max_new_tokens,
                                    temperature=temperature, top_p=top_p, stop=stops,
                                    seeds=None if req.seed is None else [req.seed])
        return params, stops

    async def complete(self, episode_id: str | None, req: ChatRequest) -> dict[str, Any]:
        """The response body for ``req`` (of episode ``episode_id``, or unrecorded when None), or ApiError."""
        from rlvr.serve.chat import completion_json

        self._check_open()
        if episode_id is None and self.episodes_only:
            raise ApiError(404, "this endpoint serves episodes: use the base URL given to the agent "
                                "(http://HOST:PORT/v1/episodes/<episode id>)", code="episode_required")
        messages = normalise_messages(req.messages)
        tools = [dict(t) for t in req.tools] if req.tools else None
        if req.tool_choice == "none":
            tools = None
        params, stops = self._sampling(req, episode_id is not None)
        rec = None
        with self.lock:
            if episode_id is not None:
                rec = self.episodes.get(episode_id)
                if rec is None:
                    raise ApiError(404, f"unknown episode {episode_id!r}", type="not_found_error",
                                   code="unknown_episode")
                if rec.closed:
                    raise ApiError(410, f"episode {episode_id!r} has ended ({rec.closed})", code="episode_ended")
                if rec.busy:
                    raise ApiError(400, f"episode {episode_id!r} already has a request in progress (one at a time "
                                        "per episode)", code="episode_busy")
                if self.max_requests and rec.requests >= self.max_requests:
                    raise ApiError(400, f"episode {episode_id!r} made its {self.max_requests} requests "
                                        "(env.params.max_requests)", code="max_requests")
                plan = rec.plan(messages, tools, self.tokenizer, self.eos_ids, canonical)
                rec.busy = True
            else:
                plan = EpisodeRecording("-", Problem("served", prompt="-")).plan(messages, tools, self.tokenizer,
                                                                                self.eos_ids, canonical)
        try:
            future = asyncio.get_running_loop().create_future()
            key = (params.n, params.max_new_tokens, params.temperature, params.top_p, tuple(params.stop),
                   params.seeds is not None)
            self._submit(_Job(rec, plan, params, stops, future, key))
            try:
                sample_group: list[Sample] = await future
            except ApiError:
                self._check_open()  # stopped meanwhile: 503, not the engine's failure
                raise
            self._check_open()
            choices, served = [], None
            for i, s in enumerate(sample_group):
                choice, msg = self._choice(i, s, stops, req.logprobs)
                choices.append(choice)
                served = served or msg
            if rec is not None:
                with self.lock:
                    if rec.closed:
                        raise ApiError(410, f"episode {episode_id!r} has ended ({rec.closed})", code="episode_ended")
                    rec.record(plan, sample_group[0].prompt_ids, sample_group[0], served)
            prompt_len = len(sample_group[0].prompt_ids)
            return completion_json(self.options.model_name, choices, prompt_len,
                                   sum(len(s.completion_ids) for s in sample_group))
        finally:
            if rec is not None:
                rec.busy = False

    def _choice(self, index: int, s: Sample, stops: tuple[str, ...], logprobs: bool) -> tuple[dict, dict]:
        text = s.text
        for stop in stops:  # the engine keeps the stop string in the text; OpenAI leaves it out
            if text.endswith(stop):
                text = text[:-len(stop)]
                break
        content, calls = split_tool_calls(text)
        message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
        if calls:
            message["tool_calls"] = calls
        choice = {"index": index, "message": message, "logprobs": None,
                  "finish_reason": "tool_calls" if calls else ("length" if s.finish_reason == "length" else "stop")}
        if logprobs:
            toks = [self.tokenizer.decode([t]) for t in s.completion_ids]
            choice["logprobs"] = {"content": [{"token": t, "logprob": float(lp), "bytes": list(t.encode()),
                                               "top_logprobs": []} for t, lp in zip(toks, s.logprobs)],
                                  "refusal": None}
        return choice, normalise_messages([message])[0]

    def _submit(self, job: _Job) -> None:
        self._loop = asyncio.get_running_loop()
        job.since = self._loop.time()
        self._pending.append(job)
        self._maybe_flush()

    def _open_episodes(self) -> int:
        with self.lock:
            return sum(not r.closed for r in self.episodes.values())

    def _maybe_flush(self) -> None:
        """Start an engine call for the waiting requests if the engine is free and one of the module doc's
        conditions holds; otherwise make sure a timer will ask again when the oldest's window ends."""
        if self._busy or not self._pending:
            return
        loop = asyncio.get_running_loop()
        open_ = self._open_episodes()
        waiting = sum(j.episode is not None for j in self._pending)
        wait = self.options.batch_window_s
        if open_:
            wait = max(wait, STRAGGLER_SHARE * self._last_call_s)
        due = max(self._pending[0].since, self._freed) + wait
        if len(self._pending) >= self.options.max_batch or loop.time() >= due or (waiting and waiting >= open_):
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._maybe_flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        take = self.options.max_batch
        jobs, self._pending = self._pending[:take], self._pending[take:]
        groups: dict[tuple, list[_Job]] = {}
        for j in jobs:
            groups.setdefault(j.key, []).append(j)
        self._busy = True
        asyncio.ensure_future(self._run(list(groups.values())))

    async def _run(self, groups: list[list[_Job]]) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            for jobs in groups:
                await self._run_group(loop, jobs)
        finally:
            self._busy, self._freed = False, loop.time()
            self._last_call_s = self._freed - t0
            self._maybe_flush()

    async def _run_group(self, loop, jobs: list[_Job]) -> None:
        try:
            outs = await loop.run_in_executor(self._executor, self._generate, jobs)
        except Exception as e:  # noqa: BLE001 - every request of the call gets the error (500)
            log.warning("engine.generate failed for %d requests: %s: %s", len(jobs), type(e).__name__, e)
            for j in jobs:
                if not j.future.done():
                    j.future.set_exception(ApiError(500, f"generation failed: {type(e).__name__}: {e}"[:500],
                                                    type="server_error"))
            return
        for j, out in zip(jobs, outs):
            if not j.future.done():
                j.future.set_result(out)

    def _generate(self, jobs: list[_Job]) -> list[list[Sample]]:
        """One engine call for ``jobs`` (equal sampling settings), on the worker thread."""
        if self.stopped:
            raise RuntimeError(self.stopped)
        params = jobs[0].params
        if params.seeds is not None:
            params = dataclasses.replace(params, seeds=[int(j.params.seeds[0]) for j in jobs])
        extra = {"cache": self.cache} if self.cache is not None else {}
        self.generate_calls += 1
        self.batch_sizes.append(len(jobs))
        return self.engine.generate([j.plan.segment.start for j in jobs], params,
                                    prefixes=[j.plan.prefix for j in jobs], **extra)
