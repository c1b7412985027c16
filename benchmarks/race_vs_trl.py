"""The race: TRL's ``GRPOTrainer`` and rlvr, the same wall-clock budget each, on the README demo.

Both train the demo of ``configs/arithmetic_grpo.yaml`` ("What is a + b?", a, b in 1..50, the bundled
SmolLM2-135M-Instruct) one after the other in one invocation, each for ``--budget-min`` minutes of
training on this machine, and both are scored by rlvr's own evaluation on the same held-out problems.
Printed: per framework, held-out accuracy along the way (greedy and T = 1, Wilson 95% intervals), the
time each needed to reach TRL's final accuracy and the ratio rlvr / TRL (the target: at most
1/3), and what each spent its training time on.

What is shared, by construction:

* the problems: ``rlvr.tasks.registry.build_task(cfg.task)`` of the demo config (2000 training and 256
  held-out problems, seed 0); TRL's dataset holds the same training problems;
* the prompt: the problem text as one user message, chat-templated with ``add_generation_prompt``
  (the same token ids: checked against ``rlvr.engines.hf.format_prompt`` before TRL trains);
* the reward: rlvr's ``numeric`` verifier through ``safe_verify``, 1 if correct and 0 if not
  (``reward.correct_reward`` / ``wrong_reward``), wrapped as TRL's reward function;
* the hyper-parameters: 8 prompts x 8 completions per optimizer step (TRL: per-device batch 16 x
  4 accumulation steps = one generation batch of 64), at most 48 new tokens, T = 1 (no top-p / top-k),
  one update per batch (TRL ``num_iterations=1``), GRPO advantages (group mean and std), PPO clip 0.2
  both sides, no KL term (rlvr ``kl_coef=0``, TRL ``beta=0``), token-mean over the whole step
  (rlvr ``loss_agg=token_mean``, TRL ``loss_type="dapo"``), learner in float32 (TRL ``bf16=False``;
  the demo has no learner autocast), gradient clipping at 1.0, seed 0, and the same optimizer and
  schedule: TRL is handed rlvr's AdamW (the demo's lr, betas 0.9/0.99, no weight decay) and rlvr's
  ``make_scheduler`` (the demo's: since 2026-11-27 lr 1e-5, linear warm-up over 2 steps, then cosine decay to 0
  at step ``--steps``; the races before it: lr 3e-5, constant) through ``optimizers=``;
* the evaluation: every checkpoint of both is loaded into the same model and scored by
  ``rlvr.recipes.rl.evaluate_heldout`` on the first ``--eval-problems`` held-out problems, greedy and
  T = 1, 64 new tokens, eval seed 1234, with the demo's engine (the bf16 sampler of
  ``rollout.dtype``) -- the demo's own before/after evaluation.  Checkpoints are stored in that dtype.

The step limit: ``--steps`` (default: the demo's ``train.steps``, 40) is the schedule's horizon and ends
training at that step if the budget has not ended it first, with a checkpoint; it is given to both (TRL
``max_steps``).  ``--steps 0`` sets no limit (1,000,000 steps: the budget alone stops training, as in the
races before 2026-11-27, whose constant rate made the horizon irrelevant).

The clock: training seconds start when the loop starts (TRL: ``on_train_begin``; rlvr: after the
recipe's ``begin``), so model loading and set-up are excluded from both (they are reported as
``setup_s``); saving a checkpoint pauses the clock.  After every optimizer step the training seconds
are compared with the budget: a checkpoint is saved at the first step ending after each of
``budget x k / --checkpoints`` (k = 1 .. n), and the step ending after the budget is the last one (both
overshoot by under one step).  The untrained model is the shared checkpoint at 0 s.  Time to reach an
accuracy is the training time of the first checkpoint at or above it: the granularity is budget / n
(plus up to one step), no interpolation.  Evaluation runs after both have trained.

Stopping: rlvr's own ``train.max_minutes`` is not used because its clock does not pause while the
race saves its checkpoints; a subclass of ``RLRecipe`` (the documented extension point) keeps the
race's clock and lowers ``train.max_rollouts`` to the completions generated so far once the budget
is spent, and the loop's own budget check ends training before the next step.  TRL: a
``TrainerCallback`` sets ``control.should_training_stop``.

Where the time goes: rlvr logs ``gen_time`` / ``verify_time`` / ``learn_time`` (forward, backward and
optimizer step) / ``sync_time`` (bf16 sampler copy) per step; the rest of the step time is ``other``
(advantages, collation, logging).  TRL logs no split to a plain run (its profiling goes to
wandb/mlflow/trackio only), so the script times its methods: ``_generate_single_turn`` (generate),
``_calculate_rewards`` (reward), the rest of ``_generate_and_score_completions`` (rollout other:
tokenising, decoding, advantages), the rest of ``training_step`` (learner forward + backward); the
rest of the clock is ``other`` (optimizer step, gradient clipping, the Trainer loop, logging).

Known mismatches (what TRL does not allow, or does differently):

* sampling precision: rlvr samples from a bf16 copy of the policy (the demo's ``rollout.dtype``) and
  its sampler is its own KV-cache loop that prefills each prompt once per group; TRL samples with
  ``model.generate`` from the float32 training model, prefilling each of the 64 rows (TRL on CPU has no
  separate low-precision sampler; ``bf16=True`` would also put its learner under autocast);
* sampling randomness: different generators (rlvr: its own seeded generator; TRL: the global torch RNG
  seeded by ``seed``) -- the same distribution, not the same samples;
* data order: rlvr's ``PromptSampler`` (seeded shuffle) vs TRL's ``RepeatSampler`` (seeded shuffle):
  the same problems, a different order;
* advantage epsilon: (r - mean) / (std + 1e-6) in rlvr, + 1e-4 in TRL (both the sample std);
* rlvr skips the learner pass on completions whose advantage is 0 (exact with no KL and no entropy
  term); TRL runs them (gradient 0): the same update, less work for rlvr;
* TRL also decodes completions for its logs and computes per-step metrics (entropy, clip ratios);
  rlvr logs its own metrics row (including a verdict histogram) every step;
* micro-batches: TRL 16 sequences (it shuffles the 64 rows before splitting them); rlvr, by default
  (``--rlvr-set``, ``RLVR_SPEED``), packs rows into 1,024-token micro-batches with each group's prompt
  packed once (``train.share_prompts``) and its LM head in chunks: the same loss and gradients up to
  float32 rounding, about half the learner's work on this task (``--rlvr-set`` with nothing: 16 padded
  rows, as the race recorded before 2026-11-24 evening).

Usage::

    python benchmarks/race_vs_trl.py [--budget-min 30] [--checkpoints 10] [--threads 0] [--out runs/race_vs_trl]
    python benchmarks/race_vs_trl.py --smoke   # 0.5 min each, 2 checkpoints, 16 held-out problems
    python benchmarks/race_vs_trl.py --seed 1 --out runs/race/seed-1 [--train-only]   # another seed (both)
    python benchmarks/race_vs_trl.py --summarize runs/race/seed-*    # the distribution over seeds

Seeds: ``--seed S`` sets ``train.seed`` of both frameworks (rlvr's sampler and data order, TRL's ``seed`` and
``data_seed``); the held-out problems and the evaluation's seed do not move.  ``--train-only`` stops after
both have trained (the timed part: run it alone), and the same command without it evaluates the stored
checkpoints (untimed: it may share the machine).  ``--summarize`` reads the ``results.json`` of several
races and prints, per evaluation key, each seed's time to TRL's final accuracy and the ratio, and their
median, minimum and maximum over seeds.

Resumable: a framework whose ``train.json`` exists is not trained again, a checkpoint evaluated on as
many problems is not evaluated again (delete ``--out`` to start over); a checkpoint's weights (bf16,
about 330 MB) are deleted once it is evaluated unless ``--keep-weights``.  rlvr's run directory
(``--out/rlvr/run``: metrics.jsonl, config, its own final checkpoint with optimizer state) is kept.
Writes ``--out/results.json``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _demo import MEMORY_OPTIONS_OFF  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "configs" / "arithmetic_grpo.yaml"
EVAL_KEYS = ("greedy", "T=1.0")  # evaluate_heldout's names for eval.temperature=0 and extra_temperatures=[1.0]
FRAMEWORKS = ("trl", "rlvr")
NAMES = {"trl": "TRL GRPOTrainer", "rlvr": "rlvr"}
TARGET_RATIO = 1 / 3
SPLIT_KEYS = {"trl": ("generate", "reward", "rollout_other", "learner", "other"),
              "rlvr": ("generate", "verify", "learn", "sync", "other")}


# --------------------------------------------------------------------------- pure parts (unit-tested)
class BudgetClock:
    """Training seconds (wall clock minus pauses) against a budget, with checkpoint marks at budget x k / n.

    ``after_step()`` is called when an optimizer step ends and says whether to save a checkpoint (the
    first step ending at or after a mark not yet passed, or the last step) and whether to stop (the
    training seconds reached the budget).  ``pause()`` excludes a block (a checkpoint save) from the
    clock.  ``now`` is injectable for tests.
    """

    def __init__(self, budget_s: float, n_checkpoints: int, now: Callable[[], float] = time.perf_counter,
                 max_steps: int | None = None):
        if budget_s <= 0 or n_checkpoints < 1 or (max_steps is not None and max_steps < 1):
            raise ValueError("need budget_s > 0, n_checkpoints >= 1 and max_steps None or >= 1")
        self.budget_s, self.now, self.max_steps, self.steps = float(budget_s), now, max_steps, 0
        self.marks = [budget_s * k / n_checkpoints for k in range(1, n_checkpoints + 1)]
        self.next_mark = 0
        self.t0: float | None = None
        self.paused = 0.0

    def start(self) -> None:
        self.t0 = self.now()

    @property
    def started(self) -> bool:
        return self.t0 is not None

    def elapsed(self) -> float:
        if self.t0 is None:
            raise RuntimeError("BudgetClock.elapsed() before start()")
        return self.now() - self.t0 - self.paused

    @contextmanager
    def pause(self):
        t = self.now()
        try:
            yield
        finally:
            self.paused += self.now() - t

    def after_step(self) -> tuple[bool, bool]:
        """``(save, stop)`` for the step that just ended (stop: the budget is spent or ``max_steps`` reached)."""
        e = self.elapsed()
        self.steps += 1
        stop = e >= self.budget_s or (self.max_steps is not None and self.steps >= self.max_steps)
        save = stop
        while self.next_mark < len(self.marks) and e >= self.marks[self.next_mark]:
            self.next_mark, save = self.next_mark + 1, True
        return save, stop


def accuracy(point: dict, key: str) -> float:
    return point["eval"][key]["accuracy"]


def first_reaching(points: list[dict], key: str, target: float) -> dict | None:
    """The earliest point (by training seconds) whose ``key`` accuracy is at least ``target``, or None."""
    for p in sorted(points, key=lambda p: p["train_s"]):
        if accuracy(p, key) >= target - 1e-12:
            return p
    return None


def race_summary(trl_points: list[dict], rlvr_points: list[dict], keys=EVAL_KEYS) -> dict:
    """Per eval key: TRL's final accuracy (its last checkpoint), the first checkpoint of each framework at or
    above it, and the ratio of their training seconds rlvr / TRL (None when either never reaches it or TRL
    reaches it at 0 s, i.e. the untrained model is already as good)."""
    out = {}
    trl_last = max(trl_points, key=lambda p: p["train_s"])
    for key in keys:
        target = accuracy(trl_last, key)
        t, r = first_reaching(trl_points, key, target), first_reaching(rlvr_points, key, target)
        ratio = r["train_s"] / t["train_s"] if (t is not None and r is not None and t["train_s"] > 0) else None
        out[key] = {"trl_final_accuracy": target, "trl_final_train_s": trl_last["train_s"],
                    "trl_reach": _brief(t), "rlvr_reach": _brief(r), "ratio_rlvr_over_trl": ratio,
                    "ratio_rlvr_over_trl_total": (r["train_s"] / trl_last["train_s"]
                                                  if r is not None and trl_last["train_s"] > 0 else None),
                    "target_met": ratio is not None and ratio <= TARGET_RATIO}
    return out


def _brief(p: dict | None) -> dict | None:
    return None if p is None else {k: p[k] for k in ("tag", "train_s", "steps", "completions")}


def time_split(steps: list[dict], keys: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Total seconds per phase over the per-step rows (each row carries its phase seconds), and the share of
    the sum."""
    totals = {k: sum(float(r.get(k, 0.0)) for r in steps) for k in keys}
    whole = sum(totals.values())
    return {k: {"seconds": v, "share": v / whole if whole > 0 else 0.0} for k, v in totals.items()}


