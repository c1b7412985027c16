"""``rlvr rm train``: outcome and process reward models trained on the policy's own verified samples.

* **ORM** (``kind=orm``): an ``AutoModelForSequenceClassification`` with one label,
  initialised from the policy, on (problem, completion, correct) triples: pointwise
  (binary cross-entropy of ``sigmoid(logit)`` against correctness) or Bradley-Terry
  (``-log sigmoid(s_correct - s_wrong)`` over correct/wrong pairs of the same prompt;
  Bradley & Terry 1952, Ouyang et al. 2022).
* **PRM** (``kind=prm``): Math-Shepherd automatic step labels (Wang et al. 2024,
  "Math-Shepherd: Verify and Reinforce LLMs Step-by-step without Human Annotations",
  Sec. 3.3): for each step prefix of a sample, ``k`` continuations are sampled by
  rlvr's :class:`~rlvr.engines.hf.HFEngine` (``generate(..., prefixes=...)``) and the
  step's label is their success rate under the task's verifier (soft estimation;
  ``label=hard``: 1 if any continuation succeeds); the last step's label is the
  sample's own verdict.  The model is the policy's causal LM trained on the
  Math-Shepherd step-tag format that :class:`rlvr.rewards.models.ProcessRewardModel`
  reads (:func:`rlvr.rewards.models.prm_input_ids`): at each tag position the
  cross-entropy of ``softmax(logits[[good, bad]])`` against the label.

Both are trained fully or with LoRA (merged before saving, so the directory is a
plain HF model), on samples read from a ``rlvr eval`` samples file or sampled fresh
from the task, split by problem into train and held-out.  The held-out report
(accuracy at 0.5, ROC AUC, expected calibration error, Brier score; for the PRM per
step and per solution with min-aggregation) is printed and written to
``OUTPUT/rm_metrics.json``; ``OUTPUT`` loads with ``rlvr search --scorer orm:OUTPUT``
/ ``prm:OUTPUT`` (``--step-tag`` as trained).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from rlvr.evaluate.metrics import expected_calibration_error

from rlvr.config import ConfigModel, option
from rlvr.models.lora import LoraSettings
from rlvr.recipes.config import TaskConfig

log = logging.getLogger(__name__)

__all__ = ["RMConfig", "train_reward_model", "roc_auc", "expected_calibration_error", "binary_metrics",
           "label_steps", "METADATA_FILE", "METRICS_FILE"]

METADATA_FILE = "rlvr_reward_model.json"
METRICS_FILE = "rm_metrics.json"


class RMConfig(ConfigModel):
    """``rlvr rm train`` settings (every key overridable as ``key=value``)."""

    kind: Literal["orm", "prm"] = option("orm", "orm: outcome reward model (sequence classifier); prm: process "
                                                "reward model (Math-Shepherd step tags)")
    model: str = option("smollm2-135m-instruct", "policy the reward model is initialised from and (fresh samples, "
                                                 "PRM labels) sampled with: bundled name, HF dir or hub id")
    output_dir: str = option("runs/rm", "where the trained model, rm_metrics.json and the labels are written")
    samples: str | None = option(None, "samples file from `rlvr eval` to train on (None: sample fresh from task.*)")
    task: TaskConfig = option(None, "task to sample fresh problems from (its train split)", default_factory=TaskConfig)
    num_problems: int = option(64, "problems used (first N of the samples file or of the task's train split)", ge=1)
    n: int = option(8, "fresh sampling: completions per problem", ge=1)
    temperature: float = option(0.8, "sampling temperature (fresh samples and PRM continuations)", ge=0)
    max_new_tokens: int = option(128, "token cap of fresh samples and of PRM continuations", ge=1)
    sample_batch_size: int = option(32, "sequences decoded together by the engine", ge=1)
    verifier: str | None = option(None, "registered verifier (None: numeric for arithmetic/gsm8k, else math)")
    heldout_fraction: float = option(0.25, "share of problems held out for the report (split by problem)", gt=0, lt=1)
    objective: Literal["pointwise", "bradley_terry"] = option(
        "pointwise", "ORM loss: pointwise BCE on correctness, or Bradley-Terry on correct/wrong pairs of a prompt")
    max_pairs_per_problem: int = option(8, "Bradley-Terry: correct/wrong pairs drawn per problem at most", ge=1)
    delimiter: str = option("\n\n", "PRM: step delimiter (as rlvr search --delimiter)")
    step_tag: str = option("ки", "PRM: step tag string (its last token is the tag; as rlvr search --step-tag)")
    good: str = option("+", "PRM: token meaning a good step")
    bad: str = option("-", "PRM: token meaning a bad step")
    rollouts_per_step: int = option(4, "PRM: continuations sampled from each step prefix (Math-Shepherd's N)", ge=1)
    label: Literal["soft", "hard", "calculations"] = option(
        "soft", "PRM: soft = success rate of the continuations, hard = 1 if any succeeds (Math-Shepherd SE / HE), "
                "calculations = 1 before the first step with a wrong written calculation, 0 from it on (checked by "
                "rule, no sampling: FoVer-style labels from a checker)")
    max_steps: int = option(8, "PRM: steps labelled per sample at most (the first ones)", ge=1)
    samples_per_problem: int = option(4, "PRM: samples per problem that get step labels (both outcomes if possible)",
                                      ge=1)
    lora: LoraSettings = option(None, "LoRA fine-tuning instead of all weights (merged before saving)",
                                default_factory=LoraSettings)
    lr: float = option(1e-5, "AdamW learning rate (LoRA usually wants ~1e-4)", gt=0)
    weight_decay: float = option(0.0, "AdamW weight decay", ge=0)
    epochs: int = option(1, "passes over the training examples", ge=1)
    max_updates: int = option(0, "stop after this many optimizer steps (0: no limit)", ge=0)
    batch_size: int = option(8, "examples (ORM: samples or pairs; PRM: labelled samples) per optimizer step", ge=1)
    max_length: int = option(1024, "tokens per input at most (the left is cut, as the scorers do)", ge=1)
    seed: int = option(0, "seed of sampling, the split, pair drawing and shuffling")
    device: str = option("cpu", "torch device")
    threads: int = option(1, "torch CPU threads", ge=1)
    ece_bins: int = option(10, "bins of the expected calibration error", ge=1)

    def check(self) -> None:
        if not self.delimiter:
            raise ValueError("delimiter must be a non-empty string")


# --------------------------------------------------------------------------- metrics
def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(score of a random positive > that of a random negative), ties counting
    1/2 (the Mann-Whitney U statistic over n_pos * n_neg).  NaN when a class is missing."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=float)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks of ties (1-based)
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def binary_metrics(probs: Sequence[float], labels: Sequence[float], bins: int = 10) -> dict[str, float]:
    """Accuracy at 0.5, ROC AUC, ECE and Brier score of probabilities against labels in [0, 1] (soft labels
    count as positive from 0.5 for accuracy and AUC; ECE and Brier use them as they are)."""
    p = np.asarray(probs, dtype=float)
    y = np.asarray(labels, dtype=float)
    pos = y >= 0.5
    return {"n": int(len(p)), "positive_share": float(pos.mean()) if len(p) else math.nan,
            "accuracy": float(((p >= 0.5) == pos).mean()) if len(p) else math.nan,
            "auc": roc_auc(p, pos), "ece": expected_calibration_error(p, y, bins),
            "brier": float(((p - y) ** 2).mean()) if len(p) else math.nan}


# --------------------------------------------------------------------------- data
@dataclass
class _Problem:
    """One problem's question, reference and verified samples."""

    id: str
    question: str
    answer: str
    texts: list[str]
    correct: list[bool]
    problem: Any  # a Problem (for the engine) or None


