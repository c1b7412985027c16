"""Components from outside rlvr: plugin modules imported before a config is checked.

A component (task, verifier, environment, estimator, loss, engine, reward source, ...)
registers itself when its module is imported (``@ENVIRONMENTS.register(...)``).  Three ways
get a module imported before the registries are read:

* an entry point in the ``rlvr.plugins`` group of an installed distribution, discovered
  once per process (each entry point names a module to import)::

      [project.entry-points."rlvr.plugins"]
      example = "rlvr_plugin_example"

* ``--import MODULE`` on any ``rlvr`` command (repeatable);
* ``plugins: [MODULE, ...]`` in a run config (imported before the config is validated).

A plugin that fails to import raises :class:`PluginError` naming the plugin (and, for an
entry point, its distribution) and the error.  ``docs/examples/rlvr-plugin-example`` is a
complete plugin package.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "PluginError", "import_plugin", "load_entry_points", "load_plugins",
           "load_config_plugins"]

ENTRY_POINT_GROUP = "rlvr.plugins"

_loaded_entry_points: dict[str, object] | None = None


class PluginError(ImportError):
    """A plugin module that cannot be imported (or that raised while importing)."""


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def import_plugin(module: str) -> ModuleType:
    """Import ``module`` (a dotted module name) for the components it registers; idempotent."""
    if not isinstance(module, str) or not module.strip():
        raise PluginError(f"a plugin is a module name such as my_package.components, got {module!r}")
    name = module.strip()
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise PluginError(f"plugin {name!r}: no module named {e.name!r} (is its package installed, "
                              "or its directory on PYTHONPATH?)") from e
        raise PluginError(f"plugin {name!r} failed to import: {_describe(e)}") from e
    except Exception as e:  # noqa: BLE001 - any error in a plugin's own code is reported with its name
        raise PluginError(f"plugin {name!r} failed to import: {_describe(e)}") from e


def load_entry_points(*, reload: bool = False) -> dict[str, object]:
    """Import every ``rlvr.plugins`` entry point of the installed distributions (once per process).

    Returns ``{entry point name: loaded object}``.  An entry point that fails raises
    :class:`PluginError` naming the entry point, its distribution and the error.
    """
    global _loaded_entry_points
    if _loaded_entry_points is not None and not reload:
        return _loaded_entry_points
    loaded: dict[str, object] = {}
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        origin = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
        try:
            loaded[ep.name] = ep.load()
        except Exception as e:  # noqa: BLE001 - name the plugin and where it comes from
            raise PluginError(f"plugin {ep.name!r} ({ENTRY_POINT_GROUP} entry point {ep.value!r} of the "
                              f"distribution {origin}) failed to import: {_describe(e)}") from e
    _loaded_entry_points = loaded
    return loaded


def load_plugins(modules: Iterable[str] = (), *, entry_points: bool = True) -> list[ModuleType]:
    """The installed ``rlvr.plugins`` entry points (unless ``entry_points=False``), then ``modules`` in order."""
    if isinstance(modules, str):
        modules = [modules]
    if entry_points:
        load_entry_points()
    return [import_plugin(m) for m in modules]


def load_config_plugins(data: Any) -> Any:
    """A config model's ``mode="before"`` validator: the entry points and the modules its raw ``plugins`` list
    names are imported before any field is validated (their component names must be known); an import that
    fails is a ``ValueError`` naming it.  Returns ``data`` unchanged."""
    modules = data.get("plugins") if isinstance(data, dict) else None
    try:
        load_plugins(modules if isinstance(modules, list) and all(isinstance(m, str) for m in modules) else [])
    except PluginError as e:
        raise ValueError(str(e)) from None
    return data