def format_points(points: list[dict], keys=EVAL_KEYS) -> list[str]:
    lines = [f"  {'train s':>8} {'steps':>6} {'completions':>11}   "
             + "   ".join(f"{k + ' acc [95% CI]':>24}" for k in keys)]
    for p in sorted(points, key=lambda p: p["train_s"]):
        cells = []
        for k in keys:
            e = p["eval"][k]
            cells.append(f"{e['accuracy']:>8.1%} [{e['ci_low']:.1%}, {e['ci_high']:.1%}]".rjust(24))
        lines.append(f"  {p['train_s']:>8.1f} {p['steps']:>6} {p['completions']:>11}   " + "   ".join(cells))
    return lines


def format_split(split: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{k} {v['seconds']:.1f} s ({v['share']:.0%})" for k, v in split.items())


def format_summary(summary: dict) -> list[str]:
    lines = []
    for key, s in summary.items():
        t, r = s["trl_reach"], s["rlvr_reach"]
        line = f"  {key}: TRL's final accuracy {s['trl_final_accuracy']:.1%} (after {s['trl_final_train_s']:.0f} s); "
        line += "TRL first reached it " + (f"at {t['train_s']:.0f} s ({t['tag']}, step {t['steps']})"
                                           if t else "never")
        line += ", rlvr " + (f"at {r['train_s']:.0f} s ({r['tag']}, step {r['steps']})" if r else
                             "never within its budget")
        if s["ratio_rlvr_over_trl"] is not None:
            line += (f"; rlvr / TRL = {s['ratio_rlvr_over_trl']:.2f} "
                     f"({'meets' if s['target_met'] else 'misses'} the 1/3 target)")
        elif t is not None and t["train_s"] == 0:
            line += "; no ratio: the untrained model already scores TRL's final accuracy"
        lines.append(line)
    return lines


def seeds_summary(results: list[dict], keys=EVAL_KEYS) -> dict:
    """The distribution over races (one ``results.json`` each, e.g. one per ``--seed``): per eval key, each race's
    TRL final accuracy, the training seconds each framework first reached it (None: never) and their ratio, rlvr's
    accuracy at the end of its budget, and over the races the median, minimum and maximum of those numbers (over
    the races where they exist) with the count of races in which rlvr never reached TRL's final accuracy."""
    import statistics

    out = {}
    for key in keys:
        rows = []
        for res in results:
            s = res["summary"][key]
            rlvr_last = max(res["points"]["rlvr"], key=lambda p: p["train_s"])
            rows.append({"seed": res["args"].get("seed", 0), "trl_final_accuracy": s["trl_final_accuracy"],
                         "trl_s": (s["trl_reach"] or {}).get("train_s"), "rlvr_s": (s["rlvr_reach"] or {}).get("train_s"),
                         "ratio": s["ratio_rlvr_over_trl"], "rlvr_final_accuracy": accuracy(rlvr_last, key)})
        stats = {}
        for f in ("trl_final_accuracy", "rlvr_final_accuracy", "trl_s", "rlvr_s", "ratio"):
            vals = [r[f] for r in rows if r[f] is not None]
            stats[f] = ({"n": len(vals), "median": statistics.median(vals), "min": min(vals), "max": max(vals)}
                        if vals else {"n": 0})
        out[key] = {"races": rows, "stats": stats, "rlvr_never": sum(r["rlvr_s"] is None for r in rows),
                    "target_met": sum(r["ratio"] is not None and r["ratio"] <= TARGET_RATIO for r in rows)}
    return out


def format_seeds_summary(summary: dict) -> list[str]:
    lines = []
    for key, s in summary.items():
        lines.append(f"{key}:")
        lines.append(f"  {'seed':>4} {'TRL final':>9} {'TRL s':>7} {'rlvr s':>7} {'rlvr/TRL':>8} {'rlvr final':>10}")
        for r in sorted(s["races"], key=lambda r: r["seed"]):
            cell = (lambda v, f: "never" if v is None else format(v, f))
            lines.append(f"  {r['seed']:>4} {r['trl_final_accuracy']:>9.1%} {cell(r['trl_s'], '.0f'):>7} "
                         f"{cell(r['rlvr_s'], '.0f'):>7} {cell(r['ratio'], '.2f'):>8} {r['rlvr_final_accuracy']:>10.1%}")
        st = s["stats"]
        for f, label, fmt in (("ratio", "rlvr / TRL time", ".2f"), ("rlvr_s", "rlvr seconds", ".0f"),
                              ("trl_s", "TRL seconds", ".0f"), ("trl_final_accuracy", "TRL final accuracy", ".1%"),
                              ("rlvr_final_accuracy", "rlvr final accuracy", ".1%")):
            v = st[f]
            lines.append(f"  {label}: " + (f"median {v['median']:{fmt}}, min {v['min']:{fmt}}, max {v['max']:{fmt}} "
                                            f"over {v['n']}" if v["n"] else "none"))
        lines.append(f"  rlvr never reached TRL's final accuracy in {s['rlvr_never']} of {len(s['races'])}; "
                     f"the 1/3 target met in {s['target_met']} of {len(s['races'])}")
    return lines


# rlvr's learner speed options: packed micro-batches, each group's prompt packed once (Prefix Grouper),
# the LM head in chunks. The algorithm, the optimizer (fp32 AdamW, as TRL) and the sampler are unchanged.
RLVR_SPEED = ["train.micro_batch_tokens=1024", "train.share_prompts=true", "train.logprob_chunk_size=128"]


# --------------------------------------------------------------------------- set-up shared by both
def demo_config(out: Path, args, extra: list[str] = ()):
    """The demo's RunConfig, with what the race changes: the step limit (``--steps``; 0: none, the clock stops
    it), no in-loop checkpoints or evaluations, the held-out size, threads and a CPU policy."""
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    return load_config(RunConfig, DEMO_CONFIG, [
        *MEMORY_OPTIONS_OFF,  # the fp32-AdamW learner the race was recorded with (see _demo.py)
        f"train.output_dir={out}", f"train.steps={args.steps or 1_000_000}", "train.save_every=0", "train.progress=false",
        f"train.threads={args.threads}", f"train.seed={args.seed}", "eval.before_training=false",
        "eval.after_training=false",
        f"eval.num_problems={args.eval_problems}", "model.device=cpu", *extra])


def save_weights(model, path: Path, dtype) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().to("cpu", dtype) for k, v in model.state_dict().items()}, path)


