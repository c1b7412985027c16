"""The RL recipe with an FSDP2-sharded learner, one process per GPU (``torchrun``): a subclass of
:class:`rlvr.recipes.rl.RLRecipe` that overrides how set-up, collection, learning, logging and
checkpoints run; the loop is the base class's.

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

import dataclasses
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlvr.distributed.fsdp import fsdp_update_policy, init_distributed, make_mesh, reduce_device, shard_model
from rlvr.distributed.sharded_checkpoint import (
    export_full_state_dict,
    load_checkpoint_sharded,
    save_checkpoint_sharded,
)
from rlvr.engines import HFEngine
from rlvr.engines.hf import sampler_dtype
from rlvr.engines.registry import hf_options
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.trackers import open_trackers
from rlvr.models.frozen import frozen_copy
from rlvr.recipes.rl import RLRecipe, Rollouts, Scored, format_eval
from rlvr.recipes.rules import unsupported_with_fsdp
from rlvr.rollout.collect import collect_rollouts
from rlvr.tasks.sampler import PromptSampler
from rlvr.config import config_to_dict, save_config
from rlvr.utils.files import atomic_write_json, read_json_or_none
from rlvr.version import code_version

__all__ = ["FSDPRecipe", "train_fsdp", "unsupported_with_fsdp"]


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


class FSDPRecipe(RLRecipe):
    """:class:`RLRecipe` with every rank a rollout worker and an FSDP2 learner shard (see the module docstring).

    Call ``train()`` on every rank (``torchrun ... -m rlvr.cli train ... distributed.fsdp=true``
    does); a process group that is already initialised is used as is.  Returns
    the same summary as the base recipe on every rank, plus ``world_size``.
    """

    def __init__(self, cfg, **kwargs: Any):
        super().__init__(cfg, **kwargs)
        self.rank, self.world, self.main = 0, 1, True  # set by train() from the process group
        self.sampler_model = None  # this rank's unsharded copy of the policy that the engine samples from
        self.rank_collect = self.collect_settings  # this rank's share of the step's prompts (set up in setup())

    def train(self) -> dict[str, Any]:
        bad = unsupported_with_fsdp(self.cfg)
        if bad:
            raise ValueError(f"distributed.fsdp=true does not support: {', '.join(bad)}")
        own_group = not dist.is_initialized()  # started by torchrun: the recipe also tears the group down
        self.rank, self.world, self.device = init_distributed()
        self.main = self.rank == 0
        try:
            return super().train()
        finally:
            if own_group and dist.is_initialized():
                dist.destroy_process_group()  # without it a gloo rank can hang at interpreter exit

    def claim_directory(self):
        """Rank 0 locks and checks the output directory (the ranks share it; only rank 0 writes its logs)."""
        return super().claim_directory() if self.main else None

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        tcfg = self.cfg.train
        if tcfg.prompts_per_step % self.world:
            raise ValueError(f"train.prompts_per_step={tcfg.prompts_per_step} must be a multiple of the "
                             f"{self.world} ranks (each rank samples an equal share)")
        rows = tcfg.prompts_per_step // self.world * self.cfg.rollout.group_size
        if self.cfg.algorithm.mini_batches > rows:
            raise ValueError(f"algorithm.mini_batches={self.cfg.algorithm.mini_batches}: each of the {self.world} ranks "
                             f"splits its own {rows} sequences into mini-batches")
        super().setup()
        self.sampler = _RankSampler(PromptSampler(self.train_problems, seed=tcfg.seed), self.rank, self.world)
        self.rank_collect = dataclasses.replace(self.collect_settings,
                                                prompts_per_step=tcfg.prompts_per_step // self.world)

    def setup_model(self) -> None:
        """An unsharded sampler copy per rank (generation is per rank), then the policy and reference sharded."""
        cfg, dcfg = self.cfg, self.cfg.distributed
        self.model.to(self.device)
        self.sampler_model = frozen_copy(self.model, sampler_dtype(cfg.rollout.dtype))
        if cfg.algorithm.kl_coef > 0:
            self.ref_model = frozen_copy(self.model)
        mesh = make_mesh(self.device.type)
        shard_model(self.model, mesh, mixed_precision=dcfg.mixed_precision,
                    activation_checkpointing=dcfg.activation_checkpointing)
        if self.ref_model is not None:
            shard_model(self.ref_model, mesh, mixed_precision=dcfg.mixed_precision)

    def make_engine(self):
        r = self.cfg.rollout
        return HFEngine(self.sampler_model, self.tokenizer, batch_size=r.batch_size,
                        system_prompt=self.cfg.task.system_prompt, **hf_options(r.engine, r.engine_params))

    # ------------------------------------------------------------------ checkpoints
    def resume(self) -> None:
        ckpt = latest_checkpoint(self.out_dir)
        if ckpt is None:
            if self.main:
                print(f"train.resume=true but no checkpoint in {self.out_dir}: starting from scratch")
            return
        state = load_checkpoint_sharded(ckpt, self.model, self.optimizer, self.scheduler)
        self.start_step, self.sampler.position = state["step"], state["data_position"]
        self.rollouts_done = state.get("rollouts", 0)
        if self.main:
            print(f"resumed from {ckpt} (step {self.start_step}, saved on {state.get('world_size')} ranks, "
                  f"now {self.world})")

    def checkpoint(self, step: int) -> Path:
        """Sharded checkpoint with an HF export in ``model/`` (a collective: every rank calls it)."""
        return save_checkpoint_sharded(self.out_dir, step, self.model, self.optimizer, self.scheduler,
                                       {"data_position": self.sampler.position, "rollouts": self.rollouts_done},
                                       tokenizer=self.tokenizer, hf_export=True, keep=self.cfg.train.keep_checkpoints)

    def snapshot(self) -> tuple:
        return (self.sampler.position, self.rollouts_done)

    def restore(self, snap: tuple) -> None:
        self.sampler.position, self.rollouts_done = snap

    # ------------------------------------------------------------------ the loop's steps
    def begin(self) -> dict[str, Any]:
        """Rank 0 writes the config and logs and evaluates; every rank resumes and syncs its sampler copy."""
        cfg, tcfg, out_dir = self.cfg, self.cfg.train, self.out_dir
        if tcfg.resume:
            self.resume()
        _sync_sampler(self.sampler_model, self.model)
        if self.main:
            save_config(cfg, out_dir / "config.yaml")
        self.periodic = False
        self.tracker = open_trackers(tcfg.report_to, out_dir, config_to_dict(cfg), run_name=out_dir.name,
                                     resume_from_step=self.start_step if tcfg.resume else None) if self.main else None
        summary: dict[str, Any] = {"output_dir": str(out_dir), "world_size": self.world}
        if self.main and cfg.eval.before_training and self.heldout and \
                read_json_or_none(out_dir / "eval_before.json") is None:
            print("held-out accuracy before training: " + format_eval(self.evaluate("before")))
        dist.barrier()
        before = read_json_or_none(out_dir / "eval_before.json")
        if before is not None:
            summary["eval_before"] = before
        from rlvr.utils.accounting import StepAccounting

        self.acct = StepAccounting(self.device)
        return summary

    def collect(self, step: int) -> Rollouts:
        """This rank's share of the step's prompts, sampled with a seed distinct per rank and step."""
        tcfg = self.cfg.train
        self.engine.generator.manual_seed(tcfg.seed * 1_000_003 + step * 1009 + self.rank)
        with self.acct.phase("generate"):
            got = collect_rollouts(self.engine, self.sampler, self.verifier, self.params, self.rank_collect, step)
        return Rollouts(got.samples, got.verdicts, got.rewards, got.rounds, got.generated)  # counted globally in log

    def learn(self, step: int, scored: Scored) -> dict[str, float]:
        with self.acct.phase("learn"):
            try:  # a non-finite global gradient norm raises on every rank, before the optimizer steps (guards.py)
                learn = fsdp_update_policy(self.model, self.optimizer, scored.batch,
                                           self.learner_settings.at_step(step), self.ref_model)  # clip_schedule
            finally:
                # as the base recipe: free the gradient shards now rather than through sampling and evaluation
                self.optimizer.zero_grad(set_to_none=True)
                self.scheduler.step()
        with self.acct.phase("sync"):
            _sync_sampler(self.sampler_model, self.model)
        return learn

    def any_rank(self, bad: str | None) -> str | None:
        """Every rank skips the step when one has a non-finite reward or advantage (their collectives must match)."""
        flag = torch.tensor([0.0 if bad is None else 1.0], device=reduce_device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() and bad is None:
            return "another rank's rewards or advantages are not finite (its warning names the source)"
        return bad

    def log(self, step: int, ro: Rollouts, scored: Scored, learn: dict[str, float]) -> dict[str, Any]:
        """Rollout statistics summed over ranks, written (and printed) by rank 0."""
        stats = _global_rollout_stats(ro.samples, ro.verdicts, scored.rewards, scored.advantages,
                                      self.cfg.rollout.group_size, ro.rounds, ro.generated)
        self.rollouts_done += int(stats.pop("_generated"))
        self.acct.add_tokens(int(stats.pop("_tokens")))
        row = {"step": step + 1, **stats, "rollouts": self.rollouts_done, "lr": self.scheduler.get_last_lr()[0],
               **learn, "world_size": self.world, **self.acct.row()}
        if self.main:
            self.tracker.log(row, row["step"])
            print(f"step {step + 1}/{self.cfg.train.steps}  reward {row['reward_mean']:.3f}  "
                  f"acc {row['accuracy']:.3f}  len {row['response_length']:.1f}  loss {row.get('loss', 0.0):.4f}  "
                  f"{row['step_time']:.1f}s", flush=True)
        return row

    def finish(self, summary: dict[str, Any], step: int, row: dict[str, Any]) -> dict[str, Any]:
        cfg, out_dir = self.cfg, self.out_dir
        if self.main:
            self.tracker.close()
        final = self.checkpoint(step) if cfg.train.steps > self.start_step or latest_checkpoint(out_dir) is None \
            else latest_checkpoint(out_dir)
        summary.update({"final_checkpoint": str(final), "last_metrics": row, "steps": step, "code": code_version()})
        if self.main and cfg.eval.after_training and self.heldout:
            summary["eval_after"] = self.evaluate("after")
            print("held-out accuracy after training:  " + format_eval(summary["eval_after"]))
        if self.main:
            atomic_write_json(out_dir / "summary.json",
                              {k: v for k, v in summary.items() if k not in ("eval_before", "eval_after")}, indent=2,
                              default=str)
        dist.barrier()
        return summary


def train_fsdp(cfg, **kwargs: Any) -> dict[str, Any]:
    """``FSDPRecipe(cfg, **kwargs).train()`` (kept for callers of the former function)."""
    return FSDPRecipe(cfg, **kwargs).train()
