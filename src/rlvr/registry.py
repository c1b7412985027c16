"""One small generic registry for every kind of pluggable component.

Each entry is a name, the object (a function or a class), a typed parameter model
(a pydantic model: the keyword options the component takes), the extra inputs it
needs from the recipe (``entropy``, ``values``, ``mask``, ...) and a one-line doc.
Config validation, ``--help`` text and CLI choices are read from these entries, so
adding a component is one decorated function or class in one file::

    from pydantic import BaseModel
    from rlvr.algorithms.advantages import ADVANTAGES

    class MyParams(BaseModel, extra="forbid"):
        scale: float = 1.0

    @ADVANTAGES.register("scaled", params=MyParams, doc="GRPO times a constant")
    def scaled_advantages(rewards, group_size, *, scale=1.0): ...

``ADVANTAGES.validate_params("scaled", {"scale": 2}, key="algorithm.advantage_params")``
checks options when a config loads, before any model is built; a bad name or
option raises :class:`RegistryError` naming the key and listing what is accepted.
"""

from __future__ import annotations

import difflib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

__all__ = ["Registry", "Entry", "RegistryError", "NoParams", "params_from_signature", "plain_text", "first_sentence"]

T = TypeVar("T")


class RegistryError(ValueError):
    """An unknown component name, or options a component does not accept."""


class NoParams(BaseModel):
    """A component without options."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered component."""

    name: str
    obj: T
    params: type[BaseModel]
    needs: frozenset[str] = frozenset()
    inputs: frozenset[str] = frozenset()
    doc: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)
    check: Callable[..., None] | None = None
    """Optional ``check(params, **context)`` raising ValueError when the options do not fit the run
    (e.g. pass@k's ``k`` larger than the group); called when a config loads."""

    def options(self) -> list[str]:
        """The option names this component accepts."""
        return list(self.params.model_fields)

    def summary(self) -> str:
        """The first sentence of the doc, whole, as plain text (docstring markup removed)."""
        return first_sentence(self.doc)


def params_from_signature(fn: Callable, skip: int = 0, name: str | None = None,
                          exclude: Iterable[str] = ()) -> type[BaseModel]:
    """A pydantic model of ``fn``'s options: its parameters after the first ``skip``, less ``exclude``.

    Parameters without a default are required options.  Annotations are kept
    where they resolve; ``**kwargs`` lets unknown options through (the component
    forwards them).  Used when a component does not declare its own parameter model.
    """
    sig = inspect.signature(fn)
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # an annotation that does not resolve at run time
        hints = {}
    fields: dict[str, Any] = {}
    exclude = set(exclude)
    extra = "forbid"
    for i, (pname, p) in enumerate(sig.parameters.items()):
        if p.kind is p.VAR_KEYWORD:
            extra = "allow"
        if i < skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or pname in exclude:
            continue
        fields[pname] = (hints.get(pname, Any), ... if p.default is p.empty else p.default)
    model_name = name or f"{getattr(fn, '__name__', 'component')}_params"
    return create_model(model_name, __config__=ConfigDict(extra=extra, arbitrary_types_allowed=True), **fields)


