"""Typed configuration on plain dataclasses: a YAML file plus dotted ``key=value`` overrides.

A config is a (possibly nested) dataclass whose every field has a default; declare
fields with :func:`option` to give each a one-line doc (shown by :func:`describe_config`)::

    @dataclass
    class TrainConfig:
        steps: int = option(100, "number of optimizer steps")

    @dataclass
    class RunConfig:
        train: TrainConfig = field(default_factory=TrainConfig)

    cfg = load_config(RunConfig, "run.yaml", ["train.steps=10"])   # defaults < file < overrides

Values are checked against the annotations (``typing.get_type_hints``, so postponed
annotations work): int, float (ints are converted, bools never count as numbers), bool,
str, Path, ``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, ``Literal``
and nested dataclasses (a mapping; keys it leaves out keep their values). Override
values are read as YAML (``0.28``, ``[1,2]``, ``true``, ``null``) except that str and
Path fields take the raw text (``model.name=1e5`` stays "1e5"; for ``str | None`` only
``null``/``~`` mean None). Float fields also take ``1e-5``, which PyYAML reads as a
string; a list that is not valid YAML (``[+,-,*]``: ``*`` is an alias) is split on commas.

Mistakes raise :class:`ConfigError` naming the file or override, the dotted key and the
expected type, with a "did you mean" for misspelt keys. Every section's ``validate()``
method, if it has one, runs last (innermost first). :func:`save_config` writes YAML that
``load_config`` reads back to an equal object.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

__all__ = ["ConfigError", "option", "load_config", "config_to_dict", "save_config", "describe_config"]

T = TypeVar("T")
_NULLS = ("null", "Null", "NULL", "~")
_NUMBER = re.compile(r"[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


class ConfigError(ValueError):
    """A config file or override that does not fit the config's types."""


class _Raw(str):
    """Unparsed text from a ``key=value`` override (parsed once the target type is known)."""


def option(default: Any, help: str = "", *, default_factory: Callable[[], Any] | None = None) -> Any:
    """``dataclasses.field`` with a one-line doc: ``steps: int = option(100, "optimizer steps")``.

    With ``default_factory`` pass ``None`` as ``default``; a list/dict/set/dataclass
    default is copied for each instance.
    """
    meta = {"help": help}
    if default_factory is not None:
        if default is not None:
            raise TypeError("option(): give a default or a default_factory, not both")
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if isinstance(default, (list, dict, set)) or dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception as e:  # NameError for an unresolvable forward reference, mostly
        raise ConfigError(f"cannot resolve the type annotations of {cls.__name__}: {e}") from None


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def _is_class(tp: Any) -> bool:
    return isinstance(tp, type) and get_origin(tp) is None  # list[int] passes isinstance(.., type)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _section_type(tp: Any) -> type | None:
    """The dataclass inside ``tp`` (``Sub`` or ``Sub | None``), if any."""
    if _is_union(tp):
        subs = [a for a in get_args(tp) if a is not type(None)]
        return _section_type(subs[0]) if len(subs) == 1 else None
    return tp if _is_class(tp) and dataclasses.is_dataclass(tp) else None


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


def _wants_raw(tp: Any, raw: str) -> bool:
    """Whether override text for ``tp`` is used verbatim instead of being parsed as YAML."""
    if tp is str or (_is_class(tp) and issubclass(tp, PurePath)):
        return True
    if get_origin(tp) is Literal:
        return raw in get_args(tp)
    if _is_union(tp):
        if type(None) in get_args(tp) and raw.strip() in _NULLS:
            return False
        return all(_wants_raw(a, raw) for a in get_args(tp) if a is not type(None))
    return False


def _parse_cli(raw: _Raw, tp: Any) -> Any:
    if _wants_raw(tp, raw):
        return str(raw)
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        text = raw.strip()
        if text.startswith("[") and text.endswith("]"):  # e.g. [+,-,*]: plain comma-separated items
            return [_Raw(item.strip()) for item in text[1:-1].split(",") if item.strip()]
        raise ConfigError(f"cannot parse {str(raw)!r} as YAML: {' '.join(str(e).split())}") from None


