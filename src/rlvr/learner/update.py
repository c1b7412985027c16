"""The learner's step: PPO-style policy (and critic) updates over a batch of scored rollouts.

``update_policy`` runs ``algorithm.ppo_epochs`` x ``algorithm.mini_batches`` optimizer steps over a
:class:`rlvr.types.Batch` with gradient accumulation over micro-batches; the no-grad passes some estimators
need before the advantage (entropy, reference KL, critic values) share
:func:`per_token_pass`.  What they read of the run is a :class:`rlvr.learner.settings.LearnerSettings`
(the recipe builds it from ``algorithm.*``, ``train.*`` and ``rollout.*``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import signal
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from rlvr.algorithms import grpo_loss, value_loss
from rlvr.algorithms.entropy_control import batch_token_selection
from rlvr.algorithms.importance import is_correction_weights
from rlvr.learner.batching import (completion_start, packed_logprobs, policy_logprobs, prompt_keys,
                                   token_budget_chunks)
from rlvr.learner.guards import require_finite_norm
from rlvr.learner.settings import LearnerSettings, ScheduleSettings
from rlvr.models.value_head import critic_values
from rlvr.types import Batch

__all__ = ["update_policy", "PolicyUpdate", "make_scheduler", "deferred_interrupts", "sub_batch", "per_token_pass",
           "policy_entropy", "reference_kl", "distill_logprobs", "critic_value_pass", "value_diagnostics", "clip_gradients",
           "enable_activation_checkpointing"]


def make_scheduler(optimizer, schedule: ScheduleSettings):
    """Linear warm-up, then constant / cosine / linear decay to 0 at ``train.steps``."""
    warm, total, kind = schedule.warmup_steps, max(schedule.total_steps, 1), schedule.kind

    def factor(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        if kind == "constant":
            return 1.0
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return 0.5 * (1 + math.cos(math.pi * frac)) if kind == "cosine" else 1.0 - frac

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cluster's preemption, ``kill``) inside :func:`sigterm_interrupts`: handled like Ctrl-C."""


def _raise_terminated(signum, frame):
    raise Terminated()


