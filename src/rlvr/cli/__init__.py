"""The ``rlvr`` command line: a thin layer that parses arguments and calls the library (no training logic).

One module per command (verb): ``rlvr.cli.train``, ``rlvr.cli.eval``, ... each holds its parser beside its
handler and exposes two functions:

* ``add_parser(sub) -> None`` adds the command to ``sub``, the ``rlvr`` parser's sub-parsers
  (``sub.add_parser(NAME, help=..., description=...)``; ``epilog_fn=`` builds a long epilog only when help is
  printed), gives it ``add_common(p)`` (``--help-all``, ``--import``) and sets ``p.set_defaults(func=run)``
  (a command with actions, like ``rlvr rm train``, sets it on the action's parser);
* ``run(ns) -> int`` does the command with the parsed arguments and returns the exit status.

A command is registered by its module name in :data:`VERBS`, in the order ``rlvr --help`` lists the commands;
:func:`build_parser` imports each one, so a command module imports only the standard library and
``rlvr.cli._common`` at its top (the library it calls is imported inside ``run``) and ``rlvr --help`` stays fast.
Adding a command is one module here plus its name in :data:`VERBS` (and a line in :data:`DESCRIPTION`, the
summary ``rlvr --help`` prints).

Shared pieces are in ``rlvr.cli._common``: the parser classes, ``add_common``, ``add_config_args`` (the
``[CONFIG.yaml] [key=value ...]`` arguments) and ``load`` (the run config they give), ``add_config_flag`` (a
config key as a flag), ``error`` (the ``rlvr: error: ...`` lines). The help text read from the config models and
the registries is :mod:`rlvr.cli.help`; neither imports a command (an import-linter contract).

Errors (docs/cli.md): ``run`` raises ``ConfigError``, ``DatasetError``, ``RegistryError``, ... for bad input
(:func:`main` prints ``rlvr: error: ...`` and exits 2) or a ``ComponentError`` / ``OSError`` while running (1);
Ctrl-C exits 130. A command may also print its own ``rlvr: error: ...`` lines and return 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from rlvr.cli._common import Parser, add_common, error, plugin_modules

__all__ = ["VERBS", "DESCRIPTION", "build_parser", "main"]

VERBS = ("train", "sft", "rft", "pipeline", "seeds", "eval", "config", "verify", "search", "compare", "contamination", "export", "rm", "serve")
"""The commands, by module name under ``rlvr.cli``, in the order ``rlvr --help`` lists them."""

DESCRIPTION = """``rlvr`` command line: a thin layer that parses config and calls the library.

    rlvr train [CONFIG.yaml] [key=value ...]    RL training (+ held-out eval before/after)
    rlvr train CONFIG.yaml --seeds 0-4 [...]     one run per seed, then seeds.json/.md/.png
    rlvr seeds summarize DIR                     rebuild that summary from the seed-<s> runs
    rlvr sft [CONFIG.yaml] [key=value ...]      supervised fine-tuning (loss on completions only)
    rlvr rft [CONFIG.yaml] [key=value ...]      rejection-sampling fine-tuning rounds
    rlvr pipeline PIPELINE.yaml [--resume]       stages in one config: sft -> rl, rl -> distill, ...
    rlvr eval  [CONFIG.yaml] [key=value ...]    accuracy of a model or checkpoint on a task
    rlvr config [CONFIG.yaml] [key=value ...]   print the resolved config as YAML
    rlvr verify INPUT.jsonl [--verifier math]    score completions against references
    rlvr search SAMPLES.jsonl [--scorer oracle]  test-time strategies + budget sweep over samples
    rlvr compare A B [...]                       does B beat A beyond noise (seed sweeps, results)
    rlvr contamination TRAIN EVAL                n-gram overlap of a training task and an eval set
    rlvr export CHECKPOINT OUT [--gguf]          a checkpoint as a plain HF model dir (LoRA merged)
    rlvr rm train [CONFIG.yaml] [key=value ...]  an outcome / process reward model on own samples
    rlvr serve MODEL [--port 8000]               an OpenAI-compatible chat endpoint for a model

Every config key can be overridden with a dotted ``key=value``: ``rlvr train --help``
lists the settings by section and every registered component, ``--help-all`` every key
with its type, default and doc. ``--import MODULE`` (any command) imports a plugin
first; installed ``rlvr.plugins`` entry points are imported at start-up.

Every command reports a problem as ``rlvr: error: ...`` on stderr (one line per line of the message) and
exits with 2 for bad input (usage, config, data: nothing ran, or it stopped before producing anything),
1 for a failure while running, 130 when interrupted (Ctrl-C), 0 otherwise (docs/cli.md).
"""
"""What ``rlvr --help`` prints above the commands."""


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr`` parser: one sub-parser per command of :data:`VERBS` (each added by its ``add_parser``)."""
    parser = Parser(prog="rlvr", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    add_common(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for verb in VERBS:
        importlib.import_module(f"{__name__}.{verb}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``rlvr`` command ``argv`` (default ``sys.argv[1:]``); return its exit status (docs/cli.md)."""
    from rlvr.config import ConfigError
    from rlvr.learner.checkpoint import CheckpointError, NonFiniteWeightsError
    from rlvr.learner.guards import TrainingDiverged
    from rlvr.models import ModelNotFoundError
    from rlvr.plugins import PluginError, load_plugins
    from rlvr.recipes.rundir import RunDirectoryError
    from rlvr.registry import RegistryError
    from rlvr.tasks.jsonl import DatasetError
    from rlvr.types import ComponentError

    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # before the parser exists: --help lists the components plugins register
        load_plugins(plugin_modules(argv))
    except PluginError as e:
        error(e)
        return 2
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    if extra:  # key=value overrides after a flag (`rlvr train cfg.yaml --resume train.steps=5`) still count
        if hasattr(ns, "args") and all("=" in a and not a.startswith("-") for a in extra):
            ns.args = list(ns.args or []) + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO if ns.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return ns.func(ns)
    except (ConfigError, ModelNotFoundError, DatasetError, RegistryError, RunDirectoryError) as e:  # nothing ran
        error(e)
        return 2
    except (ComponentError, TrainingDiverged, NonFiniteWeightsError, CheckpointError) as e:  # a broken component,
        error(e)  # a diverged run, a damaged checkpoint
        return 1
    except OSError as e:  # a file that failed while running: a full disk, a directory made unwritable meanwhile
        error(e)
        return 1
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (loading, evaluating), or a second one
        print("\nrlvr: interrupted", file=sys.stderr)
        return 130
