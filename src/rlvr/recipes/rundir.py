"""A run owns its output directory: one writer at a time, no run silently mixed into another.

:func:`claim` is the first thing a training run does, before any model loads:

- it takes an exclusive lock on ``<output_dir>/.rlvr.lock`` (``filelock``, an OS-level lock released by the
  kernel when the process dies) and records the holder (PID, host, start time, command) in
  ``.rlvr.owner.json``; a second run into a locked directory is refused naming the holder;
- it refuses, without ``train.resume`` or ``train.overwrite``, a directory that holds an earlier run (its
  metrics would be wiped and its checkpoints pruned by the new run's) or files that are not a run's;
- with ``train.overwrite`` it deletes the earlier run's files (checkpoints, metrics, evaluations,
  config, summary) and nothing else;
- it tidies what a killed writer left (temporary checkpoint directories, an interrupted re-save) and, when
  resuming, picks the newest checkpoint whose files match their checksums (a damaged one is set aside and
  named) and compares the run's config with that checkpoint's: a change that alters the run (schedule
  horizon, batch shape, estimator, ...) is refused, naming every changed key, unless it is listed in
  ``train.resume_changes``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config import ConfigError, config_to_dict, load_config
from rlvr.learner.checkpoint import CheckpointError, latest_intact_checkpoint, recover_checkpoints
from rlvr.recipes.config import RunConfig
from rlvr.utils.files import atomic_write_json, read_json_or_none

__all__ = ["RunDirectoryError", "RunClaim", "claim", "run_files", "config_changes", "flat_config",
           "RESUME_HARMLESS", "SCHEDULE_KEYS", "LOCK_FILE", "OWNER_FILE"]

LOCK_FILE = ".rlvr.lock"
OWNER_FILE = ".rlvr.owner.json"

RUN_FILES = ("config.yaml", "metrics.jsonl", "heldout.jsonl", "summary.json", "eval_before.json",
             "eval_after.json", "checkpoints", "tb", "wandb_run_id", "mlflow_run_id")
"""What a training run writes into its directory (``train.overwrite`` deletes these and nothing else)."""

RUN_MARKERS = ("config.yaml", "metrics.jsonl", "summary.json", "checkpoints")
"""Any of these makes a directory an earlier run's."""

RESUME_HARMLESS = ("train.output_dir", "train.resume", "train.overwrite", "train.resume_changes", "train.progress",
                   "train.report_to", "train.save_every", "train.keep_checkpoints", "train.threads",
                   "train.max_minutes", "train.max_rollouts", "train.malloc_mmap_threshold", "train.onednn_cache",
                   "train.max_bad_steps", "train.check_memory", "eval.", "reward.warn_verifier_errors")
"""Config keys (or prefixes ending in ``.``) a resume may change freely: where and how often the run writes,
reports and evaluates, and its budgets; none changes the trajectory of training."""

SCHEDULE_KEYS = ("train.steps", "train.lr", "train.warmup_steps", "train.schedule")
"""Keys of the learning-rate schedule: changed on resume (when allowed), the schedule is recomputed."""


class RunDirectoryError(ValueError):
    """The output directory cannot be used by this run as configured (the message says why and what to do)."""


@dataclass
class RunClaim:
    """What :func:`claim` found and holds: release it when the run ends."""

    path: Path
    lock: Any = None
    checkpoint: Path | None = None
    """The checkpoint a resume loads (verified), or None."""
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Config keys that differ from the checkpoint's (allowed ones only; the run was refused otherwise)."""
    created: list[Path] = field(default_factory=list)
    """Directories the claim created (innermost first): removed again if the run wrote nothing into them."""

    def release(self) -> None:
        """Unlock; a directory this claim created and the run left empty (it failed before writing) is removed,
        so a run refused for bad input leaves nothing behind."""
        if self.lock is None or not self.lock.is_locked:
            return
        try:
            (self.path / OWNER_FILE).unlink(missing_ok=True)
        except OSError:
            pass
        self.lock.release()
        if self.created and all(p.name == LOCK_FILE for p in self.path.iterdir()):
            try:
                (self.path / LOCK_FILE).unlink(missing_ok=True)
                for d in self.created:
                    d.rmdir()
            except OSError:  # another process wrote there meanwhile: keep it
                pass


