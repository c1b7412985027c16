"""The typed configuration of supervised fine-tuning (:mod:`rlvr.recipes.sft`).

Loaded like ``rlvr train``'s: a YAML file plus dotted ``key=value`` overrides (:func:`load_sft_config`), every
mistake one line naming the key and the file's line or the override.  The ``model``, ``task``, ``reward`` and
``eval`` sections are ``rlvr train``'s own (the held-out accuracy is the same evaluation); ``data`` says where the
examples come from and ``train`` how they are fitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import model_validator

from rlvr.config import ConfigModel, load_config, option
from rlvr.evaluate.settings import EvalConfig
from rlvr.learner.settings import ScheduleSettings
from rlvr.learner.sft import SFTSettings
from rlvr.models.settings import ModelConfig
from rlvr.rewards.settings import RewardConfig
from rlvr.tasks.settings import TaskConfig

__all__ = ["SFTDataConfig", "SFTTrainConfig", "SFTEvalConfig", "SFTConfig", "load_sft_config"]


class SFTDataConfig(ConfigModel):
    """Where the supervised examples come from (rlvr.tasks.sft_data)."""

    source: Literal["task", "jsonl", "hf"] = option(
        "task", "task: the task section's training problems, each completed by data.completion_template from its "
                "gold answer (a cold start needs no file); jsonl: data.path is a JSON-lines file; hf: data.path is "
                "a datasets save_to_disk directory, a data file or a hub id (split data.split)")
    path: str | None = option(None, "the jsonl file or HF dataset (data.source=jsonl / hf)")
    split: str = option("train", "HF dataset: the split to read")
    name: str | None = option(None, "HF dataset: its config name (e.g. main for openai/gsm8k)")
    format: Literal["auto", "messages", "prompt_completion"] = option(
        "auto", "row format: messages (a chat; loss on the assistant turns), prompt_completion (loss on the "
                "completion), auto (messages when the row has them, else prompt/completion)")
    messages_field: str = option("messages", "the field holding a chat: a list of {role, content}")
    prompt_field: str = option("prompt", "the field holding the prompt (a user message)")
    completion_field: str = option("completion", "the field holding the completion the model learns")
    weight_field: str | None = option(
        None, "jsonl / hf: a field holding each example's loss weight, a number >= 0 (offline RL as reward-weighted "
              "regression: the reward, or a positive advantage, of a logged completion); None: every weight 1")
    completion_template: str = option(
        "{solution}", "data.source=task: the completion of each problem, a str.format template over its answer, "
                      "prompt, id and metadata keys (arithmetic's solution is its worked solution ending in "
                      "\\boxed{answer}, which the numeric and math verifiers accept; e.g. \\boxed{{{answer}}} for "
                      "the answer alone)")
    check_completions: bool = option(
        True, "data.source=task: refuse a template whose completion reward.verifier does not accept as the answer "
              "(checked on every training problem before the model loads)")
    num_heldout: int = option(64, "examples held out for the held-out SFT loss: the task's held-out problems "
                                  "(data.source=task), else the last ones of the seeded shuffle", ge=0)
    max_examples: int = option(0, "train on at most this many examples (0: all)", ge=0)
    max_length: int = option(1024, "tokens per example at most: longer completions are cut, an example whose "
                                   "prompt alone is longer is left out (counted in summary.json)", ge=1)

    @model_validator(mode="after")
    def _path_of_the_source(self) -> SFTDataConfig:
        if self.source in ("jsonl", "hf") and not self.path:
            raise ValueError(f"data.path: data.source={self.source} reads a file or dataset: set data.path")
        if self.source == "task" and self.weight_field is not None:
            raise ValueError("data.weight_field: data.source=task builds unweighted examples from the task; weights "
                             "come from a jsonl or hf source")
        if self.source == "task" and self.path:
            raise ValueError("data.path: data.source=task builds its examples from the task section; set "
                             "data.source=jsonl (or hf) to read data.path")
        return self


class SFTTrainConfig(ConfigModel):
    """Optimisation, memory options, checkpoints and the run directory of an SFT run."""

    steps: int = option(200, "optimizer steps (each on train.batch_size examples; the data repeats, reshuffled, "
                             "when it runs out)", ge=0)
    epochs: float = option(0.0, "when > 0: train this many passes over the training examples instead of "
                                "train.steps (steps = ceil(epochs x examples / batch_size))", ge=0)
    batch_size: int = option(16, "examples per optimizer step", ge=1)
    micro_batch_size: int = option(8, "examples per forward/backward pass (gradient accumulation)", ge=1)
    micro_batch_tokens: int = option(0, "micro-batches filled up to this many tokens with examples packed into one "
                                        "row instead of padded (0: micro_batch_size rows, padded)", ge=0)
    logprob_chunk_size: int = option(0, "log-probs from the last hidden states this many tokens at a time, never "
                                        "holding [batch, length, vocab] logits (0: full logits)", ge=0)
    activation_checkpointing: bool = option(False, "recompute each decoder layer's activations in the backward "
                                                   "instead of storing them (less memory, ~30% more compute)")
    autocast: Literal["none", "bfloat16"] = option("none", "mixed precision for the forward/backward")
    lr: float = option(2e-5, "peak learning rate", gt=0)
    optimizer: Literal["adamw", "adamw_bf16"] = option(
        "adamw", "adamw: torch AdamW; adamw_bf16: both moments stored in bfloat16 with stochastic rounding (half "
                 "the optimizer memory)")
    weight_decay: float = option(0.0, "AdamW weight decay", ge=0)
    betas: list[float] = option(None, "AdamW betas", default_factory=lambda: [0.9, 0.99], min_length=2, max_length=2)
    warmup_steps: int = option(10, "linear warm-up steps", ge=0)
    schedule: Literal["constant", "cosine", "linear"] = option(
        "cosine", "LR schedule after the warm-up: constant, or decayed to 0 at the last step by cosine or linearly")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 disables)", ge=0)
    seed: int = option(0, "seed of the data order, the held-out slice and initialisation")
    output_dir: str = option("runs/sft", "where metrics, checkpoints, evaluations and the final model are written")
    save_every: int = option(50, "checkpoint every N steps (0: only at the end and on interrupt)", ge=0)
    keep_checkpoints: int = option(2, "how many recent checkpoints to keep", ge=0)
    resume: bool = option(False, "continue from the latest intact checkpoint in output_dir (data order and RNG "
                                 "state restored: the same weights as an uninterrupted run)")
    overwrite: bool = option(False, "start over in an output_dir that holds an earlier run (its checkpoints, "
                                    "metrics, evaluations, config and final model are deleted first)")
    resume_changes: list[str] = option(None, "config keys (or sections) a resume may change from the checkpoint's "
                                             "config", default_factory=list)
    threads: int = option(0, "torch CPU threads (0: torch's default)", ge=0)
    malloc_mmap_threshold: int = option(0, "glibc only: allocations of at least this many bytes use mmap and go "
                                           "back to the OS when freed (65536 stops the heap growing step after "
                                           "step; as rlvr train's; 0: glibc's default)", ge=0)
    progress: bool = option(True, "show a live progress bar")
    report_to: list[str] = option(None, "where metrics go besides metrics.jsonl (always written): tensorboard, "
                                        "wandb, mlflow, trackio", default_factory=list)

    @model_validator(mode="after")
    def _one_way_into_the_directory(self) -> SFTTrainConfig:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"train.betas: must be two numbers in [0, 1), got {self.betas}")
        if self.resume and self.overwrite:
            raise ValueError("train.resume continues the run in output_dir and train.overwrite deletes it: set one")
        return self


class SFTEvalConfig(EvalConfig):
    """Held-out evaluation of an SFT run: the held-out SFT loss, and the task's held-out accuracy (as rlvr train's)."""

    accuracy: bool | None = option(None, "evaluate held-out task accuracy (task.*, reward.verifier) before and "
                                         "after training (null: when data.source=task or the config has a task "
                                         "section)")
    loss_every: int = option(0, "also compute the held-out SFT loss every N steps (heldout.jsonl; 0: before and "
                                "after only)", ge=0)


class SFTConfig(ConfigModel):
    """Supervised fine-tuning: one section per concern; model, task, reward and eval are rlvr train's."""

    plugins: list[str] = option(None, "modules to import before the config is checked, for the components they "
                                      "register", default_factory=list)
    model: ModelConfig = option(None, "the model to fine-tune: which model, dtype, device, LoRA",
                                default_factory=ModelConfig)
    task: TaskConfig = option(None, "the task: its training problems (data.source=task), its held-out problems "
                                    "(held-out accuracy) and its system prompt (every prompt is rendered with it)",
                              default_factory=TaskConfig)
    reward: RewardConfig = option(None, "the verifier of the held-out accuracy (and of data.check_completions)",
                                  default_factory=RewardConfig)
    data: SFTDataConfig = option(None, "where the examples come from and how they are read",
                                 default_factory=SFTDataConfig)
    train: SFTTrainConfig = option(None, "optimisation, memory, checkpoints", default_factory=SFTTrainConfig)
    eval: SFTEvalConfig = option(None, "held-out loss and accuracy before, during and after training",
                                 default_factory=SFTEvalConfig)

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any) -> Any:
        from rlvr.plugins import load_config_plugins

        return load_config_plugins(data)

    def check(self) -> None:
        """The task, its options and file, and the verifier are registered and valid (as rlvr train checks them)."""
        check_task_and_verifier(self.task, self.reward)

    # ------------------------------------------------------------------ what the layers are handed
    def sft_settings(self) -> SFTSettings:
        t = self.train
        return SFTSettings(micro_batch_size=t.micro_batch_size, micro_batch_tokens=t.micro_batch_tokens,
                           logprob_chunk_size=t.logprob_chunk_size, activation_checkpointing=t.activation_checkpointing,
                           autocast=t.autocast, max_grad_norm=t.max_grad_norm)

    def total_steps(self, num_examples: int) -> int:
        """``train.steps``, or with ``train.epochs`` the steps of that many passes over ``num_examples``."""
        import math

        t = self.train
        if t.epochs > 0:
            return max(1, math.ceil(t.epochs * num_examples / t.batch_size))
        return t.steps

    def schedule_settings(self, total_steps: int) -> ScheduleSettings:
        t = self.train
        return ScheduleSettings(warmup_steps=t.warmup_steps, total_steps=total_steps, kind=t.schedule)

    def evaluates_accuracy(self) -> bool:
        """Whether held-out task accuracy is evaluated (``eval.accuracy``, or its default)."""
        if self.eval.accuracy is not None:
            return self.eval.accuracy
        return self.data.source == "task" or "task" in self.model_fields_set


