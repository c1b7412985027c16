"""Asynchronous rollouts: a generator process samples up to ``k`` steps ahead of the learner.

Synchronous RL alternates *generate -> learn -> generate*; one of the two is always
idle.  Here a separate process (``torch.multiprocessing``, ``spawn``) holds its own
copy of the policy (a clean process: ``forkserver``, else ``spawn``) and produces the batches of rollouts while the learner trains
on earlier ones (as in IMPALA, Espeholt et al. 2018, and asynchronous RLHF,
Noukhovitch et al. 2024, "Asynchronous RLHF: Faster and More Efficient Off-Policy
RL for Language Models")::

    learner  :  [learn 0][sync]        [learn 1][sync]        [learn 2] ...
    generator:  [gen 0][gen 1 (v0)]    [gen 2 (v1)]           [gen 3 (v2)] ...      k = 1

Policy *version* ``v`` is the policy after ``v`` optimizer steps.  Batch ``b`` is
always sampled from exactly version ``max(start, b - k)`` (``start``: the step a
resumed run starts at), so

* staleness ``b - version <= k`` (``k = 0`` is synchronous, on-policy sampling
  in a separate process);
* the run is deterministic: which weights sample which batch never depends on
  timing, and the prompts, RNG stream and filter state live in the generator and
  advance batch by batch exactly as in the synchronous loop;
* every prompt is drawn once, in the order of ``PromptSampler`` (no prompt is lost
  or repeated, the learner consumes batches in index order).

The process builds the run's environment (``env.name``, ``env.params``, ``env.max_concurrency``; a plugin's is
registered there by importing the run's ``plugins``) and collects exactly as the in-process recipe does
(:func:`rlvr.rollout.collect.collect_rollouts`, which runs :func:`rlvr.rollout.episodes.run_episodes`): a
multi-turn environment's episodes run there, token in and token out, the environment's timeouts included; a
single-turn one takes the plain sampling path.

Because batch ``b`` was sampled by an older policy than the one being updated,
its sampler log-probs ``mu`` differ from the learner's ``pi_old``; the recipe
corrects that with ``algorithm.is_correction`` (TIS / masked IS, see
``rlvr.algorithms.importance``), which ``train.async_steps > 0`` requires.

Weights travel after every update as one flat tensor of the *trainable*
parameters (all of them for full fine-tuning, only the adapters for LoRA),
through a queue whose tensors live in shared memory.  Each batch carries the
generator's state after producing it (prompt position, sampler RNG, difficulty
filter), which the learner stores so checkpoints resume exactly where the
consumed data ended.  Resuming an asynchronous run replays the same prompts, but
its first ``k`` batches are sampled by the resumed (fresher) policy, since the
stale in-flight versions are not checkpointed.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import pickle
import queue as queue_mod
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rlvr.engines.registry import EngineContext
from rlvr.rollout.collect import CollectSettings, Collected

__all__ = ["RolloutBatch", "AsyncRollouts", "GeneratorSettings", "pack_weights", "unpack_weights",
           "trainable_names", "required_version"]


@dataclass(frozen=True, kw_only=True)
class GeneratorSettings:
    """What the generator process reads of the run; each field names its config key."""

    collect: CollectSettings
    """What :func:`rlvr.rollout.collect.collect_rollouts` reads (``train.seed`` also seeds the prompt order)."""
    engine: EngineContext
    """The HF engine's context (``rollout.*``, ``model.*``, ``task.system_prompt``)."""
    engine_params: dict[str, Any] = field(default_factory=dict)
    """``rollout.engine_params`` of the hf engine."""
    verifier: str = "numeric"
    """``reward.verifier``: built in the process when no verifier callable is given."""
    verifier_params: dict[str, Any] = field(default_factory=dict)
    """``reward.verifier_params``."""
    env: str = "single_turn"
    """``env.name``: the environment the process runs episodes in (built there, with the verifier)."""
    env_params: dict[str, Any] = field(default_factory=dict)
    """``env.params``."""
    env_max_concurrency: int = 0
    """``env.max_concurrency``: environment calls run at once (0: the environment's own ``step_workers``)."""
    plugins: list[str] = field(default_factory=list)
    """``plugins``: imported in the process first (their registry names)."""
    threads: int = 0
    """``train.threads``: torch CPU threads of the process (0: torch's default)."""
    matmul: str = "aten"
    """``model.matmul``: the float32 CPU matrix-product backend."""


