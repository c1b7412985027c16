"""Where problems come from: JSON-lines files, the bundled benchmarks, HF datasets, generated arithmetic.

Every source returns a list of :class:`rlvr.types.Problem`.
"""

from rlvr.tasks.arithmetic import (
    DEFAULT_TEMPLATE,
    ArithmeticSpec,
    arithmetic_split,
    evaluate_expression,
    format_expression,
    make_arithmetic_problem,
)
from rlvr.tasks.benchmarks import (
    BENCHMARKS,
    data_file,
    find_data_dir,
    load_aime24,
    load_amc23,
    load_benchmark,
    load_gsm8k,
    load_humaneval_problems,
    load_math500,
)
from rlvr.tasks.hf_dataset import load_hf_dataset_problems
from rlvr.tasks.jsonl import DatasetError, load_jsonl_problems, read_jsonl, write_jsonl

__all__ = [
    "DatasetError",
    "read_jsonl",
    "write_jsonl",
    "load_jsonl_problems",
    "load_hf_dataset_problems",
    "BENCHMARKS",
    "find_data_dir",
    "data_file",
    "load_gsm8k",
    "load_math500",
    "load_aime24",
    "load_amc23",
    "load_benchmark",
    "load_humaneval_problems",
    "DEFAULT_TEMPLATE",
    "ArithmeticSpec",
    "evaluate_expression",
    "format_expression",
    "make_arithmetic_problem",
    "arithmetic_split",
]