def checkpoint_dtype(cfg):
    """Checkpoints are stored in the dtype the evaluation samples in (the demo's bf16 sampler): no loss."""
    import torch

    return torch.float32 if cfg.rollout.dtype == "auto" else getattr(torch, cfg.rollout.dtype)


class Timeline:
    """Per-step rows and checkpoints of one framework, written to ``train.json``."""

    def __init__(self, fw: str, out: Path, cfg, budget_s: float, n_checkpoints: int):
        self.fw, self.out, self.cfg = fw, out, cfg
        self.clock = BudgetClock(budget_s, n_checkpoints, max_steps=cfg.train.steps)
        self.steps: list[dict] = []
        self.points: list[dict] = []
        self.dtype = checkpoint_dtype(cfg)
        self.last_s = 0.0
        self.t_created = time.perf_counter()
        self.setup_s = None

    def start(self) -> None:
        self.setup_s = time.perf_counter() - self.t_created
        self.clock.start()

    def step_end(self, step: int, completions: int, phases: dict[str, float], model, extra: dict | None = None
                 ) -> bool:
        """Record the step that just ended (its phases; ``other`` is the rest of its clock time), checkpoint if
        due; returns whether the budget is spent."""
        save, stop = self.clock.after_step()
        now = self.clock.elapsed()
        row = {"step": step, "train_s": now, "completions": completions, **phases, **(extra or {})}
        row["other"] = (now - self.last_s) - sum(phases.values())
        self.last_s = now
        self.steps.append(row)
        if save:
            tag = f"ckpt-{len(self.points) + 1:02d}"
            with self.clock.pause():
                save_weights(model, self.out / "weights" / f"{tag}.pt", self.dtype)
            self.points.append({"tag": tag, "train_s": now, "steps": step, "completions": completions})
            print(f"[{self.fw}] {now:7.1f} s  step {step}: checkpoint {tag}", flush=True)
        return stop

    def write(self, info: dict) -> dict:
        data = {"framework": self.fw, "seed": self.cfg.train.seed, "budget_s": self.clock.budget_s,
                "max_steps": self.cfg.train.steps, "schedule": self.cfg.train.schedule, "lr": self.cfg.train.lr,
                "checkpoint_marks_s": self.clock.marks,
                "setup_s": self.setup_s, "train_s": self.last_s, "steps": self.steps, "points": self.points,
                "split": time_split(self.steps, SPLIT_KEYS[self.fw]), **info}
        (self.out / "train.json").write_text(json.dumps(data, indent=2))
        return data