def _verifier_name(cfg: RMConfig, task: str) -> str:
    if cfg.verifier:
        return cfg.verifier
    return "numeric" if task in ("arithmetic", "gsm8k") else "math"


def _collect(cfg: RMConfig, model, tokenizer, out: Path) -> tuple[list[_Problem], str]:
    """Verified samples: from ``cfg.samples`` or sampled fresh (written to OUTPUT/samples.jsonl)."""
    from rlvr.evaluate.samples import (generate_samples, make_header, model_fingerprint, read_samples,
                                       score_samples)
    from rlvr.types import Problem

    if cfg.samples:
        header, records = read_samples(cfg.samples)
        records = records[: cfg.num_problems]
        task = header.task
        problems = [Problem(id=r.id, prompt=r.prompt, answer=r.answer, metadata=r.metadata) for r in records]
    else:
        from rlvr.engines.hf import HFEngine
        from rlvr.tasks.registry import build_task

        task = cfg.task.name
        train, _ = build_task(cfg.task)
        problems = list(train[: cfg.num_problems])
        engine = HFEngine(model, tokenizer, batch_size=cfg.sample_batch_size, system_prompt=cfg.task.system_prompt)
        header = make_header(task, problems, cfg.model, model_fingerprint(model), n=cfg.n,
                             temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                             system_prompt=cfg.task.system_prompt)
        records = generate_samples(engine, problems, header, out / "samples.jsonl", progress=False)
    verifier = _verifier_name(cfg, task)
    scored = score_samples(records, verifier)
    data = [_Problem(r.id, p.prompt or r.prompt, r.answer, [s["text"] for s in r.samples],
                     [bool(c) for c in scored.correct[i]], p)
            for i, (r, p) in enumerate(zip(records, problems))]
    return data, verifier


