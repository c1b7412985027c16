"""tests/recorded.py: what counts as equal to a recording on its own platform and on another."""

from __future__ import annotations

import json

import pytest

import recorded


def test_exact_on_the_recording_platform_rounding_elsewhere():
    then = {"rows": [{"loss": 0.5, "learner_seqs": 8, "logprob_mismatch": 4.4e-4}], "weight_sum": 163.621}
    same = json.loads(json.dumps(then))
    assert recorded.differences(same, then, exact=True) == []
    rounded = {"rows": [{"loss": 0.5 * (1 + 3e-7), "learner_seqs": 8, "logprob_mismatch": 4.52e-4}],
               "weight_sum": 163.621 * (1 + 1e-8)}
    assert len(recorded.differences(rounded, then, exact=True)) == 3  # float for float on its own platform
    assert recorded.differences(rounded, then, exact=False) == []  # rounding (and bf16 statistics) elsewhere
    moved = {"rows": [{"loss": 0.5 * 1.001, "learner_seqs": 8, "logprob_mismatch": 4.4e-4}], "weight_sum": 163.621}
    assert recorded.differences(moved, then, exact=False) == [".rows[0].loss: 0.5005, recorded 0.5"]
    other_samples = {"rows": [{"loss": 0.5, "learner_seqs": 7, "logprob_mismatch": 4.4e-4}], "weight_sum": 163.621}
    assert recorded.differences(other_samples, then, exact=False) == [".rows[0].learner_seqs: 7, recorded 8"]
    assert recorded.differences({"rows": [], "weight_sum": 1.0}, then, exact=False)[0] == \
        ".rows: 0 items, recorded 1"
    assert sorted(recorded.differences({"x": 1}, {"y": 1}, exact=True)) == [".x: only in the run",
                                                                            ".y: only in the recording"]
    assert recorded.differences(1, 1.0, exact=True) == [": 1, recorded 1.0"]  # an int is not a float


def test_this_platform_reads_its_own_recording_else_the_first(tmp_path, monkeypatch):
    path = tmp_path / "fixture.json"
    monkeypatch.setattr(recorded, "platform_key", lambda: "x86_64 TestVendor avx2 torch 9")
    assert recorded.record(path, {"a": 1.0}) == "x86_64 TestVendor avx2 torch 9"
    assert recorded.load(path) == ({"a": 1.0}, "x86_64 TestVendor avx2 torch 9", True)
    monkeypatch.setattr(recorded, "platform_key", lambda: "aarch64 Other - torch 9")
    assert recorded.load(path) == ({"a": 1.0}, "x86_64 TestVendor avx2 torch 9", False)
    recorded.assert_matches({"a": 1.0 + 1e-9}, path)  # another platform: within rounding
    with pytest.raises(AssertionError, match="within rounding: recorded on x86_64 TestVendor"):
        recorded.assert_matches({"a": 1.1}, path)
    recorded.record(path, {"a": 2.0})  # a second platform's recording is added, the first kept
    assert set(json.loads(path.read_text())["recordings"]) == {"x86_64 TestVendor avx2 torch 9", "aarch64 Other - torch 9"}
    with pytest.raises(AssertionError, match="exact"):
        recorded.assert_matches({"a": 2.0 + 1e-9}, path)


def test_platform_key_names_the_kernel_choices():
    key = recorded.platform_key()
    machine, vendor, isa, torch_word, version = key.split(" ")
    assert torch_word == "torch" and machine and vendor and isa