def run_files(path: Path, extra: Sequence[str] = ()) -> list[Path]:
    """The files and directories of an earlier run in ``path`` (with ``extra``: a recipe's own, as glob
    patterns, e.g. ``final``, ``round-*``)."""
    found = [path / n for n in RUN_FILES if (path / n).exists()]
    return found + [p for pattern in extra for p in sorted(path.glob(pattern)) if p not in found]


def _foreign(path: Path, extra: Sequence[str] = ()) -> list[str]:
    """Entries of ``path`` that no run writes (hidden ones aside)."""
    if not path.is_dir():
        return []
    known = set(RUN_FILES) | {"wandb", "mlflow.db", "report.html"} | {p.name for p in run_files(path, extra)}
    return sorted(p.name for p in path.iterdir()
                  if not p.name.startswith(".") and p.name not in known and not p.name.endswith(".jsonl"))


def _owner_line(path: Path) -> str:
    owner = read_json_or_none(path / OWNER_FILE) or {}
    if not owner:
        return "another process"
    since = owner.get("started", "?")
    return f"PID {owner.get('pid', '?')} on {owner.get('host', '?')} (since {since}: {owner.get('command', '')})"


def _lock(path: Path):
    from filelock import FileLock, Timeout

    lock = FileLock(str(path / LOCK_FILE), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunDirectoryError(f"{path} is in use by another run: {_owner_line(path)}. Wait for it to finish, "
                                f"stop it, or give this run another train.output_dir") from None
    atomic_write_json(path / OWNER_FILE, {
        "pid": os.getpid(), "host": socket.gethostname(),
        "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv)[:300]})
    return lock


def flat_config(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config dict as ``{"section.key": value}`` (an empty dict is kept as a value)."""
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flat_config(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def _harmless(key: str) -> bool:
    return any(key == h or (h.endswith(".") and key.startswith(h)) for h in RESUME_HARMLESS)


def config_changes(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
    """Flattened keys whose value differs between two config dicts (``config_to_dict`` form): key -> (old, new).
    Keys that cannot alter the run (:data:`RESUME_HARMLESS`) are left out, and so is ``train.steps`` with a
    constant schedule (after warm-up a longer or shorter run is the same run cut elsewhere)."""
    a, b = flat_config(old), flat_config(new)
    out = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
           if not _harmless(k) and json.dumps(a.get(k), default=str) != json.dumps(b.get(k), default=str)}
    if "train.steps" in out and b.get("train.schedule") == "constant" and a.get("train.schedule") == "constant":
        del out["train.steps"]
    return out


def _allowed(key: str, allowed: list[str]) -> bool:
    return any(key == a or key.startswith(a.rstrip(".") + ".") for a in allowed)


def _checkpoint_config(ckpt: Path, run_dir: Path, cls: type = RunConfig) -> tuple[dict | None, str]:
    """The config (of class ``cls``) a checkpoint was written under: its own config.yaml, else the run
    directory's."""
    for f in (ckpt / "config.yaml", run_dir / "config.yaml"):
        if f.is_file():
            try:
                return config_to_dict(load_config(cls, f, [])), str(f)
            except (ConfigError, ValueError, OSError) as e:
                return None, f"{f} does not load here ({str(e).splitlines()[0][:200]})"
    return None, "no config.yaml beside it"


def claim(cfg: RunConfig, warn: Callable[[str], None] = print, extra_files: Sequence[str] = ()) -> RunClaim:
    """Lock ``cfg.train.output_dir`` for this run and check that the run may write there (module docstring).

    ``cfg`` is a :class:`RunConfig` or another recipe's config with a ``train`` section holding ``output_dir``,
    ``resume``, ``overwrite`` and ``resume_changes`` (an SFT run's); a resume compares it with the checkpoint's
    config loaded as the same class.  ``extra_files`` (glob patterns) are the recipe's own outputs besides
    :data:`RUN_FILES` (an SFT run's ``final`` model): deleted by ``train.overwrite``, never called foreign.

    Raises :class:`RunDirectoryError` (a bad-input error: nothing was loaded, nothing in the directory was
    changed) when it may not.
    """
    tcfg = cfg.train
    path = Path(tcfg.output_dir)
    created, d = [], path.absolute()
    while not d.exists():  # what mkdir creates, innermost first
        created.append(d)
        d = d.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirectoryError(f"train.output_dir={tcfg.output_dir}: cannot create it ({e.strerror or e})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunDirectoryError(f"train.output_dir={tcfg.output_dir}: not writable by this user")
    lock = _lock(path)
    held = RunClaim(path, lock, created=created)
    try:
        _check(cfg, held, warn, tuple(extra_files))
    except BaseException:
        held.release()
        raise
    return held


def _check(cfg: RunConfig, held: RunClaim, warn: Callable[[str], None], extra: tuple[str, ...] = ()) -> None:
    tcfg, path = cfg.train, held.path
    earlier = [p for p in (path / n for n in RUN_MARKERS) if p.exists()]
    foreign = _foreign(path, extra)
    if tcfg.overwrite:
        if foreign and not earlier:
            warn(f"train.overwrite=true: {path} holds files that are not a run's ({', '.join(foreign[:5])}); "
                 "they are left as they are")
        removed = run_files(path, extra)
        for p in removed:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        if removed:
            warn(f"train.overwrite=true: deleted the earlier run's {', '.join(p.name for p in removed)} in {path}")
        return
    if foreign and not earlier:
        raise RunDirectoryError(
            f"train.output_dir={path} is not empty and holds no run ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}): choose an empty or new directory, or set train.overwrite=true "
            "(--overwrite) to write the run beside those files")
    for line in recover_checkpoints(path):
        warn(f"{path}: {line}")
    if not tcfg.resume:
        if earlier:
            state = "finished" if (path / "summary.json").is_file() else "unfinished"
            raise RunDirectoryError(
                f"train.output_dir={path} holds an earlier {state} run ({', '.join(p.name for p in earlier)}): "
                "continue it with --resume (train.resume=true), start over with --overwrite (train.overwrite=true: "
                "deletes its checkpoints and metrics), or choose another train.output_dir")
        return
    try:
        held.checkpoint = latest_intact_checkpoint(path, warn=warn)
    except CheckpointError as e:
        raise RunDirectoryError(f"resume: {e}") from None
    if held.checkpoint is None:
        return
    old, where = _checkpoint_config(held.checkpoint, path, type(cfg))
    if old is None:
        warn(f"resume: cannot compare this run's config with the checkpoint's: {where}")
        return
    changes = config_changes(old, config_to_dict(cfg))
    refused = {k: v for k, v in changes.items() if not _allowed(k, tcfg.resume_changes)}
    if refused:
        shown = "; ".join(f"{k}: {_show(a)} -> {_show(b)}" for k, (a, b) in list(refused.items())[:8])
        more = f"; and {len(refused) - 8} more" if len(refused) > 8 else ""
        keys = ",".join(refused)
        raise RunDirectoryError(
            f"resume: this config differs from the one {held.checkpoint.name} was trained with ({where}) in keys "
            f"that change the run: {shown}{more}. If that is intended, add train.resume_changes=[{keys}]; "
            "otherwise resume with the original settings, or start over with --overwrite")
    held.changes = changes
    if changes:
        warn("resume: continuing with changed settings (train.resume_changes): "
             + "; ".join(f"{k}: {_show(a)} -> {_show(b)}" for k, (a, b) in changes.items()))


def _show(v: Any) -> str:
    return json.dumps(v, default=str) if not isinstance(v, str) else v
