"""The GRPO recipe with an FSDP2-sharded learner, one process per GPU (``torchrun``).

    torchrun --nproc-per-node 4 -m rlvr.cli train CONFIG.yaml distributed.fsdp=true

Every rank is a rollout worker and a learner shard:

    prompts   = this rank's share of the step's train.prompts_per_step prompts
    groups    = generate from the rank's own unsharded sampler copy (whole groups stay on one rank)
    advantage = per group, on the rank (no communication)
    update    = fsdp_update_policy: sharded forward/backward, loss normalised by the *global* batch
    sync      = all-gather the new weights into every rank's sampler copy
    log       = rollout statistics summed over ranks, written by rank 0

``train.prompts_per_step`` stays the global batch (it must divide by the number
of ranks), so a run on N ranks optimises the same objective per step as a run in
one process.  Checkpoints are sharded (:mod:`rlvr.distributed.sharded_checkpoint`)
with an HF export in ``model/``; a run resumes on any number of ranks.  Evaluation
runs on rank 0 with its sampler copy while the other ranks wait.

Not supported here (the one-process recipe has them; each is rejected with an
error): LoRA, asynchronous rollouts, Ray or vLLM rollout engines, KL-in-reward,
reference resets, the difficulty filter, periodic held-out evaluation.  Resume is
exact for weights, optimizer, scheduler and data position; the sampling RNG is
re-seeded per rank and step, so a resumed run does not draw the very same
completions an uninterrupted one would.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from rlvr.distributed.fsdp import fsdp_update_policy, init_distributed, make_mesh, reduce_device, shard_model
from rlvr.distributed.sharded_checkpoint import (
    export_full_state_dict,
    load_checkpoint_sharded,
    save_checkpoint_sharded,
)

__all__ = ["train_fsdp", "unsupported_with_fsdp"]


def unsupported_with_fsdp(cfg) -> list[str]:
    """Config settings this recipe cannot honour (empty when the config is fine)."""
    alg, tcfg = cfg.algorithm, cfg.train
    bad = {
        "model.lora.enabled": cfg.model.lora.enabled,
        "train.async_steps": tcfg.async_steps > 0,
        "train.rollout_worker": bool(tcfg.rollout_worker),
        "distributed.backend=ray": cfg.distributed.backend != "none",
        "rollout.engine=vllm": cfg.rollout.engine != "hf",
        "algorithm.kl_in_reward": alg.kl_in_reward,
        "algorithm.ref_reset_every / ref_reset_kl": bool(alg.ref_reset_every or alg.ref_reset_kl),
        "algorithm.difficulty_filter": alg.difficulty_filter,
        "eval.every": bool(cfg.eval.every),
    }
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS

    needs = ADVANTAGE_ESTIMATORS.entry(alg.advantage).needs if alg.advantage in ADVANTAGE_ESTIMATORS else set()
    if needs:  # the FSDP learner calls the estimator on rewards alone
        bad[f"algorithm.advantage={alg.advantage} (needs {', '.join(sorted(needs))}, which the FSDP learner "
            "does not compute)"] = True
    return [k for k, on in bad.items() if on]


class _RankSampler:
    """This rank's slice of a shared prompt order: every call draws ``k * world`` prompts, keeps ``k``."""

    def __init__(self, base, rank: int, world: int):
        self.base, self.rank, self.world = base, rank, world

    @property
    def position(self) -> int:
        return self.base.position

    @position.setter
    def position(self, value: int) -> None:
        self.base.position = value

    def next(self, k: int):
        drawn = self.base.next(k * self.world)
        return drawn[self.rank * k:(self.rank + 1) * k]


def _sync_sampler(sampler_model, model) -> None:
    """Copy the sharded policy's current weights into this rank's unsharded sampler copy (collective)."""
    full = export_full_state_dict(model, rank0_only=False)
    with torch.no_grad():
        sampler_model.load_state_dict(full, strict=False)


