"""The task registry: each task is a function of its typed options returning ``(train, held_out)`` problems.

A task's options are its function's keyword parameters.  The ones every task may take
(``path``, ``num_heldout``, ``seed``: :data:`SHARED_OPTIONS`) are filled from the
``task.*`` fields; the task's own (``num_train``, ``template``, ``prompt_field``, ...)
come from ``task.params`` and are validated when the config loads.  Its tags say what
the config's rules need to know: ``needs_path`` (it reads ``task.path``) and
``user_answers`` (its reference answers come from the user's data, so whether there are
any is known only when it is read).  Adding a task is one decorated function in one file::

    from rlvr.tasks.registry import TASKS

    @TASKS.register("countdown")
    def countdown(num_train: int = 1000, num_heldout: int = 256, seed: int = 0, max_target: int = 100):
        ...
        return train_problems, heldout_problems
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import Field, NonNegativeInt

from rlvr.registry import Registry
from rlvr.tasks.arithmetic import DEFAULT_TEMPLATE, ArithmeticSpec, arithmetic_split, check_template
from rlvr.tasks.benchmarks import load_benchmark, load_gsm8k
from rlvr.tasks.code_functions import CodeFunctionsParams, check_params as _check_code_functions, \
    code_function_problems
from rlvr.tasks.jsonl import load_jsonl_problems
from rlvr.tasks.settings import TaskConfig
from rlvr.types import Problem

__all__ = ["TASKS", "SHARED_OPTIONS", "build_task", "task_options", "held_out_split", "multiply_solution"]

Split = tuple[list[Problem], list[Problem]]
TASKS: Registry[Callable[..., Split]] = Registry("task")
"""Tasks by name: ``fn(**options) -> (train problems, held-out problems)``."""


def held_out_split(problems: list[Problem], num_heldout: int, seed: int) -> Split:
    """The last ``num_heldout`` problems of a seeded shuffle are held out; the rest are for training."""
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    n_held = min(num_heldout, len(problems))
    held = [problems[i] for i in order[len(order) - n_held:]]
    train = [problems[i] for i in order[: len(order) - n_held]]
    return train, held


def _check_arithmetic(params: dict[str, Any], *, num_heldout: int | None = None, **_: Any) -> None:
    """The expression space (large enough for the train and held-out problems) and the template, checked when the
    config loads (the problems are built later)."""
    spec = ArithmeticSpec(num_operands=params["num_operands"], min_value=params["min_value"],
                          max_value=params["max_value"], operators=tuple(params["operators"] or ["+"]))
    check_template(params["template"])
    need = params["num_train"] + (params["num_heldout"] if num_heldout is None else num_heldout)
    if need > spec.num_expressions:
        raise ValueError(f"the arithmetic spec allows only {spec.num_expressions} distinct expressions but num_train "
                         f"+ num_heldout = {need}; widen [min_value, max_value], or add operands or operators")


@TASKS.register("arithmetic", check=_check_arithmetic,
                doc="generated 'What is a + b?' problems, disjoint train/held-out splits; task.params {num_train, "
                    "num_operands, min_value, max_value, operators, template}")
def arithmetic_task(template: str = DEFAULT_TEMPLATE, num_operands: Annotated[int, Field(ge=2)] = 2,
                    min_value: int = 1, max_value: int = 50, operators: list[str] | None = None,
                    num_train: NonNegativeInt = 2000, num_heldout: int = 256, seed: int = 0) -> Split:
    """``template``: the prompt, a format string with ``{expression}``; ``num_operands``: operands per expression;
    ``min_value`` / ``max_value``: the operands' range; ``operators``: drawn from ``+ - *`` (default ``[+]``);
    ``num_train``: training problems (the held-out ones are generated disjoint from them)."""
    spec = ArithmeticSpec(num_operands=num_operands, min_value=min_value, max_value=max_value,
                          operators=tuple(operators or ["+"]))
    return arithmetic_split(spec, num_train, num_heldout, seed=seed, template=template)


@TASKS.register("gsm8k", doc="GSM8K: trains on its train file, holds out its test file (or a file's split)")
def gsm8k_task(path: str | None = None, num_heldout: int = 256, seed: int = 0) -> Split:
    if path is None:  # a real train split exists: never train on test
        return load_gsm8k(split="train"), load_gsm8k(split="test", limit=num_heldout)
    return held_out_split(load_benchmark("gsm8k", path=path), num_heldout, seed)


def _benchmark_task(name: str) -> Callable[..., Split]:
    def task(path: str | None = None, num_heldout: int = 256, seed: int = 0) -> Split:
        return held_out_split(load_benchmark(name, path=path), num_heldout, seed)

    task.__name__ = task.__qualname__ = f"{name}_task"
    return task


for _name in ("math500", "aime24", "amc23", "humaneval"):
    TASKS.add(_name, _benchmark_task(_name), doc=f"{_name}: an evaluation set; held-out = a seeded subset")


@TASKS.register("jsonl", tags={"needs_path", "user_answers"}, doc="problems from a JSON-lines file (task.path; task.params {prompt_field, answer_field}); "
                             "task.params {image_field: NAME} reads images (paths), bad_images: skip | error")
def jsonl_task(path: str | None = None, prompt_field: str = "prompt", answer_field: str = "answer",
               num_heldout: int = 256, seed: int = 0, image_field: str | None = None,
               bad_images: Literal["skip", "error"] = "skip") -> Split:
    if not path:
        raise ValueError("task.name=jsonl needs task.path=<file.jsonl>")
    problems = load_jsonl_problems(os.fspath(path), prompt_field=prompt_field, answer_field=answer_field,
                                   image_field=image_field, bad_images=bad_images)
    return held_out_split(problems, num_heldout, seed)


@TASKS.register("code_functions", params=CodeFunctionsParams, check=_check_code_functions,
                doc="generated function-writing problems (chains of int/str/list primitives) with hidden unit "
                    "tests; score with reward.verifier=code_humaneval; task.params num_train, steps, max_len, "
                    "max_int, num_examples, num_tests")
def code_functions_task(**options: Any) -> Split:
    return code_function_problems(**options)


SHARED_OPTIONS = ("path", "num_heldout", "seed")
"""The ``task.*`` fields a task receives when its function takes them (every other option is in ``task.params``)."""


def task_options(task: TaskConfig) -> dict[str, Any]:
    """The options of ``task.name``'s task: the :data:`SHARED_OPTIONS` it takes, then ``task.params`` (validated)."""
    entry = TASKS.entry(task.name, key="task.name")
    params = dict(task.params)
    TASKS.validate_params(task.name, params, key="task.params")
    shared = {k: getattr(task, k) for k in SHARED_OPTIONS if k in entry.options() and k not in params}
    return {**shared, **params}


