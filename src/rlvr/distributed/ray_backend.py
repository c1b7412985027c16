"""Rollout workers as Ray actors (``distributed.backend: ray``), behind the ``RolloutEngine`` interface.

Layout.  ``RayRolloutEngine`` reserves one placement-group bundle per rollout
worker (``{"CPU": c, "GPU": g}``, strategy PACK / SPREAD / STRICT_*) and starts
one ``RolloutWorker`` actor in each bundle.  A worker holds its own rollout
engine: an ``HFEngine`` on a model rebuilt from the learner's config, or a
``VLLMEngine`` on the model's directory.  The learner runs the recipe
(``rlvr.recipes.rl.train``) unchanged: it calls ``engine.generate`` and
``engine.sync_weights`` as with any engine.  Where the learner runs is
``distributed.learner``: ``driver`` (the process that called ``train``) or
``actor`` (``train_on_cluster``: a ``LearnerActor`` in bundle 0 of one placement
group whose bundles 1.. hold the rollout workers, so Ray places the learner's
GPU/CPUs and every worker's together; samples flow from the workers to it and
weights back through the object store).  One learner process; data-parallel
learners (FSDP2, ``rlvr.distributed.fsdp``) are not wired into this layout yet.
``submit_to_cluster`` starts that layout without waiting: ``rlvr train --seeds``
with ``distributed.backend: ray`` submits one per seed and Ray starts each when
its placement group fits (``rlvr.recipes.seeds``).

One ``generate`` call:

    seed   <- params.seed or a draw from engine.generator   (resumable, like HFEngine)
    shards <- the problems split into contiguous chunks, one per worker
    each shard k runs on worker k with seed + k                   (ray.wait collects them)
    a worker that dies (RayActorError) is recovered: Ray restarts it (max_restarts),
        or rlvr creates a fresh actor in the same bundle once restarts are used up;
        the current weights are loaded into it and exactly its shard is re-issued
    groups  <- shards in problem order, checked: one group per problem, group
        indices 0..n-1, every sample from the current weight version

Because a re-issued shard has the same problems, seed and weights, it yields the
same samples a worker that never died would have produced (tested): no sample
is lost or duplicated.

Weights travel through Ray's object store: ``sync_weights`` puts the learner's
state dict once (``ray.put``) and every worker loads it (Ray hands the same
object to each worker on a node without copying it per worker).  NCCL broadcast
between GPU processes is the faster route for large models and is not built.

Ray is imported only when an engine is built; without it the error names the
``distributed`` extra.
"""

from __future__ import annotations

import logging
import os
import weakref
from dataclasses import dataclass, field  # EngineSpec (not config)
from typing import Any, Callable, Mapping, Sequence

import torch

from rlvr.distributed.settings import DistributedConfig
from rlvr.engines.base import EngineBase, SamplingParams, eos_token_ids
from rlvr.types import Problem, Sample
from rlvr.utils.extras import require_extra

__all__ = ["RAY_MISSING", "import_ray", "init_ray", "reserve", "EngineSpec", "RolloutWorker", "RayRolloutEngine",
           "LearnerActor", "ClusterRun", "run_bundles", "submit_to_cluster", "train_on_cluster", "shard_bounds",
           "check_groups"]

log = logging.getLogger(__name__)

RAY_MISSING = "distributed.backend=ray needs Ray, which is not installed: pip install 'rlvr[distributed]'"


def import_ray():
    """Import and return ``ray``, or raise ImportError naming the extra to install."""
    return require_extra("ray", RAY_MISSING)


def init_ray(address: str | None = None, num_cpus: int = 0):
    """Join the cluster at ``address`` (``auto``: the one ``ray start --head`` runs here), or start a local one.

    Reuses an already initialised Ray (tests, notebooks).  ``num_cpus`` caps a
    locally started cluster (0: all cores).
    """
    ray = import_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if address:
            kwargs["address"] = address
        elif num_cpus:
            kwargs["num_cpus"] = num_cpus
        ray.init(**kwargs)
    return ray