def _global_rollout_stats(samples, verdicts, rewards, advantages, G: int, rounds: int, generated: int) -> dict:
    """Rollout statistics of the whole step: sums over ranks, then the same formulas as the one-process log."""
    from rlvr.algorithms import group_stats

    n = len(samples)
    zero_var = float(group_stats(rewards, G)["zero_variance_frac"]) * (n // G)
    local = torch.tensor([n, float(rewards.sum()), float((rewards ** 2).sum()), sum(v.correct for v in verdicts),
                          sum(s.num_tokens for s in samples), sum(s.finish_reason == "stop" for s in samples),
                          zero_var, n // G, float(advantages.sum()), float((advantages ** 2).sum()),
                          float(advantages.abs().sum()), rounds, generated], dtype=torch.float64,
                         device=reduce_device())
    dist.all_reduce(local)
    (n, r, r2, correct, tokens, stop, zv, groups, a, a2, aa, rounds, generated) = local.tolist()

    def std(s, s2):  # unbiased, as torch.std
        return max(0.0, (s2 - s * s / n) / (n - 1)) ** 0.5 if n > 1 else 0.0  # rounding can make it < 0

    return {"reward_mean": r / n, "reward_std": std(r, r2), "accuracy": correct / n,
            "response_length": tokens / n, "stop_fraction": stop / n, "zero_variance_groups": zv / groups,
            "sampling_rounds": rounds / dist.get_world_size(), "adv_mean": a / n, "adv_std": std(a, a2),
            "adv_abs_mean": aa / n, "_tokens": tokens, "_generated": generated}


def train_fsdp(cfg, *, model=None, tokenizer=None, problems: tuple[list, list] | None = None,
               verifier: Callable | None = None, on_step: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Run GRPO with an FSDP2 learner on every rank of the process group (see the module docstring).

    Call it on every rank (``torchrun ... -m rlvr.cli train ... distributed.fsdp=true``
    does); a process group that is already initialised is used as is.  Returns
    the same summary as :func:`rlvr.recipes.rl.train` on every rank.
    """
    bad = unsupported_with_fsdp(cfg)
    if bad:
        raise ValueError(f"distributed.fsdp=true does not support: {', '.join(bad)}")
    own_group = not dist.is_initialized()  # started by torchrun: this function also tears the group down
    rank, world, device = init_distributed()
    try:
        return _train(cfg, rank, world, device, model, tokenizer, problems, verifier, on_step)
    finally:
        if own_group and dist.is_initialized():
            dist.destroy_process_group()  # without it a gloo rank can hang at interpreter exit


def _train(cfg, rank, world, device, model, tokenizer, problems, verifier, on_step) -> dict[str, Any]:
    from rlvr.algorithms import get_advantage_estimator
    from rlvr.config import save_config
    from rlvr.models import load_policy
    from rlvr.models.frozen import frozen_copy
    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.engines.hf import sampler_dtype
    from rlvr.learner.batching import collate
    from rlvr.learner.checkpoint import latest_checkpoint
    from rlvr.tasks.sampler import PromptSampler, build_task
    from rlvr.learner.update import make_scheduler
    from rlvr.recipes.rl import evaluate_heldout, format_eval
    from rlvr.rollout.collect import collect_rollouts
    from rlvr.learner.metrics import MetricsLogger
    from rlvr.verifiers import get_verifier

    tcfg, dcfg = cfg.train, cfg.distributed
    if tcfg.prompts_per_step % world:
        raise ValueError(f"train.prompts_per_step={tcfg.prompts_per_step} must be a multiple of the "
                         f"{world} ranks (each rank samples an equal share)")
    main = rank == 0
    out_dir = Path(tcfg.output_dir)
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
    if tcfg.threads:
        torch.set_num_threads(tcfg.threads)
    torch.manual_seed(tcfg.seed)  # the same initial weights on every rank for models built in memory

    if model is None:
        model, tokenizer = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
    model.to(device)
    sampler_model = frozen_copy(model, sampler_dtype(cfg.rollout.dtype))  # unsharded: generation is per rank
    ref_model = None
    if cfg.algorithm.kl_coef > 0:
        ref_model = frozen_copy(model)
    mesh = make_mesh(device.type)
    shard = dict(mixed_precision=dcfg.mixed_precision, activation_checkpointing=dcfg.activation_checkpointing)
    shard_model(model, mesh, **shard)
    if ref_model is not None:
        shard_model(ref_model, mesh, mixed_precision=dcfg.mixed_precision)

    train_problems, heldout = problems if problems is not None else build_task(cfg.task)
    verifier = verifier or get_verifier(cfg.reward.verifier, **cfg.reward.verifier_params)
    estimator = get_advantage_estimator(cfg.algorithm.advantage, **cfg.algorithm.advantage_params)
    engine = HFEngine(sampler_model, tokenizer, batch_size=cfg.rollout.batch_size,
                      system_prompt=cfg.task.system_prompt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, betas=tuple(tcfg.betas),
                                  weight_decay=tcfg.weight_decay)
    scheduler = make_scheduler(optimizer, cfg)
    sampler = _RankSampler(PromptSampler(train_problems, seed=tcfg.seed), rank, world)
    rank_cfg = copy.deepcopy(cfg)
    rank_cfg.train.prompts_per_step = tcfg.prompts_per_step // world

    start_step, rollouts_done = 0, 0
    if tcfg.resume:
        ckpt = latest_checkpoint(out_dir)
        if ckpt is None:
            if main:
                print(f"train.resume=true but no checkpoint in {out_dir}: starting from scratch")
        else:
            state = load_checkpoint_sharded(ckpt, model, optimizer, scheduler)
            start_step, sampler.position = state["step"], state["data_position"]
            rollouts_done = state.get("rollouts", 0)
            if main:
                print(f"resumed from {ckpt} (step {start_step}, saved on {state.get('world_size')} ranks, "
                      f"now {world})")
    _sync_sampler(sampler_model, model)
    if main:
        save_config(cfg, out_dir / "config.yaml")
    metrics_log = MetricsLogger(out_dir, resume_from_step=start_step if tcfg.resume else None) if main else None

    summary: dict[str, Any] = {"output_dir": str(out_dir), "world_size": world}
    if main and cfg.eval.before_training and heldout and not (out_dir / "eval_before.json").exists():
        print("held-out accuracy before training: " + format_eval(evaluate_heldout(engine, heldout, verifier, cfg, "before",
                                                                          out_dir)))
    dist.barrier()
    if (out_dir / "eval_before.json").exists():
        summary["eval_before"] = json.loads((out_dir / "eval_before.json").read_text())

    def checkpoint(step: int) -> Path:
        return save_checkpoint_sharded(out_dir, step, model, optimizer, scheduler,
                                       {"data_position": sampler.position, "rollouts": rollouts_done},
                                       tokenizer=tokenizer, hf_export=True, keep=tcfg.keep_checkpoints)

    params = SamplingParams(n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
                            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                            ignore_eos=cfg.rollout.ignore_eos)
    step, row = start_step, {}
    for step in range(start_step, tcfg.steps):
        if tcfg.max_rollouts and rollouts_done >= tcfg.max_rollouts:
            break
        t0 = time.perf_counter()
        engine.generator.manual_seed(tcfg.seed * 1_000_003 + step * 1009 + rank)  # distinct per rank and step
        samples, verdicts, rewards, rounds, t_gen, generated = collect_rollouts(
            engine, sampler, verifier, params, rank_cfg, step)
        t_roll = time.perf_counter() - t0
        advantages = estimator(rewards, cfg.rollout.group_size)
        batch = collate(samples, advantages, engine.pad_id)
        t1 = time.perf_counter()
        learn = fsdp_update_policy(model, optimizer, batch, cfg, ref_model)
        scheduler.step()
        t_learn = time.perf_counter() - t1
        _sync_sampler(sampler_model, model)
        stats = _global_rollout_stats(samples, verdicts, rewards, advantages, cfg.rollout.group_size, rounds,
                                      generated)
        rollouts_done += int(stats.pop("_generated"))
        tokens = stats.pop("_tokens")
        t_step = time.perf_counter() - t0
        row = {"step": step + 1, **stats, "rollouts": rollouts_done, "lr": scheduler.get_last_lr()[0], **learn,
               "world_size": world, "tokens_per_s": tokens / max(t_step, 1e-9), "rollout_time": t_roll,
               "learn_time": t_learn, "step_time": t_step, "gen_time_rank0": t_gen}
        if main:
            metrics_log.log(row)
            print(f"step {step + 1}/{tcfg.steps}  reward {row['reward_mean']:.3f}  acc {row['accuracy']:.3f}  "
                  f"len {row['response_length']:.1f}  loss {row.get('loss', 0.0):.4f}  {t_step:.1f}s", flush=True)
        if on_step is not None:
            on_step(row)
        if tcfg.save_every and (step + 1) % tcfg.save_every == 0:
            checkpoint(step + 1)
    else:
        step = tcfg.steps
    if main:
        metrics_log.close()
    final = checkpoint(step) if tcfg.steps > start_step or latest_checkpoint(out_dir) is None else \
        latest_checkpoint(out_dir)
    summary.update({"final_checkpoint": str(final), "last_metrics": row, "steps": step})
    if main and cfg.eval.after_training and heldout:
        summary["eval_after"] = evaluate_heldout(engine, heldout, verifier, cfg, "after", out_dir)
        print("held-out accuracy after training:  " + format_eval(summary["eval_after"]))
    if main:
        (out_dir / "summary.json").write_text(json.dumps(
            {k: v for k, v in summary.items() if k not in ("eval_before", "eval_after")}, indent=2, default=str))
    dist.barrier()
    return summary
