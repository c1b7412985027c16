"""benchmarks/endpoint_overhead.py runs end to end on the tiny model (--smoke); its numbers are not checked."""

from __future__ import annotations

from conftest import load_benchmark


def test_endpoint_overhead_smoke_runs(capsys):
    out = load_benchmark("endpoint_overhead").main(["--smoke", "--threads", "1"])
    assert out["in_process_tps"] > 0 and out["endpoint_tps"] > 0
    assert out["ratio"] == out["in_process_tps"] / out["endpoint_tps"]
    text = capsys.readouterr().out
    assert "ratio (in-process / endpoint)" in text and "2.0 turns/episode" in text
