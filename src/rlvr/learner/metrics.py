"""Per-step metrics: an append-only JSONL file, plus TensorBoard when it is installed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "read_metrics"]


class MetricsLogger:
    """Append one JSON object per step to ``<output_dir>/metrics.jsonl``.

    On resume, rows for steps at or after the resumed step are dropped first, so
    the file never holds a step twice.
    """

    def __init__(self, output_dir: str | Path, resume_from_step: int | None = None, tensorboard: bool = True,
                 name: str = "metrics.jsonl"):
        self.path = Path(output_dir) / name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is None:
            self.path.write_text("")
        elif self.path.exists():
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_from_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

                self._tb = SummaryWriter(str(self.path.parent / "tb"))
            except Exception:  # tensorboard not installed: JSONL only
                self._tb = None

    def log(self, row: dict[str, Any]) -> None:
        clean = {k: (float(v) if hasattr(v, "item") else v) for k, v in row.items()}
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in clean.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self._tb is not None and "step" in clean:
            for k, v in clean.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._tb.add_scalar(k, v, clean["step"])

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a metrics file (a torn last line from a killed run is ignored)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows
