"""One configuration, many seeds: ``rlvr train CONFIG --seeds 0-4`` and ``rlvr.train(cfg, seeds=[...])``.

Every seed ``s`` is one ordinary training run (``train.seed=s``) in its own directory
``<train.output_dir>/seed-<s>/``; after each seed, the summary of all of them is (re)written
next to them (``seeds.json``, ``seeds.md``, ``seeds.png``: :mod:`rlvr.evaluate.seeds`).

Where the runs go:

* ``distributed.backend=none`` (default): one after the other in this process, each with its
  progress bar, one console line when a seed starts and one when it ends with its result;
* ``distributed.backend=ray``: every seed is submitted at once as the learner-actor layout of
  :func:`rlvr.distributed.ray_backend.submit_to_cluster` (one placement group per seed holding
  the learner's bundle, ``distributed.cpus_per_learner``/``gpus_per_learner``, and its
  ``distributed.num_rollout_workers`` rollout workers); Ray starts each seed when the cluster
  (``distributed.address``, or a local one) has room for its group, so as many seeds run at
  once as fit.  rlvr schedules nothing itself.  Progress bars are off there (concurrent bars
  interleave); the start and end lines remain.

Resumable per seed: a seed whose run finished (``summary.json`` exists) is not trained again,
its files are read back; a seed with a checkpoint resumes from it (``train.resume=true``); any
other starts from scratch.  Running the same command again after a crash or Ctrl-C therefore
continues where the sweep stopped.  A seed directory written with another config (any key
except ``train.seed``, ``train.output_dir``, ``train.resume`` and ``train.progress``) is refused
before anything trains: its results would not belong to this sweep.
"""

from __future__ import annotations

import copy
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.config import ConfigError, config_to_dict, load_config
from rlvr.evaluate.seeds import (IGNORED_CONFIG_KEYS, headline, read_seed_run, result_line, seed_dir,
                                 write_seeds_summary)
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import RLRecipe, TrainingInterrupted, actor_run
from rlvr.recipes.rundir import flat_config
from rlvr.recipes.run import train

__all__ = ["SeedsError", "parse_seeds", "check_seeds", "plan_seeds", "SeedPlan", "train_seeds", "MAX_SEED"]

log = logging.getLogger(__name__)

MAX_SEED = 2**32 - 1
_INT = re.compile(r"^[0-9]+$")
_RANGE = re.compile(r"^([0-9]+)\s*-\s*([0-9]+)$")


class SeedsError(ValueError):
    """A seed list or a seed sweep that cannot run (the message says why, without the ``--seeds:`` prefix)."""


def _check_one(s: int, text: str) -> int:
    if s > MAX_SEED:
        raise SeedsError(f"seed {text} is too large (at most {MAX_SEED})")
    return s


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"``, ``"0-4"``, ``"0-2,7,10-11"`` -> the seeds, in the order given.

    Refused (SeedsError): an empty list or item, a negative number, a non-integer, a reversed range, a
    duplicate seed, a seed above :data:`MAX_SEED`.
    """
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise SeedsError("empty seed list (give e.g. 0,1,2 or 0-4)")
    seeds: list[int] = []
    for item in items:
        if not item:
            raise SeedsError(f"empty item in {text!r} (give e.g. 0,1,2 or 0-4)")
        if item.startswith("-") and _INT.match(item[1:].strip()):
            raise SeedsError(f"negative seed {item} (seeds are integers >= 0)")
        m = _RANGE.match(item)
        if m:
            lo, hi = _check_one(int(m.group(1)), m.group(1)), _check_one(int(m.group(2)), m.group(2))
            if lo > hi:
                raise SeedsError(f"range {item} runs backwards (write {hi}-{lo})")
            seeds.extend(range(lo, hi + 1))
        elif _INT.match(item):
            seeds.append(_check_one(int(item), item))
        else:
            raise SeedsError(f"{item!r} is not a seed: seeds are integers >= 0, ranges are written a-b")
    return check_seeds(seeds)


def check_seeds(seeds: Sequence[Any] | str) -> list[int]:
    """A seed list from Python (``[0, 1, 2]``, ``range(5)``, or the string forms of :func:`parse_seeds`), checked
    as the CLI checks it: non-empty, integers (not bools or floats), each in ``[0, MAX_SEED]``, no duplicates."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    try:
        seeds = list(seeds)
    except TypeError:
        raise SeedsError(f"expected a list of integers, got {type(seeds).__name__}") from None
    if not seeds:
        raise SeedsError("empty seed list")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int):
            raise SeedsError(f"{s!r} is not a seed: seeds are integers >= 0")
        if s < 0:
            raise SeedsError(f"negative seed {s} (seeds are integers >= 0)")
        _check_one(s, str(s))
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise SeedsError(f"seed{'s' if len(dup) > 1 else ''} {', '.join(map(str, dup))} "
                         f"listed more than once")
    return [int(s) for s in seeds]


@dataclass
class SeedPlan:
    """What the sweep does with one seed."""

    seed: int
    path: Path
    action: str
    """``skip`` (finished earlier), ``resume`` (from ``checkpoint``) or ``train`` (from scratch)."""
    cfg: RunConfig
    checkpoint: Path | None = None


def _config_mismatch(cfg: RunConfig, path: Path) -> list[str]:
    """Keys where ``path/config.yaml`` (an earlier run of this seed) differs from ``cfg``; [] when none or no file."""
    file = path / "config.yaml"
    if not file.is_file():
        return []
    try:
        old = config_to_dict(load_config(RunConfig, file, []))
    except (ConfigError, ValueError) as e:  # written by other code: keys since renamed or removed
        return [f"its config.yaml does not load here ({str(e).splitlines()[0]})"]
    a, b = flat_config(config_to_dict(cfg)), flat_config(old)
    return [f"{k}: {a.get(k)!r} here, {b.get(k)!r} there" for k in sorted(set(a) | set(b))
            if k not in IGNORED_CONFIG_KEYS and a.get(k) != b.get(k)]


def plan_seeds(cfg: RunConfig, seeds: Sequence[int]) -> list[SeedPlan]:
    """One :class:`SeedPlan` per seed (``train.seed=s``, ``train.output_dir=<root>/seed-<s>``); raises SeedsError
    for a seed directory written with another config.  Reads files only."""
    if cfg.distributed.fsdp:
        raise SeedsError("not with distributed.fsdp (every torchrun rank would run the whole sweep): start one "
                         "torchrun per seed with train.seed=S train.output_dir=ROOT/seed-S, then "
                         "`rlvr seeds summarize ROOT`")
    root = Path(cfg.train.output_dir)
    plans = []
    for s in seeds:
        path = seed_dir(root, s)
        ckpt = latest_checkpoint(path) if path.is_dir() else None
        action = "skip" if (path / "summary.json").is_file() else "resume" if ckpt is not None else "train"
        # a seed directory without a checkpoint (killed before its first one) is trained again from scratch
        train_cfg = cfg.train.model_copy(update={"seed": s, "output_dir": str(path), "resume": action == "resume",
                                                 "overwrite": action == "train" and path.is_dir()})
        seed_cfg = cfg.model_copy(update={"train": train_cfg})
        bad = _config_mismatch(seed_cfg, path)
        if bad:
            raise SeedsError(f"{path} was trained with another config ({'; '.join(bad[:6])}"
                             f"{'; ...' if len(bad) > 6 else ''}): use another train.output_dir, the same "
                             "settings, or delete that directory to train the seed again")
        plans.append(SeedPlan(s, path, action, seed_cfg, ckpt))
    return plans


def _summarize(root: Path, seeds: Sequence[int]) -> dict:
    return write_seeds_summary(root, seeds)


def _summarize_quietly(root: Path, seeds: Sequence[int]) -> None:
    """The summary of what exists, on the way out of a failed or interrupted sweep (never hides that error)."""
    try:
        _summarize(root, seeds)
    except Exception as e:  # noqa: BLE001
        log.warning("could not write the seeds summary of %s: %s", root, e)


def train_seeds(cfg: RunConfig, seeds: Sequence[int] | str, *, echo: Callable[[str], None] = print,
                **injected: Any) -> dict[str, Any]:
    """Train ``cfg`` once per seed (see the module docstring) and return the seeds summary (``seeds.json``'s
    content plus ``paths``).

    ``injected``: the recipe's ``model`` (deep-copied for every seed: each starts from the same weights),
    ``tokenizer``, ``problems``, ``verifier``, ``on_step`` (its rows get a ``seed`` key).  A seed that fails
    stops the sweep (sequential) or is reported after the others end (Ray); the summary is written first.
    """
    seeds = check_seeds(seeds)
    plans = plan_seeds(cfg, seeds)
    root = Path(cfg.train.output_dir)
    n = len(plans)
    todo = [p for p in plans if p.action != "skip"]
    echo(f"{n} seed{'s' if n != 1 else ''} in {root}: {n - len(todo)} finished earlier, "
         f"{sum(p.action == 'resume' for p in todo)} to resume, {sum(p.action == 'train' for p in todo)} to train"
         + (" (Ray)" if todo and cfg.distributed.backend == "ray" else ""))
    if cfg.distributed.backend == "ray" and todo:
        for i, p in enumerate(plans):
            if p.action == "skip":
                echo(_skip_line(root, p, i, n))
        _run_on_ray(plans, root, seeds, echo, injected)
    else:
        _run_here(plans, root, seeds, echo, injected)
    summary = _summarize(root, seeds)
    echo(headline(summary))
    echo(f"seeds summary: {summary['paths']['json']}, {summary['paths']['markdown']}"
         + (f", {summary['paths']['plot']}" if "plot" in summary["paths"] else ""))
    return summary