def _split(data: list[_Problem], frac: float, seed: int) -> tuple[list[_Problem], list[_Problem]]:
    idx = list(range(len(data)))
    random.Random(seed).shuffle(idx)
    n_held = max(1, int(round(frac * len(data)))) if len(data) > 1 else 0
    held = set(idx[:n_held])
    return [d for i, d in enumerate(data) if i not in held], [d for i, d in enumerate(data) if i in held]


def label_steps(engine, problem, steps: Sequence[str], correct: bool, verify, *, delimiter: str, k: int,
                params, hard: bool = False) -> list[float]:
    """Math-Shepherd labels of ``steps`` (the first ones of a sample whose outcome is ``correct``): for each
    step but the last of the whole sample, ``k`` continuations of ``delimiter.join(steps[:i+1]) + delimiter``
    are sampled and verified; the label is their success rate (``hard``: 1 if any succeeds).  The sample's
    last step gets its own verdict.  ``verify(text) -> bool``."""
    from dataclasses import replace

    labels: list[float] = []
    prefixes = [delimiter.join(steps[: i + 1]) + delimiter for i in range(len(steps) - 1)]
    if prefixes:
        groups = engine.generate([problem] * len(prefixes), replace(params, n=k), prefixes=prefixes)
        for prefix, group in zip(prefixes, groups):
            ok = [verify(prefix + s.text) for s in group]
            rate = sum(ok) / len(ok)
            labels.append(float(rate > 0) if hard else rate)
    labels.append(1.0 if correct else 0.0)
    return labels


# --------------------------------------------------------------------------- models
def _token_id(tokenizer, text: str, what: str) -> int:
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    unk = tokenizer.unk_token_id
    if not ids or (unk is not None and ids[-1] == unk):
        raise ValueError(f"{what} {text!r} is not in the tokenizer's vocabulary; choose another {what}")
    return ids[-1]


def _with_lora(model, settings: LoraSettings, task_type: str):
    from rlvr.models.lora import require_peft

    peft = require_peft()
    settings = type(settings).model_validate(settings.model_dump())  # the ranges, also after a change in place
    extra = {"modules_to_save": ["score"]} if task_type == "SEQ_CLS" else {}
    cfg = peft.LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                          target_modules=list(settings.target_modules), bias="none", task_type=task_type, **extra)
    return peft.get_peft_model(model, cfg)


def _unwrap(model):
    """A plain HF model: LoRA adapters merged in."""
    from rlvr.models.lora import is_lora_model

    return model.merge_and_unload() if is_lora_model(model) else model


