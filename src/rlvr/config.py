"""Typed configuration on pydantic v2: a YAML file plus dotted ``key=value`` overrides.

A config is a tree of :class:`ConfigModel` sections (pydantic models with
``extra="forbid"`` and strict types); declare every field with :func:`option` so it
has a default and a one-line doc (shown by :func:`describe_config`)::

    class TrainConfig(ConfigModel):
        steps: int = option(100, "number of optimizer steps")

    class RunConfig(ConfigModel):
        train: TrainConfig = option(None, "training", default_factory=TrainConfig)

    cfg = load_config(RunConfig, "run.yaml", ["train.steps=10"])   # defaults < file < overrides

Types are checked strictly (pydantic's strict mode: no bool for an int, no "3" for an
int) except that a float field takes an int and a numeric string (PyYAML reads
``1e-5`` as a string).  Override values are read as YAML (``0.28``, ``[1,2]``,
``true``, ``null``) except that str fields take the raw text (``model.name=1e5`` stays
"1e5"; for ``str | None`` only ``null``/``~`` mean None); a list that is not valid
YAML (``[+,-,*]``) is split on commas; ``section.dict_field.key=value`` sets one entry
of a dict field.  A section's ``check()`` method, if it has one, runs after its fields
are validated (innermost first).  Numeric ranges are field constraints
(``option(2e-5, "learning rate", gt=0)``), shown in :func:`describe_config`; a float
field never takes NaN or infinity.

Overriding the component a section names (``task.name``, ``env.name``, ``reward.verifier``,
``algorithm.advantage``, ``rollout.engine``: a field beside a dict field ``params`` or ``<field>_params``)
with another one drops the file's options of the former component (``task.params``); options the
overrides set (``task.params.prompt_field=q``) apply to the new one.

Mistakes raise :class:`ConfigError` naming the file (and line) or override, the dotted
key, the expected type or range and what was given, with a "did you mean" for misspelt
keys; every bad key of a file or of the overrides is reported, one per line.  An error about
a key inside a mapping (``task.params.num_train: not an option ...``) names where that key was set:
the file's line, or the override.  A key that moved is refused
with its new place: a section lists them in its ``moved`` class attribute (``{"old_field": "new.dotted.key"}``).
:func:`save_config` writes YAML that ``load_config`` reads back to an equal object.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["ConfigError", "ConfigModel", "option", "value_range", "load_config", "config_to_dict", "save_config",
           "config_yaml", "describe_config"]

T = TypeVar("T", bound="ConfigModel")
_NULLS = ("null", "Null", "NULL", "~")
_NUMBER = re.compile(r"[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


class ConfigError(ValueError):
    """A config file or override that does not fit the config's types."""


def option(default: Any, help: str = "", *, default_factory: Callable[[], Any] | None = None,
           gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
           min_length: int | None = None, max_length: int | None = None) -> Any:
    """A field with a default, a one-line doc and its valid range: ``steps: int = option(100, "optimizer steps",
    ge=0)``.

    ``gt``/``ge``/``lt``/``le`` bound a number (for ``X | None`` the number, ``None`` stays allowed);
    ``min_length``/``max_length`` bound a list.  With ``default_factory`` pass ``None`` as ``default``.
    """
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le), ("min_length", min_length),
                                ("max_length", max_length)) if v is not None}
    if default_factory is not None:
        if default is not None:
            raise TypeError("option(): give a default or a default_factory, not both")
        return Field(default_factory=default_factory, description=help, **bounds)
    return Field(default=default, description=help, **bounds)