@contextmanager
def sigterm_interrupts():
    """Inside this block SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``), so a run checkpoints
    and exits with a message instead of dying at once; the previous handler is restored after. A no-op
    outside the main thread, where handlers cannot be installed."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def deferred_interrupts():
    """Inside this block Ctrl-C (and SIGTERM, when :func:`sigterm_interrupts` made it an interrupt) is
    remembered and raised when the block ends.

    Used around the optimizer update so an interrupt never leaves half-updated
    weights; outside it, Ctrl-C raises at once (weights are then those of the
    last finished step, which is what gets checkpointed).
    """
    pending: list[int] = []
    handled = [signal.SIGINT]
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        handled.append(signal.SIGTERM)
    previous = {}
    try:
        for sig in handled:
            previous[sig] = signal.signal(sig, lambda signum, _: pending.append(signum))
    except ValueError:  # not in the main thread: cannot install handlers
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            raise Terminated() if signal.SIGTERM in pending else KeyboardInterrupt()


def sub_batch(batch: Batch, rows: torch.Tensor, device: torch.device | None = None) -> tuple[Batch, int]:
    """Rows of a batch with all-padding columns trimmed, moved to ``device``; returns (batch, completion start)."""
    am = batch.attention_mask[rows]
    used = am.any(0).nonzero()
    lo, hi = int(used[0]), int(used[-1]) + 1
    adv = batch.advantages[rows]
    parts = [batch.input_ids[rows, lo:hi], am[:, lo:hi], batch.completion_mask[rows, lo:hi],
             batch.sampler_logprobs[rows, lo:hi], adv[:, lo:hi] if adv.dim() == 2 else adv]
    parts += [None if t is None else t[rows, lo:hi] for t in (batch.ref_logprobs, batch.values, batch.returns)]
    parts.append(None if batch.off_policy is None else batch.off_policy[rows])
    parts.append(None if batch.token_select is None else batch.token_select[rows, lo:hi])
    if device is not None:
        parts = [None if t is None else t.to(device, non_blocking=True) for t in parts]
    sub = Batch(*parts)
    if batch.image_inputs is not None:  # a vision-language policy's rows keep their images
        sub.image_inputs = [batch.image_inputs[int(r)] for r in rows]
    if batch.entropy_select is not None:
        sub.entropy_select = batch.entropy_select[rows, lo:hi]
        if device is not None:
            sub.entropy_select = sub.entropy_select.to(device, non_blocking=True)
    return sub, completion_start(sub)


def per_token_pass(batch: Batch, micro_batch_size: int, device, fn) -> torch.Tensor:
    """Run ``fn(micro_batch, start) -> [b, T' - start, ...]`` over the batch without gradients; [B, T, ...]
    float32 result (``fn``'s trailing dimensions kept: several per-token quantities from one forward pass).

    The no-grad forward passes some estimators need before the advantage
    (entropy, reference KL, critic values) share this loop: micro-batches of
    ``train.micro_batch_size`` rows with padding columns trimmed, results put
    back at the columns of the completion tokens they belong to.
    """
    out = None
    with torch.no_grad():
        for chunk in torch.arange(batch.input_ids.shape[0]).split(micro_batch_size):
            mb, start = sub_batch(batch, chunk, device)
            res = fn(mb, start)
            if out is None:
                out = torch.zeros(tuple(batch.input_ids.shape) + tuple(res.shape[2:]), dtype=torch.float32)
            # sub_batch trimmed columns lo:hi; completions end at hi, so the result block ends there too
            hi = int(batch.attention_mask[chunk].any(0).nonzero()[-1]) + 1
            out[chunk, hi - res.shape[1]:hi] = res.float().cpu()
    mask = batch.completion_mask
    if out is None:  # no rows
        return torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    return out * mask.reshape(tuple(mask.shape) + (1,) * (out.dim() - 2))


def policy_entropy(model, batch: Batch, settings: LearnerSettings, device) -> torch.Tensor:
    """Per-token entropy of the current policy at every completion position, [B, T] (no grad).

    Needed before the advantage by the entropy-guided estimator (RL-ZVP).
    """
    was_training = model.training
    model.eval()
    out = per_token_pass(batch, settings.micro_batch_size, device, lambda mb, start: policy_logprobs(
        model, mb.input_ids, mb.attention_mask, start, settings.temperature, with_entropy=True,
        chunk_size=settings.logprob_chunk_size, **_images(mb))[1])
    model.train(was_training)
    return out


def reference_kl(model, ref_model, batch: Batch, settings: LearnerSettings, device) -> torch.Tensor:
    """Per-token k1 = log pi_old - log pi_ref at every completion position, [B, T] (no grad).

    ``pi_old`` is the learner's policy before this step's update (``model``), not the sampler: the KL
    penalty in the reward measures how far the trained policy has moved from the reference, and the
    sampler's log-probs carry its own precision and staleness (verl's ``apply_kl_penalty`` also subtracts
    the actor's recomputed ``old_log_probs``).  Demonstration rows (``batch.off_policy``) get 0: they are
    not drawn from the policy, so ``log pi_old - log pi_ref`` on their tokens estimates no KL of it.
    """
    def k1(mb: Batch, start: int) -> torch.Tensor:
        def logp(m):
            return policy_logprobs(m, mb.input_ids, mb.attention_mask, start, settings.temperature,
                                   chunk_size=settings.logprob_chunk_size, **_images(mb))[0].float()

        return logp(model) - logp(ref_model)

    was_training = model.training
    model.eval()
    out = per_token_pass(batch, settings.micro_batch_size, device, k1)
    model.train(was_training)
    if batch.off_policy is not None:
        out = out * (~batch.off_policy.bool()).unsqueeze(-1).to(out.dtype)
    return out


def distill_logprobs(model, teacher, batch: Batch, settings: LearnerSettings, device,
                     chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy distillation's inputs: ``(log pi_teacher, log pi_student)`` of every sampled completion token,
    [B, T] each (0 off the completion), without gradients.

    The student's are the learner's ``logp_old``: the policy before this step's update, computed as the
    learner's first pass computes them (``train.logprob_chunk_size``, ``train.autocast``, in micro-batches of
    ``train.micro_batch_size`` rows).  The teacher's come from its last hidden states through its LM head
    ``chunk_size`` tokens at a time (``distill.chunk_size``; never the [B, T, vocab] logits; a head the chunked
    path cannot reproduce falls back to full logits with a warning, see
    :func:`rlvr.learner.batching.chunked_head`).  Both divide the logits by ``rollout.temperature``
    (``settings.temperature``): the student's distribution is the one it sampled from and the learner's ratio
    uses, and the teacher is compared with it under the same temperature.
    """
    amp = torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=settings.autocast == "bfloat16")

    def logp(m, chunk: int):
        def fn(mb: Batch, start: int) -> torch.Tensor:
            with amp:
                return policy_logprobs(m, mb.input_ids, mb.attention_mask, start, settings.temperature,
                                       chunk_size=chunk, **_images(mb))[0].float()
        return per_token_pass(batch, settings.micro_batch_size, device, fn)

    was_training = model.training
    model.eval()
    try:
        student = logp(model, settings.logprob_chunk_size)
    finally:
        model.train(was_training)
    return logp(teacher, chunk_size), student


def _images(mb: Batch) -> dict:
    """``images=`` for the log-prob functions when the micro-batch has image rows ({} for text: the call is unchanged)."""
    return {"images": mb.image_inputs} if mb.image_inputs is not None else {}


def critic_value_pass(critic, model, batch: Batch, settings: LearnerSettings, device) -> torch.Tensor:
    """The critic's value of the state before every completion token, [B, T] (no grad; 0 off the completion)."""
    return per_token_pass(batch, settings.micro_batch_size, device, lambda mb, start: critic_values(
        critic, model, mb.input_ids, mb.attention_mask, start))


def update_policy(model, optimizer, batch: Batch, settings: LearnerSettings, ref_model=None, dp=None, critic=None,
                  critic_optimizer=None, train_policy: bool = True,
                  entropy_coef: float | None = None) -> dict[str, float]:
    """``algorithm.ppo_epochs`` passes over ``batch``, each ``algorithm.mini_batches`` optimizer steps; returns
    averaged diagnostics.

    The rows are split, in order, into ``algorithm.mini_batches`` mini-batches of (nearly) equal size (verl's
    ``ppo_mini_batch_size``, as a count); each is one optimizer step, with gradients accumulated over its
    micro-batches and the loss normalised by the mini-batch's own tokens or sequences.  ``logp_old``, the
    ratio's denominator, is the learner's log-prob before the step's first optimizer step: with one
    mini-batch it is epoch 0's own forward pass, detached (the weights do not change within that epoch, so
    no extra pass; the first epoch has ratio exactly 1, as TRL's ``old_per_token_logps = per_token_logps
    .detach()``); with several, a no-grad pass over the whole batch comes first (verl's ``compute_log_prob``
    before ``update_policy``), so from the second optimizer step on the ratio, and every clip, acts.  The
    learning-rate schedule is the caller's and steps once per rollout batch (verl steps its actor scheduler
    once per ``update_actor`` call).

    With a ``critic`` (PPO with GAE) every micro-batch also computes the
    clipped value loss against ``batch.returns``, weighted by
    ``algorithm.value.coef`` and aggregated like the policy loss; the critic's
    parameters are clipped and stepped by ``critic_optimizer`` at every optimizer step.  A shared
    critic reads the hidden states of the policy's own forward pass, so its
    loss also trains the policy's trunk.  ``train_policy=False`` (critic
    warm-up) trains the critic alone: no policy loss, no policy step, and a
    shared head reads detached hidden states.

    Gradients are accumulated over micro-batches with weights chosen so the sum
    equals the loss aggregated over the whole mini-batch (token-mean: tokens in the
    micro-batch / tokens in the mini-batch; sequence means: sequences / sequences).  The reported ``loss`` (and
    ``pg_loss``, ``value_loss``) is the objective over the rows learned from, weighted the same way
    (:data:`OBJECTIVE_TERMS`): the token mean over all their tokens, or the mean over all their sequences, across
    micro-batches, mini-batches and epochs (rows skipped for a zero advantage are left out of it, as of
    ``learner_tokens``; their loss is 0).

    ``dp`` (a :class:`rlvr.distributed.fsdp.DataParallel`, None on one process)
    makes this one rank of a data-parallel step: ``batch`` is the rank's share (each rank splits its own rows
    into the mini-batches; mini-batch ``m`` is the union of every rank's ``m``-th part),
    the normalisers are the global token / sequence counts of each mini-batch, and every rank runs
    the same number of passes.  Diagnostics stay per rank; ``grad_norm`` is the last optimizer step's.

    ``entropy_coef`` replaces ``algorithm.entropy_coef`` for this update (the entropy floor's adaptive
    coefficient).  A policy loss that selects tokens over the whole batch (Clip-Cov / KL-Cov with
    ``scope="batch"``, :func:`rlvr.algorithms.entropy_control.batch_token_selection`) selects them here,
    once per rollout batch, from the sampler's log-probs of every counted token (this rank's rows under
    ``dp``); every micro-batch of every optimizer step gets its slice.
    """
    return PolicyUpdate(model, optimizer, batch, settings, ref_model, dp, critic, critic_optimizer, train_policy,
                        entropy_coef).run()


OBJECTIVE_TERMS = frozenset({"loss", "pg_loss", "value_loss"})
"""Diagnostics that are the objective (or a term of it) under ``algorithm.loss_agg``: averaged over micro-batches
by tokens for ``token_mean`` and by sequences for the sequence means, so the logged value is the aggregation's
objective over the rows learned from whatever the micro- and mini-batch split (the other diagnostics are token
means, averaged by tokens)."""


@dataclass
class MiniBatch:
    """One optimizer step's share of the batch: its micro-batches (indices into ``PolicyUpdate.chunks``), the rows
    it learns from, and its loss normalisers (global under data parallelism)."""

    chunks: list[int]
    rows: torch.Tensor
    tokens: torch.Tensor | float  # completion tokens of every row of the mini-batch (learned from or not), >= 1
    seqs: int  # rows of the mini-batch
    passes: int  # micro-batch passes (the largest count of any rank under data parallelism)


class PolicyUpdate:
    """The state of one :func:`update_policy` call: mini-batches of rows learned from, normalisers, running sums."""

    def __init__(self, model, optimizer, batch: Batch, settings: LearnerSettings, ref_model=None, dp=None,
                 critic=None, critic_optimizer=None, train_policy: bool = True, entropy_coef: float | None = None):
        s = self.settings = settings
        self.entropy_coef = s.entropy_coef if entropy_coef is None else entropy_coef
        selected_rows, self.selection_stats = self.select_tokens(batch, s)  # Clip-Cov / KL-Cov, batch-wide
        if self.selection_stats is not None:
            batch = dataclasses.replace(batch, token_select=self.selection_stats.pop("_selected"))
        self.model, self.optimizer, self.batch, self.ref_model = model, optimizer, batch, ref_model
        self.dp, self.critic, self.critic_optimizer, self.train_policy = dp, critic, critic_optimizer, train_policy
        self.B = batch.input_ids.shape[0]
        keep = torch.ones(self.B, dtype=torch.bool)
        if s.skip_zero_advantage and (s.kl_coef == 0 or s.kl_in_reward) and self.entropy_coef == 0 \
                and critic is None:  # the critic learns from every row
            nonzero = batch.advantages != 0
            keep = nonzero.any(-1) if nonzero.dim() == 2 else nonzero
            if selected_rows is not None:  # KL-Cov: a selected token has a gradient at any advantage
                keep = keep | selected_rows
        self.packed = s.micro_batch_tokens > 0
        shared = prompt_keys(batch.input_ids, batch.attention_mask, completion_start(batch), **_images(batch)) \
            if self.packed and s.share_prompts else None
        one = s.mini_batches == 1
        parts = [torch.arange(self.B)] if one else list(torch.arange(self.B).tensor_split(s.mini_batches))
        self.chunks: list[torch.Tensor] = []
        self.minis: list[MiniBatch] = []
        for part in parts:
            rows = part[keep[part]]
            if self.packed:  # packed micro-batches filled to a token budget
                chunks = token_budget_chunks(rows, batch.attention_mask.sum(1), s.micro_batch_tokens, shared)
            else:
                chunks = list(rows.split(s.micro_batch_size)) if len(rows) else []
            local = batch.completion_mask.sum() if one else batch.completion_mask[part].sum()
            tokens, seqs, passes = local.clamp(min=1), len(part), len(chunks)
            if dp is not None:  # global normalisers, and the largest pass count of any rank
                tokens, seqs, passes = dp.global_sizes(float(local), len(part), len(chunks))
            self.minis.append(MiniBatch(list(range(len(self.chunks), len(self.chunks) + len(chunks))), rows,
                                        tokens, seqs, passes))
            self.chunks += chunks
        self.rows = self.minis[0].rows if one else torch.cat([m.rows for m in self.minis])
        self.prepass = not one  # logp_old before the first optimizer step: a pass over the whole batch
        self.logprobs = functools.partial(packed_logprobs, share_prompts=s.share_prompts) if self.packed \
            else policy_logprobs
        self.grad_scale = 1.0 if dp is None else dp.grad_scale
        self.sums: dict[str, float] = {}  # per-token diagnostics (and token-mean objectives), x counted tokens
        self.weight_total = 0.0
        self.seq_sums: dict[str, float] = {}  # sequence-mean objectives (OBJECTIVE_TERMS), x sequences
        self.seq_total = 0
        self.mismatch_tokens = 0.0  # first-pass tokens with a sampler log-prob (demonstrations have none)
        self.mismatch_max = 0.0  # largest |learner - sampler| log-prob of those tokens
        self.ratio_outside = 0.0  # of those tokens, how many have exp(learner - sampler) outside [0.9, 1.1]
        self.learner_old_logps: dict[int, torch.Tensor] = {}  # first-pass learner log-probs per micro-batch
        self.is_weights: dict[int, torch.Tensor | None] = {}
        self.device = next(model.parameters()).device
        self.kl_coef = settings.loss_kl_coef  # 0 when folded into the reward instead of the loss
        self.amp = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=s.autocast == "bfloat16")
        self.shared = critic is not None and critic.shared

    @staticmethod
    def select_tokens(batch: Batch, s: LearnerSettings) -> tuple[torch.Tensor | None, dict | None]:
        """The policy loss's batch-wide token selection: (rows a zero advantage must not drop, or None;
        stats with the [B, T] selection under ``"_selected"``), or (None, None) for other losses."""
        mask = batch.completion_mask
        if batch.off_policy is not None:  # demonstrations have no sampler log-probs and get their own loss
            mask = torch.where(batch.off_policy.unsqueeze(-1), torch.zeros_like(mask), mask)
        out = batch_token_selection(s.policy_loss, s.policy_loss_params, batch.sampler_logprobs,
                                    batch.advantages, mask)
        if out is None:
            return None, None
        selected, stats, gradient_on_zero_advantage = out
        return (selected.any(-1) if gradient_on_zero_advantage else None), {**stats, "_selected": selected}

    def run(self) -> dict[str, float]:
        """``algorithm.ppo_epochs`` passes, each one optimizer step per mini-batch."""
        s = self.settings
        grad_norm = critic_norm = 0.0
        if s.activation_checkpointing:
            enable_activation_checkpointing(self.model)
        self.model.train()
        if self.prepass:
            self.old_logprob_pass()
        for epoch in range(s.ppo_epochs):
            for mini in self.minis:
                self.optimizer.zero_grad(set_to_none=True)
                if self.critic_optimizer is not None:
                    self.critic_optimizer.zero_grad(set_to_none=True)
                for j in range(mini.passes):
                    if j >= len(mini.chunks):  # this rank has run out of rows: zero-loss pass, same collectives
                        self.dp.idle_pass(self.model, self.ref_model if self.kl_coef > 0 else None)
                        continue
                    self.micro_batch(epoch, mini.chunks[j], mini)
                if mini.passes and self.critic_optimizer is not None:
                    critic_norm = clip_gradients(list(self.critic.parameters()), s.max_grad_norm)
                    require_finite_norm(critic_norm, "critic")  # guards.py: nothing non-finite reaches the weights
                    self.critic_optimizer.step()
                if mini.passes and self.train_policy:
                    grad_norm = clip_gradients(list(self.model.parameters()), s.max_grad_norm)
                    require_finite_norm(grad_norm, "policy")
                self.optimizer.step()  # a no-op without gradients (critic warm-up too)
        sums, weight_total = self.sums, self.weight_total
        out = {k: v / weight_total for k, v in sums.items()} if weight_total else {}
        out.update({k: v / self.seq_total for k, v in self.seq_sums.items()})
        if self.dp is not None and self.seq_sums:  # the ranks' sequence-mean objectives are combined by sequences
            out["objective_seqs"] = self.seq_total
        if weight_total:  # mismatch was summed over first-pass tokens only (those with a sampler log-prob)
            out["logprob_mismatch"] = sums["logprob_mismatch"] / max(self.mismatch_tokens, 1.0)
            out["logprob_mismatch_max"] = self.mismatch_max
            out["sampler_ratio_outside"] = self.ratio_outside / max(self.mismatch_tokens, 1.0)
        out.update({"grad_norm": grad_norm, "learner_seqs": int(len(self.rows)),
                    "learner_tokens": int(weight_total)})
        if self.critic is not None:
            out["critic_grad_norm"] = critic_norm
        if self.selection_stats is not None:
            out.update(self.selection_stats)
        return out

    def old_logprob_pass(self) -> None:
        """Several optimizer steps per batch: every micro-batch's ``logp_old`` (and sampler mismatch, importance
        weights) from the weights before the first step, without gradients."""
        s = self.settings
        with torch.no_grad():
            for mini in self.minis:
                for j in range(mini.passes):
                    if j >= len(mini.chunks):  # same collectives as the ranks that have rows
                        self.dp.idle_pass(self.model, backward=False)
                        continue
                    ci = mini.chunks[j]
                    mb, start = sub_batch(self.batch, self.chunks[ci], self.device)
                    with self.amp:
                        logp, _ = self.logprobs(self.model, mb.input_ids, mb.attention_mask, start,
                                                s.temperature, chunk_size=s.logprob_chunk_size,
                                                **_images(mb))
                    self.first_pass(ci, mb, start, logp, mb.completion_mask[:, start:])

    def micro_batch(self, epoch: int, ci: int, mini: MiniBatch) -> None:
        """Forward, loss and backward of micro-batch ``ci`` of ``mini``; its diagnostics join the running sums."""
        s = self.settings
        model = self.model
        chunk = self.chunks[ci]
        mb, start = sub_batch(self.batch, chunk, self.device)
        with self.amp, torch.set_grad_enabled(self.train_policy):
            logp, ent, *hidden = self.logprobs(model, mb.input_ids, mb.attention_mask, start,
                                               s.temperature, with_entropy=True,
                                               entropy_grad=self.entropy_coef > 0, return_hidden=self.shared,
                                               chunk_size=s.logprob_chunk_size, **_images(mb))
        mask = mb.completion_mask[:, start:]
        if epoch == 0 and not self.prepass:
            self.first_pass(ci, mb, start, logp, mask)
        ref_logp = None
        if self.kl_coef > 0:
            with torch.no_grad(), self.amp:
                ref_logp, _ = self.logprobs(self.ref_model, mb.input_ids, mb.attention_mask, start,
                                            s.temperature, chunk_size=s.logprob_chunk_size,
                                            **_images(mb))
        adv = mb.advantages[:, start:] if mb.advantages.dim() == 2 else mb.advantages  # per-token estimators
        loss, m = grpo_loss(logp, self.learner_old_logps[ci], adv, mask, ref_logp=ref_logp,
                            kl_coef=self.kl_coef, kl_kind=s.kl_estimator, clip_low=s.clip_low,
                            clip_high=s.clip_high, agg=s.loss_agg, max_len=s.max_new_tokens,
                            policy_loss=s.policy_loss, policy_loss_params=s.policy_loss_params,
                            entropy=ent if self.entropy_coef > 0 else None, entropy_coef=self.entropy_coef,
                            is_weights=self.is_weights[ci], off_policy=mb.off_policy,
                            shaping_gamma=s.shaping_gamma if mb.off_policy is not None else 0.1,
                            token_select=None if mb.token_select is None else mb.token_select[:, start:],
                            entropy_select=None if mb.entropy_select is None else mb.entropy_select[:, start:])
        w = float(mask.sum() / mini.tokens) if s.loss_agg == "token_mean" else len(chunk) / mini.seqs
        total = loss  # without gradient under train_policy=False: logp was computed without it
        if self.critic is not None:  # PPO's value loss, against the GAE returns
            total = total + self.value_term(mb, start, hidden, mask, m)
        (total * (w * self.grad_scale)).backward()
        n_tok = float(mask.sum())
        m = {k: float(v) for k, v in m.items()}
        m["entropy"] = float((ent.detach() * mask).sum() / mask.sum().clamp(min=1))
        m["loss"] = float(loss.detach())
        by_seqs = s.loss_agg != "token_mean"  # the objective's terms are means over sequences: weigh by sequences
        for k, v in m.items():
            if by_seqs and k in OBJECTIVE_TERMS:
                self.seq_sums[k] = self.seq_sums.get(k, 0.0) + v * len(chunk)
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v * n_tok
        self.weight_total += n_tok
        self.seq_total += len(chunk)

    def first_pass(self, ci: int, mb: Batch, start: int, logp: torch.Tensor, mask: torch.Tensor) -> None:
        """Keep the learner's log-probs before any update as ``logp_old``; sampler mismatch and importance weights."""
        s = self.settings
        old = logp.detach()
        if mb.off_policy is not None:  # demonstrations: behaviour probability 1 (log 0), as their sampler log-probs
            off = mb.off_policy.unsqueeze(-1)
            old = torch.where(off, torch.zeros_like(old), old)
            mask = torch.where(off, torch.zeros_like(mask), mask)  # no sampler: not in the mismatch
        self.learner_old_logps[ci] = old
        rollout_logp = mb.sampler_logprobs[:, start:]
        delta = (logp.detach() - rollout_logp).float()
        counted = mask.bool()
        mismatch = (delta.abs() * mask).sum()
        self.sums["logprob_mismatch"] = self.sums.get("logprob_mismatch", 0.0) + float(mismatch.float())
        if counted.any():  # the worst token, and tokens whose learner/sampler ratio leaves [0.9, 1.1]
            self.mismatch_max = max(self.mismatch_max, float(delta.abs()[counted].max()))
            ratio = delta[counted].exp()
            self.ratio_outside += float(((ratio < 0.9) | (ratio > 1.1)).sum())
        self.mismatch_tokens += float(mask.sum())
        # sampler -> learner importance weights (precision mismatch, stale weights)
        self.is_weights[ci] = is_correction_weights(s.is_correction, logp.detach(), rollout_logp, mask,
                                                    **s.is_params)

    def value_term(self, mb: Batch, start: int, hidden: list, mask: torch.Tensor, m: dict) -> torch.Tensor:
        """``value.coef`` x the clipped value loss of the critic against the GAE returns (metrics into ``m``)."""
        s, critic = self.settings, self.critic
        with self.amp:
            values = critic.values_from_hidden(hidden[0]) if self.shared else \
                critic_values(critic, self.model, mb.input_ids, mb.attention_mask, start)
        vloss, vm = value_loss(values, mb.values[:, start:], mb.returns[:, start:], mask,
                               clip_range=s.value_clip, agg=s.loss_agg, max_len=s.max_new_tokens)
        m.update(vm, value_loss=vloss.detach())
        return s.value_coef * vloss