def _mismatch(key: str, expected: str, value: Any, hint: str = "") -> ConfigError:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return ConfigError(f"{key}: expected {expected}, got {type(value).__name__} {shown}{hint}")


def _coerce(value: Any, tp: Any, key: str, current: Any = None) -> Any:
    """``value`` checked against (and converted to) annotation ``tp``; ``key`` names it in errors."""
    if isinstance(value, _Raw):
        value = _parse_cli(value, tp)
    origin, args = get_origin(tp), get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:  # X | None: X's own, more precise, error
            return _coerce(value, members[0], key, current)
        for m in members:
            try:
                return _coerce(value, m, key, current)
            except ConfigError:
                pass
        raise _mismatch(key, _type_name(tp), value)
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise _mismatch(key, "one of " + ", ".join(repr(a) for a in args), value)
    if (section := _section_type(tp)) is not None:
        if isinstance(value, section):
            return value
        if not isinstance(value, Mapping):
            raise _mismatch(key, f"a mapping for section {section.__name__}", value)
        return _merge(current if isinstance(current, section) else _instantiate(section, key), value, key)
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            raise _mismatch(key, _type_name(tp), value, " (write a list as [a, b])" if isinstance(value, str) else "")
        if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[int, str]: fixed length
            if len(value) != len(args):
                raise _mismatch(key, f"{_type_name(tp)} ({len(args)} items)", value)
            return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        items = [_coerce(v, args[0] if args else Any, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin or tp) is tuple else items
    if tp is dict or origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise _mismatch(key, _type_name(tp), value)
        ktp, vtp = args or (Any, Any)
        return {_coerce(k, ktp, f"{key} (a key)"): _coerce(v, vtp, _join(key, str(k))) for k, v in value.items()}
    if tp is float and isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)  # PyYAML reads 1e-5 (no dot) as a string
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if _is_class(tp) and issubclass(tp, PurePath) and isinstance(value, (str, PurePath)):
        return tp(value)
    if tp is Any or not _is_class(origin or tp):
        return value  # an annotation this module does not check (TypeVar, Callable, ...)
    if isinstance(value, origin or tp) and not (isinstance(value, bool) and tp in (int, float)):
        return value
    raise _mismatch(key, _type_name(tp), value)


def _instantiate(cls: type, key: str) -> Any:
    try:
        return cls()
    except TypeError as e:
        raise ConfigError(f"{key or cls.__name__}: {cls.__name__} cannot be built from defaults ({e}); "
                          "every config field needs a default") from None
    except ValueError as e:
        raise ConfigError(f"{key or cls.__name__}: {e}") from None


def _rebuild(obj: Any, changes: dict[str, Any], prefix: str) -> Any:
    if not changes:
        return obj
    try:
        return dataclasses.replace(obj, **changes)
    except (TypeError, ValueError) as e:  # from a __post_init__ check
        raise ConfigError(f"{prefix or 'config'}: {e}") from None


def _unknown(prefix: str, name: Any, known: Sequence[str]) -> ConfigError:
    where = f"in '{prefix}'" if prefix else "at top level"
    msg = f"unknown config key '{_join(prefix, str(name))}' (known keys {where}: {', '.join(sorted(known))})"
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return ConfigError(msg + (f"; did you mean '{_join(prefix, close[0])}'?" if close else ""))


def _merge(obj: Any, data: Mapping, prefix: str) -> Any:
    """A copy of dataclass ``obj`` with the (nested) values of ``data`` applied."""
    known, hints, changes = _fields(type(obj)), _hints(type(obj)), {}
    for name, value in data.items():
        if name not in known:
            raise _unknown(prefix, name, list(known))
        changes[name] = _coerce(value, hints[name], _join(prefix, name), getattr(obj, name))
    return _rebuild(obj, changes, prefix)