def reward_function(verifier, correct_reward: float = 1.0, wrong_reward: float = 0.0):
    """rlvr's verifier as a TRL reward function (``answer`` is a dataset column, passed per completion)."""
    from rlvr.verifiers import safe_verify

    def numeric_verifier(completions, answer, **_):
        out = []
        for c, ref in zip(completions, answer):
            text = c[0]["content"] if isinstance(c, list) else c  # conversational: [{"role", "content"}]
            ok = safe_verify(verifier, text, ref).correct
            out.append(correct_reward if ok else wrong_reward)
        return out

    return numeric_verifier


def trl_dataset(problems, system_prompt: str | None):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": p.to_messages(system_prompt), "answer": str(p.answer)} for p in problems])


def _timed(acc: dict, name: str, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[name] += time.perf_counter() - t0
    return wrapper


# --------------------------------------------------------------------------- TRL
def train_trl(cfg, problems, verifier, out: Path, args) -> dict:
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.engines.hf import format_prompt
    from rlvr.learner.update import make_scheduler
    from rlvr.models import load_policy

    tl = Timeline("trl", out, cfg, args.budget_min * 60, args.checkpoints)
    train, _ = problems
    model, tok = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
    G, P, tc, alg = cfg.rollout.group_size, cfg.train.prompts_per_step, cfg.train, cfg.algorithm
    mb = tc.micro_batch_size
    if (G * P) % mb:
        raise SystemExit(f"prompts_per_step x group_size ({P * G}) must be a multiple of micro_batch_size ({mb})")
    if alg.advantage != "grpo" or alg.kl_coef or alg.loss_agg != "token_mean" or alg.ppo_epochs != 1 \
            or alg.mini_batches != 1 or cfg.train.autocast != "none" or cfg.rollout.top_p != 1.0:
        raise SystemExit("the TRL side mirrors grpo / no KL / token_mean / 1 epoch of 1 mini-batch / fp32 learner / "
                         "top_p 1 only")
    gcfg = GRPOConfig(
        output_dir=str(out / "hf"), use_cpu=True, bf16=False, seed=tc.seed, data_seed=tc.seed,
        per_device_train_batch_size=mb, gradient_accumulation_steps=G * P // mb, num_generations=G,
        max_completion_length=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature, top_p=1.0, top_k=0,
        num_iterations=1, beta=0.0, loss_type="dapo", scale_rewards="group", epsilon=alg.clip_low,
        epsilon_high=alg.clip_high, mask_truncated_completions=False, max_grad_norm=tc.max_grad_norm,
        learning_rate=tc.lr, max_steps=tc.steps, logging_steps=1, report_to=[], save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0,
        # TRL's default recomputes activations (slower, no other effect); newer transformers renamed the option
        **({"activation_checkpointing": False} if "activation_checkpointing" in GRPOConfig.__dataclass_fields__
           else {"gradient_checkpointing": False}))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tc.lr,
                                  betas=tuple(tc.betas), weight_decay=tc.weight_decay)
    scheduler = make_scheduler(optimizer, cfg.schedule_settings())
    acc = {"generate": 0.0, "reward": 0.0, "rollout": 0.0, "training_step": 0.0}
    seen = dict(acc)
    trl_logs: dict[int, dict] = {}  # TRL's own log row of each step (reward, lengths, its step_time)

    class Race(TrainerCallback):
        def on_train_begin(self, args_, state, control, **kw):
            tl.start()

        def on_step_end(self, args_, state, control, model=None, **kw):
            d = {k: acc[k] - seen[k] for k in acc}
            seen.update(acc)
            phases = {"generate": d["generate"], "reward": d["reward"],
                      "rollout_other": d["rollout"] - d["generate"] - d["reward"],
                      "learner": d["training_step"] - d["rollout"]}
            if tl.step_end(state.global_step, state.global_step * G * P, phases, model):
                control.should_training_stop = True

        def on_log(self, args_, state, control, logs=None, **kw):
            if logs is not None:
                trl_logs[state.global_step] = dict(logs)

    trainer = GRPOTrainer(model=model, reward_funcs=reward_function(verifier, cfg.reward.correct_reward,
                                                                      cfg.reward.wrong_reward),
                          args=gcfg, train_dataset=trl_dataset(train, cfg.task.system_prompt), processing_class=tok,
                          optimizers=(optimizer, scheduler), callbacks=[Race()])
    checks = {}
    try:  # the same prompt token ids as rlvr's engine gives the policy
        msgs = [p.to_messages(cfg.task.system_prompt) for p in train[:8]]
        trl_ids = [list(x) for x in trainer._tokenize_prompts(msgs)[0]]
        rlvr_ids = [format_prompt(tok, p, cfg.task.system_prompt) for p in train[:8]]
        checks["prompt_ids_match"] = trl_ids == rlvr_ids
        if not checks["prompt_ids_match"]:
            raise SystemExit(f"TRL's prompt ids differ from rlvr's: {trl_ids[0]} vs {rlvr_ids[0]}")
    except AttributeError as e:  # a TRL without _tokenize_prompts: say it was not checked
        checks["prompt_ids_match"] = f"unchecked ({e})"
    checks["eos_token_ids"] = sorted(int(x) for x in getattr(trainer, "eos_token_ids", []) or [])
    for name, attr in (("generate", "_generate_single_turn"), ("reward", "_calculate_rewards"),
                       ("rollout", "_generate_and_score_completions"), ("training_step", "training_step")):
        if not hasattr(trainer, attr):
            raise SystemExit(f"TRL has no {attr}: update the timing wrappers of this script")
        setattr(trainer, attr, _timed(acc, name, getattr(trainer, attr)))
    trainer.train()
    for r in tl.steps:  # TRL's own per-step log: reward, lengths, its step_time
        lg = trl_logs.get(r["step"], {})
        r.update({k: lg[k] for k in ("reward", "completions/mean_length", "step_time") if k in lg})
    import trl

    data = tl.write({"trl_version": trl.__version__, "checks": checks,
                     "grpo_config": {k: v for k, v in gcfg.to_dict().items() if isinstance(v, (int, float, str, bool))
                                     or v is None}})
    del trainer, model, optimizer
    gc.collect()
    return data


# --------------------------------------------------------------------------- rlvr
def train_rlvr(cfg, problems, verifier, out: Path, args) -> dict:
    from rlvr.models import load_policy
    from rlvr.recipes.rl import RLRecipe

    tl = Timeline("rlvr", out, cfg, args.budget_min * 60, args.checkpoints)
    model, tok = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)

    class RaceRecipe(RLRecipe):
        def begin(self):
            summary = super().begin()
            tl.start()
            return summary

        def show(self, row):
            super().show(row)
            phases = {"generate": row["gen_time"], "verify": row["verify_time"], "learn": row["learn_time"],
                      "sync": row["sync_time"]}
            extra = {"reward": row["reward_mean"], "completions/mean_length": row["response_length"],
                     "step_time": row["step_time"], "learner_seqs": row.get("learner_seqs")}
            if tl.step_end(row["step"], row["rollouts"], phases, self.model, extra):
                # the loop checks train.max_rollouts before every step: this ends training after this one
                self.cfg.train.max_rollouts = max(1, self.rollouts_done)

    if (out / "run").exists():
        shutil.rmtree(out / "run")  # a half-finished earlier attempt
    RaceRecipe(cfg, model=model, tokenizer=tok, problems=problems, verifier=verifier).train()
    data = tl.write({"rlvr_run_dir": str(out / "run"), "rlvr_set": list(args.rlvr_set)})
    del model
    gc.collect()
    return data


