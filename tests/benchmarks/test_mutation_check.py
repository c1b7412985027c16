"""benchmarks/mutation_check.py: tests/algorithms/test_reference_equivalence.py catches every formula mutation.

The default suite checks that every mutation still applies to the source (its text occurs once, so a refactor cannot
silently turn it into a no-op) and that three of them are caught by the tests that name them; ``-m slow`` runs all
twenty against the whole file."""

from __future__ import annotations

import pytest

from conftest import load_benchmark

# the mutations the reference file let through before it checked the KL term, the KL penalty in the reward, the
# entropy bonus, clip-higher, the importance weights and Dr. GRPO's normaliser
FORMERLY_SURVIVING = {"kl_sign", "kl_in_reward_sign", "entropy_sign", "clip_high_ignored", "is_weights_ignored",
                      "tis_cap_removed", "drgrpo_normaliser", "kl_aggregation"}


@pytest.fixture(scope="module")
def mc():
    return load_benchmark("mutation_check")


def test_every_mutation_applies_once_to_the_source(mc):
    names = [m.name for m in mc.MUTATIONS]
    assert len(names) == len(set(names)) == 20
    assert FORMERLY_SURVIVING <= set(names)
    assert [m.name for m in mc.MUTATIONS if not mc.applies(m)] == []
    assert all(m.old != m.new for m in mc.MUTATIONS)


def test_a_mutated_copy_changes_only_its_text(mc, tmp_path):
    m = next(m for m in mc.MUTATIONS if m.name == "kl_sign")
    src = mc.mutated_copy(m, tmp_path)
    text = (src / "rlvr" / m.path).read_text()
    assert m.new in text and m.old not in text
    assert text.replace(m.new, m.old) == (mc.SRC / "rlvr" / m.path).read_text()


@pytest.mark.parametrize("name", ["kl_sign", "clip_high_ignored", "tis_cap_removed"])
def test_a_formerly_surviving_mutation_is_caught(mc, name):
    m = next(m for m in mc.MUTATIONS if m.name == name)
    assert mc.check(m, fast=True) == "caught"


@pytest.mark.slow
def test_every_mutation_is_caught_by_the_reference_file(mc):
    results = {m.name: mc.check(m) for m in mc.MUTATIONS}
    assert {n: r for n, r in results.items() if r != "caught"} == {}