@dataclass
class EngineSpec:
    """Everything a rollout worker needs to build its engine (pickled to the actor)."""

    engine: str
    """``hf`` or ``vllm``."""
    tokenizer: Any
    """The HF tokenizer (chat template, decoding)."""
    model_config: Any = None
    """hf: the policy's ``transformers`` config; the worker builds the architecture and loads the learner's weights."""
    model_path: str | None = None
    """vllm: HF directory vLLM loads (then overwritten by the learner's weights)."""
    batch_size: int = 64
    system_prompt: str | None = None
    dtype: str = "auto"
    """hf: sampler precision (``rollout.dtype``); vllm: vLLM's dtype."""
    threads: int = 1
    """torch CPU threads in the worker (its reserved CPUs)."""
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)
    hf_kwargs: dict[str, Any] = field(default_factory=dict)
    """hf: further ``HFEngine`` options (``rollout.engine_params``, e.g. ``decode``)."""


class RolloutWorker:
    """The body of one rollout actor: an engine plus the weight version it samples from."""

    def __init__(self, spec: EngineSpec):
        torch.set_num_threads(max(1, spec.threads))
        self.version = -1  # no weights from the learner yet
        if spec.engine == "hf":
            from transformers import AutoModelForCausalLM

            from rlvr.engines.hf import HFEngine, sampler_dtype

            from rlvr.models.frozen import freeze

            model = freeze(AutoModelForCausalLM.from_config(spec.model_config))
            self.model = model
            self.engine = HFEngine(model, spec.tokenizer, batch_size=spec.batch_size,
                                   system_prompt=spec.system_prompt, dtype=sampler_dtype(spec.dtype),
                                   **spec.hf_kwargs)
        elif spec.engine == "vllm":
            from rlvr.engines.vllm import VLLMEngine

            self.model = None
            self.engine = VLLMEngine(spec.model_path, spec.tokenizer, system_prompt=spec.system_prompt,
                                     dtype=spec.dtype, batch_size=spec.batch_size, **spec.vllm_kwargs)
        else:
            raise ValueError(f"unknown rollout engine {spec.engine!r} (hf or vllm)")

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        """Sample from these weights from now on; returns the worker's process id."""
        if self.model is not None:
            self.model.load_state_dict(state_dict)
            self.engine.sync_weights(self.model)
        else:
            self.engine.load_state_dict(state_dict)
        self.version = version
        return os.getpid()

    def generate(self, problems: Sequence[Problem], params: SamplingParams,
                 prefixes: Sequence[Sequence[int] | str] | None = None) -> tuple[int, list[list[Sample]]]:
        """Groups for ``problems`` (continuing ``prefixes`` when given) and the weight version that produced them."""
        return self.version, self.engine.generate(problems, params, prefixes)

    def set_batch_size(self, rows: int) -> None:
        """Decode at most ``rows`` sequences together from now on."""
        self.engine.batch_size = rows

    def pid(self) -> int:
        return os.getpid()