def _override(obj: Any, parts: list[str], raw: str, prefix: str) -> Any:
    """A copy of dataclass ``obj`` with the dotted key ``parts`` set from override text ``raw``."""
    name, rest = parts[0], parts[1:]
    known = _fields(type(obj))
    if name not in known:
        raise _unknown(prefix, name, list(known))
    tp, key, current = _hints(type(obj))[name], _join(prefix, name), getattr(obj, name)
    if not rest:
        value = _coerce(_Raw(raw), tp, key, current)
    elif (section := _section_type(tp)) is not None:
        base = current if isinstance(current, section) else _instantiate(section, key)
        value = _override(base, rest, raw, key)
    elif (tp is dict or get_origin(tp) in (dict, Mapping)) and len(rest) == 1:
        vtp = get_args(tp)[1] if get_args(tp) else Any
        value = {**(current or {}), rest[0]: _coerce(_Raw(raw), vtp, _join(key, rest[0]))}
    else:
        raise ConfigError(f"'{key}' is a {_type_name(tp)}, not a section: cannot set '{_join(key, '.'.join(rest))}'")
    return _rebuild(obj, {name: value}, prefix)


def _validate(obj: Any, prefix: str) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            _validate(value, _join(prefix, f.name))
    hook = getattr(obj, "validate", None)
    if callable(hook):
        try:
            hook()
        except ValueError as e:
            where = f"config section '{prefix}'" if prefix else "config"
            raise ConfigError(f"invalid {where}: {e}") from None


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Defaults of dataclass ``cls``, updated by the YAML file ``path`` and then by ``key=value`` overrides."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"load_config needs a dataclass type, got {cls!r}")
    if isinstance(overrides, str):
        raise TypeError("overrides must be a sequence of 'key=value' strings, not one string")
    cfg = _instantiate(cls, "")
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: invalid YAML: {e}") from None
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping of config keys, got {type(data).__name__}")
        try:
            cfg = _merge(cfg, data, "")
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
    for item in overrides:
        key, sep, raw = str(item).partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ConfigError(f"malformed override {item!r}: expected key=value with a dotted key, "
                              "e.g. train.steps=10 or model.name=foo")
        try:
            cfg = _override(cfg, [p.strip() for p in parts], raw, "")
        except ConfigError as e:
            raise ConfigError(f"override {item!r}: {e}") from None
    _validate(cfg, "")
    return cfg


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _fields(type(value))}
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """``cfg`` as nested plain dicts/lists/scalars (Path -> str, tuple -> list), ready for YAML or JSON."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"config_to_dict needs a dataclass instance, got {cfg!r}")
    return _plain(cfg)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write ``cfg`` as YAML that ``load_config(type(cfg), path)`` reads back to an equal object."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")


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


def _describe(obj: Any, prefix: str, rows: list[tuple[str, str, str]]) -> None:
    hints = _hints(type(obj))
    for name, f in _fields(type(obj)).items():
        key, tp, value, doc = _join(prefix, name), hints[name], getattr(obj, name), f.metadata.get("help", "")
        section = _section_type(tp)
        if section is None or value is None:
            rows.append((key, f"{_type_name(tp)} = {_show(_plain(value))}", doc))
        elif doc:
            rows.append((key, "section", doc))
        if section is not None:
            _describe(value if value is not None else _instantiate(section, key), key, rows)


def describe_config(cls: type) -> str:
    """One line per dotted key of dataclass ``cls``: ``key  type = default  doc`` (for ``--help``)."""
    rows: list[tuple[str, str, str]] = []
    _describe(_instantiate(cls, ""), "", rows)
    kw = max((len(k) for k, _, _ in rows), default=0)
    tw = min(max((len(t) for _, t, _ in rows), default=0), 36)
    return "\n".join(f"  {k:<{kw}}  {t:<{tw}}  {d}".rstrip() for k, t, d in rows)
