"""Experiment trackers: where per-step metrics go (``train.report_to``, as in the HF Trainer).

``train.report_to`` is a list of tracker names:

- ``jsonl``: ``<run_dir>/metrics.jsonl`` (and ``<run_dir>/<group>.jsonl``); always on,
  listed or not; needs nothing.
- ``tensorboard``: event files under ``<run_dir>/tb`` (``pip install tensorboard``).
- ``wandb``: a Weights & Biases run under ``<run_dir>/wandb``, offline when there is
  no API key or no network; ``$WANDB_MODE`` wins; project ``$WANDB_PROJECT`` or
  ``rlvr`` (``pip install wandb``).  An offline run's ``.wandb`` log is complete when the
  process exits (wandb waits for its service then); ``run.finish()`` itself returns a moment
  before the service has flushed it.
- ``mlflow``: an MLflow run in ``$MLFLOW_TRACKING_URI``, else the SQLite store
  ``<run_dir>/mlflow.db`` (``mlflow ui --backend-store-uri sqlite:///<run_dir>/mlflow.db``); experiment ``$MLFLOW_EXPERIMENT_NAME`` or ``rlvr``
  (``pip install mlflow``).
- ``trackio``: a trackio run (its local database, or its Space), project
  ``$TRACKIO_PROJECT`` or ``rlvr`` (``pip install trackio``).

This is a low-layer module: it imports only the standard library, and each
tracker package only inside the function that needs it, so ``import rlvr.trackers``
is free.  :func:`validate_report_to` checks names and packages without importing
them (``importlib.util.find_spec``), so that a config naming a missing package
fails when it is loaded, not at the first training step.

Usage (the training loop)::

    validate_report_to(cfg.train.report_to)              # at config load
    tracker = open_trackers(cfg.train.report_to, out_dir, config_dict, run_name,
                            resume_from_step=start_step if resuming else None,
                            groups=("train", "heldout"))
    tracker.log(row, step)                               # -> metrics.jsonl + every tracker
    tracker.log(eval_row, step, group="heldout")         # -> heldout.jsonl + "heldout/<key>"
    tracker.close()

Metric rows are cleaned as the JSONL file always had them: tensors/numpy scalars
(anything with ``.item``) become floats, NaN and infinities become ``null``.
External trackers get the numeric values only (``None``, strings and lists are
left to the JSONL file), under ``<group>/<key>`` for groups other than ``train``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import urlparse

__all__ = ["TRACKERS", "Tracker", "JsonlTracker", "validate_report_to", "open_trackers", "read_metrics",
           "clean_row"]

TRACKERS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "jsonl": ((), None),
    "tensorboard": (("tensorboard",), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    # the SQLite store needs sqlalchemy and alembic, which mlflow has and mlflow-skinny lacks
    "mlflow": (("mlflow", "sqlalchemy", "alembic"), "mlflow"),
    "trackio": (("trackio",), "trackio"),
}
"""Tracker name -> (the modules it imports, what ``pip install`` needs)."""

TRAIN_GROUP = "train"


def _names(names: Iterable[str] | str | None) -> list[str]:
    if names is None:
        return []
    if isinstance(names, str):
        return [names]
    return list(names)


def validate_report_to(names: Sequence[str]) -> None:
    """Check ``train.report_to``: known names, each tracker's package importable.

    Raises:
        ValueError: not a list of strings, an unknown name, a name given twice, or
            a tracker whose package is not installed; the message names
            ``train.report_to``, the package and the ``pip install`` command.
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ValueError(f"train.report_to must be a list of tracker names (e.g. [jsonl, tensorboard]), "
                         f"got {names!r}")
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or name not in TRACKERS:
            raise ValueError(f"train.report_to: unknown tracker {name!r}; known trackers: "
                             f"{', '.join(TRACKERS)}")
        if name in seen:
            raise ValueError(f"train.report_to names {name!r} twice")
        seen.add(name)
        modules, requirement = TRACKERS[name]
        missing = [m for m in modules if not _importable(m)]
        if missing:
            raise ValueError(f"train.report_to includes {name!r}, which needs the package {requirement!r} "
                             f"(not installed: {', '.join(missing)}): pip install {requirement}   "
                             f"(or remove {name!r} from train.report_to)")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or sys.modules[module] = None
        return False


# ---------------------------------------------------------------- rows