def build_task(task: TaskConfig) -> Split:
    """(train, held-out) problems of a ``task`` section (``task.name`` plus its options)."""
    return TASKS.get(task.name)(**task_options(task))


@TASKS.register("hf", tags={"needs_path", "user_answers"}, doc="a `datasets` dataset: task.path is a hub id, a save_to_disk directory, a data directory "
                          "or file (pip install rlvr[hf]); split / eval_split / name in task.params")
def hf_task(path: str | None = None, prompt_field: str = "prompt", answer_field: str = "answer",
            split: str = "train", eval_split: str | None = None, name: str | None = None,
            num_heldout: int = 256, seed: int = 0, image_field: str | None = None,
            bad_images: Literal["skip", "error"] = "skip") -> Split:
    from rlvr.tasks.hf_dataset import load_hf_dataset_problems

    if not path:
        raise ValueError("task.name=hf needs task.path=<hub id, dataset directory or data file>")
    load = dict(name=name, prompt_field=prompt_field, answer_field=answer_field, image_field=image_field,
                bad_images=bad_images)
    train = load_hf_dataset_problems(path, split=split, **load)
    if eval_split is None:  # one split: hold out a seeded subset of it
        return held_out_split(train, num_heldout, seed)
    return train, load_hf_dataset_problems(path, split=eval_split, limit=num_heldout, **load)


