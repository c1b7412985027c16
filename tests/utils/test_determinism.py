"""``train.deterministic``: the mode holds for the body and the caller's setting comes back, even on error."""

from __future__ import annotations

import pytest
import torch

from rlvr.utils.determinism import deterministic_algorithms


def _mode() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


@pytest.mark.parametrize("mode, inside", [("off", (False, False)), ("warn", (True, True)), ("error", (True, False))])
def test_mode_inside_and_restored_after(mode, inside):
    before = _mode()
    assert before == (False, False)
    with deterministic_algorithms(mode):
        assert _mode() == inside
    assert _mode() == before


def test_restored_when_the_body_raises():
    with pytest.raises(KeyError):
        with deterministic_algorithms("error"):
            raise KeyError("x")
    assert _mode() == (False, False)


def test_a_caller_setting_is_kept():
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with deterministic_algorithms("error"):
            assert _mode() == (True, False)
        assert _mode() == (True, True)
    finally:
        torch.use_deterministic_algorithms(False)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="off, warn or error"):
        with deterministic_algorithms("on"):
            pass
