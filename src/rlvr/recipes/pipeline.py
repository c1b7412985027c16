"""Stages in one config (``rlvr pipeline PIPELINE.yaml``): SFT then RL, RL then distillation, SFT and RL interleaved.

A pipeline is a list of stages, each of a registered kind (:data:`rlvr.recipes.stage_kinds.STAGE_KINDS`: ``rl``,
``distill``, ``sft``, ``rft``), each configured by its own command's YAML (``config``) plus dotted ``overrides``.
Stage ``i`` starts from stage ``i - 1``'s final model (the first from ``model``) unless it names its own ``model``;
an override may name an earlier stage's final model as ``{previous}`` or ``{stage:NAME}`` (e.g. the teacher of a
distillation stage: ``distill.teacher={stage:rl}``).  ``repeat: N`` runs the list N times in a row (ReLIFT-style
interleaving of SFT and RL is ``[sft, rl]`` with ``repeat: 3``).

Every stage config is loaded and checked when the pipeline loads, before any model: a mistake in stage 3 is
reported before stage 1 trains (paths that earlier stages will create are checked when their stage starts).
Stage ``k`` runs in ``<output_dir>/<kk>-<name>`` as its own command would (its lock, checkpoints, metrics,
held-out evaluation before and after).  ``--resume`` skips finished stages (their ``summary.json`` and final
model are there) and resumes the first unfinished one from its latest intact checkpoint, at the step it reached;
a change to a finished stage's config is refused.  ``summary.json`` / ``summary.md`` in ``output_dir`` hold every
stage's held-out accuracy before and after it.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import field_validator, model_validator

from rlvr.config import ConfigError, ConfigModel, config_to_dict, load_config, option, save_config
from rlvr.models.loader import DEFAULT_MODEL
from rlvr.recipes.rundir import RunDirectoryError, config_changes, flat_config
from rlvr.recipes.stage_kinds import STAGE_KINDS, StageKind
from rlvr.utils.files import atomic_write_json, atomic_write_text, read_json_or_none

__all__ = ["import_stage_kinds", "StageConfig", "PipelineConfig", "PlannedStage", "load_pipeline", "plan_stages", "run_pipeline",
           "format_pipeline_summary"]

_PLACEHOLDER = re.compile(r"\{(previous|stage:([A-Za-z0-9_.-]+))\}")
_NAME = re.compile(r"^[A-Za-z0-9_.-]*$")
LOCK_FILE = ".rlvr-pipeline.lock"


class StageConfig(ConfigModel):
    """One stage: a registered kind, its own command's config file and overrides."""

    kind: str = option("rl", "what the stage runs, a name in rlvr.recipes.stage_kinds.STAGE_KINDS: rl (rlvr train), "
                             "distill (rlvr train with a distill.teacher), sft (rlvr sft), rft (rlvr rft)")
    name: str = option("", "the stage's name, used in its directory <output_dir>/<NN>-<name> and in {stage:NAME} "
                           "(letters, digits, _ . -; empty: the kind)")
    config: str | None = option(None, "the stage's YAML config, of its kind's command (rlvr train's for rl and "
                                      "distill, rlvr sft's for sft, ...); null: that command's defaults")
    overrides: list[str] = option(None, "dotted key=value overrides of the stage's config, e.g. train.steps=20; "
                                        "{previous} / {stage:NAME} stand for an earlier stage's final model",
                                  default_factory=list)
    model: str | None = option(None, "the model the stage starts from (its model.name); null: the previous stage's "
                                     "final model (the pipeline's model for the first stage)")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        import_stage_kinds()
        STAGE_KINDS.entry(kind, key="kind")  # an unknown kind names the known ones
        return kind

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"{name!r}: a stage name is letters, digits, '_', '.' and '-' only (it names a directory)")
        return name

    @field_validator("overrides")
    @classmethod
    def _key_value(cls, overrides: list[str]) -> list[str]:
        for o in overrides:
            if "=" not in o:
                raise ValueError(f"{o!r} is not a key=value override")
        return overrides

    def label(self) -> str:
        return self.name or self.kind


