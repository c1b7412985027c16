"""``rlvr config``: print the resolved config as YAML."""

from __future__ import annotations

from rlvr.cli._common import add_common, add_config_args, load, run_help


def run(ns) -> int:
    import yaml

    from rlvr.config import config_to_dict

    print(yaml.safe_dump(config_to_dict(load(list(ns.args))), sort_keys=False), end="")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("config", help="print the resolved config", description="Print the resolved config as YAML "
                       "(defaults < the YAML file < the key=value overrides).",
                       epilog_fn=run_help, full_epilog_fn=lambda: run_help(True))
    add_config_args(p)
    add_common(p)
    p.set_defaults(func=run)
