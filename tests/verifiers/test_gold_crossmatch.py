"""The gold cross-match (``benchmarks/gold_crossmatch.py``): every shipped gold against every
other, rlvr's ``math`` verifier against math-verify; every disagreement is listed in
``tests/verifiers/data/gold_crossmatch_disagreements.tsv`` and every pair both call equal
in ``gold_crossmatch_agreed_equal.tsv``, each with a judgement.

The default suite re-checks every listed pair and a deterministic subset (AIME 2024 and
AMC 2023 in full, the first MATH-500 golds); the full run is ``slow``."""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify")

from conftest import load_benchmark  # noqa: E402

MATH500_PREFIX = 24  # distinct MATH-500 golds in the default-suite subset


@pytest.fixture(scope="module")
def cm():
    return load_benchmark("gold_crossmatch")


@pytest.fixture(scope="module")
def listed(cm):
    assert cm.DISAGREEMENTS.exists() and cm.AGREED.exists(), "the committed cross-match tables are missing"
    return cm.read_disagreements(cm.DISAGREEMENTS) + cm.read_disagreements(cm.AGREED)


def test_every_row_has_a_judgement(cm, listed):
    for path in (cm.DISAGREEMENTS, cm.AGREED):
        for row in cm.read_disagreements(path):
            assert set(row) == set(cm.COLUMNS), row
            assert row["dataset"] in cm.DATASETS, row
            if path == cm.DISAGREEMENTS:
                assert row["rlvr"] != row["math_verify"] and row["right"] in ("rlvr", "math-verify", "neither"), row
            else:
                assert row["rlvr"] == row["math_verify"] == "1" and row["right"] in ("both", "neither"), row
            assert row["judgement"] != "TODO" and len(row["judgement"]) > 20, row
            assert row["response_gold"] != row["reference_gold"], row
    assert len({cm.key(r) for r in listed}) == len(listed)


def test_rlvr_is_right_wherever_the_judgement_says_so(cm, listed):
    """No row judges rlvr's current verdict wrong (a known rlvr error would be a failing test)."""
    wrong = [cm.key(r) for r in listed if r["right"] == "math-verify" or (r["right"] == "neither" and r["rlvr"] == "1")]
    assert wrong == []


def test_listed_verdicts_are_current(cm, listed):
    """Both verifiers still give the listed verdicts on every listed pair."""
    from rlvr.verifiers import get_verifier

    verify = get_verifier("math")
    stale = []
    for row in listed:
        a, b = cm.prepare([row["response_gold"], row["reference_gold"]])
        now = (str(int(verify(f"\\boxed{{{a.text}}}", b.text).correct)), str(int(cm.mv_verdict(b, a))))
        if now != (row["rlvr"], row["math_verify"]):
            stale.append((cm.key(row), now))
    assert stale == []


def _check_subset(cm, listed, dataset: str, golds: list[str], **kw) -> None:
    res = cm.crossmatch(dataset, golds, **kw)
    assert res.self_fail_rlvr == [], res.self_fail_rlvr  # every gold matches itself
    assert res.validation_equal == []  # no skipped pair is equal for either verifier
    mv_equal = set(res.mv_equal)
    found = {cm.key(d): (str(int(d[3])), str(int(d[4]))) for d in res.disagreements}
    found.update({(dataset, a, b): ("1", "1") for a, b in res.rlvr_equal if (a, b) in mv_equal})
    expected = {cm.key(r): (r["rlvr"], r["math_verify"]) for r in listed
                if r["dataset"] == dataset and r["response_gold"] in golds and r["reference_gold"] in golds}
    assert found == expected


def test_crossmatch_of_aime_and_amc_is_listed(cm, listed):
    for dataset in ("aime24", "amc23"):
        _check_subset(cm, listed, dataset, cm.unique_golds(dataset))


def test_crossmatch_of_a_math500_prefix_is_listed(cm, listed):
    _check_subset(cm, listed, "math500", cm.unique_golds("math500", MATH500_PREFIX), validate=40)


def test_fingerprints_bucket_soundly(cm):
    """The pairs the script skips are different values; the ones it keeps may be equal."""
    gs = cm.prepare(["\\frac{1}{2}", "0.5", "3", "\\sqrt{2}", "x^2+1", "(x+1)^2 - 2x", "y^2+1", "(1,2)", "\\text{east}"])
    fp = {g.text: g.fp_mv for g in gs}
    assert not cm.clearly_different(fp["\\frac{1}{2}"], fp["0.5"])
    assert cm.clearly_different(fp["3"], fp["\\sqrt{2}"])
    assert not cm.clearly_different(fp["x^2+1"], fp["(x+1)^2 - 2x"])
    assert cm.clearly_different(fp["x^2+1"], fp["y^2+1"])
    assert cm.clearly_different(fp["3"], fp["x^2+1"])
    assert not cm.clearly_different(fp["(1,2)"], fp["3"])  # tuples are never skipped


@pytest.mark.slow
def test_full_crossmatch_matches_the_committed_files(cm, listed):
    """Every dataset, every pair (about an hour on one loaded core, most of it math-verify)."""
    for dataset in cm.DATASETS:
        _check_subset(cm, listed, dataset, cm.unique_golds(dataset), validate=300)