class PipelineConfig(ConfigModel):
    """``rlvr pipeline``: stages run one after the other, each starting from the one before's final model."""

    model: str = option(DEFAULT_MODEL, "the model the first stage starts from (bundled name, HF directory, "
                                       "rlvr checkpoint or hub id)")
    output_dir: str = option("runs/pipeline", "where each stage's directory, summary.json and summary.md go")
    stages: list[StageConfig] = option(None, "the stages, in order (at least one)", default_factory=list)
    repeat: int = option(1, "run the stage list this many times in a row (SFT and RL interleaved: [sft, rl], "
                            "repeat 3)", ge=1, le=100)
    seed: int | None = option(None, "train.seed of every stage (null: each stage's own)")
    resume: bool = option(False, "skip finished stages and resume the first unfinished one from its latest "
                                 "intact checkpoint")
    overwrite: bool = option(False, "start over in an output_dir holding an earlier pipeline: its stage "
                                    "directories and summaries are deleted first")

    @model_validator(mode="after")
    def _stages_make_sense(self) -> PipelineConfig:
        if not self.stages:
            raise ValueError("stages: the list is empty; give at least one stage, e.g. "
                             "[{kind: sft, config: configs/sft_arithmetic.yaml}, "
                             "{kind: rl, config: configs/arithmetic_grpo.yaml}]")
        if self.resume and self.overwrite:
            raise ValueError("resume continues the pipeline in output_dir and overwrite deletes it: set one")
        names = [s.label() for s in self.stages]
        dup = sorted({n for n in names if names.count(n) > 1 and any(s.name == n for s in self.stages)})
        if dup:
            raise ValueError(f"stages: the name {dup[0]!r} is given to more than one stage")
        for i, st in enumerate(self.stages):
            for o in st.overrides:
                for m in _PLACEHOLDER.finditer(o):
                    if m.group(1) == "previous":
                        if i == 0 and self.repeat == 1:
                            raise ValueError(f"stages[0].overrides: {o!r}: the first stage has no previous stage")
                    elif m.group(2) not in names[:i] and not (self.repeat > 1 and m.group(2) in names):
                        raise ValueError(f"stages[{i}].overrides: {o!r}: no earlier stage is named "
                                         f"{m.group(2)!r} (earlier: {', '.join(names[:i]) or 'none'})")
        return self


def import_stage_kinds() -> None:
    """The built-in kinds register themselves when their recipes are imported."""
    import rlvr.recipes.run  # noqa: F401  (rl, distill)
    for module in ("rlvr.recipes.sft", "rlvr.recipes.rft"):
        try:
            __import__(module)
        except ModuleNotFoundError as e:  # pragma: no cover - both ship with rlvr
            if e.name != module:
                raise


@dataclass
class PlannedStage:
    """A stage as it will run: its index (1-based, across repeats), directory and loaded config."""

    index: int
    stage: StageConfig
    kind: StageKind
    directory: Path
    config: Any
    overrides: list[str]
    where: str
    """Where the stage is written (the pipeline file and line), for error messages."""


def load_pipeline(path: str | Path | None = None, overrides: list[str] = ()) -> PipelineConfig:
    """The pipeline config of ``path`` and overrides (a bad key or value names file, line and key)."""
    return load_config(PipelineConfig, path, list(overrides))


def _stage_lines(path: str | Path | None) -> dict[int, int]:
    """Line of each stage entry in the pipeline YAML (for messages)."""
    if path is None:
        return {}
    import yaml

    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    for k, v in getattr(node, "value", []) if isinstance(node, yaml.MappingNode) else []:
        if k.value == "stages" and isinstance(v, yaml.SequenceNode):
            return {i: item.start_mark.line + 1 for i, item in enumerate(v.value)}
    return {}


