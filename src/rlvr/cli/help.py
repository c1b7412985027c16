"""Help text for people, read from the config models and the registries (``rlvr <command> --help``).

* :func:`settings_overview`: the config's sections, each with its doc and its keys;
* :func:`components_overview`: every registered component of every kind (tasks,
  engines, environments, verifiers, reward sources, estimators, losses, ...) with
  the first sentence of its doc, under the config key that names it;
* :func:`settings_reference`: every key with its type, default and doc (``--help-all``);
* :func:`reference_markdown`: the same as a Markdown page, ``docs/reference/config.md``
  (``python -m rlvr.cli.help docs/reference/config.md`` writes it; a test keeps it current).

Everything is wrapped to :func:`help_width` columns (at most 100).
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel

from rlvr.config import ConfigModel, _section, _show, _type_name
from rlvr.registry import Registry, first_sentence, plain_text

__all__ = ["MAX_WIDTH", "help_width", "wrap", "Kind", "component_kinds", "settings_overview", "settings_reference",
           "components_overview", "reference_markdown", "config_keys", "config_field"]

MAX_WIDTH = 100
PLUGIN_HINT = ("Components from other packages: --import MODULE, `plugins: [MODULE]` in the config, or an "
               "rlvr.plugins entry point of an installed package (docs/plugins.md).")


def help_width() -> int:
    """The terminal's width less 2 (as argparse), at most :data:`MAX_WIDTH` and at least 60."""
    return max(60, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH + 2, 24)).columns - 2))


def wrap(text: str, width: int, indent: int = 0, hang: int | None = None) -> list[str]:
    """``text`` on lines of at most ``width`` columns: the first indented by ``indent``, the rest by ``hang``."""
    hang = indent if hang is None else hang
    return textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * hang,
                         break_on_hyphens=False) or [" " * indent]


def _columns(name: str, text: str, width: int, indent: int, col: int) -> list[str]:
    """``name`` then ``text`` from column ``col`` (wrapped there); a name too long for it gets its own line."""
    head = " " * indent + name
    if len(head) + 2 > col:
        return [head] + wrap(text, width, col)
    lines = wrap(text, width - col, 0)
    return [f"{head:<{col}}{lines[0]}"] + [" " * col + line for line in lines[1:]]


# --------------------------------------------------------------------------- config keys
def _fields(cls: type[ConfigModel], prefix: str = ""):
    """``(dotted key, field, section class or None)`` for every field of ``cls``, depth first."""
    for name, f in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        sub = _section(f.annotation)
        yield key, f, sub
        if sub is not None:
            yield from _fields(sub, key)


def config_field(cls: type[ConfigModel], key: str):
    """The pydantic field of the dotted ``key`` of ``cls`` (its annotation, default, doc and constraints)."""
    for k, f, _ in _fields(cls):
        if k == key:
            return f
    raise KeyError(f"{cls.__name__} has no key {key!r}")


def config_keys(cls: type[ConfigModel]) -> list[str]:
    """Every settable dotted key of ``cls`` (leaves, not sections)."""
    return [key for key, _, sub in _fields(cls) if sub is None]