def _skip_line(root: Path, p: SeedPlan, i: int, n: int) -> str:
    result = result_line(read_seed_run(root, p.seed))
    return f"seed {p.seed} [{i + 1}/{n}]: finished earlier, not trained again: {result}"


def _start_line(p: SeedPlan, i: int, n: int) -> str:
    what = f"resuming from {p.checkpoint.name}" if p.action == "resume" else "training"
    return f"seed {p.seed} [{i + 1}/{n}]: {what} in {p.path}"


def _end_line(root: Path, p: SeedPlan, i: int, n: int, seconds: float) -> str:
    took = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
    return f"seed {p.seed} [{i + 1}/{n}]: done in {took}: {result_line(read_seed_run(root, p.seed))}"


def _run_here(plans: list[SeedPlan], root: Path, seeds: list[int], echo, injected: dict) -> None:
    n = len(plans)
    on_step = injected.pop("on_step", None)
    model = injected.pop("model", None)
    for i, p in enumerate(plans):
        if p.action == "skip":
            echo(_skip_line(root, p, i, n))
            continue
        echo(_start_line(p, i, n))
        kwargs = dict(injected)
        if model is not None:
            kwargs["model"] = copy.deepcopy(model)  # every seed starts from the same weights
        if on_step is not None:
            kwargs["on_step"] = lambda row, s=p.seed: on_step({**row, "seed": s})
        t0 = time.perf_counter()
        try:
            train(p.cfg, **kwargs)
        except TrainingInterrupted:
            _summarize_quietly(root, seeds)
            echo(f"seed {p.seed} [{i + 1}/{n}]: interrupted; run the same command again to resume the sweep")
            raise
        except BaseException:
            _summarize_quietly(root, seeds)
            raise
        echo(_end_line(root, p, i, n, time.perf_counter() - t0))
        _summarize(root, seeds)


def _run_on_ray(plans: list[SeedPlan], root: Path, seeds: list[int], echo, injected: dict) -> None:
    from rlvr.distributed.ray_backend import submit_to_cluster

    if injected.pop("on_step", None) is not None:
        raise SeedsError("on_step callbacks cannot run in Ray learner actors (distributed.backend=ray)")
    n = len(plans)
    running: dict[Any, tuple[int, SeedPlan, Any, float]] = {}
    failures: list[tuple[int, BaseException]] = []
    try:
        for i, p in enumerate(plans):
            if p.action == "skip":
                continue
            cfg = p.cfg.model_copy(update={"train": p.cfg.train.model_copy(update={"progress": False})})
            try:
                run = submit_to_cluster(actor_run(RLRecipe, cfg, **injected), cfg.distributed, ready_timeout=None)
            except BaseException:
                for _, _, started, _ in running.values():
                    started.release()
                raise
            running[run.ref] = (i, p, run, time.perf_counter())
            echo(_start_line(p, i, n) + " (submitted to Ray)")
        ray = next(iter(running.values()))[2].ray
        while running:
            ready, _ = ray.wait(list(running), num_returns=1)
            i, p, run, t0 = running.pop(ready[0])
            try:
                ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - reported once every seed has ended
                failures.append((p.seed, e))
                first = str(e).splitlines()[0] if str(e) else ""
                echo(f"seed {p.seed} [{i + 1}/{n}]: failed: {type(e).__name__}: {first}")
            else:
                echo(_end_line(root, p, i, n, time.perf_counter() - t0))
            finally:
                run.release()
            _summarize(root, seeds)
    except KeyboardInterrupt:
        for _, _, run, _ in running.values():
            run.release()
        _summarize_quietly(root, seeds)
        echo("interrupted: the running seeds were stopped; run the same command again to resume them from their "
             "last checkpoints")
        raise TrainingInterrupted() from None
    if failures:
        raise RuntimeError(f"--seeds: seed{'s' if len(failures) > 1 else ''} "
                           f"{', '.join(str(s) for s, _ in failures)} failed (first: {failures[0][1]})") \
            from failures[0][1]