# --------------------------------------------------------------------------- evaluation
def evaluate_all(cfg, problems, verifier, out: Path, trained: dict[str, dict], keep_weights: bool = True) -> dict:
    """Every checkpoint of both (and the untrained model once), scored by rlvr's evaluate_heldout; an evaluation
    already written for the same number of problems is reused.  Without ``keep_weights`` a checkpoint's
    weights are deleted once its evaluation is written."""
    import torch

    from rlvr.distributed.engine_factory import make_engine
    from rlvr.models import load_policy
    from rlvr.recipes.rl import evaluate_heldout, format_eval

    heldout = problems[1]
    n = min(cfg.eval.num_problems, len(heldout))
    model, tok = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
    engine = make_engine(model, tok, cfg.rollout, cfg.engine_context(), cfg.distributed)

    def cached(d: Path, tag: str) -> dict | None:
        f = d / f"eval_{tag}.json"
        res = json.loads(f.read_text()) if f.exists() else None
        return res if res is not None and all(r["n"] == n for r in res.values()) else None

    def run(d: Path, tag: str) -> dict:
        t0 = time.perf_counter()
        res = evaluate_heldout(engine, heldout, verifier, cfg, tag, d)
        print(f"  eval {d.name}/{tag} ({time.perf_counter() - t0:.0f} s): {format_eval(res)}", flush=True)
        return res

    (out / "initial").mkdir(parents=True, exist_ok=True)
    initial = cached(out / "initial", "initial") or run(out / "initial", "initial")  # before any load
    points = {}
    for fw, data in trained.items():
        pts = [{"tag": "initial", "train_s": 0.0, "steps": 0, "completions": 0, "eval": _strip(initial)}]
        d = out / fw
        for p in data["points"]:
            res = cached(d, p["tag"])
            weights = d / "weights" / f"{p['tag']}.pt"
            if res is None:
                if not weights.exists():
                    raise SystemExit(f"{weights} is gone and {d}/eval_{p['tag']}.json is not for {n} problems: "
                                     "use another --out or the earlier --eval-problems")
                model.load_state_dict(torch.load(weights, map_location="cpu"))
                engine.sync_weights(model)
                res = run(d, p["tag"])
            if not keep_weights and weights.exists():
                weights.unlink()
            pts.append({**p, "eval": _strip(res)})
        points[fw] = pts
    return points


def _strip(res: dict) -> dict:
    return {k: {f: v[f] for f in ("accuracy", "ci_low", "ci_high", "n", "mean_completion_tokens")}
            for k, v in res.items()}


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=30.0, help="training minutes per framework")
    ap.add_argument("--checkpoints", type=int, default=10, help="checkpoints per framework, at budget x k / n")
    ap.add_argument("--eval-problems", type=int, default=256, help="held-out problems scored per checkpoint")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads for both (0: torch's default)")
    ap.add_argument("--out", type=Path, default=None, help="results directory (default runs/race_vs_trl[_smoke])")
    ap.add_argument("--keep-weights", action="store_true",
                    help="keep the checkpoints' weights (--out/FRAMEWORK/weights) after they are evaluated")
    ap.add_argument("--smoke", action="store_true", help="end-to-end check: 0.5 min each, 2 checkpoints, 16 problems")
    ap.add_argument("--steps", type=int, default=None,
                    help="step limit and schedule horizon of both (default: the demo config's train.steps; 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="train.seed of both frameworks (default 0)")
    ap.add_argument("--train-only", action="store_true",
                    help="stop after training (the timed part); the same command without it evaluates")
    ap.add_argument("--summarize", nargs="+", type=Path, metavar="DIR",
                    help="print the distribution over the races in these --out directories (their results.json)")
    ap.add_argument("--rlvr-set", nargs="*", default=RLVR_SPEED,
                    help="rlvr-only config overrides (learner options that change neither the algorithm nor the "
                         "optimizer; default: %(default)s; none: the race as recorded before 2026-11-24 evening)")
    args = ap.parse_args()
    if args.summarize:
        results = [json.loads((d / "results.json").read_text()) for d in args.summarize]
        summary = seeds_summary(results)
        print("\n".join(format_seeds_summary(summary)))
        return
    if args.smoke:
        args.budget_min, args.checkpoints, args.eval_problems = 0.5, 2, 16
    if args.steps is None:
        from rlvr.config import load_config
        from rlvr.recipes.config import RunConfig

        args.steps = load_config(RunConfig, DEMO_CONFIG, []).train.steps
    if args.steps < 0:
        raise SystemExit(f"--steps must be 0 (no limit) or a step count, not {args.steps}")
    out = args.out or ROOT / "runs" / ("race_vs_trl_smoke" if args.smoke else "race_vs_trl")
    out.mkdir(parents=True, exist_ok=True)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from rlvr.tasks.registry import build_task
    from rlvr.verifiers import get_verifier

    base = demo_config(out / "rlvr" / "run", args)
    problems = build_task(base.task)
    verifier = get_verifier(base.reward.verifier, **base.reward.verifier_params)
    trained = {}
    for fw in FRAMEWORKS:
        d = out / fw
        if (d / "train.json").exists():
            data = json.loads((d / "train.json").read_text())
            if data["budget_s"] != args.budget_min * 60:
                raise SystemExit(f"{d} was trained for {data['budget_s']} s, not {args.budget_min * 60} s: "
                                 "use another --out")
            if data.get("max_steps", 1_000_000) != base.train.steps:  # races before --steps: no limit
                raise SystemExit(f"{d} was trained with a limit of {data.get('max_steps', 1_000_000)} steps, not "
                                 f"--steps {args.steps}: use another --out")
            if data.get("seed", 0) != args.seed:
                raise SystemExit(f"{d} was trained with --seed {data.get('seed', 0)}, not {args.seed}: use another --out")
            if fw == "rlvr" and data.get("rlvr_set", []) != list(args.rlvr_set):
                raise SystemExit(f"{d} was trained with --rlvr-set {data.get('rlvr_set', [])}, not {args.rlvr_set}: "
                                 "use another --out")
            print(f"[{fw}] already trained ({len(data['steps'])} steps): {d / 'train.json'}")
            trained[fw] = data
            continue
        if (d / "weights").exists():
            shutil.rmtree(d / "weights")
        d.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(args.seed)
        cfg = demo_config(d / "run", args, args.rlvr_set if fw == "rlvr" else [])
        print(f"[{fw}] training for {args.budget_min:g} min ...", flush=True)
        trained[fw] = (train_trl if fw == "trl" else train_rlvr)(cfg, problems, verifier, d, args)
    if args.train_only:
        print(f"trained; evaluate with the same command without --train-only ({out})")
        return
    print("evaluating checkpoints ...", flush=True)
    points = evaluate_all(base, problems, verifier, out, trained, keep_weights=args.keep_weights)
    summary = race_summary(points["trl"], points["rlvr"])

    import trl

    ecfg = base.eval
    lines = [f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads, "
             f"torch {torch.__version__}, trl {trl.__version__}; load average {os.getloadavg()[0]:.2f} at the end",
             f"task: the demo ({DEMO_CONFIG.relative_to(ROOT)}): {base.task.name}, {base.model.name}, "
             f"{base.train.prompts_per_step} prompts x {base.rollout.group_size} completions per step, "
             f"{base.rollout.max_new_tokens} new tokens, T={base.rollout.temperature}, lr {base.train.lr:g}, "
             f"{base.train.warmup_steps} warm-up steps, {base.train.schedule} schedule over "
             f"{base.train.steps} steps (the step limit)",
             f"rlvr overrides: {' '.join(args.rlvr_set) or '(none)'}",
             f"budget: {args.budget_min:g} min of training per framework; checkpoints every "
             f"{args.budget_min * 60 / args.checkpoints:.0f} s of training (granularity of the times below)",
             f"held-out: {min(ecfg.num_problems, len(problems[1]))} problems, greedy and T=1.0, "
             f"{ecfg.max_new_tokens} new tokens, Wilson 95% intervals"]
    for fw in FRAMEWORKS:
        t = trained[fw]
        lines += ["", f"{NAMES[fw]}: {len(t['steps'])} steps in {t['train_s']:.1f} s "
                      f"({t['train_s'] / max(1, len(t['steps'])):.1f} s/step; set-up {t['setup_s']:.1f} s, untimed)",
                  *format_points(points[fw]), f"  time split: {format_split(t['split'])}"]
    lines += ["  (rlvr's learn includes its optimizer step; TRL's learner is forward + backward, and its optimizer "
              "step, gradient clipping and Trainer loop are in other)"]
    lines += ["", "time to reach TRL's final accuracy:", *format_summary(summary)]
    print("\n" + "\n".join(lines))
    results = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "summary": summary, "points": points,
               "train": {fw: {k: v for k, v in trained[fw].items() if k != "steps"} for fw in FRAMEWORKS},
               "steps": {fw: trained[fw]["steps"] for fw in FRAMEWORKS}, "report": lines}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