def value_range(field: Any) -> str:
    """A field's constraints as text: ``> 0``, ``in (0, 1]``, ``>= 1``, ``2 items`` ("" when unconstrained)."""
    b: dict[str, Any] = {}
    for m in getattr(field, "metadata", ()):
        for k in ("gt", "ge", "lt", "le", "min_length", "max_length"):
            if getattr(m, k, None) is not None:
                b[k] = getattr(m, k)
    return _range_text(b)


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range_text(b: Mapping[str, Any]) -> str:
    lo = ("(", b["gt"]) if "gt" in b else ("[", b["ge"]) if "ge" in b else None
    hi = (")", b["lt"]) if "lt" in b else ("]", b["le"]) if "le" in b else None
    parts = []
    if lo and hi:
        parts.append(f"in {lo[0]}{_num(lo[1])}, {_num(hi[1])}{hi[0]}")
    elif lo:
        parts.append(f"{'>' if lo[0] == '(' else '>='} {_num(lo[1])}")
    elif hi:
        parts.append(f"{'<' if hi[0] == ')' else '<='} {_num(hi[1])}")
    n_lo, n_hi = b.get("min_length"), b.get("max_length")
    if n_lo is not None and n_lo == n_hi:
        parts.append(f"{n_lo} items")
    elif n_lo is not None or n_hi is not None:
        parts.append(" ".join(x for x in (f"at least {n_lo}" if n_lo else "", f"at most {n_hi}" if n_hi else "")
                              if x) + " items")
    return ", ".join(parts)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _members(tp: Any) -> list[Any]:
    return [a for a in get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]


def _section(tp: Any) -> type[ConfigModel] | None:
    """The ConfigModel inside ``tp`` (``Sub`` or ``Sub | None``), if any."""
    subs = _members(tp)
    if len(subs) == 1 and isinstance(subs[0], type) and issubclass(subs[0], ConfigModel):
        return subs[0]
    return None


def _floaty(tp: Any) -> bool:
    return any(m is float for m in _members(tp))


def _numeric_strings(value: Any, tp: Any) -> Any:
    """Numeric strings (PyYAML's ``1e-5``) as floats where ``tp`` holds floats."""
    if isinstance(value, str) and _floaty(tp) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    if isinstance(value, list):
        inner = [get_args(m)[0] for m in _members(tp) if get_origin(m) in (list, tuple) and get_args(m)]
        if inner and _floaty(inner[0]):
            return [_numeric_strings(v, inner[0]) for v in value]
    return value


class ConfigModel(BaseModel):
    """A config section: unknown keys refused, strict types, every field a default and a doc."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=False, allow_inf_nan=False)

    moved: ClassVar[dict[str, str]] = {}
    """Former fields of this section and where their setting lives now (``{"old": "section.new_key ..."}``): a
    config that still sets one is refused with that message."""

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            fields = cls.model_fields
            data = {k: _numeric_strings(v, fields[k].annotation) if k in fields else v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _check(self):
        hook = getattr(self, "check", None)
        if callable(hook):
            hook()
        return self


# --------------------------------------------------------------------------- errors
def _type_name(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if tp is type(None):
        return "None"
    if _is_union(tp):
        return " | ".join(_type_name(a) for a in args)
    if origin is Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]" if args else origin.__name__
    return getattr(tp, "__name__", str(tp))


def _field_at(cls: type[ConfigModel], parts: Sequence[Any]) -> tuple[type[ConfigModel] | None, Any]:
    """(the section holding the last part, that field's annotation) for a dotted path, where it resolves."""
    section, tp = cls, None
    for i, p in enumerate(parts):
        if section is None or not isinstance(p, str) or p not in section.model_fields:
            return (section if i == len(parts) - 1 else None), None
        tp = section.model_fields[p].annotation
        if i < len(parts) - 1:
            section = _section(tp)
    return section, tp


def _type_at(cls: type[ConfigModel], loc: Sequence[Any]) -> Any:
    """The annotation at an error location (fields by name, list items by index, dict values by key)."""
    tp: Any = cls
    for p in loc:
        sub = _section(tp)
        if sub is not None and isinstance(p, str) and p in sub.model_fields:
            tp = sub.model_fields[p].annotation
            continue
        inner = [m for m in _members(tp) if get_origin(m) in (list, tuple, dict, Mapping) and get_args(m)]
        if not inner:
            return None
        tp = get_args(inner[0])[-1 if get_origin(inner[0]) in (dict, Mapping) else 0]
    members = _members(tp) if tp is not None else []
    return members[0] if len(members) == 1 else tp  # X | None: X's own name once the value is not None


def _unknown(prefix: str, name: str, known: Sequence[str], section: type[ConfigModel] | None = None) -> str:
    key = f"{prefix}.{name}" if prefix else name
    if section is not None and name in getattr(section, "moved", {}):
        return f"{key}: moved to {section.moved[name]}"
    where = f"in '{prefix}'" if prefix else "at top level"
    msg = f"unknown config key '{key}' (known keys {where}: {', '.join(sorted(known))})"
    close = difflib.get_close_matches(name, list(known), n=1)
    return msg + (f"; did you mean '{prefix + '.' if prefix else ''}{close[0]}'?" if close else "")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_KEYED = re.compile(r"[a-z_]+(\.[a-z_0-9]+|\[\d+\])+: ")
_BOUNDS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}


def _explain_one(cls: type[ConfigModel], e: Mapping[str, Any]) -> tuple[list[Any], str]:
    """One pydantic error as (its location, ``dotted.key: what was expected, what was given``)."""
    loc = [p for p in e["loc"] if not (isinstance(p, str) and (p.startswith("function-") or p in ("list", "dict")))]
    strs = [p for p in loc if isinstance(p, str)]
    key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")
    if e["type"] == "extra_forbidden":
        section, _ = _field_at(cls, strs)
        if section is not None:
            return loc, _unknown(".".join(strs[:-1]), strs[-1], list(section.model_fields), section)
    if e["type"] == "value_error":  # a check() hook: the message names its keys
        msg = str(e.get("ctx", {}).get("error", e["msg"]))
        if _KEYED.match(msg):  # "section.key: why" already
            return loc, msg
        where = f"config section '{key}'" if key else "config"
        return loc, f"invalid {where}: {msg}"
    if e["type"] in ("model_type", "dict_type", "model_attributes_type"):
        section, tp = _field_at(cls, strs)
        sub = _section(tp) if tp is not None else None
        if sub is not None:
            return loc, (f"{key}: expected a mapping for section {sub.__name__}, got {type(e['input']).__name__} "
                         f"{_shown(e['input'])}")
    if e["type"] == "missing":
        return loc, f"{key}: no value and no default (every config field needs a default)"
    ctx = e.get("ctx") or {}
    if e["type"] in _BOUNDS:
        bound = _BOUNDS[e["type"]]
        section, _ = _field_at(cls, strs)
        field = section.model_fields.get(strs[-1]) if section is not None and strs and loc[-1] == strs[-1] else None
        rng = value_range(field) if field is not None else ""  # the whole range, e.g. "in (0, 1]" for top_p=0
        return loc, f"{key}: must be {rng or _range_text({bound: ctx.get(bound)})}, got {_shown(e['input'])}"
    if e["type"] in ("too_short", "too_long"):
        section, _ = _field_at(cls, strs)
        field = section.model_fields.get(strs[-1]) if section is not None and strs and loc[-1] == strs[-1] else None
        rng = (value_range(field) if field is not None else "") or \
            _range_text({k: ctx[k] for k in ("min_length", "max_length") if k in ctx})
        return loc, f"{key}: needs {rng}, got {len(e['input'])}: {_shown(e['input'])}"
    if e["type"] == "finite_number":
        return loc, f"{key}: must be a finite number, got {_shown(e['input'])}"
    tp = _type_at(cls, loc)
    expected = _type_name(tp) if tp is not None else e["msg"].lower()
    if e["type"] == "literal_error":
        expected = "one of " + ", ".join(repr(a) for a in get_args(_members(tp)[0])) if tp is not None else e["msg"]
    hint = " (write a list as [a, b])" if isinstance(e["input"], str) and "list" in expected else ""
    return loc, f"{key}: expected {expected}, got {type(e['input']).__name__} {_shown(e['input'])}{hint}"