def shard_bounds(num_items: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` chunks of nearly equal size (first ones one larger), empty chunks dropped."""
    base, extra = divmod(num_items, num_shards)
    bounds, start = [], 0
    for k in range(num_shards):
        end = start + base + (k < extra)
        if end > start:
            bounds.append((start, end))
        start = end
    return bounds


def check_groups(problems: Sequence[Problem], groups: Sequence[Sequence[Sample]], n: int) -> None:
    """Raise unless there is exactly one group per problem, in order, each with group indices 0..n-1."""
    if len(groups) != len(problems):
        raise RuntimeError(f"rollout workers returned {len(groups)} groups for {len(problems)} problems")
    for p, g in zip(problems, groups):
        if [s.problem_id for s in g] != [p.id] * n or sorted(s.group_index for s in g) != list(range(n)):
            raise RuntimeError(f"problem {p.id!r}: expected group indices 0..{n - 1} once each, got "
                               f"{[(s.problem_id, s.group_index) for s in g]}")


def reserve(bundles: list[dict[str, float]], strategy: str, timeout: float = 300.0):
    """A ready placement group with these bundles, or a RuntimeError that shows what the cluster has."""
    ray = import_ray()
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([dict(b) for b in bundles], strategy=strategy)
    try:
        ray.get(pg.ready(), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(pg)
        raise RuntimeError(f"Ray could not reserve bundles {bundles} ({strategy}) within {timeout:.0f} s; "
                           f"cluster resources: {ray.cluster_resources()}") from None
    return pg


_PLACEMENT: dict[str, Any] = {}  # set inside the learner actor: where its rollout workers go


def _release(ray_module, pg, actors: list) -> None:
    """Kill the actors and free their placement group (safe after ``ray.shutdown``)."""
    try:
        if not ray_module.is_initialized():
            return
        for a in actors:
            ray_module.kill(a, no_restart=True)
        if pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(pg)
    except Exception:  # pragma: no cover - best effort at interpreter exit
        pass


class RayRolloutEngine(EngineBase):
    """A ``RolloutEngine`` whose samples come from ``num_workers`` Ray actors in a placement group.

    Multi-turn episodes run on the driver (:func:`rlvr.rollout.episodes.run_episodes`, environment and all):
    each turn is one ``generate`` call whose ``prefixes`` (the trajectories' token ids) travel with their
    problems' shards.  No prefix cache (a turn's shards need not land where the last turn's rows were): a later
    turn's prompt is prefilled again on its worker.  Setting ``batch_size`` sets every worker's.

    Args:
        spec: how each worker builds its engine.
        model: the learner's policy; its weights are broadcast at once, so the
            workers start from the learner's state.
        num_workers, cpus_per_worker, gpus_per_worker, strategy: the placement
            group (one bundle per worker).
        max_restarts: Ray restarts of a dead worker before rlvr creates a new one.
        seed: seed of ``generator`` (per-call seeds).
        pad_id: the padding id the recipe collates with (None: the tokenizer's, else its EOS).
        worker_cls: the actor body (tests pass a subclass that fails on purpose).
        ready_timeout: seconds to wait for the placement group's resources.
        placement: ``(placement_group, first_bundle)`` to place the workers in bundles
            ``first_bundle ..`` of an existing group (the learner-actor layout,
            ``train_on_cluster``); default: the one ``use_placement`` set, else a new group.
    """

    def __init__(self, spec: EngineSpec, model, *, num_workers: int = 2, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0, strategy: str = "PACK", max_restarts: int = 3, seed: int = 0,
                 pad_id: int | None = None, worker_cls=RolloutWorker, ready_timeout: float = 300.0,
                 placement=None):
        ray = import_ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not ray.is_initialized():
            init_ray()
        self._ray = ray
        self._strategy_cls = PlacementGroupSchedulingStrategy
        self.spec = spec
        self.workers: list = []
        # tokenizer, generator (per-call seeds), pad_id, eos_ids, batch_size (the workers' engines'), on_chunk
        super().__init__(spec.tokenizer, batch_size=spec.batch_size, seed=seed,
                         eos_ids=eos_token_ids(spec.tokenizer, getattr(model, "generation_config", None)))
        if pad_id is not None:
            self.pad_id = pad_id
        self.num_workers = num_workers
        self.cpus, self.gpus, self.max_restarts = cpus_per_worker, gpus_per_worker, max_restarts
        placement = placement or _PLACEMENT.get("rollout")
        if placement is not None:  # bundles reserved by the caller; the caller frees them
            self.pg, self.first_bundle = placement
            owned = False
        else:
            bundle = {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if gpus_per_worker else {})}
            self.pg, self.first_bundle = reserve([bundle] * num_workers, strategy, ready_timeout), 0
            owned = True
        self._actor_cls = ray.remote(worker_cls)
        self.workers.extend(self._spawn(i) for i in range(num_workers))
        self._finalizer = weakref.finalize(self, _release, ray, self.pg if owned else None, self.workers)
        self.version = 0
        self.recoveries = 0  # worker deaths recovered from (restart or re-creation)
        self.recreated = 0  # of those, workers rlvr had to create anew
        self._weights_ref = None
        self.sync_weights(model)

    @property
    def batch_size(self) -> int:
        """Sequences each worker's engine decodes together (set: every worker's, and any worker started later)."""
        return self.spec.batch_size

    @batch_size.setter
    def batch_size(self, rows: int) -> None:
        if rows == self.spec.batch_size:
            return
        self.spec = EngineSpec(**{**self.spec.__dict__, "batch_size": int(rows)})
        if self.workers:
            self._ray.get([w.set_batch_size.remote(int(rows)) for w in self.workers])

    # ------------------------------------------------------------------ actors
    def _spawn(self, i: int):
        strategy = self._strategy_cls(placement_group=self.pg, placement_group_bundle_index=self.first_bundle + i)
        spec = self.spec
        if spec.threads != max(1, int(self.cpus)):
            spec = EngineSpec(**{**spec.__dict__, "threads": max(1, int(self.cpus))})
        return self._actor_cls.options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=self.max_restarts,
                                       max_task_retries=0, scheduling_strategy=strategy).remote(spec)

    def _recover(self, i: int) -> None:
        """Bring worker ``i`` back with the current weights: wait for Ray's restart, else create it anew."""
        ray = self._ray
        self.recoveries += 1
        try:  # retries wait while Ray restarts the actor (its constructor runs again: weights must be reloaded)
            ray.get(self.workers[i].load_state_dict.options(max_task_retries=-1).remote(
                self._weights_ref, self.version))
            log.warning("rollout worker %d died and was restarted by Ray; its prompts are re-issued", i)
            return
        except ray.exceptions.RayActorError:
            pass
        log.warning("rollout worker %d is out of restarts: creating a new one in its bundle", i)
        ray.kill(self.workers[i], no_restart=True)
        self.workers[i] = self._spawn(i)  # in place: the finalizer holds this list
        self.recreated += 1
        ray.get(self.workers[i].load_state_dict.remote(self._weights_ref, self.version))

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model) -> None:
        """Put the learner's weights in the object store once and load them into every worker."""
        from rlvr.engines.vllm import plain_state_dict

        self.load_state_dict(plain_state_dict(model))

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Put these HF-named tensors in the object store once and load them into every worker."""
        state = {k: v.detach().cpu() for k, v in state_dict.items()}  # ray.put copies it
        self.version += 1
        self._weights_ref = self._ray.put(state)
        refs = [w.load_state_dict.remote(self._weights_ref, self.version) for w in self.workers]
        for i, ref in enumerate(refs):
            try:
                self._ray.get(ref)
            except self._ray.exceptions.RayActorError:
                self._recover(i)

    # ------------------------------------------------------------------ sampling
    def generate(self, problems: Sequence[Problem], params: SamplingParams,
                 prefixes: Sequence[Sequence[int] | str] | None = None, cache: Any | None = None) -> list[list[Sample]]:
        """Shard ``problems`` (and their ``prefixes``) over the workers; recover from worker deaths; return groups
        in problem order.  ``cache`` must be None (:meth:`prefix_cache` is None)."""
        if cache is not None:
            raise ValueError("RayRolloutEngine.generate takes no prefix cache (its prefix_cache() is None)")
        if prefixes is not None and len(prefixes) != len(problems):
            raise ValueError(f"got {len(prefixes)} prefixes for {len(problems)} problems")
        if not problems:
            return []
        ray = self._ray
        seed = params.seed if params.seed is not None else int(
            torch.randint(0, 2**31 - 1 - self.num_workers, (1,), generator=self.generator))
        bounds = shard_bounds(len(problems), self.num_workers)
        shard_params = [SamplingParams(**{**params.__dict__, "seed": seed + k,
                                          "seeds": None if params.seeds is None else list(params.seeds[lo:hi])})
                        for k, (lo, hi) in enumerate(bounds)]
        results: list[list[list[Sample]] | None] = [None] * len(bounds)

        def submit(k: int):
            lo, hi = bounds[k]
            extra = () if prefixes is None else ([list(x) if not isinstance(x, str) else x
                                                  for x in prefixes[lo:hi]],)
            return self.workers[k].generate.remote(list(problems[lo:hi]), shard_params[k], *extra)

        pending = {submit(k): k for k in range(len(bounds))}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            k = pending.pop(ready[0])
            try:
                version, groups = ray.get(ready[0])
            except ray.exceptions.RayActorError:
                self._recover(k)
                pending[submit(k)] = k  # exactly this shard again, same seed, same weights
                continue
            if version != self.version:
                raise RuntimeError(f"rollout worker {k} sampled with weight version {version}, "
                                   f"expected {self.version}")
            results[k] = groups
            if self.on_chunk is not None:
                self.on_chunk(bounds[k][1] - bounds[k][0], len(problems))
        out = [g for shard in results for g in shard]  # type: ignore[union-attr]
        check_groups(problems, out, params.n)
        return out

    def worker_pids(self) -> list[int]:
        """Process id of every worker (diagnostics, tests)."""
        return self._ray.get([w.pid.remote() for w in self.workers])

    def close(self) -> None:
        """Kill the workers and free their placement group."""
        self._finalizer()


# --------------------------------------------------------------------------- learner actor
class LearnerActor:
    """Runs a whole recipe (learner + rollout orchestration) inside bundle 0 of a placement group.

    Its rollout workers go to bundles ``1 ..`` of the same group, so one group
    reserves the learner's GPU(s)/CPUs and every rollout worker's, placed
    together by Ray (PACK) or spread over nodes (SPREAD).  Batches (Samples)
    come from the rollout actors to this actor, weights go back through the
    object store.
    """

    def __init__(self, placement, threads: int):
        torch.set_num_threads(max(1, threads))
        _PLACEMENT["rollout"] = placement

    def train(self, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Call ``run`` (a picklable callable that trains a recipe here and returns its summary)."""
        summary = run()
        summary["learner_pid"] = os.getpid()
        return summary


@dataclass
class ClusterRun:
    """A recipe started in a :class:`LearnerActor` by :func:`submit_to_cluster`.

    ``ref`` resolves to the recipe's summary (``ray.get`` / ``ray.wait``); :meth:`release` kills the actor and
    frees the placement group (call it once the run is done, failed or abandoned).
    """

    ref: Any
    actor: Any
    placement_group: Any
    ray: Any

    def release(self) -> None:
        _release(self.ray, self.placement_group, [self.actor])


def run_bundles(d: DistributedConfig) -> list[dict[str, float]]:
    """One run's placement-group bundles: ``[learner] + num_rollout_workers x [rollout worker]``."""
    learner = {"CPU": d.cpus_per_learner, **({"GPU": d.gpus_per_learner} if d.gpus_per_learner else {})}
    rollout = {"CPU": d.cpus_per_rollout_worker,
               **({"GPU": d.gpus_per_rollout_worker} if d.gpus_per_rollout_worker else {})}
    return [learner] + [rollout] * d.num_rollout_workers


def submit_to_cluster(run: Callable[[], dict[str, Any]], d: DistributedConfig, *,
                      ready_timeout: float | None = 300.0) -> ClusterRun:
    """Start ``run()`` (a picklable callable that trains a recipe, e.g. ``rlvr.recipes.rl.actor_run``'s) in a learner
    actor placed with its rollout workers; do not wait.

    One placement group holds :func:`run_bundles` of ``d`` (the ``distributed`` section); ``run`` is called in a
    ``LearnerActor`` in bundle 0 and its rollout workers go to bundles 1...  ``ready_timeout``: seconds to wait
    for the group's resources before starting (a RuntimeError that shows the cluster's resources if they never
    come); None: do not wait, Ray starts the run when the cluster has room for its group (several runs queue in
    Ray's scheduler), and only a group larger than the whole cluster is refused at once.
    """
    ray = init_ray(d.address, d.num_cpus)
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundles = run_bundles(d)
    if ready_timeout is not None:
        pg = reserve(bundles, d.placement_strategy, ready_timeout)
    else:
        have = ray.cluster_resources()
        for res in ("CPU", "GPU"):
            need = sum(b.get(res, 0.0) for b in bundles)
            if need > have.get(res, 0.0) + 1e-9:
                raise RuntimeError(f"one run needs {need:g} {res} (bundles {bundles}) but the Ray cluster has "
                                   f"{have.get(res, 0.0):g} in all: lower distributed.cpus_per_* / gpus_per_*")
        pg = placement_group([dict(b) for b in bundles], strategy=d.placement_strategy)
    try:
        actor = ray.remote(LearnerActor).options(
            num_cpus=d.cpus_per_learner, num_gpus=d.gpus_per_learner,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0),
        ).remote((pg, 1), max(1, int(d.cpus_per_learner)))
    except BaseException:
        remove_placement_group(pg)
        raise
    return ClusterRun(actor.train.remote(run), actor, pg, ray)


def train_on_cluster(run: Callable[[], dict[str, Any]], d: DistributedConfig) -> dict[str, Any]:
    """``rlvr train`` with ``distributed.learner: actor``: ``run()`` (a recipe's training, pickled with its config
    and injected model / tokenizer / problems / verifier) in a Ray actor placed with its workers.

    One placement group holds ``[learner bundle] + num_rollout_workers x [rollout bundle]`` of ``d`` (the
    ``distributed`` section); ``run`` is called in a ``LearnerActor`` in bundle 0.
    """
    cluster_run = submit_to_cluster(run, d)
    try:
        return cluster_run.ray.get(cluster_run.ref)
    finally:
        cluster_run.release()
