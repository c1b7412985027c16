"""Help for people: `rlvr <command> --help` fits 100 columns, shows the settings by section and every
registered component of every kind with the first sentence of its doc (whole, without markup);
`--help-all` keeps every key; docs/reference/config.md is generated and current."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import describe_config
from rlvr.cli.help import (MAX_WIDTH, component_kinds, components_overview, config_keys, reference_markdown,
                       settings_overview, settings_reference)
from rlvr.recipes.config import RunConfig
from rlvr.recipes.reward_model import RMConfig
from rlvr.registry import Registry, first_sentence, plain_text

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [[], ["train"], ["eval"], ["config"], ["verify"], ["search"], ["compare"], ["contamination"], ["export"],
            ["rm"], ["rm", "train"]]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--help", "--help-all"])
def test_every_help_line_fits_100_columns(capsys, monkeypatch, flag):
    monkeypatch.setenv("COLUMNS", "300")  # a wide terminal is capped at 100 columns
    for cmd in COMMANDS:
        out = _help(capsys, *cmd, flag)
        long = [line for line in out.splitlines() if len(line) > MAX_WIDTH]
        assert not long, (cmd, long)


def test_generated_help_follows_a_narrow_terminal():
    for text in (settings_overview(RunConfig, 72), settings_reference(RunConfig, 72), components_overview(72),
                 components_overview(72, details=True)):
        assert max(len(line) for line in text.splitlines()) <= 72


def test_train_help_is_short_and_grouped_by_section(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "102")
    out = _help(capsys, "train", "--help")
    from rlvr.cli.help import component_kinds

    kinds = component_kinds()
    head, components = out.split("registered components", 1)
    assert len(head.splitlines()) < 92  # the settings: one line per section (its doc, its keys, a blank line)
    # one line per component (two where its sentence wraps), a few per kind
    assert len(components.splitlines()) <= 2 * sum(len(k.registry) for k in kinds) + 3 * len(kinds)
    settings = out.split("settings (", 1)[1].split("registered components", 1)[0]
    for section in ("model", "task", "rollout", "algorithm", "reward", "env", "train", "eval", "distributed"):
        assert re.search(rf"\n  {section} +\S", settings), section
    assert "keys: group_size, max_new_tokens, temperature, top_p" in settings
    assert "train.steps  int = " not in out  # types and defaults are --help-all's


def _registries_in_rlvr() -> list[Registry]:
    """Every Registry bound to a module-level name anywhere in the imported rlvr package."""
    import rlvr.recipes.rl  # noqa: F401 - imports the packages that hold the registries

    found = {}
    for name, mod in list(sys.modules.items()):
        if name == "rlvr" or name.startswith("rlvr."):
            for value in vars(mod).values():
                if isinstance(value, Registry):
                    found[id(value)] = value
    return list(found.values())


def test_every_registry_of_rlvr_is_a_listed_kind():
    listed = {id(k.registry) for k in component_kinds()}
    registries = _registries_in_rlvr()
    assert len(registries) >= 12
    missing = [r.kind for r in registries if id(r) not in listed]
    assert not missing, f"registries missing from rlvr.cli.help.component_kinds: {missing}"


def test_help_lists_every_registered_component_with_its_first_sentence_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "102")
    out = _help(capsys, "train", "--help")
    flat = " ".join(out.split())
    for title in ("environments", "rollout engines", "reward sources", "verifiers", "tasks", "advantage estimators"):
        assert f"\n  {title}: " in out
    for kind in component_kinds():
        assert kind.registry.names(), kind.title
        for name in kind.registry.names():
            summary = kind.registry.entry(name).summary()
            assert re.search(rf"\n    {re.escape(name)}( |\n)", out), (kind.title, name)
            assert f"{name} {summary}" in flat, (kind.title, name, summary)
    for markup in ("``", ":func:", ":class:", ":mod:", "::"):
        assert markup not in out


def test_help_all_lists_every_config_key_and_component_options(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "102")
    out = _help(capsys, "train", "--help-all")
    keys = config_keys(RunConfig)
    assert len(keys) > 100  # every section's keys, not only the top level
    for key in keys:
        assert re.search(rf"\n  {re.escape(key)}  \S", out), key
    assert "options: clip_low, clip_high, dual_clip" in " ".join(out.split())  # ppo_clip's options
    rm = _help(capsys, "rm", "train", "--help-all")
    for key in config_keys(RMConfig):
        assert re.search(rf"\n  {re.escape(key)}  \S", rm), key
    assert len(describe_config(RunConfig).splitlines()) >= len(keys)  # the library's one-line dump is kept


def test_first_sentence_keeps_sentences_whole_and_drops_markup():
    assert first_sentence("Dr. GRPO advantages, ``r - mean`` per group (Liu et al. 2025, *Understanding\n"
                          "R1-Zero-Like Training*). More text.") == \
        "Dr. GRPO advantages, r - mean per group (Liu et al. 2025, Understanding R1-Zero-Like Training)."
    assert first_sentence("PPO from a value head; see :func:`rlvr.algorithms.gae.ppo_gae_advantages`.\n\nMore.") == \
        "PPO from a value head; see rlvr.algorithms.gae.ppo_gae_advantages."
    assert first_sentence('A :class:`~rlvr.engines.HFEngine` ("Fast. Really.") e.g. here. Then') == \
        'A HFEngine ("Fast. Really.") e.g. here.'
    assert first_sentence("Weighted REINFORCE (Zhu et al. 2025): ``L = lam * L_PSR + L_NSR``, i.e.::\n\n"
                          "    A_i = lam") == "Weighted REINFORCE (Zhu et al. 2025): L = lam * L_PSR + L_NSR."
    assert first_sentence("Dual-clip PPO (Ye et al. 2020, Eq. 5)::\n\n    x") == "Dual-clip PPO (Ye et al. 2020, Eq. 5)."
    assert first_sentence("no full stop at all") == "no full stop at all"
    assert plain_text("**bold** and *it* and [a link](https://example.org) and `x`_") == "bold and it and a link and x"
    assert plain_text("2 * 3 * 4 stays") == "2 * 3 * 4 stays"


def test_registry_doc_is_the_first_paragraph_not_the_first_line():
    reg: Registry = Registry("widget")

    @reg.register("w")
    def w(scale: float = 1.0):
        """A widget that is described over
        two lines (Someone et al. 2024).

        Details."""

    assert reg.entry("w").doc == "A widget that is described over two lines (Someone et al. 2024)."
    assert reg.entry("w").summary() == "A widget that is described over two lines (Someone et al. 2024)."


def test_the_reference_page_is_current():
    page = ROOT / "docs" / "reference" / "config.md"
    assert page.read_text(encoding="utf-8") == reference_markdown(), \
        "docs/reference/config.md is stale: run `python -m rlvr.cli.help docs/reference/config.md`"
    for key in config_keys(RunConfig):
        assert f"| `{key}` |" in page.read_text(encoding="utf-8")


def test_eval_flags_that_stand_for_config_keys_take_the_keys_type_range_default_and_doc(capsys, monkeypatch):
    """`rlvr eval --n` and the other flags of rlvr.cli.eval.EVAL_CONFIG_FLAGS are generated from the config field they
    override: the help shows its doc and current default, and a value outside its range is refused naming the
    flag before any model loads."""
    from rlvr.cli.eval import EVAL_CONFIG_FLAGS
    from rlvr.config import value_range
    from rlvr.cli.help import config_field

    monkeypatch.setenv("COLUMNS", "102")
    flat = " ".join(_help(capsys, "eval", "--help").split())
    assert {"--n", "--temperature", "--max-new-tokens", "--seed", "--model"} <= set(EVAL_CONFIG_FLAGS)
    for flag, (key, _) in EVAL_CONFIG_FLAGS.items():
        f = config_field(RunConfig, key)
        assert f"default {key} = {f.get_default(call_default_factory=True)})" in flat, flag
        assert plain_text(f.description).split(" (")[0] in flat, flag
    # a changed default or range is what the flag shows and enforces
    monkeypatch.setattr(config_field(RunConfig, "eval.n"), "default", 3)
    assert "default eval.n = 3)" in " ".join(_help(capsys, "eval", "--help").split())
    for flag in ("--n", "--max-new-tokens", "--temperature", "--threads"):
        f = config_field(RunConfig, EVAL_CONFIG_FLAGS[flag][0])
        low = next(getattr(m, b) for m in f.metadata for b in ("ge", "gt") if getattr(m, b, None) is not None)
        assert main(["eval", "--model", "/nonexistent/model", flag, str(low - 1)]) == 2
        assert f"{flag}: must be {value_range(f)}, got {low - 1}" in capsys.readouterr().err