def _check_reasoning_gym(params: dict[str, Any], **_: Any) -> None:
    from rlvr.tasks.procedural import check_dataset

    check_dataset(params["dataset"], params.get("config") or {})


@TASKS.register("reasoning_gym", check=_check_reasoning_gym,
                doc="a reasoning-gym dataset (pip install rlvr[procedural]): task.params {dataset: NAME, config: "
                    "{difficulty options}}; score with reward.verifier=reasoning_gym")
def reasoning_gym_task(dataset: str = "chain_sum", config: dict[str, Any] | None = None, num_train: int = 2000,
                       num_heldout: int = 256, seed: int = 0) -> Split:
    from rlvr.tasks.procedural import reasoning_gym_problems

    return reasoning_gym_problems(dataset, dict(config or {}), num_train, num_heldout, seed)


@TASKS.register("multiply", doc="'What is a * b?' with a of a_digits digits and b of b_digits digits (the "
                                "calculator tool-use task); disjoint train/held-out")
def multiply_task(a_digits: int = 3, b_digits: int = 2, num_train: int = 2000, num_heldout: int = 256,
                  seed: int = 0, prompt: str = "What is {a} * {b}? Put the final answer in \\boxed{{}}.") -> Split:
    if not (1 <= a_digits <= 9 and 1 <= b_digits <= 9):
        raise ValueError("multiply: a_digits and b_digits must be in 1..9")
    space = 9 * 10 ** (a_digits - 1) * 9 * 10 ** (b_digits - 1)
    if num_train + num_heldout > space // 2:
        raise ValueError(f"multiply: {num_train + num_heldout} problems asked of a space of {space} products")
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: list[Problem] = []
    while len(out) < num_heldout + num_train:  # held-out first: it does not move when num_train changes
        a = rng.randint(10 ** (a_digits - 1), 10 ** a_digits - 1)
        b = rng.randint(10 ** (b_digits - 1), 10 ** b_digits - 1)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        tag = "heldout" if len(out) < num_heldout else "train"
        out.append(Problem(f"mul-{tag}-{a}x{b}", prompt=prompt.format(a=a, b=b), answer=str(a * b),
                           metadata={"a": a, "b": b, "solution": multiply_solution(a, b)}))
    return out[num_heldout:], out[:num_heldout]


def _check_composed(params: dict[str, Any], *, num_heldout: int | None = None, **_: Any) -> None:
    from rlvr.tasks.composed import check_composed

    check_composed(params["horizon"], params["num_operands"], params["min_value"], params["max_value"],
                   list(params["operators"] or ["+"]), params["num_train"],
                   params["num_heldout"] if num_heldout is None else num_heldout)


@TASKS.register("composed_arithmetic", check=_check_composed, doc="R-Horizon's composed queries: a chain of `horizon` arithmetic problems, "
                                           "each starting from the previous answer; the answer is the last one's")
def composed_arithmetic_task(horizon: int = 3, num_operands: int = 2, min_value: int = 1, max_value: int = 20,
                             operators: list[str] | None = None, num_train: NonNegativeInt = 2000,
                             num_heldout: int = 256, seed: int = 0) -> Split:
    """``horizon``: problems per query (2-16); ``num_operands``: operands of the first problem (the later ones take
    the previous answer and ``num_operands - 1`` more); values in ``[min_value, max_value]``; ``operators`` from
    ``+ - *`` (default ``[+]``)."""
    from rlvr.tasks.composed import composed_split

    return composed_split(horizon, num_operands, min_value, max_value, list(operators or ["+"]), num_train,
                          num_heldout, seed)


def multiply_solution(a: int, b: int) -> str:
    """A templated worked solution of ``a * b`` by the place values of ``b`` (the multiply task's reference
    solution, for guidance), e.g. ``"123 * 45 = 123 * 40 + 123 * 5 = 4920 + 615 = 5535. The answer is
    \\boxed{5535}."``; draws no random numbers."""
    parts = [int(d) * 10 ** i for i, d in enumerate(reversed(str(b))) if d != "0"][::-1]
    chain = [f"{a} * {b}"]
    if len(parts) > 1:
        chain += [" + ".join(f"{a} * {p}" for p in parts), " + ".join(str(a * p) for p in parts)]
    chain.append(str(a * b))
    return f"{' = '.join(chain)}. The answer is \\boxed{{{a * b}}}."