def _validate(cls: type[T], data: Mapping, source: str | Callable[[list[Any]], str]) -> T:
    """``cls`` from ``data``; every error becomes one line ``<source>: <key>: <why>`` of a :class:`ConfigError`
    (``source`` is text, or a function of the error's location: a file's line, the override that set the key)."""
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors(include_url=False):
            loc, msg = _explain_one(cls, e)
            where = source(_message_loc(loc, msg)) if callable(source) else source
            line = f"{where}: {msg}" if where else msg
            if line not in lines:
                lines.append(line)
        at = re.compile(r"^.*?:(\d+): ")  # a file's errors in the order of their lines
        lines.sort(key=lambda t: int(m.group(1)) if (m := at.match(t)) else 0)
        raise ConfigError("\n".join(lines)) from None


def _message_loc(loc: list[Any], msg: str) -> list[Any]:
    """The location an error names: its message's leading ``dotted.key[i]:`` when that lies inside ``loc``
    (a section's check() names the key it refuses, e.g. ``task.params.num_train``), else ``loc``."""
    m = _KEYED.match(msg)
    if not m:
        return loc
    parts: list[Any] = []
    for dotted in m.group(0)[:-2].split("."):
        name, *idx = re.split(r"\[(\d+)\]", dotted)
        parts += [name] + [int(i) for i in idx if i]
    return parts if len(parts) > len(loc) and parts[:len(loc)] == list(loc) else loc