def _fill(text: str, previous: str, finals: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        return previous if m.group(1) == "previous" else finals[m.group(2)]

    return _PLACEHOLDER.sub(sub, text)


def plan_stages(cfg: PipelineConfig, path: str | Path | None = None,
                finals: dict[str, str] | None = None) -> list[PlannedStage]:
    """Every stage's directory and config, loaded and checked.

    ``finals`` maps stage labels (and ``"#k"`` for the k-th stage) to the final models of stages that have
    finished; a model a stage will only create is stood in for by the pipeline's ``model`` while checking (the
    real path is filled in when that stage starts).
    """
    finals = dict(finals or {})
    lines = _stage_lines(path)
    out: list[PlannedStage] = []
    previous = cfg.model
    k = 0
    root = Path(cfg.output_dir)
    for rep in range(cfg.repeat):
        for i, st in enumerate(cfg.stages):
            k += 1
            kind = STAGE_KINDS[st.kind]
            where = f"{path}:{lines[i]}" if path is not None and i in lines else f"stages[{i}]"
            where += f" (stage {k}, {st.label()})"
            directory = root / f"{k:02d}-{st.label()}"
            known = {name: finals.get(name, cfg.model) for name in (s.label() for s in cfg.stages)}
            model = st.model or previous
            stage_overrides = [_fill(o, previous, known) for o in st.overrides]
            pinned = [f"{kind.model_key}={model}", f"{kind.output_key}={directory}"]
            if cfg.seed is not None:
                pinned.append(f"{kind.seed_key}={cfg.seed}")
            try:
                if st.config is not None and not Path(st.config).is_file():
                    raise ConfigError(f"config file not found: {st.config}")
                scfg = load_config(kind.config_class, st.config, stage_overrides + pinned)
                if kind.check is not None:
                    kind.check(scfg)
            except (ConfigError, ValueError) as e:
                raise ConfigError(f"{where}: {e}") from None
            out.append(PlannedStage(k, st, kind, directory, scfg, stage_overrides + pinned, where))
            previous = finals.get(f"#{k}", cfg.model)
    return out


def _held_out(directory: Path) -> dict[str, Any]:
    return {tag: read_json_or_none(directory / f"eval_{tag}.json") for tag in ("before", "after")}


def _finished(planned: PlannedStage) -> str | None:
    if read_json_or_none(planned.directory / "summary.json") is None:
        return None
    return planned.kind.final_model(planned.directory)


def _claim_root(cfg: PipelineConfig):
    from filelock import FileLock, Timeout

    root = Path(cfg.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(root / LOCK_FILE), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunDirectoryError(f"{root} is in use by another pipeline: wait for it, stop it, or give this one "
                                f"another output_dir") from None
    try:
        earlier = sorted(p.name for p in root.iterdir() if not p.name.startswith(".")
                         and (p.name in ("pipeline.yaml", "summary.json", "summary.md") or re.match(r"^\d\d-", p.name)))
        if earlier and not cfg.resume:
            if not cfg.overwrite:
                raise RunDirectoryError(f"output_dir={root} holds an earlier pipeline ({', '.join(earlier[:4])}"
                                        f"{', ...' if len(earlier) > 4 else ''}): continue it with --resume, start "
                                        f"over with --overwrite, or give another output_dir")
            for name in earlier:
                p = root / name
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    except BaseException:
        lock.release()
        raise
    return lock


def _check_finished_unchanged(planned: PlannedStage) -> None:
    saved = planned.directory / "config.yaml"
    if not saved.is_file():
        return
    import yaml

    try:
        old = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return
    new = config_to_dict(planned.config)
    changes = config_changes(flat_config(old), flat_config(new))
    if changes:
        shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(changes.items())[:6])
        raise RunDirectoryError(f"{planned.where}: the stage has finished, but its config changed ({shown}): "
                                f"resuming would mix two pipelines; start over with --overwrite or another "
                                f"output_dir")


def run_pipeline(cfg: PipelineConfig, path: str | Path | None = None, *,
                 print_fn: Callable[[str], None] = print, **kwargs: Any) -> dict[str, Any]:
    """Run every stage in order (see the module docstring); returns the pipeline summary (also written as
    ``summary.json`` and ``summary.md`` in ``output_dir``).  ``kwargs`` (e.g. ``on_step``) reach the stages whose
    kind passes them."""
    planned = plan_stages(cfg, path)  # every stage checked before anything runs or loads
    root = Path(cfg.output_dir)
    lock = _claim_root(cfg)
    try:
        save_config(cfg, root / "pipeline.yaml")
        finals: dict[str, str] = {}
        rows: list[dict[str, Any]] = []
        total = len(planned)
        for k in range(total):
            # reload the stage now that earlier stages' models exist: the real paths replace the stand-ins
            p = plan_stages(cfg, path, finals)[k]
            done = _finished(p) if cfg.resume else None
            skipped = done is not None
            started = time.time()
            if skipped:
                _check_finished_unchanged(p)
                print_fn(f"stage {p.index}/{total} {p.stage.label()} ({p.stage.kind}): finished earlier, skipped")
                summary = read_json_or_none(p.directory / "summary.json") or {}
            else:
                flags = []
                if cfg.resume and p.directory.is_dir() and any(p.directory.iterdir()):
                    flags.append(f"{p.kind.resume_key}=true")
                if flags:
                    p.config = load_config(p.kind.config_class, p.stage.config, p.overrides + flags)
                print_fn(f"stage {p.index}/{total} {p.stage.label()} ({p.stage.kind}) in {p.directory}"
                         + (" (resuming)" if flags else ""))
                passed = {k2: v for k2, v in kwargs.items() if k2 in p.kind.passes}
                summary = p.kind.run(p.config, **passed)
                done = p.kind.final_model(p.directory)
                if done is None:
                    raise RuntimeError(f"stage {p.index} ({p.stage.label()}) finished without a final model in "
                                       f"{p.directory}")
            finals[f"#{p.index}"] = done
            finals[p.stage.label()] = done
            rows.append({"stage": p.index, "name": p.stage.label(), "kind": p.stage.kind,
                         "directory": str(p.directory), "final_model": done,
                         "steps": summary.get("steps"), "seconds": round(time.time() - started, 1),
                         "skipped": skipped,
                         **{f"eval_{t}": v for t, v in _held_out(p.directory).items()}})
        result = {"output_dir": str(root), "final_model": finals[f"#{total}"], "stages": rows}
        atomic_write_json(root / "summary.json", result, indent=2, default=str)
        atomic_write_text(root / "summary.md", format_pipeline_summary(result))
        print_fn(format_pipeline_summary(result))
        return result
    finally:
        lock.release()


def _acc(results: dict | None) -> str:
    if not results:
        return "-"
    return ", ".join(f"{tag} {r['accuracy']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}]"
                     for tag, r in results.items() if isinstance(r, dict) and "accuracy" in r) or "-"


def format_pipeline_summary(result: dict[str, Any]) -> str:
    """A Markdown table: each stage's held-out accuracy before and after it."""
    lines = ["| stage | kind | steps | held-out before | held-out after |", "|---|---|---|---|---|"]
    for r in result["stages"]:
        lines.append(f"| {r['stage']}. {r['name']} | {r['kind']} | {r.get('steps') if r.get('steps') is not None else '-'}"
                     f" | {_acc(r.get('eval_before'))} | {_acc(r.get('eval_after'))} |")
    lines.append("")
    lines.append(f"final model: {result['final_model']}")
    return "\n".join(lines) + "\n"
