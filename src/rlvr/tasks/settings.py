"""The ``task`` and ``curriculum`` sections of a run: where training and held-out problems come from."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from rlvr.config import ConfigModel, option
from rlvr.rewards.settings import RewardFunctionSpec

__all__ = ["TaskConfig", "CurriculumConfig", "MixtureEntry", "MixtureConfig", "task_at_level"]


class TaskConfig(ConfigModel):
    name: str = option("arithmetic", "which registered task supplies training and held-out problems "
                                     "(rlvr.tasks.registry.TASKS: arithmetic, gsm8k, math500, aime24, amc23, jsonl, "
                                     "code_functions, ...)")
    params: dict[str, Any] = option(None, "the task's own options, validated against its registry entry, e.g. "
                                          "{num_train: 2000, max_value: 50, operators: [+, -]} for arithmetic, "
                                          "{prompt_field: question, answer_field: answer} for jsonl",
                                    default_factory=dict)
    path: str | None = option(None, "file to read (jsonl, hf tasks) or override for a benchmark file")
    num_heldout: int = option(256, "held-out problems for evaluation (arithmetic: generated disjoint from train)", ge=0)
    system_prompt: str | None = option(None, "system message for every prompt (None: the chat template's default)")
    seed: int = option(0, "seed of the problem generator and split")

    moved = {k: f"task.params.{k} (an option of the task's registry entry)"
             for k in ("prompt_field", "answer_field", "template", "num_operands", "min_value", "max_value",
                       "operators", "num_train")}


class MixtureEntry(ConfigModel):
    """One task of a task mixture (``mixture``): its problems, its share of the prompts and its rubric."""

    task: str = option("arithmetic", "registered task name (as task.name)")
    label: str | None = option(None, "its name in metrics (task/<label>/...) and problem ids; default: the task")
    weight: float = option(1.0, "its share of the training prompts (weights are normalised)", ge=0)
    params: dict[str, Any] = option(None, "the task's options (as task.params)", default_factory=dict)
    path: str | None = option(None, "file to read (as task.path)")
    num_heldout: int | None = option(None, "its held-out problems (None: task.num_heldout)", ge=0)
    verifier: str | None = option(None, "the registered verifier that scores its problems (its environment's "
                                        "checker; None: reward.verifier)")
    verifier_params: dict[str, Any] = option(None, "the verifier's options", default_factory=dict)
    functions: list[RewardFunctionSpec] = option(None, "its rubric (as reward.functions; empty: reward.functions, "
                                                       "else the verifier's scaled reward)", default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _a_bare_task(cls, data: Any) -> Any:
        """``gsm8k`` is short for ``{task: gsm8k}``."""
        return {"task": data} if isinstance(data, str) else data

    @property
    def name(self) -> str:
        """The label problems, metrics and the rubric are keyed by."""
        return self.label or self.task


class MixtureConfig(ConfigModel):
    """A task mixture (rlvr.tasks.mixture): several tasks in one run, each problem scored by its own task."""

    tasks: list[MixtureEntry] = option(None, "the tasks, each {task, label, weight, params, num_heldout, verifier, "
                                             "verifier_params, functions}; a bare name is {task: name} (empty: "
                                             "task alone)", default_factory=list)
    adapt: Literal["none", "learnable"] = option(
        "none", "none: draw tasks by their weights; learnable: weight each task also by the recent share of its "
                "groups that were learnable (rewards not all equal: a GRPO gradient), so sampling moves toward "
                "the tasks the policy can learn from now")
    adapt_alpha: float = option(0.3, "learnable: the moving average's weight of each step's share", gt=0, le=1)
    adapt_floor: float = option(0.1, "learnable: added to every task's learnable share, so none is starved", ge=0)


class CurriculumConfig(ConfigModel):
    """A live curriculum (rlvr.tasks.curriculum): the task's difficulty follows the rolling pass rate."""

    levels: list[dict[str, Any]] = option(None, "task options of each level, easiest first, e.g. "
                                                "[{max_value: 9}, {max_value: 99}]; task.* fields or task.params "
                                                "keys (empty: no curriculum)", default_factory=list)
    low: float = option(0.2, "move one level down when the rolling pass rate falls below this", ge=0, le=1)
    high: float = option(0.8, "move one level up when the rolling pass rate rises above this", ge=0, le=1)
    window: int = option(32, "groups in the rolling pass rate", ge=1)
    min_groups: int = option(16, "groups seen at a level before it may change", ge=1)
    start_level: int = option(0, "level of the first step", ge=0)
    eval_level: int = option(-1, "level whose held-out problems are evaluated (-1: the hardest)")
    fixed: bool = option(False, "stay at start_level (the fixed-difficulty control of a curriculum run; the "
                                "levels are still built and logged)")

    @model_validator(mode="after")
    def _band_is_ordered(self) -> CurriculumConfig:
        if self.levels and not 0 <= self.low < self.high <= 1:
            raise ValueError(f"curriculum: need 0 <= low < high <= 1, got low={self.low}, high={self.high}")
        return self

    @model_validator(mode="after")
    def _window_holds_min_groups(self) -> CurriculumConfig:
        if self.levels and not 1 <= self.min_groups <= self.window:
            raise ValueError("curriculum: need window >= 1 and 1 <= min_groups <= window")
        return self

    @model_validator(mode="after")
    def _levels_are_indexed(self) -> CurriculumConfig:
        n = len(self.levels)
        if n and (not 0 <= self.start_level < n or not -n <= self.eval_level < n):
            raise ValueError(f"curriculum.start_level / eval_level must index the {n} levels")
        return self


def task_at_level(task: TaskConfig, level: dict[str, Any], key: str = "curriculum.levels") -> TaskConfig:
    """``task`` with one curriculum level's options: task.* fields replaced, other keys merged into params."""
    fields = set(TaskConfig.model_fields) - {"params", "name"}
    unknown_name = level.get("name")
    update = {k: v for k, v in level.items() if k in fields}
    params = {**task.params, **{k: v for k, v in level.items() if k not in fields and k != "name"}}
    data = {**task.model_dump(), **update, "params": params}
    if unknown_name:
        data["name"] = unknown_name
    try:
        return TaskConfig.model_validate(data)
    except Exception as e:  # noqa: BLE001 - reported with the level's key
        raise ValueError(f"{key}: {e}") from None