class Registry(Generic[T]):
    """Named components of one kind (``kind`` appears in error messages: "advantage estimator", ...)."""

    def __init__(self, kind: str, skip: int = 0):
        """``kind`` names the components in messages; ``skip``: leading call arguments that are not options."""
        self.kind = kind
        self.skip = skip
        self._entries: dict[str, Entry[T]] = {}

    # ------------------------------------------------------------------ registering
    def register(self, name: str, *, params: type[BaseModel] | None = None, needs: Iterable[str] = (),
                 inputs: Iterable[str] = (), doc: str | None = None, tags: Iterable[str] = (),
                 skip: int | None = None, check: Callable[..., None] | None = None) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``name`` and return it unchanged.

        ``params``: the option model (default: derived from the signature's
        parameters after the registry's ``skip`` leading ones).  ``needs``: extra
        inputs the recipe must supply; ``inputs``: ones it may supply (neither is
        an option).  ``doc``: one line (default: the first line
        of the docstring).  Registering a different object under a taken name is an
        error; re-registering the same one (a module reload) is allowed.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(obj: T) -> T:
            self.add(name, obj, params=params, needs=needs, inputs=inputs, doc=doc, tags=tags, skip=skip, check=check)
            return obj

        return decorator

    def add(self, name: str, obj: T, *, params: type[BaseModel] | None = None, needs: Iterable[str] = (),
            inputs: Iterable[str] = (), doc: str | None = None, tags: Iterable[str] = (),
            skip: int | None = None, check: Callable[..., None] | None = None) -> Entry[T]:
        """Register ``obj`` under ``name`` (the non-decorator form of :meth:`register`)."""
        old = self._entries.get(name)
        if old is not None and _origin(old.obj) != _origin(obj):
            raise ValueError(f"a {self.kind} named {name!r} is already registered ({old.obj!r})")
        needs, inputs = frozenset(needs), frozenset(inputs)
        if params is None:
            skip = self.skip if skip is None else skip
            params = params_from_signature(obj, skip=skip, name=f"{name}_params", exclude=needs | inputs) \
                if callable(obj) else NoParams
        if doc is None:  # the docstring's first paragraph, on one line
            doc = " ".join((inspect.getdoc(obj) or "").strip().split("\n\n")[0].split())
        entry = Entry(name=name, obj=obj, params=params, needs=needs, inputs=inputs, doc=doc, tags=frozenset(tags),
                      check=check)
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register throw-away components clean up with this)."""
        self._entries.pop(name, None)

    # ------------------------------------------------------------------ reading
    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name: str) -> T:
        return self.entry(name).obj

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, name: str, key: str | None = None) -> Entry[T]:
        """The entry of ``name``; an unknown name raises :class:`RegistryError` listing the known ones."""
        try:
            return self._entries[name]
        except KeyError:
            where = f"{key}: " if key else ""
            close = difflib.get_close_matches(str(name), self.names(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else \
                "; one from another package needs --import MODULE (or plugins: [MODULE], or an installed plugin)"
            raise RegistryError(f"{where}unknown {self.kind} {name!r}; registered: "
                                f"{', '.join(self.names()) or 'none'}{hint}") from None

    def get(self, name: str) -> T:
        """The registered object of ``name``."""
        return self.entry(name).obj

    def check(self, name: str, params: dict[str, Any] | None, key: str = "params", **context: Any) -> None:
        """Validate ``params`` and run the entry's ``check`` against the run's ``context`` (e.g. ``group_size``)."""
        entry = self.entry(name, key=key)
        given = self.validate_params(name, params, key=key)
        if entry.check is not None:
            defaults = {n: f.get_default(call_default_factory=True)
                        for n, f in entry.params.model_fields.items() if not f.is_required()}
            try:
                entry.check({**defaults, **given}, **context)  # the check sees every option's value
            except ValueError as e:
                raise RegistryError(f"{key}: {e} (the {self.kind} {name!r})") from None

    def validate_params(self, name: str, params: dict[str, Any] | None, key: str = "params") -> dict[str, Any]:
        """``params`` checked against ``name``'s option model; returns the given ones, coerced (no defaults added,
        so the component's own defaults apply).

        The error names ``key`` (e.g. ``algorithm.advantage_params``), the bad
        option and the accepted ones.
        """
        entry = self.entry(name)
        params = dict(params or {})
        try:
            model = entry.params.model_validate(params)
        except ValidationError as e:
            accepted = ", ".join(entry.options()) or "none"
            problems = []
            for err in e.errors():
                loc = ".".join(str(x) for x in err["loc"])
                msg = "not an option" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append(f"{key}.{loc}: {msg}" if loc else f"{key}: {msg}")
            raise RegistryError(f"{'; '.join(problems)} (the {self.kind} {name!r} accepts: {accepted})") from None
        return {k: getattr(model, k) for k in params}  # coerced values of the options given

    def build(self, name: str, *args: Any, **params: Any) -> Any:
        """Call ``name``'s object with ``params`` validated (a factory or class)."""
        self.validate_params(name, params)
        return self.entry(name).obj(*args, **params)

    def describe(self) -> str:
        """One line per entry: ``name  doc  (options: ...; needs: ...)`` for ``--help``."""
        rows = []
        for n in self.names():
            e = self._entries[n]
            extra = []
            if e.options():
                extra.append("options: " + ", ".join(e.options()))
            if e.needs:
                extra.append("needs: " + ", ".join(sorted(e.needs)))
            rows.append(f"{n}: {e.doc}" + (f" ({'; '.join(extra)})" if extra else ""))
        return "\n".join(rows)


_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :func:`x`, :py:class:`~a.b`
_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`_*")
_EMPHASIS = re.compile(r"(?<![\w*])(\*\*|\*)(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")
_ABBREVIATIONS = ("al.", "e.g.", "i.e.", "cf.", "vs.", "Eq.", "eq.", "Fig.", "Dr.", "approx.", "resp.", "etc.")


def plain_text(text: str) -> str:
    """Docstring text without reStructuredText / Markdown markup, on one line: ``x`` and `x` -> x,
    :func:`a.b` -> a.b (:class:`~a.B` -> B), *x* / **x** -> x, [x](url) -> x, a closing ``::`` -> ``:``."""
    text = " ".join(str(text).split())

    def role(m: re.Match) -> str:
        target = m.group(1).strip()
        return target.rsplit(".", 1)[-1] if m.group(0).split("`", 1)[1].startswith("~") else target

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\2", text)
    return re.sub(r"::(\s|$)", r":\1", text).strip()


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph (plain text, see :func:`plain_text`), whole.

    A sentence ends at ``.``, ``!`` or ``?`` followed by a space and not inside brackets or
    quotes, and not after an abbreviation (``et al.``, ``e.g.``, ...); a closing ``:`` (text
    that introduced a formula or a list) becomes a full stop.
    """
    text = plain_text(re.split(r"\n\s*\n", str(text).strip(), maxsplit=1)[0])
    depth, quoted = 0, False
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == '"':
            quoted = not quoted
        elif ch in ".!?" and depth == 0 and not quoted and (i + 1 == len(text) or text[i + 1] == " "):
            word = text[:i + 1].rsplit(" ", 1)[-1]
            if word in _ABBREVIATIONS or re.fullmatch(r"[A-Z]\.", word):  # an initial: "J. Schulman"
                continue
            text = text[:i + 1]
            break
    text = text.strip()
    if text.endswith(":"):  # "..., i.e.::" then a formula: the sentence before it
        text = re.sub(r",?\s*(i\.e\.|e\.g\.)$", "", text[:-1].rstrip()).rstrip()
        text = text if text.endswith((".", "!", "?")) else text + "."
    return text


def _origin(obj: Any) -> tuple[Any, ...]:
    """Where an object was defined; a reloaded module's object has the same origin."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return (module, qualname) if module and qualname else (id(obj),)