from rlvr.tasks import visual as _visual  # noqa: E402,F401  (registers the drawn visual task)


def _check_code_tests(params: dict[str, Any], **_: Any) -> None:
    if not 1 <= params["num_mutants"] <= 16:
        raise ValueError(f"code_tests: num_mutants must be in 1..16, got {params['num_mutants']}")
    if not 1 <= params["steps"] <= 8:
        raise ValueError(f"code_tests: steps must be in 1..8, got {params['steps']}")


@TASKS.register("code_tests", check=_check_code_tests, doc="write unit tests for a specified function (code_functions programs), scored by "
                                  "the share of mutants they fail (reward.verifier=test_suite)")
def code_tests_task(num_train: NonNegativeInt = 500, num_heldout: NonNegativeInt = 64, seed: int = 0, steps: int = 2,
                    num_mutants: int = 4) -> Split:
    """``steps``: the programs' steps (as code_functions'); ``num_mutants``: wrong implementations per problem."""
    from rlvr.tasks.suite_writing import suite_writing_problems

    if not 1 <= num_mutants <= 16:
        raise ValueError(f"code_tests: num_mutants must be in 1..16, got {num_mutants}")
    return suite_writing_problems(num_mutants=num_mutants, seed=seed, num_train=num_train, num_heldout=num_heldout,
                                 steps=steps)


def _check_verify_samples(params: dict[str, Any], **_: Any) -> None:
    if not params.get("path") or not Path(params["path"]).is_file():
        raise ValueError(f"verify_samples: task.params.path must be a samples file of rlvr eval, got {params.get('path')!r}")


@TASKS.register("verify_samples", check=_check_verify_samples,
                doc="verification problems from a samples file of rlvr eval: 'is this solution correct?', labelled "
                    "yes/no by task.params.verifier (joint solve-and-verify RL in a mixture; reward.verifier=math)")
def verify_samples_task(path: str | None = None, verifier: str = "math", num_heldout: NonNegativeInt = 64,
                        seed: int = 0, balance: bool = True) -> Split:
    """``path``: a ``*.samples.jsonl`` of ``rlvr eval``; ``verifier`` labels each stored solution; ``balance``
    subsamples the larger of right and wrong to the smaller's size."""
    from rlvr.tasks.self_verify import verification_split

    return verification_split(str(path), verifier=verifier, num_heldout=num_heldout, seed=seed, balance=balance)


def _check_search_qa(params: dict[str, Any], *, num_heldout: int | None = None, **_: Any) -> None:
    from rlvr.tasks.search_qa import check_search_qa

    check_search_qa(params, num_heldout=num_heldout)


@TASKS.register("search_qa", check=_check_search_qa,
                doc="questions about a shipped fictional encyclopedia (answer: a number or a name), answerable only "
                    "by reading it: use with env.name=search and reward.verifier=math; held-out questions are about "
                    "entries no training question is about; task.params {num_train, answers, template, corpus}")
def search_qa_task(num_train: NonNegativeInt = 2000, num_heldout: NonNegativeInt = 256, seed: int = 0,
                   answers: Literal["all", "number", "name"] = "all",
                   template: str = "{question} Put the final answer in \\boxed{{}}.",
                   corpus: str | None = None) -> Split:
    """``num_train``: training questions; ``answers``: which questions (all, number or name answers);
    ``template``: the prompt, a format string with ``{question}``; ``corpus``: a corpus file in the shipped
    format (default: the shipped one)."""
    from rlvr.tasks.search_qa import search_qa_split

    return search_qa_split(num_train=num_train, num_heldout=num_heldout, seed=seed, answers=answers,
                           template=template, corpus=corpus)


from rlvr.tasks import verifiers_taskset as _vf_tasks, openenv_seeds as _openenv_tasks  # noqa: E402,F401  (register)