@dataclass
class RolloutBatch:
    """One step's rollouts from the generator process."""

    index: int
    """The learner step this batch is for (0-based)."""
    version: int
    """Policy version (optimizer steps taken) of the weights that sampled it."""
    rollouts: Collected
    """The step's rollouts, as :func:`rlvr.rollout.collect.collect_rollouts` returned them."""
    verify_time: float
    state: dict[str, Any] = field(default_factory=dict)
    """Generator state after this batch: ``data_position``, ``generator`` (RNG), ``difficulty_filter``."""
    peak_rss_mb: float = 0.0
    """The generator process's peak resident memory so far."""

    @property
    def staleness(self) -> int:
        return self.index - self.version

    @property
    def gen_time(self) -> float:
        return self.rollouts.generation_seconds


def required_version(index: int, start: int, max_ahead: int) -> int:
    """The policy version that samples batch ``index``: ``max(start, index - max_ahead)``."""
    return max(start, index - max_ahead)


def trainable_names(model) -> list[str]:
    """Names of the parameters that change during training (the ones sent after each update)."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def pack_weights(model, names: list[str]) -> torch.Tensor:
    """The named parameters as one flat CPU tensor (their common dtype, else float32)."""
    params = dict(model.named_parameters())
    dtypes = {params[n].dtype for n in names}
    wire = dtypes.pop() if len(dtypes) == 1 else torch.float32
    with torch.no_grad():
        return torch.cat([params[n].detach().reshape(-1).to("cpu", wire) for n in names])


def unpack_weights(model, names: list[str], flat: torch.Tensor) -> None:
    """Copy a :func:`pack_weights` tensor back into ``model``'s parameters (in place)."""
    params = dict(model.named_parameters())
    total = sum(params[n].numel() for n in names)
    if total != flat.numel():
        raise ValueError(f"weight message holds {flat.numel()} values, the model's trainable parameters {total}")
    offset = 0
    with torch.no_grad():
        for n in names:
            p = params[n]
            p.copy_(flat[offset: offset + p.numel()].view(p.shape))
            offset += p.numel()


# ----------------------------------------------------------------------------- worker process
def _worker_main(payload: bytes, weights_q, batches_q) -> None:
    """Generator process: sample batch ``b`` with policy version ``max(start, b - k)``, in index order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    try:
        from rlvr.plugins import load_plugins

        args = pickle.loads(payload)
        cfg: GeneratorSettings = args["settings"]
        load_plugins(cfg.plugins)  # registry names from plugins (the verifier may be built here)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        from rlvr.engines.registry import build_engine
        from rlvr.envs import build_environment, set_concurrency
        from rlvr.models.matmul import matmul_backend
        from rlvr.utils.accounting import peak_rss_mb
        from rlvr.tasks.sampler import PromptSampler
        from rlvr.rollout.collect import collect_rollouts
        from rlvr.verifiers import get_verifier

        model = args["model"].to(args["device"])
        verifier = args["verifier"] or get_verifier(cfg.verifier, **cfg.verifier_params)
        # the run's environment, built here from its name and options (single_turn: the verifier's check, the
        # plain sampling path); episodes run as in the in-process recipe (rlvr.rollout.episodes.run_episodes)
        from rlvr.envs import ENVIRONMENTS

        if cfg.env not in ENVIRONMENTS:
            raise ValueError(f"env.name={cfg.env} is not registered in the rollout process: register it in a "
                             "module named in the run's plugins, which the process imports")
        env = set_concurrency(build_environment(cfg.env, verifier, args["tokenizer"], **cfg.env_params),
                              cfg.env_max_concurrency)
        modes = contextlib.ExitStack()  # held until this function returns: the whole generator process
        modes.enter_context(matmul_backend(cfg.matmul))
        # the same engine as the in-process recipe, rollout.engine_params included
        engine = build_engine("hf", model, args["tokenizer"], cfg.engine, **cfg.engine_params)
        engine.generator.set_state(args["generator_state"])
        sampler = PromptSampler(args["problems"], seed=cfg.collect.seed, position=args["data_position"])
        dfilter, names = args["dfilter"], args["names"]
        start, end, k = args["start"], args["end"], args["max_ahead"]
        version = start
        for b in range(start, end):
            need = required_version(b, start, k)
            changed = False
            while version < need:
                msg = weights_q.get()
                if msg is None:  # the learner is done
                    return
                version, flat = msg
                unpack_weights(model, names, flat)
                del flat
                changed = True
            if changed:
                engine.sync_weights(model)
            t0 = time.perf_counter()
            ro = collect_rollouts(engine, sampler, env, args["params"], cfg.collect, b, dfilter)
            t_all = time.perf_counter() - t0
            state = {"data_position": sampler.position, "generator": engine.generator.get_state(),
                     "difficulty_filter": None if dfilter is None else dfilter.state_dict()}
            # plain pickle (tensors by value): a shared-memory handle would die with this process
            batches_q.put(pickle.dumps(RolloutBatch(b, version, ro, t_all - ro.generation_seconds, state,
                                                    peak_rss_mb())))
    except BaseException:  # report, never hang the learner
        batches_q.put(("error", traceback.format_exc()))


# ----------------------------------------------------------------------------- learner handle
def _context():
    """A clean-process start method: ``forkserver`` where available (the server imports torch and
    the recipe once, later workers fork from it in milliseconds), else ``spawn``.  Never plain
    ``fork`` of the learner, whose torch thread pools do not survive a fork."""
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = torch.multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["rlvr.recipes.rl"])
        return ctx
    return torch.multiprocessing.get_context("spawn")


class AsyncRollouts:
    """The learner's handle on a generator process that samples up to ``max_ahead`` steps ahead.

    Args:
        model: the learner's policy (a copy is sent to the process; the learner's
            own weights are never shared with it).
        tokenizer, problems, params: what ``collect_rollouts`` needs.
        settings: what the process reads of the run (:class:`GeneratorSettings`).
        verifier: a picklable verifier callable, or None to build
            ``settings.verifier`` from the registry inside the process.
        dfilter: the difficulty filter (copied into the process) or None.
        start, end: learner steps ``[start, end)`` to produce batches for.
        max_ahead: k, how many policy versions a batch may lag (0: synchronous).
        data_position, generator_state: prompt position and sampler RNG at ``start``.
    """

    def __init__(self, model, tokenizer, problems, params, settings: GeneratorSettings, *, verifier: Callable | None,
                 dfilter, start: int, end: int, max_ahead: int, data_position: int, generator_state: torch.Tensor,
                 device: torch.device | str = "cpu", poll_seconds: float = 1.0):
        if max_ahead < 0:
            raise ValueError(f"max_ahead must be >= 0, got {max_ahead}")
        if verifier is not None:
            try:
                pickle.dumps(verifier)
            except Exception as e:
                raise ValueError("train.async_steps / train.rollout_worker run the verifier in the rollout "
                                 f"process, so it must be picklable (a module-level function): {e}") from e
        self.start, self.end, self.max_ahead = start, end, max_ahead
        self.names = trainable_names(model)
        self.poll_seconds = poll_seconds
        self._sent: collections.deque = collections.deque(maxlen=max_ahead + 2)  # keep shared tensors alive
        ctx = _context()
        self.weights_q = ctx.Queue()
        self.batches_q = ctx.Queue(maxsize=max_ahead + 1)
        worker_model = copy.deepcopy(model).to("cpu")
        payload = {"model": worker_model, "tokenizer": tokenizer, "problems": list(problems), "params": params,
                   "settings": settings, "verifier": verifier, "dfilter": copy.deepcopy(dfilter), "names": self.names,
                   "start": start, "end": end, "max_ahead": max_ahead, "data_position": data_position,
                   "generator_state": generator_state, "device": str(device)}
        # torch's reductions put the copy's tensors in shared memory; the process maps them
        from multiprocessing.reduction import ForkingPickler

        blob = bytes(ForkingPickler.dumps(payload))
        self.process = ctx.Process(target=_worker_main, args=(blob, self.weights_q, self.batches_q),
                                   name="rlvr-rollouts", daemon=True)
        self.process.start()
        del worker_model, payload

    def get(self, index: int) -> RolloutBatch:
        """The batch for learner step ``index`` (blocks until the generator has produced it)."""
        while True:
            try:
                item = self.batches_q.get(timeout=self.poll_seconds)
                break
            except queue_mod.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(f"rollout process died (exit code {self.process.exitcode})") from None
        if isinstance(item, tuple) and item and item[0] == "error":
            raise RuntimeError("rollout process failed:\n" + item[1])
        item = pickle.loads(item)
        if item.index != index:
            raise RuntimeError(f"rollout batches out of order: expected step {index}, got {item.index}")
        return item

    def send_weights(self, version: int, model) -> bool:
        """Publish policy ``version`` (after ``version`` updates); skipped if no batch needs it."""
        if required_version(self.end - 1, self.start, self.max_ahead) < version:
            return False
        flat = pack_weights(model, self.names)
        self._sent.append(flat)
        self.weights_q.put((version, flat))
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Stop the process (a no-op once it has ended)."""
        if self.process is None:
            return
        try:
            self.weights_q.put(None)
        except (ValueError, OSError):
            pass
        self.process.join(timeout=0.1)
        while self.process.is_alive() and timeout > 0:  # unblock a put() on a full batch queue
            try:
                self.batches_q.get(timeout=0.2)
            except queue_mod.Empty:
                pass
            self.process.join(timeout=0.1)
            timeout -= 0.3
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
        for q in (self.weights_q, self.batches_q):
            q.cancel_join_thread()
            q.close()
        self.process = None
        self._sent.clear()

    def __enter__(self) -> "AsyncRollouts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