# --------------------------------------------------------------------------- training loops
def _train(model, examples: list, loss_fn, cfg: RMConfig) -> list[float]:
    """AdamW over ``examples`` in shuffled batches; ``loss_fn(model, example) -> scalar`` summed per batch."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(cfg.seed)
    losses, updates = [], 0
    model.train()
    for _ in range(cfg.epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order), cfg.batch_size):
            batch = [examples[i] for i in order[start:start + cfg.batch_size]]
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for ex in batch:  # one sequence at a time: no padding, exactly the scorers' inputs
                loss = loss_fn(model, ex) / len(batch)
                loss.backward()
                total += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(total)
            updates += 1
            if cfg.max_updates and updates >= cfg.max_updates:
                model.eval()
                return losses
    model.eval()
    return losses


def _orm_logit(model, ids: list[int]):
    import torch

    dev = next(model.parameters()).device
    return model(input_ids=torch.tensor([ids], device=dev)).logits[0, 0].float()


def _train_orm(cfg: RMConfig, path: str, tokenizer, train: list[_Problem], held: list[_Problem]) -> tuple[Any, dict]:
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForSequenceClassification

    from rlvr.rewards.models import orm_input_ids

    torch.manual_seed(cfg.seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else tokenizer.eos_token_id
    model.to(cfg.device)
    if cfg.lora.enabled:
        model = _with_lora(model, cfg.lora, "SEQ_CLS")
    ids = lambda d, t: orm_input_ids(tokenizer, d.question, t, cfg.max_length)  # noqa: E731
    rng = random.Random(cfg.seed)
    if cfg.objective == "pointwise":
        examples = [(ids(d, t), float(c)) for d in train for t, c in zip(d.texts, d.correct)]

        def loss_fn(m, ex):
            logit = _orm_logit(m, ex[0])
            return F.binary_cross_entropy_with_logits(logit, torch.tensor(ex[1], device=logit.device))
    else:
        examples = []
        for d in train:
            good = [t for t, c in zip(d.texts, d.correct) if c]
            bad = [t for t, c in zip(d.texts, d.correct) if not c]
            pairs = [(g, b) for g in good for b in bad]
            rng.shuffle(pairs)
            examples += [(ids(d, g), ids(d, b)) for g, b in pairs[: cfg.max_pairs_per_problem]]

        def loss_fn(m, ex):
            return -F.logsigmoid(_orm_logit(m, ex[0]) - _orm_logit(m, ex[1]))
    if not examples:
        raise ValueError("no training examples: " + ("no problem has both a correct and a wrong sample"
                                                     if cfg.objective == "bradley_terry" else "no samples"))
    t0 = time.perf_counter()
    losses = _train(model, examples, loss_fn, cfg)
    train_s = time.perf_counter() - t0
    with torch.inference_mode():
        probs, labels, best = [], [], []
        for d in held:
            ps = [float(torch.sigmoid(_orm_logit(model, ids(d, t)))) for t in d.texts]
            probs += ps
            labels += [float(c) for c in d.correct]
            best.append(float(d.correct[int(np.argmax(ps))]) if ps else 0.0)
    report = {"held_out": binary_metrics(probs, labels, cfg.ece_bins),
              "best_of_n_accuracy": float(np.mean(best)) if best else math.nan,
              "train": {"examples": len(examples), "updates": len(losses), "first_loss": losses[0],
                        "last_loss": losses[-1], "seconds": train_s}}
    return _unwrap(model), report


def _prm_loss(model, ex, good_id: int, bad_id: int, hard: bool):
    import torch

    ids, positions, labels = ex
    dev = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids], device=dev)).logits[0].float()
    pair = logits[torch.tensor(positions, device=dev)][:, [good_id, bad_id]].log_softmax(-1)
    y = torch.tensor(labels, device=dev)
    if hard:
        y = (y > 0).float()
    return -(y * pair[:, 0] + (1 - y) * pair[:, 1]).mean()


def _prm_examples(tokenizer, data: list[_Problem], labels: dict, tag_id: int, cfg: RMConfig) -> list:
    from rlvr.rewards.models import prm_input_ids

    out = []
    for d in data:
        for steps, ys in labels.get(d.id, {}).values():
            ids, pos = prm_input_ids(tokenizer, d.question, steps, tag_id)
            cut = max(0, len(ids) - cfg.max_length)
            keep = [(p - cut, y) for p, y in zip(pos, ys) if p - cut >= 0]
            if keep:
                out.append((ids[cut:], [p for p, _ in keep], [y for _, y in keep]))
    return out


def _prm_labels(cfg: RMConfig, model, tokenizer, data: list[_Problem], verifier: str) -> dict:
    """``{problem id: {sample index: (steps, labels)}}`` for up to ``samples_per_problem`` samples per problem
    (correct and wrong ones alternated, so both outcomes are represented)."""
    from rlvr.engines.base import SamplingParams
    from rlvr.engines.hf import HFEngine
    from rlvr.rewards.functions.arithmetic_steps import calculation_step_labels
    from rlvr.rewards.models import split_steps
    from rlvr.types import Problem
    from rlvr.verifiers import get_verifier, safe_verify

    verify_fn = get_verifier(verifier)
    engine = HFEngine(model, tokenizer, batch_size=cfg.sample_batch_size, system_prompt=cfg.task.system_prompt)
    params = SamplingParams(n=cfg.rollouts_per_step, max_new_tokens=cfg.max_new_tokens,
                            temperature=cfg.temperature, seed=cfg.seed)
    out: dict = {}
    for d in data:
        good = [j for j, c in enumerate(d.correct) if c]
        bad = [j for j, c in enumerate(d.correct) if not c]
        chosen = [j for pair in zip(good, bad) for j in pair] + good[len(bad):] + bad[len(good):]
        chosen = chosen[: cfg.samples_per_problem]
        prob = d.problem if d.problem is not None else Problem(id=d.id, prompt=d.question, answer=d.answer)
        for j in chosen:
            steps = split_steps(d.texts[j], cfg.delimiter)[: cfg.max_steps]
            if not steps:
                continue
            whole = len(split_steps(d.texts[j], cfg.delimiter)) == len(steps)

            if cfg.label == "calculations":  # labels from checking each step's arithmetic: no continuations
                out.setdefault(d.id, {})[j] = (steps, calculation_step_labels(steps))
                continue

            def verify(text, _a=d.answer):
                return safe_verify(verify_fn, text, _a).correct

            ys = label_steps(engine, prob, steps if whole else steps + ["(cut)"], d.correct[j], verify,
                             delimiter=cfg.delimiter, k=cfg.rollouts_per_step, params=params,
                             hard=cfg.label == "hard")
            if not whole:  # the last kept step is not the sample's last: its label came from continuations
                ys = ys[:-1]
            out.setdefault(d.id, {})[j] = (steps, ys)
    return out


def _train_prm(cfg: RMConfig, model, tokenizer, train: list[_Problem], held: list[_Problem], verifier: str,
               out: Path) -> tuple[Any, dict]:
    import torch

    from rlvr.rewards.models import aggregate_step_scores, prm_input_ids, split_steps

    tag_id = _token_id(tokenizer, cfg.step_tag, "step_tag")
    good_id = _token_id(tokenizer, cfg.good, "good")
    bad_id = _token_id(tokenizer, cfg.bad, "bad")
    if len({tag_id, good_id, bad_id}) < 3:
        raise ValueError(f"step_tag {cfg.step_tag!r}, good {cfg.good!r} and bad {cfg.bad!r} must be different tokens")
    t0 = time.perf_counter()
    labels = _prm_labels(cfg, model, tokenizer, train + held, verifier)
    label_s = time.perf_counter() - t0
    (out / "prm_labels.jsonl").write_text("".join(
        json.dumps({"id": pid, "sample": j, "steps": s, "labels": y}, ensure_ascii=False) + "\n"
        for pid, rows in labels.items() for j, (s, y) in rows.items()))
    examples = _prm_examples(tokenizer, train, labels, tag_id, cfg)
    if not examples:
        raise ValueError(f"no PRM training examples: no sample splits into steps at {cfg.delimiter!r}")
    torch.manual_seed(cfg.seed)
    for p in model.parameters():
        p.requires_grad_(True)
    if cfg.lora.enabled:
        model = _with_lora(model, cfg.lora, "CAUSAL_LM")
    t1 = time.perf_counter()
    losses = _train(model, examples, lambda m, ex: _prm_loss(m, ex, good_id, bad_id, cfg.label == "hard"), cfg)
    train_s = time.perf_counter() - t1
    step_p, step_y, sol_p, sol_y, best = [], [], [], [], []
    with torch.inference_mode():
        dev = next(model.parameters()).device
        for d in held:
            for j, (steps, ys) in labels.get(d.id, {}).items():
                ids, pos = prm_input_ids(tokenizer, d.question, steps, tag_id)
                cut = max(0, len(ids) - cfg.max_length)
                logits = model(input_ids=torch.tensor([ids[cut:]], device=dev)).logits[0].float()
                for p, y in zip(pos, ys):
                    if p - cut >= 0:
                        step_p.append(float(logits[p - cut, [good_id, bad_id]].softmax(-1)[0]))
                        step_y.append(float(y))
            scores = []
            for t in d.texts:  # every sample of the held-out problem, as `rlvr search` scores it
                steps = split_steps(t, cfg.delimiter)
                if not steps:
                    scores.append(0.0)
                    continue
                ids, pos = prm_input_ids(tokenizer, d.question, steps, tag_id)
                cut = max(0, len(ids) - cfg.max_length)
                logits = model(input_ids=torch.tensor([ids[cut:]], device=dev)).logits[0].float()
                ps = [float(logits[p - cut, [good_id, bad_id]].softmax(-1)[0]) if p - cut >= 0 else 0.5 for p in pos]
                scores.append(aggregate_step_scores(ps, "min"))
            sol_p += scores
            sol_y += [float(c) for c in d.correct]
            best.append(float(d.correct[int(np.argmax(scores))]) if scores else 0.0)
    report = {"held_out_steps": binary_metrics(step_p, step_y, cfg.ece_bins),
              "held_out": binary_metrics(sol_p, sol_y, cfg.ece_bins),
              "best_of_n_accuracy": float(np.mean(best)) if best else math.nan,
              "labels": {"samples": sum(len(v) for v in labels.values()),
                         "steps": sum(len(y) for v in labels.values() for _, y in v.values()), "seconds": label_s},
              "train": {"examples": len(examples), "updates": len(losses), "first_loss": losses[0],
                        "last_loss": losses[-1], "seconds": train_s}}
    return _unwrap(model), report


# --------------------------------------------------------------------------- entry point
def train_reward_model(cfg: RMConfig, progress: bool = True) -> dict:
    """Collect verified samples, (PRM: label steps,) train, report on held-out problems, save to ``output_dir``.

    Returns the report (also in ``output_dir/rm_metrics.json``): ``held_out`` (accuracy, auc, ece,
    brier of the solution-level scores), ``best_of_n_accuracy`` on held-out problems and the same for
    the first sample and an oracle, the PRM's ``held_out_steps``, ``train`` and ``timing``.
    """
    import torch

    from rlvr.models.loader import load_policy, resolve_model_path

    torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = resolve_model_path(cfg.model)
    policy, tokenizer = load_policy(cfg.model, device=cfg.device)
    data, verifier = _collect(cfg, policy, tokenizer, out)
    train, held = _split(data, cfg.heldout_fraction, cfg.seed)
    if not train or not held:
        raise ValueError(f"need at least 2 problems for a train/held-out split, got {len(data)}")
    collect_s = time.perf_counter() - t0
    if cfg.kind == "orm":
        del policy
        model, report = _train_orm(cfg, path, tokenizer, train, held)
    else:
        model, report = _train_prm(cfg, policy, tokenizer, train, held, verifier, out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {"kind": cfg.kind, "base_model": cfg.model, "objective": cfg.objective if cfg.kind == "orm" else None,
            "step_tag": cfg.step_tag, "good": cfg.good, "bad": cfg.bad, "delimiter": cfg.delimiter,
            "verifier": verifier, "lora": cfg.lora.enabled}
    (out / METADATA_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    first = [float(d.correct[0]) for d in held if d.correct]
    report.update({
        "kind": cfg.kind, "model": cfg.model, "output_dir": str(out), "verifier": verifier,
        "problems": {"train": len(train), "held_out": len(held)},
        "held_out_first_sample_accuracy": float(np.mean(first)) if first else math.nan,
        "held_out_oracle_best_of_n": float(np.mean([any(d.correct) for d in held])),
        "timing": {"collect_s": collect_s, "total_s": time.perf_counter() - t0},
        "config": json.loads(cfg.model_dump_json()),
    })
    (out / METRICS_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False, default=float))
    return report


def format_report(report: dict) -> str:
    """A few lines for the terminal."""
    h = report["held_out"]
    lines = [f"{report['kind'].upper()} trained on {report['problems']['train']} problems, held out "
             f"{report['problems']['held_out']}: accuracy {h['accuracy']:.1%}, AUC {h['auc']:.3f}, ECE {h['ece']:.3f}, "
             f"Brier {h['brier']:.3f} ({h['n']} samples, {h['positive_share']:.1%} correct)"]
    if "held_out_steps" in report:
        s = report["held_out_steps"]
        lines.append(f"  steps: accuracy {s['accuracy']:.1%}, AUC {s['auc']:.3f}, ECE {s['ece']:.3f} ({s['n']} steps)")
    lines.append(f"  best-of-n on held-out problems: {report['best_of_n_accuracy']:.1%} (first sample "
                 f"{report['held_out_first_sample_accuracy']:.1%}, oracle {report['held_out_oracle_best_of_n']:.1%})")
    t = report["train"]
    lines.append(f"  {t['updates']} updates on {t['examples']} examples, loss {t['first_loss']:.4f} -> "
                 f"{t['last_loss']:.4f}; total {report['timing']['total_s']:.0f} s")
    lines.append(f"model, {METRICS_FILE} and {METADATA_FILE} written to {report['output_dir']} "
                 f"(rlvr search --scorer {report['kind']}:{report['output_dir']})")
    return "\n".join(lines)