def value_diagnostics(batch: Batch) -> dict[str, float]:
    """How well the critic's values (before this step's update) predicted the returns.

    ``value_explained_var = 1 - Var(R - V) / Var(R)`` over completion tokens
    (1: perfect, 0: no better than a constant, negative: worse); NaN when the
    returns are constant (e.g. every reward 0: GAE then leaves rounding noise
    of ~1e-8, whose variance must not be divided by).
    """
    m = batch.completion_mask.bool()
    v, r = batch.values[m], batch.returns[m]
    var_r = float(r.var()) if r.numel() > 1 else 0.0
    ev = float(1 - (r - v).var() / var_r) if var_r > 1e-8 else float("nan")
    return {"value_explained_var": ev, "value_pred_mean": float(v.mean()) if v.numel() else 0.0,
            "return_mean": float(r.mean()) if r.numel() else 0.0}


def enable_activation_checkpointing(model) -> None:
    """Turn on transformers' per-layer activation checkpointing (non-reentrant) once; a no-op when already on.

    Only the learner's training-mode passes recompute: HF models skip
    checkpointing in eval mode, so sampling and the no-grad passes are unaffected.
    """
    if getattr(model, "_rlvr_checkpointing", False):
        return
    from rlvr.models.matmul import checkpoint_context

    # recompute under the forward's matmul backend (model.matmul): modes do not reach the backward pass
    kwargs = {"use_reentrant": False, "context_fn": checkpoint_context}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model._rlvr_checkpointing = True


def clip_gradients(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Clip the gradients of ``params`` to ``max_norm`` (0: no clipping); returns their norm before clipping."""
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