def _yaml_lines(text: str) -> dict[tuple, int]:
    """The line (1-based) of every key and list item of a YAML document, by its path (``("train", "lr")``)."""
    out: dict[tuple, int] = {}

    def walk(node: Any, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    out[path + (k.value,)] = k.start_mark.line + 1
                    walk(v, path + (k.value,))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                out[path + (i,)] = v.start_mark.line + 1
                walk(v, path + (i,))

    try:
        walk(yaml.compose(text, Loader=yaml.SafeLoader), ())
    except yaml.YAMLError:
        pass
    return out


def _file_source(path: str | Path, text: str) -> Callable[[list[Any]], str]:
    lines = _yaml_lines(text)

    def where(loc: list[Any]) -> str:
        for n in range(len(loc), 0, -1):
            if tuple(loc[:n]) in lines:
                return f"{path}:{lines[tuple(loc[:n])]}"
        return str(path)

    return where


def _override_source(overrides: Sequence[str]) -> Callable[[list[Any]], str]:
    """The last override that set the error's key (or a key inside it, or the section holding it)."""
    keys = [[p.strip() for p in str(o).partition("=")[0].split(".")] for o in overrides]

    def where(loc: list[Any]) -> str:
        strs = [p for p in loc if isinstance(p, str)]
        for o, k in zip(reversed(list(overrides)), reversed(keys)):
            n = min(len(k), len(strs))
            if n and k[:n] == strs[:n]:
                return f"override {o!r}"
        return f"override {list(overrides)[-1]!r}" if len(overrides) == 1 else ""

    return where


def _combined_source(cls: type[ConfigModel], file_where: Callable[[list[Any]], str], overrides: Sequence[str],
                     lines: Mapping[tuple, int]) -> Callable[[list[Any]], str]:
    """An error's key set by an override (its value holds the key, or the key holds the override's) names the
    override; one set in the file names its line."""
    by_override = _override_source(overrides)
    keys = [[p.strip() for p in str(o).partition("=")[0].split(".")] for o in overrides]
    values = [_apply_override(cls, {}, o) for o in overrides]

    def where(loc: list[Any]) -> str:
        for o, k, v in zip(reversed(list(overrides)), reversed(keys), reversed(values)):
            if loc and (k[:len(loc)] == list(loc) or _has(v, loc)):
                return f"override {o!r}"
        return file_where(loc) if tuple(loc) in lines else by_override(loc)

    return where


def _has(data: Any, path: Sequence[Any]) -> bool:
    """Whether the nested mappings and lists ``data`` hold ``path``."""
    for p in path:
        if isinstance(data, Mapping) and p in data:
            data = data[p]
        elif isinstance(data, list) and isinstance(p, int) and 0 <= p < len(data):
            data = data[p]
        else:
            return False
    return True


# --------------------------------------------------------------------------- overrides
def _component_options(cls: type[ConfigModel], prefix: tuple[str, ...] = ()) -> dict[tuple, tuple]:
    """``{("task", "name"): ("task", "params"), ("reward", "verifier"): ("reward", "verifier_params"), ...}``: every
    str field that names a component, with the dict field that holds that component's options."""
    out: dict[tuple, tuple] = {}
    fields = cls.model_fields
    for name, f in fields.items():
        sub = _section(f.annotation)
        if sub is not None:
            out.update(_component_options(sub, prefix + (name,)))
            continue
        opts = "params" if name == "name" else f"{name}_params"
        if opts in fields and any(m is str for m in _members(f.annotation)) and \
                any(m is dict or get_origin(m) in (dict, Mapping) for m in _members(fields[opts].annotation)):
            out[prefix + (name,)] = prefix + (opts,)
    return out


def _get(data: Mapping, path: Sequence[str]) -> Any:
    for p in path:
        if not isinstance(data, Mapping) or p not in data:
            return None
        data = data[p]
    return data


def _drop_replaced_options(cls: type[ConfigModel], data: dict, overrides: Sequence[str]) -> dict:
    """``data`` without the options of a component an override replaces by another (``task.name=jsonl`` drops
    the file's ``task.params``: they were the former component's); options the overrides set then apply to the
    new one."""
    components = _component_options(cls)
    keys = [tuple(p.strip() for p in str(o).partition("=")[0].strip().split(".")) for o in overrides]
    for item, key in zip(overrides, keys):
        opts = components.get(key)
        if opts is None or _get(data, opts) is None:
            continue
        current = _get(data, key)
        if current is None:  # not in the file: the field's default names the component
            section, _ = _field_at(cls, list(key))
            current = section.model_fields[key[-1]].default if section is not None else None
        if _get(_apply_override(cls, {}, item), key) == current:  # the same component: its options stay
            continue
        parent = dict(data)  # a copy down the path
        node = parent
        for p in opts[:-1]:
            node[p] = dict(node[p])
            node = node[p]
        del node[opts[-1]]
        data = parent
    return data


def _wants_raw(tp: Any, raw: str) -> bool:
    """Whether override text for ``tp`` is used verbatim instead of being parsed as YAML."""
    if tp is str:
        return True
    if get_origin(tp) is Literal:
        return raw in get_args(tp)
    if _is_union(tp):
        if type(None) in get_args(tp) and raw.strip() in _NULLS:
            return False
        return all(_wants_raw(a, raw) for a in get_args(tp) if a is not type(None))
    return False


def _parse(raw: str, tp: Any) -> Any:
    if tp is not None and _wants_raw(tp, raw):
        return raw
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        text = raw.strip()
        if text.startswith("[") and text.endswith("]"):  # e.g. [+,-,*]: plain comma-separated items
            return [item.strip() for item in text[1:-1].split(",") if item.strip()]
        raise ConfigError(f"cannot parse {raw!r} as YAML: {' '.join(str(e).split())}") from None


def _deep_merge(base: dict, update: Mapping) -> dict:
    out = dict(base)
    for k, v in update.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _apply_override(cls: type[ConfigModel], data: dict, item: str) -> dict:
    key, sep, raw = str(item).partition("=")
    parts = [p.strip() for p in key.strip().split(".")]
    if not sep or not all(parts):
        raise ConfigError(f"malformed override {item!r}: expected key=value with a dotted key, "
                          "e.g. train.steps=10 or model.name=foo")
    section, prefix, tp = cls, "", None
    for i, p in enumerate(parts):
        if section is None:  # the previous part was a dict field: this is one of its keys
            break
        if p not in section.model_fields:
            raise ConfigError(f"override {item!r}: {_unknown(prefix, p, list(section.model_fields), section)}")
        tp = section.model_fields[p].annotation
        prefix = f"{prefix}.{p}" if prefix else p
        if i < len(parts) - 1:
            sub = _section(tp)
            is_dict = any(m is dict or get_origin(m) in (dict, Mapping) for m in _members(tp))
            if sub is None and not (is_dict and i == len(parts) - 2):
                raise ConfigError(f"override {item!r}: '{prefix}' is a {_type_name(tp)}, not a section: "
                                  f"cannot set '{'.'.join(parts)}'")
            if sub is None:  # dict field: the value's type is the dict's value type
                vt = [get_args(m)[1] for m in _members(tp) if get_args(m)]
                tp = vt[0] if vt else Any
            section = sub
    try:
        value = _parse(raw, tp)
    except ConfigError as e:
        raise ConfigError(f"override {item!r}: {e}") from None
    nested: Any = value
    for p in reversed(parts):
        nested = {p: nested}
    return _deep_merge(data, nested)


# --------------------------------------------------------------------------- loading and saving
def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = (),
                data: Mapping[str, Any] | None = None) -> T:
    """Defaults of ``cls``, updated by the YAML file ``path`` (or the nested mapping ``data``), then by
    ``key=value`` overrides."""
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise TypeError(f"load_config needs a ConfigModel class, got {cls!r}")
    if isinstance(overrides, str):
        raise TypeError("overrides must be a sequence of 'key=value' strings, not one string")
    if path is not None and data is not None:
        raise TypeError("load_config takes a YAML path or a data mapping, not both")
    data = dict(data or {})
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
            loaded = yaml.safe_load(text)
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:  # one line: where the parser stopped, and why
            mark = getattr(e, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            why = " ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
            raise ConfigError(f"{where}: invalid YAML: {why or ' '.join(str(e).split())}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping of config keys, got {type(loaded).__name__}")
        data = dict(loaded)
        if not overrides:
            return _validate(cls, data, _file_source(path, text))
        _validate(cls, data, _file_source(path, text))  # a mistake in the file is named as the file's
    data = _drop_replaced_options(cls, data, overrides)
    for item in overrides:
        data = _apply_override(cls, data, item)
    if path is not None:  # an error names the override that set its key, else the file's line
        return _validate(cls, data, _combined_source(cls, _file_source(path, text), overrides, _yaml_lines(text)))
    return _validate(cls, data, _override_source(overrides) if overrides else "")


def config_to_dict(cfg: BaseModel) -> dict[str, Any]:
    """``cfg`` as nested plain dicts/lists/scalars, ready for YAML or JSON."""
    if not isinstance(cfg, BaseModel):
        raise TypeError(f"config_to_dict needs a config instance, got {cfg!r}")
    return cfg.model_dump(mode="json")


def config_yaml(cfg: BaseModel) -> str:
    """``cfg`` as the YAML text :func:`save_config` writes."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, allow_unicode=True)


def save_config(cfg: BaseModel, path: str | Path) -> None:
    """Write ``cfg`` as YAML that ``load_config(type(cfg), path)`` reads back to an equal object.

    Atomically: a temporary file beside ``path``, fsync'd, renamed over it; a kill or a full disk leaves the
    old file, never a torn one.
    """
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(config_yaml(cfg))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\n", "\\n") + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _describe(cls: type[ConfigModel], prefix: str, rows: list[tuple[str, str, str]]) -> None:
    for name, f in cls.model_fields.items():
        key, tp, doc = f"{prefix}.{name}" if prefix else name, f.annotation, f.description or ""
        section = _section(tp)
        if section is None:
            default = f.get_default(call_default_factory=True)
            rng = value_range(f)
            rows.append((key, f"{_type_name(tp)} = {_show(default if not isinstance(default, BaseModel) else None)}",
                         f"{doc} ({rng})" if rng else doc))
        else:
            if doc:
                rows.append((key, "section", doc))
            _describe(section, key, rows)


def describe_config(cls: type[ConfigModel]) -> str:
    """One line per dotted key of ``cls``: ``key  type = default  doc`` (for ``--help``)."""
    rows: list[tuple[str, str, str]] = []
    _describe(cls, "", rows)
    kw = max((len(k) for k, _, _ in rows), default=0)
    tw = min(max((len(t) for _, t, _ in rows), default=0), 36)
    return "\n".join(f"  {k:<{kw}}  {t:<{tw}}  {d}".rstrip() for k, t, d in rows)

