"""benchmarks/fault_injection.py: one scenario in the default suite (the script keeps working), all in the slow set."""

from __future__ import annotations

import pytest

from conftest import load_benchmark


def test_one_scenario_runs_and_passes(capsys):
    fi = load_benchmark("fault_injection")
    assert fi.main(["--only", "overwrite"]) == 0
    out = capsys.readouterr().out
    assert "| overwrite | a rerun without --resume into a finished run's directory |" in out and "| yes |" in out


def test_unknown_scenarios_are_refused():
    fi = load_benchmark("fault_injection")
    with pytest.raises(SystemExit):
        fi.main(["--only", "meteor"])


@pytest.mark.slow
def test_every_scenario_passes(capsys):
    fi = load_benchmark("fault_injection")
    assert fi.main(["--kills", "3"]) == 0, capsys.readouterr().out[-3000:]
