"""What the commands share: the parser classes (help at most 100 columns, epilogs built only when help is
printed, ``--help-all``), the options every command has, ``[CONFIG.yaml] [key=value ...]`` arguments and the run
config they load, config keys as flags, and the ``rlvr: error: ...`` line.

Imports no command module (an import-linter contract): each ``rlvr.cli.<verb>`` imports what it needs from here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help at most :func:`rlvr.cli.help.help_width` columns wide: a description paragraph with a longer
    line is re-wrapped (indented paragraphs, such as example commands, are kept as written)."""

    def __init__(self, prog: str, **kwargs):
        from rlvr.cli.help import help_width

        super().__init__(prog, width=help_width(), max_help_position=32, **kwargs)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import re
        import textwrap

        out = []
        for para in re.split(r"\n\s*\n", text.strip("\n")):
            lines = para.splitlines()
            if lines and not lines[0].startswith(" ") and max(map(len, lines)) + len(indent) > width:
                para = textwrap.fill(" ".join(para.split()), width, initial_indent=indent, subsequent_indent=indent,
                                     break_on_hyphens=False)
            else:
                para = "\n".join(indent + line if line else line for line in lines)
            out.append(para)
        return "\n\n".join(out)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog is built only when help is printed (it imports every registry):
    ``epilog_fn()`` for ``--help``, ``full_epilog_fn()`` for ``--help-all``."""

    def __init__(self, *args, epilog_fn=None, full_epilog_fn=None, **kwargs):
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)
        self.epilog_fn, self.full_epilog_fn = epilog_fn, full_epilog_fn

    def format_help(self) -> str:
        if self.epilog_fn is not None:
            self.epilog = self.epilog_fn()
        return super().format_help()

    def error(self, message: str):
        """A usage mistake: the usage line, then ``rlvr: error: ...`` (naming the command), exit 2."""
        self.print_usage(sys.stderr)
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        self.exit(2, f"rlvr: error: {command + ': ' if command else ''}{message}\n")

    def format_full_help(self) -> str:
        """``--help`` with the full dump (every key's type, default and doc; components with options)."""
        fn = self.full_epilog_fn or self.epilog_fn
        self.epilog = fn() if fn is not None else self.epilog
        return super().format_help()


class HelpAll(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        text = parser.format_full_help() if isinstance(parser, Parser) else parser.format_help()
        parser._print_message(text, sys.stdout)
        parser.exit()


def run_help(full: bool = False) -> str:
    """The epilog of ``rlvr train`` / ``eval`` / ``config``: the settings by section and every registered
    component (``full``: every key's type, default and doc, and the components' options)."""
    from rlvr.cli.help import components_overview, settings_overview, settings_reference
    from rlvr.recipes.config import RunConfig

    settings = settings_reference(RunConfig) if full else settings_overview(RunConfig)
    return settings + "\n\n" + components_overview(details=full)


def plugin_modules(argv: list[str]) -> list[str]:
    """The modules named by ``--import MODULE`` / ``--import=MODULE`` anywhere in ``argv``."""
    out = []
    for i, arg in enumerate(argv):
        if arg == "--import" and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith("--import="):
            out.append(arg.split("=", 1)[1])
    return out


def add_common(p: argparse.ArgumentParser) -> None:
    """``--help-all`` and ``--import`` (every command has both)."""
    p.add_argument("--help-all", action=HelpAll,
                   help="show this help with every config key (type, default, doc) and component options")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first, for the components it registers (repeatable; installed "
                        "rlvr.plugins entry points are imported without it)")


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs="*", metavar="CONFIG.yaml | key=value",
                   help="an optional YAML config file followed by dotted overrides, e.g. train.steps=20")


def config_path(args: list[str]) -> tuple[str | None, list[str]]:
    """``(the YAML file, the key=value overrides)`` of a command's arguments; a missing file is a ConfigError."""
    from rlvr.config import ConfigError

    if args and "=" not in args[0]:
        if not Path(args[0]).is_file():
            raise ConfigError(f"config file not found: {args[0]}")
        return args[0], list(args[1:])
    return None, list(args)


def load(args: list[str]):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    path, overrides = config_path(args)
    return load_config(RunConfig, path, overrides)


def run_fine_tuning(ns, load_config, run) -> int:
    """``rlvr sft`` / ``rlvr rft``: the config of ``ns.args`` with ``--resume`` / ``--overwrite`` as
    ``train.resume`` / ``train.overwrite``, loaded by ``load_config(path, overrides)`` and run by ``run(cfg)``;
    prints the run directory and the final model (an interrupted run returns its exit code)."""
    from rlvr.recipes.rl import TrainingInterrupted

    path, overrides = config_path(list(ns.args))
    if ns.resume:
        overrides.append("train.resume=true")
    if ns.overwrite:
        overrides.append("train.overwrite=true")
    cfg = load_config(path, overrides)
    try:
        summary = run(cfg)
    except TrainingInterrupted as e:
        return e.exit_code
    print(f"run directory: {summary['output_dir']}")
    print(f"final model: {summary['final_model']}")
    return 0


def dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_config_flag(group, flag: str, key: str, note: str) -> None:
    """``flag`` for the config ``key``: its type (int, float or str), and its doc and default as the help."""
    import typing

    from rlvr.cli.help import config_field
    from rlvr.recipes.config import RunConfig
    from rlvr.registry import plain_text

    f = config_field(RunConfig, key)
    kinds = [t for t in (typing.get_args(f.annotation) or (f.annotation,)) if t is not type(None)]
    kind = kinds[0] if len(kinds) == 1 and kinds[0] in (int, float, str) else str
    doc = plain_text(f.description or "")
    default = f.get_default(call_default_factory=True)
    group.add_argument(flag, type=kind, dest=dest(flag),
                       help=f"{doc}{'; ' + note if note else ''} (default {key} = {default})")


def in_range(f, value) -> bool:
    """``value`` within the numeric bounds (ge, gt, le, lt) of the config field ``f``."""
    import operator

    checks = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
    return all(check(value, getattr(m, bound)) for m in f.metadata for bound, check in checks.items()
               if getattr(m, bound, None) is not None)


def csv_list(text: str | None, kind=str, what: str = "value") -> list | None:
    if not text:
        return None
    from rlvr.config import ConfigError

    try:
        return [kind(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"bad {what} list {text!r}") from None


def error(e: BaseException) -> None:
    """``rlvr: error: ...``, one line per line of the message (a config file reports every bad key)."""
    for line in str(e).splitlines() or [""]:
        print(f"rlvr: error: {line}", file=sys.stderr)