def check_task_and_verifier(task: TaskConfig, reward: RewardConfig) -> None:
    """``task.name`` is registered with valid options (its file exists), ``reward.verifier`` too: the
    checks of rlvr train's rules (:mod:`rlvr.recipes.rules`) for the two sections."""
    from rlvr.tasks.registry import TASKS, task_options
    from rlvr.verifiers import VERIFIERS

    entry = TASKS.entry(task.name, key="task.name")
    path = task_options(task).get("path")
    if "needs_path" in entry.tags and not path:
        raise ValueError(f"task.path: task.name={task.name} reads its problems from task.path: set task.path=...")
    if task.name == "jsonl" and not Path(path).is_file():
        raise ValueError(f"task.path: {path}: " + ("not a file" if Path(path).exists() else "no such file"))
    TASKS.check(task.name, task.params, key="task.params", num_heldout=task.params.get("num_heldout",
                                                                                      task.num_heldout))
    VERIFIERS.entry(reward.verifier, key="reward.verifier")
    VERIFIERS.validate_params(reward.verifier, reward.verifier_params, key="reward.verifier_params")


def load_sft_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> SFTConfig:
    """An :class:`SFTConfig` from an optional YAML file and ``key=value`` overrides (defaults < file < overrides);
    every mistake is a :class:`~rlvr.config.ConfigError` naming the key and the file's line or the override."""
    return load_config(SFTConfig, path, list(overrides))