def _range(f) -> str:
    """A field's numeric / length constraints (pydantic ``Field(ge=..., gt=...)``) as text, e.g. ``> 0, <= 1``."""
    names = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}
    parts = []
    for m in f.metadata:
        for attr, sign in names.items():
            value = getattr(m, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def _default(f) -> str:
    value = f.get_default(call_default_factory=True)
    return _show(None if isinstance(value, BaseModel) else value)


def _selected(key: str, only: Sequence[str] | None) -> bool:
    """Whether the dotted ``key`` is one of ``only`` (a key or a section), or holds one of them; all when None."""
    return only is None or any(key == o or key.startswith(o + ".") or o.startswith(key + ".") for o in only)


def settings_overview(cls: type[ConfigModel], width: int | None = None, *, only: Sequence[str] | None = None) -> str:
    """The config's sections with their docs and key names (override any as ``key=value``); ``only``: just these
    keys and sections (e.g. what ``rlvr eval`` reads)."""
    width = width or help_width()
    lines = wrap("settings (set any key as section.key=value; --help-all gives every key's type, default and doc):",
                 width, 0, 2)
    top = [(name, f) for name, f in cls.model_fields.items() if _section(f.annotation) is None and _selected(name, only)]
    sections = [(name, f) for name, f in cls.model_fields.items()
                if _section(f.annotation) is not None and _selected(name, only)]
    col = 2 + max([len(n) for n, _ in sections] + [len(n) for n, _ in top] + [8]) + 2
    for name, f in top:
        lines += _columns(name, plain_text(f.description or ""), width, 2, col)
    for name, f in sections:
        sub = _section(f.annotation)
        lines += _columns(name, plain_text(f.description or ""), width, 2, col)
        keys = [k for k in config_keys(sub) if _selected(f"{name}.{k}", only)]
        lines += wrap("keys: " + ", ".join(keys), width, col, col + 6)
    return "\n".join(lines)


def settings_reference(cls: type[ConfigModel], width: int | None = None, *,
                       only: Sequence[str] | None = None) -> str:
    """Every key: ``key  type = default`` then its doc, indented (the ``--help-all`` dump); ``only``: just these
    keys and sections."""
    width = width or help_width()
    lines = wrap("config keys (set as key=value):", width)
    for key, f, sub in _fields(cls):
        if not _selected(key, only):
            continue
        doc = plain_text(f.description or "")
        if sub is not None:
            lines += wrap(f"{key}: {doc}" if doc else key, width, 2, 6)
            continue
        valid = _range(f)
        lines += wrap(f"{key}  {_type_name(f.annotation)} = {_default(f)}" + (f"  ({valid})" if valid else ""),
                      width, 2, 6)
        if doc:
            lines += wrap(doc, width, 6)
    return "\n".join(lines)


# --------------------------------------------------------------------------- components
@dataclass(frozen=True)
class Kind:
    """One kind of component: its title, the config key that names one, and its registry."""

    title: str
    key: str
    registry: Registry


def component_kinds() -> list[Kind]:
    """Every registry of rlvr, in the order of the loop (tasks ... losses)."""
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS, IS_CORRECTIONS, KL_ESTIMATORS, POLICY_LOSSES
    from rlvr.algorithms.process import PROCESS_CREDIT, PROCESS_FILTERS, STEP_TRANSFORMS
    from rlvr.credit.turns import TURN_CREDIT
    from rlvr.engines.registry import ENGINES
    from rlvr.envs import ENVIRONMENTS
    from rlvr.learner.passes import POLICY_INPUTS
    from rlvr.recipes.pipeline import import_stage_kinds
    from rlvr.recipes.stage_kinds import STAGE_KINDS
    from rlvr.rewards.rubric import REWARD_FUNCTIONS
    from rlvr.rewards.shaping import REWARD_SHAPING
    from rlvr.rewards.sources import REWARD_SOURCES
    from rlvr.tasks.registry import TASKS
    from rlvr.verifiers import VERIFIERS

    return [
        Kind("tasks", "task.name (options: the task.* keys, others in task.params)", TASKS),
        Kind("rollout engines", "rollout.engine (options in rollout.engine_params)", ENGINES),
        Kind("environments", "env.name (options in env.params)", ENVIRONMENTS),
        Kind("verifiers", "reward.verifier (options in reward.verifier_params)", VERIFIERS),
        Kind("reward functions", "reward.functions (items: {kind, name, weight >= 0 (0: logged only), params})",
             REWARD_FUNCTIONS),
        Kind("reward sources", "reward.source (options in reward.source_params)", REWARD_SOURCES),
        Kind("policy passes", "what a reward source tagged policy needs (filled by the entry tagged with it)",
             POLICY_INPUTS),
        Kind("reward shaping terms", "reward.shaping (a mapping {name: {options}}, applied in the order listed)",
             REWARD_SHAPING),
        Kind("step-reward transforms", "reward.process_transforms (items: a name or {name: {options}})",
             STEP_TRANSFORMS),
        Kind("process credit assignment", "reward.process_credit (options in reward.process_credit_params)",
             PROCESS_CREDIT),
        Kind("process/outcome filters", "reward.process_filter (options in reward.process_filter_params)",
             PROCESS_FILTERS),
        Kind("advantage estimators", "algorithm.advantage (options in algorithm.advantage_params)",
             ADVANTAGE_ESTIMATORS),
        Kind("turn credit", "algorithm.turn_credit (options in algorithm.turn_credit_params)", TURN_CREDIT),
        Kind("policy losses", "algorithm.policy_loss (options in algorithm.policy_loss_params)", POLICY_LOSSES),
        Kind("KL estimators", "algorithm.kl_estimator", KL_ESTIMATORS),
        Kind("IS corrections", "algorithm.is_correction (options in algorithm.is_params)", IS_CORRECTIONS),
        Kind("stage kinds", "stages[].kind of rlvr pipeline (each stage is configured by its own command's config)",
             import_stage_kinds() or STAGE_KINDS),
    ]


def _builtin(entry) -> bool:
    return str(getattr(entry.obj, "__module__", "") or "").startswith("rlvr.")


def _entries(reg: Registry, builtin_only: bool) -> list:
    return [e for e in (reg.entry(n) for n in reg.names()) if _builtin(e) or not builtin_only]


def _details(entry) -> str:
    extra = []
    if entry.options():
        extra.append("options: " + ", ".join(entry.options()))
    if entry.needs:
        extra.append("needs: " + ", ".join(sorted(entry.needs)))
    return f" ({'; '.join(extra)})" if extra else ""


def _option(name: str, f) -> str:
    """One component option for the reference page: its name, default (or "required") and valid range."""
    if f.is_required():
        return f"`{name}` (required)"
    bound = _range(f)
    return f"`{name}` = `{_default(f)}`" + (f" ({bound})" if bound else "")


def components_overview(width: int | None = None, *, details: bool = False,
                        kinds: Sequence[str] | None = None) -> str:
    """Every registered component of every kind: name and the first sentence of its doc (``details``: options);
    ``kinds``: just the kinds with these titles (``tasks``, ``verifiers``, ...)."""
    width = width or help_width()
    lines = wrap("registered components (the names each key accepts"
                 + ("" if details else "; --help-all adds their options") + "):", width, 0, 2)
    for kind in component_kinds():
        if kinds is not None and kind.title not in kinds:
            continue
        entries = _entries(kind.registry, builtin_only=False)
        lines += [""] + wrap(f"{kind.title}: {kind.key}", width, 2, 6)
        col = 4 + min(22, max(len(e.name) for e in entries)) + 2 if entries else 8
        for e in entries:
            lines += _columns(e.name, e.summary() + (_details(e) if details else ""), width, 4, col)
    return "\n".join(lines + [""] + wrap(PLUGIN_HINT, width))


# --------------------------------------------------------------------------- reference page
def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _settings_markdown(cls: type[ConfigModel], prefix: str = "") -> list[str]:
    """One table per section of ``cls`` (keys outside any section get a table each)."""
    out: list[str] = []
    for name, f in cls.model_fields.items():
        sub = _section(f.annotation)
        out += [f"### `{prefix}{name}`", "", plain_text(f.description or ""), ""]
        out += ["| key | type | default | valid | description |", "|---|---|---|---|---|"]
        fields = [(name, f, None)] if sub is None else [(k, g, s) for k, g, s in _fields(sub, name) if s is None]
        for key, g, _ in fields:
            out.append(f"| `{prefix}{key}` | `{_cell(_type_name(g.annotation))}` | `{_cell(_default(g))}` | "
                       f"{_cell(_range(g))} | {_cell(plain_text(g.description or ''))} |")
        out.append("")
    return out


def _other_commands() -> list[tuple[str, type[ConfigModel], str]]:
    """The commands besides ``rlvr train`` with configs of their own: (command, config class, one line)."""
    from rlvr.recipes.pipeline import PipelineConfig, StageConfig
    from rlvr.recipes.rft_config import RFTConfig
    from rlvr.recipes.sft_config import SFTConfig

    return [("rlvr sft", SFTConfig, "Supervised fine-tuning (docs/post-training.md)."),
            ("rlvr rft", RFTConfig, "Rejection-sampling fine-tuning rounds (docs/post-training.md)."),
            ("rlvr pipeline", PipelineConfig, "Stages in one config (docs/post-training.md); each entry of "
                                              "`stages` has the keys of the `stages[]` table."),
            ("rlvr pipeline: stages[]", StageConfig, "One stage of a pipeline.")]


def command_help(command: str, full: bool = False) -> str:
    """The epilog of ``rlvr sft`` / ``rft`` / ``pipeline``: its settings by section (``full``: every key's type,
    default and doc)."""
    for name, cls, _ in _other_commands():
        if name == command:
            return settings_reference(cls) if full else settings_overview(cls)
    raise KeyError(command)


def reference_markdown() -> str:
    """``docs/reference/config.md``: every key of ``rlvr train`` and every built-in component, as Markdown."""
    from rlvr.recipes.config import RunConfig

    out = ["# Configuration reference", "",
           "Generated from the config models and the registries by `python -m rlvr.cli.help docs/reference/config.md`;",
           "a test fails when this page is not current. `rlvr train --help` shows the overview, "
           "`rlvr train --help-all`", "every key; components of installed plugins are listed there too.", "",
           "## Settings", "", "Override any key as `section.key=value` after the optional YAML file.", ""]
    out += _settings_markdown(RunConfig)
    for command, cls, note in _other_commands():
        out += [f"## Settings of `{command}`", "", note, ""]
        out += _settings_markdown(cls)
    out += ["## Components", "", "The names each key accepts, with their options (the keyword options of the "
            "registered function or class).", ""]
    for kind in component_kinds():
        out += [f"### {kind.title}", "", f"`{kind.key.split(' ', 1)[0]}`" +
                (f" {kind.key.split(' ', 1)[1]}" if " " in kind.key else ""), "",
                "| name | description | options |", "|---|---|---|"]
        for e in _entries(kind.registry, builtin_only=True):
            opts = ", ".join(_option(n, f) for n, f in e.params.model_fields.items()) or "none"
            if e.needs:
                opts += "; needs " + ", ".join(sorted(e.needs))
            out.append(f"| `{e.name}` | {_cell(e.summary())} | {_cell(opts)} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # python -m rlvr.cli.help docs/reference/config.md
    text = reference_markdown()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
