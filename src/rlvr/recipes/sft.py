"""Supervised fine-tuning (SFT): a cold start before RL, or training on kept samples (rejection sampling).

:func:`run_sft` runs an :class:`~rlvr.recipes.sft_config.SFTConfig` and returns its summary::

    claim the output directory (lock; --resume / --overwrite rules of rlvr train)
    read the examples (jsonl, HF dataset, or a task's problems + completion template)   # bad input: one line
    load the model, encode the examples (chat template + task system prompt, as the rollouts render prompts)
    evaluate before: held-out SFT loss, held-out task accuracy (rlvr train's evaluation)
    for each step: batch_size examples in seeded order -> masked-NLL update (rlvr.learner.sft) -> metrics row
    checkpoint every train.save_every steps (and on Ctrl-C / SIGTERM); resume restores data order and RNG
    write <output_dir>/final (an HF model directory rlvr train takes as model.name), evaluate after

The loss is the mean NLL of the completion tokens (assistant turns of a chat) only; see :mod:`rlvr.learner.sft`.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.config import ConfigError, config_to_dict, config_yaml, save_config
from rlvr.learner.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from rlvr.learner.optim import make_optimizer
from rlvr.learner.sft import encode_examples, heldout_nll, supervised_update
from rlvr.learner.update import deferred_interrupts, make_scheduler, sigterm_interrupts, Terminated
from rlvr.plugins import load_plugins
from rlvr.recipes.rl import TrainingInterrupted, evaluate_heldout, format_eval
from rlvr.recipes.rundir import RunClaim, claim
from rlvr.recipes.sft_config import SFTConfig, load_sft_config
from rlvr.recipes.stage_kinds import StageKind, register_stage_kind
from rlvr.tasks.jsonl import DatasetError
from rlvr.tasks.registry import build_task
from rlvr.tasks.sampler import PromptSampler
from rlvr.tasks.sft_data import SFTExample, read_sft_hf, read_sft_jsonl, task_examples
from rlvr.trackers import open_trackers
from rlvr.types import Problem
from rlvr.utils.accounting import peak_rss_mb, set_malloc_mmap_threshold
from rlvr.utils.device import resolve_device
from rlvr.utils.files import atomic_write_json, read_json_or_none
from rlvr.version import code_version

__all__ = ["SFTRecipe", "run_sft", "load_sft_config", "load_examples", "FINAL_MODEL"]

log = logging.getLogger(__name__)

FINAL_MODEL = "final"
"""``<output_dir>/final``: the trained model as an HF directory (weights, config, tokenizer)."""

RUN_OUTPUTS = (FINAL_MODEL, "sft_before.json")
"""What an SFT run writes besides rlvr train's run files (``train.overwrite`` deletes them too)."""


# --------------------------------------------------------------------------- data
def load_examples(cfg: SFTConfig) -> tuple[list[SFTExample], list[SFTExample], list[Problem]]:
    """``(training examples, held-out examples, held-out task problems)`` of ``cfg`` (the problems only when
    held-out accuracy is evaluated).  Reads and checks everything before a model loads: a missing, empty or
    malformed file, or a row without its completion, raises :class:`DatasetError` (one line, naming the file and
    line)."""
    d = cfg.data
    problems_heldout: list[Problem] = []
    fields = dict(fmt=d.format, messages_field=d.messages_field, prompt_field=d.prompt_field,
                  completion_field=d.completion_field, weight_field=d.weight_field)
    if d.source == "task":
        train_p, held_p = build_task(cfg.task)
        if not train_p:
            raise ConfigError(f"data.source=task: task.name={cfg.task.name} gave no training problems")
        if d.check_completions:
            check_gold_completions(cfg, train_p)
        train = task_examples(train_p, d.completion_template, "train")
        held = task_examples(held_p[: d.num_heldout], d.completion_template, "heldout") if d.num_heldout else []
        problems_heldout = held_p
    else:
        rows = read_sft_jsonl(d.path, **fields) if d.source == "jsonl" else \
            read_sft_hf(d.path, d.split, d.name, **fields)
        order = list(range(len(rows)))
        random.Random(cfg.train.seed).shuffle(order)  # the held-out slice does not depend on the file's order
        n_held = min(d.num_heldout, len(rows) - 1)
        if n_held < d.num_heldout:
            log.warning("data.num_heldout=%d: %s has %d examples; holding out %d", d.num_heldout, d.path, len(rows),
                        n_held)
        held = [rows[i] for i in sorted(order[len(rows) - n_held:])] if n_held > 0 else []
        train = [rows[i] for i in sorted(order[: len(rows) - n_held])]
        if cfg.evaluates_accuracy():
            problems_heldout = build_task(cfg.task)[1]
    if d.max_examples:
        train = train[: d.max_examples]
    if not cfg.evaluates_accuracy():
        problems_heldout = []
    return train, held, problems_heldout


def check_gold_completions(cfg: SFTConfig, problems: list[Problem]) -> None:
    """Every templated completion must be accepted by ``reward.verifier`` as its problem's answer: a template whose
    completions the verifier refuses would train the model to answer in a form the RL reward scores 0."""
    from rlvr.verifiers import get_verifier

    verifier = get_verifier(cfg.reward.verifier, **cfg.reward.verifier_params)
    for ex in task_examples(problems, cfg.data.completion_template, "train"):
        text = ex.completion if ex.completion is not None else ex.messages[-1]["content"]
        v = verifier(text, ex.metadata["answer"])
        if not v.correct:
            raise ConfigError(
                f"data.completion_template={cfg.data.completion_template!r}: the completion of train problem "
                f"{ex.id!r} ({text[:80]!r}) is not accepted by reward.verifier={cfg.reward.verifier} as its answer "
                f"{ex.metadata['answer']!r} ({v.reason}); write the answer as the verifier reads it (e.g. "
                "\\boxed{{{answer}}}), or set data.check_completions=false")


# --------------------------------------------------------------------------- the recipe
class SFTRecipe:
    """SFT as configured by an :class:`SFTConfig`; :meth:`train` runs it and returns a summary.

    ``model`` / ``tokenizer`` may be injected (tests); ``on_step`` is called with every metrics row (raising
    ``KeyboardInterrupt`` from it stops the run like Ctrl-C: a checkpoint of the finished steps is written).
    """

    def __init__(self, cfg: SFTConfig, *, model=None, tokenizer=None,
                 on_step: Callable[[dict[str, Any]], None] | None = None):
        load_plugins(cfg.plugins)
        self.cfg, self.model, self.tokenizer, self.on_step = cfg, model, tokenizer, on_step
        self.out_dir = Path(cfg.train.output_dir)
        self.settings = cfg.sft_settings()
        self.held: RunClaim | None = None
        self.start_step = 0
        self.finished = 0
        self.tracker = self.bar = None
        self.engine = self.verifier = None

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        cfg, tcfg = self.cfg, self.cfg.train
        if tcfg.threads:
            torch.set_num_threads(tcfg.threads)
        if tcfg.malloc_mmap_threshold and not set_malloc_mmap_threshold(tcfg.malloc_mmap_threshold):
            log.warning("train.malloc_mmap_threshold is ignored: the C library is not glibc")
        self.train_examples, self.heldout_examples, self.heldout_problems = load_examples(cfg)
        torch.manual_seed(tcfg.seed)
        if self.model is None:
            from rlvr.models import load_policy

            self.model, self.tokenizer = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
        self.device = resolve_device(cfg.model.device)
        self.model.to(self.device)
        if cfg.model.lora.enabled:
            from rlvr.models.lora import apply_lora

            self.model = apply_lora(self.model, cfg.model.lora)
        system = cfg.task.system_prompt
        self.train_samples, dropped = encode_examples(self.tokenizer, self.train_examples, system, cfg.data.max_length)
        self.heldout_samples, dropped_held = encode_examples(self.tokenizer, self.heldout_examples, system,
                                                            cfg.data.max_length)
        self.dropped = dropped + dropped_held
        if not self.train_samples:
            raise ConfigError(f"data.max_length={cfg.data.max_length}: every training example's prompt is longer; "
                              "nothing to train on")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.tokenizer.eos_token_id
        self.total_steps = cfg.total_steps(len(self.train_samples))
        self.optimizer = make_optimizer([p for p in self.model.parameters() if p.requires_grad], tcfg.optimizer,
                                        lr=tcfg.lr, betas=tcfg.betas, weight_decay=tcfg.weight_decay, seed=tcfg.seed)
        self.scheduler = make_scheduler(self.optimizer, cfg.schedule_settings(self.total_steps))
        self.order = PromptSampler(self.train_samples, seed=tcfg.seed)
        if self.heldout_problems:
            from rlvr.engines.registry import EngineContext, build_engine
            from rlvr.verifiers import get_verifier

            m = cfg.model
            ctx = EngineContext(batch_size=cfg.eval.batch_size or 64, system_prompt=system, policy_dtype=m.dtype,
                                model_name=m.name, cache_dir=m.cache_dir, seed=tcfg.seed)
            self.engine = build_engine("hf", self.model, self.tokenizer, ctx)
            self.verifier = get_verifier(cfg.reward.verifier, **cfg.reward.verifier_params)

    def resume(self) -> None:
        """Weights, optimizer, schedule, data position and RNG state of the latest intact checkpoint."""
        ckpt = self.held.checkpoint if self.held is not None else None
        if ckpt is None:
            log.warning("train.resume=true but no intact checkpoint in %s: starting from scratch", self.out_dir)
            return
        state = load_checkpoint(ckpt, self.model, self.optimizer, self.scheduler)
        if state.get("examples") != len(self.train_samples):
            raise CheckpointError(f"{ckpt} was trained on {state.get('examples')} examples, this run has "
                                  f"{len(self.train_samples)}: the data changed; start over with --overwrite")
        self.start_step = state["step"]
        self.order.position = state["data_position"]
        set_rng_state(state["rng"])
        print(f"resumed from {ckpt} (step {self.start_step})")

    def checkpoint(self, step: int) -> Path:
        state = {"data_position": self.order.position, "rng": rng_state(), "examples": len(self.train_samples)}
        return save_checkpoint(self.out_dir, step, self.model, self.tokenizer, self.optimizer, self.scheduler, state,
                               keep=self.cfg.train.keep_checkpoints, config_text=config_yaml(self.cfg))

    # ------------------------------------------------------------------ evaluation
    def heldout_loss(self) -> dict[str, float] | None:
        if not self.heldout_samples:
            return None
        return heldout_nll(self.model, self.heldout_samples, self.settings, self.pad_id)

    def accuracy(self, tag: str) -> dict | None:
        if self.engine is None:
            return None
        state = rng_state(self.engine.generator)  # an evaluation leaves training's random streams as they were
        try:
            return evaluate_heldout(self.engine, self.heldout_problems, self.verifier, self.cfg, tag, self.out_dir)
        finally:
            set_rng_state(state, self.engine.generator)

    def periodic_accuracy(self, step: int) -> None:
        """An ``eval.every`` held-out accuracy (rlvr train's periodic evaluation), a heldout.jsonl row."""
        from rlvr.recipes.rl import periodic_eval

        state = rng_state(self.engine.generator)
        try:
            row = periodic_eval(self.engine, self.heldout_problems, self.verifier, self.cfg, step, 0)
        finally:
            set_rng_state(state, self.engine.generator)
        row.pop("rollouts", None)
        self.tracker.log(row, step, group="heldout")

    def evaluate(self, tag: str, step: int) -> dict[str, Any]:
        """Held-out SFT loss and task accuracy, logged to heldout.jsonl; ``{"heldout_loss": ..., "accuracy": ...}``."""
        out: dict[str, Any] = {}
        loss = self.heldout_loss()
        if loss is not None:
            out["heldout_loss"] = loss["loss"]
            out["heldout_ppl"] = loss["ppl"]
            print(f"held-out SFT loss {tag} training: {loss['loss']:.4f} (ppl {loss['ppl']:.2f}, "
                  f"{loss['tokens']} tokens)")
        if tag in ("before", "after"):
            acc = self.accuracy(tag)
            if acc is not None:
                out["accuracy"] = acc
                print(f"held-out accuracy {tag} training: {format_eval(acc)}")
        if self.tracker is not None and out:
            row = {"step": step, **{k: v for k, v in out.items() if k != "accuracy"}}
            if "accuracy" in out:
                first = next(iter(out["accuracy"].values()))
                row.update(heldout_accuracy=first["accuracy"], heldout_ci_low=first["ci_low"],
                           heldout_ci_high=first["ci_high"], heldout_n=first["n"])
            self.tracker.log(row, step, group="heldout")
        return out

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        self.held = claim(self.cfg, extra_files=RUN_OUTPUTS)  # before anything loads
        try:
            with sigterm_interrupts():
                return self._run()
        finally:
            self.held.release()

    def _run(self) -> dict[str, Any]:
        cfg, tcfg, out_dir = self.cfg, self.cfg.train, self.out_dir
        self.setup()
        if tcfg.resume:
            self.resume()
        save_config(cfg, out_dir / "config.yaml")
        self.tracker = open_trackers(tcfg.report_to, out_dir, config_to_dict(cfg), run_name=out_dir.name,
                                     resume_from_step=self.start_step if tcfg.resume else None,
                                     groups=("train", "heldout"))
        summary: dict[str, Any] = {"output_dir": str(out_dir), "train_examples": len(self.train_samples),
                                   "heldout_examples": len(self.heldout_samples), "dropped_too_long": self.dropped,
                                   "total_steps": self.total_steps}
        before = read_json_or_none(out_dir / "sft_before.json")  # a resumed run's: not evaluated again
        if before is not None and (acc := read_json_or_none(out_dir / "eval_before.json")) is not None:
            before["accuracy"] = acc
        if before is None and cfg.eval.before_training:
            before = self.evaluate("before", self.start_step if tcfg.resume else 0)
            atomic_write_json(out_dir / "sft_before.json", {k: v for k, v in before.items() if k != "accuracy"})
        summary.update(_tagged(before or {}, "before"))
        if tcfg.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total_steps, initial=self.start_step, desc="sft", unit="step",
                            dynamic_ncols=True)
        self.finished, row, snap = self.start_step, {}, None
        try:
            for step in range(self.start_step, self.total_steps):
                snap = (step, self.order.position, rng_state())
                row = self.step(step)
                snap = None
                if tcfg.save_every and (step + 1) % tcfg.save_every == 0:
                    with deferred_interrupts():
                        self.checkpoint(step + 1)
                if cfg.eval.loss_every and (step + 1) % cfg.eval.loss_every == 0:
                    self.evaluate("during", step + 1)
                if cfg.eval.every and self.engine is not None and (step + 1) % cfg.eval.every == 0:
                    self.periodic_accuracy(step + 1)
        except KeyboardInterrupt as e:
            self.interrupted(snap, e)
        return self.finish(summary, row)

    def step(self, step: int) -> dict[str, Any]:
        """One optimizer step on the next ``train.batch_size`` examples; the update and its log line are one unit."""
        t0 = time.perf_counter()
        batch = self.order.next(self.cfg.train.batch_size)
        with deferred_interrupts():
            m = supervised_update(self.model, self.optimizer, batch, self.settings, self.pad_id)
            lr = self.scheduler.get_last_lr()[0]
            self.scheduler.step()
            self.finished = step + 1
            dt = time.perf_counter() - t0
            row = {"step": step + 1, "loss": m["loss"], "grad_norm": m["grad_norm"], "lr": lr,
                   "tokens": m["tokens"], "seqs": m["seqs"], "epoch": self.order.position / len(self.train_samples),
                   "step_time": dt, "tokens_per_s": m["tokens"] / dt if dt > 0 else 0.0,
                   "peak_rss_mb": peak_rss_mb()}
            self.tracker.log(row, row["step"])
        if self.on_step is not None:
            self.on_step(row)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{lr:.2g}", s=f"{dt:.1f}")
        return row

    def interrupted(self, snap: tuple | None, interrupt: BaseException) -> None:
        """Ctrl-C / SIGTERM: checkpoint the finished steps (the data position before an unfinished one) and raise."""
        code, what = (143, "terminated (SIGTERM)") if isinstance(interrupt, Terminated) else (130, "interrupted")
        if snap is not None and self.finished <= snap[0]:  # the step did not finish: its data is not consumed
            _, self.order.position, rngs = snap
            set_rng_state(rngs)
        if self.bar is not None:
            self.bar.close()
        self.tracker.close()
        print(f"\n{what}: writing a checkpoint of step {self.finished} (interrupt again to stop without it)",
              flush=True)
        try:
            path = self.checkpoint(self.finished)
        except KeyboardInterrupt:
            print(f"{what} again: stopped without writing that checkpoint")
            raise TrainingInterrupted(code) from None
        print(f"{what}: checkpoint written to {path}; continue with --resume (train.resume=true)")
        raise TrainingInterrupted(code) from None

    def finish(self, summary: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        """The final checkpoint and model directory, the evaluation after training, summary.json."""
        cfg, out_dir = self.cfg, self.out_dir
        if self.bar is not None:
            self.bar.close()
        step = self.finished
        final_ckpt = self.checkpoint(step) if step > self.start_step or latest_checkpoint(out_dir) is None else \
            latest_checkpoint(out_dir)
        final = out_dir / FINAL_MODEL
        self.save_final(final)
        summary.update({"steps": step, "final_checkpoint": str(final_ckpt), "final_model": str(final),
                        "last_metrics": row, "code": code_version()})
        if cfg.eval.after_training:
            summary.update(_tagged(self.evaluate("after", step), "after"))
        self.tracker.close()
        atomic_write_json(out_dir / "summary.json", {k: v for k, v in summary.items()
                                                     if k not in ("eval_before", "eval_after")}, indent=2,
                          default=str)
        return summary

    def save_final(self, path: Path) -> None:
        """The trained weights and tokenizer as an HF directory (LoRA merged), written beside and renamed over
        ``path`` so a kill leaves the old one or the new one whole."""
        tmp = path.with_name(f".{path.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model = self.model
        from rlvr.models.lora import is_lora_model

        if is_lora_model(model):
            from rlvr.models.lora import merged_state_dict

            model.get_base_model().save_pretrained(tmp, state_dict=merged_state_dict(model), safe_serialization=True)
        else:
            model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)


def _tagged(ev: dict[str, Any], tag: str) -> dict[str, Any]:
    """``heldout_loss`` / ``accuracy`` of one evaluation as summary keys (``heldout_loss_before``, ``eval_before``,
    ``accuracy_before``: the first temperature's accuracy)."""
    out: dict[str, Any] = {}
    if "heldout_loss" in ev:
        out[f"heldout_loss_{tag}"] = ev["heldout_loss"]
    if "accuracy" in ev:
        out[f"eval_{tag}"] = ev["accuracy"]
        out[f"accuracy_{tag}"] = next(iter(ev["accuracy"].values()))["accuracy"]
    return out


def run_sft(cfg: SFTConfig, **kwargs: Any) -> dict[str, Any]:
    """Run :class:`SFTRecipe` on ``cfg``; returns the summary (``final_model``: the HF directory rlvr train takes as
    ``model.name``; held-out loss and accuracy before and after).  Keyword arguments (``model``, ``tokenizer``,
    ``on_step``) go to the recipe."""
    return SFTRecipe(cfg, **kwargs).train()


register_stage_kind("sft", StageKind(SFTConfig, run_sft, passes=frozenset({"on_step"})),
                    doc="rlvr sft: supervised fine-tuning (loss on completion tokens only)")