def clean_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics row as the JSONL file stores it: ``.item()``-able values as floats, NaN/inf as None."""
    clean = {k: (float(v) if hasattr(v, "item") else v) for k, v in row.items()}
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in clean.items()}


def _numeric(row: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The int/float (and bool) values of a clean row except ``step``, keys prefixed."""
    return {prefix + k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not (isinstance(v, float) and not math.isfinite(v))}


def read_metrics(path: str | os.PathLike, damaged: list[int] | None = None) -> list[dict[str, Any]]:
    """All rows of a metrics file.

    A torn last line (a run killed while writing it) is ignored. A damaged line elsewhere is skipped with a
    warning naming the file and line (the rows after it are kept); its line number is appended to
    ``damaged`` when a list is given.
    """
    rows = []
    lines = Path(path).read_text(errors="replace").splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            rows.append(row)
        except ValueError:
            if i == last:
                continue
            if damaged is not None:
                damaged.append(i + 1)
            warnings.warn(f"{path}:{i + 1}: damaged metrics line skipped (not a JSON object): {line[:60]!r}",
                          stacklevel=2)
    return rows


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path``'s content with ``text`` all at once (temporary file, fsync, rename): a kill or a full disk
    leaves the old content. (The same as rlvr.utils.files', which this layer cannot import.)"""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Append one line and fsync it: a row reported as logged survives a crash of the machine."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------- the trackers


class JsonlTracker:
    """One JSON object per :meth:`log` call, appended to ``<run_dir>/metrics.jsonl`` (group ``train``)
    or ``<run_dir>/<group>.jsonl``.

    Every declared group's file is prepared when the tracker opens: emptied for a
    new run, or, when resuming from step ``s``, cut to its rows with ``step <= s``
    so that the file never holds a step twice.
    """

    def __init__(self, run_dir: str | os.PathLike, resume_from_step: int | None = None,
                 groups: Sequence[str] = (TRAIN_GROUP,)):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.paths: dict[str, Path] = {}
        for group in groups:
            path = self.path(group)
            if resume_from_step is None:
                atomic_write_text(path, "")
            elif path.exists():
                damaged: list[int] = []
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    kept = [r for r in read_metrics(path, damaged) if r.get("step", 0) <= resume_from_step]
                if damaged:
                    print(f"{path}: line{'s' if len(damaged) > 1 else ''} {', '.join(map(str, damaged[:10]))} "
                          f"damaged (not JSON): removed, the {len(kept)} intact rows up to step "
                          f"{resume_from_step} kept")
                atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
            self.paths[group] = path

    def path(self, group: str = TRAIN_GROUP) -> Path:
        return self.run_dir / ("metrics.jsonl" if group == TRAIN_GROUP else f"{group}.jsonl")

    def log_row(self, row: Mapping[str, Any], group: str = TRAIN_GROUP) -> None:
        """Append a clean row (see :func:`clean_row`) to the group's file."""
        if group not in self.paths:
            raise ValueError(f"metrics group {group!r} was not opened (open_trackers(..., groups=...) "
                             f"has {sorted(self.paths)})")
        append_line(self.paths[group], json.dumps(dict(row)))

    def log(self, metrics: Mapping[str, Any], step: int, group: str = TRAIN_GROUP) -> None:
        self.log_row(clean_row(_with_step(metrics, step)), group)

    def close(self) -> None:
        pass


class _TensorBoardTracker:
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(str(run_dir / "tb"))

    def log_numeric(self, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


def _wandb_online_possible() -> bool:
    """An API key (``$WANDB_API_KEY`` or ~/.netrc) and a reachable server (1 s TCP connect)."""
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    host = urlparse(url).hostname or "api.wandb.ai"
    has_key = bool(os.environ.get("WANDB_API_KEY"))
    if not has_key:
        try:
            import netrc

            has_key = netrc.netrc().authenticators(host) is not None
        except (OSError, netrc.NetrcParseError):
            has_key = False
    if not has_key:
        return False
    port = urlparse(url).port or (443 if url.startswith("https") else 80)
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


class _WandbTracker:
    def __init__(self, run_dir: Path, config: dict[str, Any], run_name: str | None, resume: bool):
        import wandb

        mode = os.environ.get("WANDB_MODE") or None  # wandb reads it too; we only add a default
        if mode is None and not _wandb_online_possible():
            mode = "offline"
            print("rlvr: wandb: no API key or no network, logging offline under "
                  f"{run_dir / 'wandb'} (upload later with `wandb sync`)", file=sys.stderr)
        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else None
        if run_id is None:
            import uuid

            run_id = uuid.uuid4().hex[:12]
        (run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rlvr"), name=run_name, dir=str(run_dir),
                              config=config, mode=mode, id=run_id, resume="allow", reinit="create_new")
        id_file.write_text(run_id)

    def log_numeric(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if not isinstance(v, str) else v
    return out


class _MlflowTracker:
    def __init__(self, run_dir: Path, config: dict[str, Any], run_name: str | None, resume: bool):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
        self.client = MlflowClient(tracking_uri=uri)
        self.uri = uri
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "rlvr")
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        id_file = run_dir / "mlflow_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else None
        if run_id is None:
            run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
            params = [Param(k, v[:6000]) for k, v in _flatten(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(run_id, params=params[i:i + 100])
        else:
            self.client.update_run(run_id, status="RUNNING")
        id_file.write_text(run_id)
        self.run_id = run_id

    def log_numeric(self, values: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class _TrackioTracker:
    def __init__(self, config: dict[str, Any], run_name: str | None, resume: bool):
        import trackio

        self.trackio = trackio
        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "rlvr"), name=run_name, config=config,
                                resume="allow" if resume else "never")

    def log_numeric(self, values: dict[str, float], step: int) -> None:
        self.trackio.log(values, step=step)

    def close(self) -> None:
        self.trackio.finish()


def _with_step(metrics: Mapping[str, Any], step: int) -> dict[str, Any]:
    if "step" in metrics and metrics["step"] != step:
        raise ValueError(f"metrics row has step={metrics['step']!r} but was logged at step {step}")
    return {"step": step, **{k: v for k, v in metrics.items() if k != "step"}}


class Tracker:
    """The JSONL file plus every external tracker of ``train.report_to``, behind one ``log``/``close``."""

    def __init__(self, jsonl: JsonlTracker, others: dict[str, Any]):
        self.jsonl = jsonl
        self.others = others
        self._closed = False

    @property
    def names(self) -> list[str]:
        return ["jsonl", *self.others]

    def log(self, metrics: Mapping[str, Any], step: int, group: str = TRAIN_GROUP) -> None:
        """Record one row at ``step``: appended to the group's JSONL file (with ``"step"`` first),
        and its numeric values sent to every other tracker (as ``<group>/<key>`` outside ``train``)."""
        row = clean_row(_with_step(metrics, step))
        self.jsonl.log_row(row, group)
        values = _numeric(row, "" if group == TRAIN_GROUP else f"{group}/")
        if values:
            for tracker in self.others.values():
                tracker.log_numeric(values, step)

    def close(self) -> None:
        """Flush and finish every tracker (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for name, tracker in self.others.items():
            try:
                tracker.close()
            except Exception as e:  # noqa: BLE001 - close the others, then report
                errors.append(f"{name}: {e}")
        if errors:
            raise RuntimeError("closing trackers failed: " + "; ".join(errors))

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_trackers(names: Sequence[str], run_dir: str | os.PathLike, config: dict[str, Any] | None = None,
                  run_name: str | None = None, *, resume_from_step: int | None = None,
                  groups: Sequence[str] = (TRAIN_GROUP,)) -> Tracker:
    """Open the JSONL writer (always) and each tracker named in ``names`` (``train.report_to``).

    Args:
        names: tracker names (``jsonl`` may be listed or not; it is always on).
        run_dir: the run's output directory.
        config: the run's config as a plain dict (recorded by wandb, mlflow, trackio).
        run_name: the run's name in the trackers (None: the tracker's default).
        resume_from_step: resuming from this step: the JSONL files keep their rows up
            to it, and wandb/mlflow continue the run recorded in ``run_dir``.
        groups: the JSONL files to open: ``train`` is ``metrics.jsonl``, any other
            group ``<group>.jsonl`` (e.g. ``heldout``).
    """
    names = _names(names)
    validate_report_to(names)
    run_dir = Path(run_dir)
    config = dict(config or {})
    resume = resume_from_step is not None
    jsonl = JsonlTracker(run_dir, resume_from_step=resume_from_step, groups=groups)
    others: dict[str, Any] = {}
    try:
        for name in names:
            if name == "tensorboard":
                others[name] = _TensorBoardTracker(run_dir)
            elif name == "wandb":
                others[name] = _WandbTracker(run_dir, config, run_name, resume)
            elif name == "mlflow":
                others[name] = _MlflowTracker(run_dir, config, run_name, resume)
            elif name == "trackio":
                others[name] = _TrackioTracker(config, run_name, resume)
    except BaseException:
        Tracker(jsonl, others).close()
        raise
    return Tracker(jsonl, others)
