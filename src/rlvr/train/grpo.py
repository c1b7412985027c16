"""The GRPO recipe, readable top to bottom (in the spirit of CleanRL / torchtune).

One step:
    prompts  = sampler.next(P)                       # resumable data order
    groups   = engine.generate(prompts, n=G)         # token ids + sampler log-probs
    rewards  = verifier(completion, answer)          # one scalar per completion
    adv      = advantage_estimator(rewards, G)       # e.g. group-normalised (GRPO)
    loss     = PPO-clip(logp_new / logp_old, adv) [+ kl_coef * KL(pi || ref)]
    optimizer step (grad accumulation over micro-batches, clipping, LR schedule)

``logp_old`` is the learner's own log-prob from the first pass over the batch
(detached), so the first PPO epoch has ratio exactly 1 and later epochs reuse it:
no extra forward pass is spent on it.  The sampler's log-probs are compared with
it every step (``logprob_mismatch``), the signal that off-policy corrections need.  Sequences whose
advantage is exactly 0 contribute no policy gradient, so with no KL term they are
skipped by the learner (``algorithm.skip_zero_advantage``) while the loss
normaliser still counts them: the gradient is unchanged, the work is not.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.algorithms import get_advantage_estimator, group_stats, grpo_loss, ppo_gae_advantages, value_loss
from rlvr.algorithms.importance import is_correction_weights
from rlvr.algorithms.kl import ReferenceResetSchedule
from rlvr.algorithms.sampling import DifficultyFilter, informative_groups
from rlvr.config import save_config
from rlvr.evaluate.accuracy import evaluate_accuracy
from rlvr.models import load_policy
from rlvr.models.lora import apply_lora
from rlvr.models.value_head import build_critic, critic_values
from rlvr.rollout import SamplingParams, make_engine
from rlvr.rewards import flip_rewards, laser_reward, soft_overlong_punishment
from rlvr.train.accounting import StepAccounting
from rlvr.train.batching import collate, completion_start, policy_logprobs
from rlvr.train.checkpoint import latest_checkpoint, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rlvr.train.config import RunConfig
from rlvr.train.data import PromptSampler, build_task
from rlvr.train.metrics import MetricsLogger
from rlvr.types import Batch, Problem
from rlvr.verifiers import get_verifier, safe_verify

__all__ = ["train", "update_policy", "make_scheduler", "resolve_device", "TrainingInterrupted"]

log = logging.getLogger(__name__)


class TrainingInterrupted(KeyboardInterrupt):
    """Raised after Ctrl-C once a checkpoint has been written."""


# --------------------------------------------------------------------------- setup
def make_scheduler(optimizer, cfg: RunConfig):
    """Linear warm-up, then constant / cosine / linear decay to 0 at ``train.steps``."""
    warm, total, kind = cfg.train.warmup_steps, max(cfg.train.steps, 1), cfg.train.schedule

    def factor(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        if kind == "constant":
            return 1.0
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return 0.5 * (1 + math.cos(math.pi * frac)) if kind == "cosine" else 1.0 - frac

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@contextmanager
def _deferred_interrupts():
    """Inside this block Ctrl-C is remembered and raised when the block ends.

    Used around the optimizer update so an interrupt never leaves half-updated
    weights; outside it, Ctrl-C raises at once (weights are then those of the
    last finished step, which is what gets checkpointed).
    """
    pending = []
    previous = signal.getsignal(signal.SIGINT)
    installed = False
    try:
        signal.signal(signal.SIGINT, lambda *_: pending.append(True))
        installed = True
    except ValueError:  # not in the main thread: cannot install handlers
        pass
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt


def resolve_device(name: str) -> torch.device:
    """``model.device``: ``auto`` is CUDA when available, else CPU; anything else is passed to torch."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"model.device={name} but torch sees no CUDA device (CPU build or no GPU)")
    return dev


# --------------------------------------------------------------------------- learner
def _sub_batch(batch: Batch, rows: torch.Tensor, device: torch.device | None = None) -> tuple[Batch, int]:
    """Rows of a batch with all-padding columns trimmed, moved to ``device``; returns (batch, completion start)."""
    am = batch.attention_mask[rows]
    used = am.any(0).nonzero()
    lo, hi = int(used[0]), int(used[-1]) + 1
    adv = batch.advantages[rows]
    parts = [batch.input_ids[rows, lo:hi], am[:, lo:hi], batch.completion_mask[rows, lo:hi],
             batch.old_logprobs[rows, lo:hi], adv[:, lo:hi] if adv.dim() == 2 else adv]
    parts += [None if t is None else t[rows, lo:hi] for t in (batch.ref_logprobs, batch.values, batch.returns)]
    if device is not None:
        parts = [None if t is None else t.to(device, non_blocking=True) for t in parts]
    sub = Batch(*parts)
    return sub, completion_start(sub)


def _draw_prompts(sampler: PromptSampler, k: int, dfilter: DifficultyFilter | None) -> list[Problem]:
    """``k`` prompts; with a difficulty filter, prompts outside its pass-rate band are skipped.

    At most ``8 k`` prompts are examined per call; if the band holds fewer than
    ``k`` of them the rest are taken unfiltered, so a step never stalls.
    """
    if dfilter is None:
        return sampler.next(k)
    out: list[Problem] = []
    for _ in range(8 * k):
        if len(out) == k:
            break
        p = sampler.next(1)[0]
        if dfilter.keep(p.id):
            out.append(p)
    return out + (sampler.next(k - len(out)) if len(out) < k else [])


def _per_token_pass(batch: Batch, cfg: RunConfig, device, fn) -> torch.Tensor:
    """Run ``fn(micro_batch, start) -> [b, T' - start]`` over the batch without gradients; [B, T] float32 result.

    The no-grad forward passes some estimators need before the advantage
    (entropy, reference KL, critic values) share this loop: micro-batches of
    ``train.micro_batch_size`` rows with padding columns trimmed, results put
    back at the columns of the completion tokens they belong to.
    """
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for chunk in torch.arange(batch.input_ids.shape[0]).split(cfg.train.micro_batch_size):
            mb, start = _sub_batch(batch, chunk, device)
            res = fn(mb, start)
            # _sub_batch trimmed columns lo:hi; completions end at hi, so the result block ends there too
            hi = int(batch.attention_mask[chunk].any(0).nonzero()[-1]) + 1
            out[chunk, hi - res.shape[1]:hi] = res.float().cpu()
    return out * batch.completion_mask


def _policy_entropy(model, batch: Batch, cfg: RunConfig, device) -> torch.Tensor:
    """Per-token entropy of the current policy at every completion position, [B, T] (no grad).

    Needed before the advantage by the entropy-guided estimator (RL-ZVP).
    """
    was_training = model.training
    model.eval()
    out = _per_token_pass(batch, cfg, device, lambda mb, start: policy_logprobs(
        model, mb.input_ids, mb.attention_mask, start, cfg.rollout.temperature, with_entropy=True)[1])
    model.train(was_training)
    return out


def _reference_kl(ref_model, batch: Batch, cfg: RunConfig, device) -> torch.Tensor:
    """Per-token k1 = log pi_sampler - log pi_ref at every completion position, [B, T] (no grad)."""
    return _per_token_pass(batch, cfg, device, lambda mb, start: mb.old_logprobs[:, start:] - policy_logprobs(
        ref_model, mb.input_ids, mb.attention_mask, start, cfg.rollout.temperature)[0].float())


def _critic_values(critic, model, batch: Batch, cfg: RunConfig, device) -> torch.Tensor:
    """The critic's value of the state before every completion token, [B, T] (no grad; 0 off the completion)."""
    return _per_token_pass(batch, cfg, device, lambda mb, start: critic_values(
        critic, model, mb.input_ids, mb.attention_mask, start))


def _collect_rollouts(engine, sampler: PromptSampler, verifier, params: SamplingParams, cfg: RunConfig, step: int,
                      dfilter: DifficultyFilter | None = None, budget_left: int | None = None):
    """Sample ``prompts_per_step`` groups, verify them and turn verdicts into rewards.

    Reward shaping on top of the verifier: optional noise injection (for
    noisy-verifier experiments; ``accuracy`` keeps the true verdicts) and DAPO's
    soft overlong punishment.  With ``algorithm.dynamic_sampling`` all-equal-reward
    groups are dropped and more prompts are drawn, up to ``max_sampling_rounds``
    generation rounds; if still short the batch is topped up with dropped groups
    (their advantage is 0, so they only count towards the step's statistics).

    With a difficulty filter, prompts outside its band are skipped before
    generation and every generated group updates the prompt's running pass rate
    (from the true verdicts).  LASER adds a bonus to correct answers within
    ``reward.laser_target_length`` tokens.

    Returns ``(samples, verdicts, rewards, rounds, generation_seconds, completions_generated)``.
    """
    G, P, rcfg = params.n, cfg.train.prompts_per_step, cfg.reward
    noise = torch.Generator().manual_seed(cfg.train.seed * 1_000_003 + step)  # resume-exact
    kept: list[tuple] = []
    dropped: list[tuple] = []
    t_gen, rounds = 0.0, 0
    max_rounds = cfg.algorithm.max_sampling_rounds if cfg.algorithm.dynamic_sampling else 1
    if budget_left is not None:  # train.max_rollouts: extra rounds may not overshoot the budget
        max_rounds = max(1, min(max_rounds, budget_left // (P * G)))
    while len(kept) < P and rounds < max_rounds:
        rounds += 1
        problems = _draw_prompts(sampler, P, dfilter)
        t0 = time.perf_counter()
        groups = engine.generate(problems, params)
        t_gen += time.perf_counter() - t0
        for problem, group in zip(problems, groups):
            verdicts = [safe_verify(verifier, s.text, problem.answer) for s in group]
            correct = torch.tensor([float(v.correct) for v in verdicts])
            if dfilter is not None:
                dfilter.update([problem.id], correct, G)
            if rcfg.flip_false_positive or rcfg.flip_false_negative:
                correct = flip_rewards(correct, rcfg.flip_false_positive, rcfg.flip_false_negative, noise)
            reward = rcfg.wrong_reward + (rcfg.correct_reward - rcfg.wrong_reward) * correct
            lengths = torch.tensor([float(s.num_tokens) for s in group])
            if rcfg.laser_target_length:  # LASER's reward is 1[correct] + bonus: add the bonus alone
                reward = reward + laser_reward(correct, lengths, rcfg.laser_target_length,
                                               alpha=rcfg.laser_alpha) - correct
            if rcfg.overlong_cache_len:
                reward = reward + soft_overlong_punishment(lengths, params.max_new_tokens, rcfg.overlong_cache_len)
            informative = bool(informative_groups(reward, G)[0])
            (kept if informative or not cfg.algorithm.dynamic_sampling else dropped).append((group, verdicts, reward))
    chosen = (kept + dropped)[:P]
    samples = [s for g, _, _ in chosen for s in g]
    verdicts = [v for _, vs, _ in chosen for v in vs]
    rewards = torch.cat([r for _, _, r in chosen])
    return samples, verdicts, rewards, rounds, t_gen, (len(kept) + len(dropped)) * G


def update_policy(model, optimizer, batch: Batch, cfg: RunConfig, ref_model=None, dp=None, critic=None,
                  critic_optimizer=None, train_policy: bool = True) -> dict[str, float]:
    """One optimizer step per PPO epoch over ``batch``; returns averaged diagnostics.

    With a ``critic`` (PPO with GAE) every micro-batch also computes the
    clipped value loss against ``batch.returns``, weighted by
    ``algorithm.value.coef`` and aggregated like the policy loss; the critic's
    parameters are clipped and stepped by ``critic_optimizer``.  A shared
    critic reads the hidden states of the policy's own forward pass, so its
    loss also trains the policy's trunk.  ``train_policy=False`` (critic
    warm-up) trains the critic alone: no policy loss, no policy step, and a
    shared head reads detached hidden states.

    Gradients are accumulated over micro-batches with weights chosen so the sum
    equals the loss aggregated over the whole batch (token-mean: tokens in the
    micro-batch / tokens in the batch; sequence means: sequences / sequences).

    ``dp`` (a :class:`rlvr.distributed.fsdp.DataParallel`, None on one process)
    makes this one rank of a data-parallel step: ``batch`` is the rank's share,
    the normalisers are the global token / sequence counts, and every rank runs
    the same number of passes.  Diagnostics stay per rank.
    """
    alg, tcfg = cfg.algorithm, cfg.train
    B = batch.input_ids.shape[0]
    total_tokens = batch.completion_mask.sum().clamp(min=1)
    rows = torch.arange(B)
    if alg.skip_zero_advantage and (alg.kl_coef == 0 or alg.kl_in_reward) and alg.entropy_coef == 0 \
            and critic is None:  # the critic learns from every row
        nonzero = batch.advantages != 0
        rows = rows[nonzero.any(-1) if nonzero.dim() == 2 else nonzero]
    chunks = list(rows.split(tcfg.micro_batch_size)) if len(rows) else []
    n_passes, grad_scale = len(chunks), 1.0
    if dp is not None:  # global normalisers, and the largest pass count of any rank
        total_tokens, B, n_passes = dp.global_sizes(float(batch.completion_mask.sum()), B, len(chunks))
        grad_scale = dp.grad_scale
    sums: dict[str, float] = {}
    weight_total = 0.0
    grad_norm = 0.0
    model.train()
    old_logps: dict[int, torch.Tensor] = {}  # first-pass learner log-probs per micro-batch
    is_weights: dict[int, torch.Tensor | None] = {}
    device = next(model.parameters()).device
    device_type = device.type
    kl_coef = 0.0 if alg.kl_in_reward else alg.kl_coef  # folded into the reward instead of the loss
    amp = torch.autocast(device_type, dtype=torch.bfloat16, enabled=tcfg.autocast == "bfloat16")
    shared = critic is not None and critic.shared
    critic_norm = 0.0
    for epoch in range(alg.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        if critic_optimizer is not None:
            critic_optimizer.zero_grad(set_to_none=True)
        for ci in range(n_passes):
            if ci >= len(chunks):  # this rank has run out of rows: zero-loss pass, same collectives
                dp.idle_pass(model, ref_model if kl_coef > 0 else None)
                continue
            chunk = chunks[ci]
            mb, start = _sub_batch(batch, chunk, device)
            with amp, torch.set_grad_enabled(train_policy):
                logp, ent, *hidden = policy_logprobs(model, mb.input_ids, mb.attention_mask, start,
                                                     cfg.rollout.temperature, with_entropy=True,
                                                     entropy_grad=alg.entropy_coef > 0, return_hidden=shared)
            mask = mb.completion_mask[:, start:]
            if epoch == 0:
                old_logps[ci] = logp.detach()
                rollout_logp = mb.old_logprobs[:, start:]
                mismatch = ((logp.detach() - rollout_logp).abs() * mask).sum()
                sums["logprob_mismatch"] = sums.get("logprob_mismatch", 0.0) + float(mismatch.float())
                # sampler -> learner importance weights (precision mismatch, stale weights)
                is_weights[ci] = is_correction_weights(alg.is_correction, logp.detach(), rollout_logp, mask,
                                                       **alg.is_params)
            ref_logp = None
            if kl_coef > 0:
                with torch.no_grad(), amp:
                    ref_logp, _ = policy_logprobs(ref_model, mb.input_ids, mb.attention_mask, start,
                                                  cfg.rollout.temperature)
            adv = mb.advantages[:, start:] if mb.advantages.dim() == 2 else mb.advantages  # per-token estimators
            loss, m = grpo_loss(logp, old_logps[ci], adv, mask, ref_logp=ref_logp,
                                kl_coef=kl_coef, kl_kind=alg.kl_estimator, clip_low=alg.clip_low,
                                clip_high=alg.clip_high, agg=alg.loss_agg, max_len=cfg.rollout.max_new_tokens,
                                policy_loss=alg.policy_loss, policy_loss_params=alg.policy_loss_params,
                                entropy=ent if alg.entropy_coef > 0 else None, entropy_coef=alg.entropy_coef,
                                is_weights=is_weights[ci])
            w = float(mask.sum() / total_tokens) if alg.loss_agg == "token_mean" else len(chunk) / B
            total = loss  # without gradient under train_policy=False: logp was computed without it
            if critic is not None:  # PPO's value loss, against the GAE returns
                with amp:
                    values = critic.values_from_hidden(hidden[0]) if shared else \
                        critic_values(critic, model, mb.input_ids, mb.attention_mask, start)
                vloss, vm = value_loss(values, mb.values[:, start:], mb.returns[:, start:], mask,
                                       clip_range=alg.value.clip, agg=alg.loss_agg,
                                       max_len=cfg.rollout.max_new_tokens)
                total = total + alg.value.coef * vloss
                m.update(vm, value_loss=vloss.detach())
            (total * (w * grad_scale)).backward()
            n_tok = float(mask.sum())
            m = {k: float(v) for k, v in m.items()}
            m["entropy"] = float((ent.detach() * mask).sum() / mask.sum().clamp(min=1))
            m["loss"] = float(loss.detach())
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + v * n_tok
            weight_total += n_tok
        if n_passes and critic_optimizer is not None:
            critic_norm = _clip_gradients(list(critic.parameters()), tcfg.max_grad_norm)
            critic_optimizer.step()
        if n_passes and train_policy:
            grad_norm = _clip_gradients(list(model.parameters()), tcfg.max_grad_norm)
        optimizer.step()  # a no-op without gradients (critic warm-up too); keeps the LR scheduler's step order
    out = {k: v / weight_total for k, v in sums.items()} if weight_total else {}
    if weight_total:  # mismatch was summed over first-epoch tokens only
        out["logprob_mismatch"] = sums["logprob_mismatch"] / (weight_total / alg.ppo_epochs)
    out.update({"grad_norm": grad_norm, "learner_seqs": int(len(rows)), "learner_tokens": int(weight_total)})
    if critic is not None:
        out["critic_grad_norm"] = critic_norm
    return out


def _value_diagnostics(batch: Batch) -> dict[str, float]:
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


def _clip_gradients(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Clip the gradients of ``params`` to ``max_norm`` (0: no clipping); returns their norm before clipping."""
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))


# --------------------------------------------------------------------------- eval
def _evaluate(engine, problems: list[Problem], verifier, cfg: RunConfig, tag: str, out_dir: Path) -> dict:
    ecfg = cfg.eval
    probs = problems[: ecfg.num_problems]
    results = {"greedy" if ecfg.temperature == 0 else f"T={ecfg.temperature}": evaluate_accuracy(
        engine, probs, verifier, n=ecfg.n, temperature=ecfg.temperature,
        max_new_tokens=ecfg.max_new_tokens, seed=ecfg.seed, keep_samples=8)}
    for t in ecfg.extra_temperatures:
        results[f"T={t}"] = evaluate_accuracy(engine, probs, verifier, n=ecfg.n, temperature=t,
                                              max_new_tokens=ecfg.max_new_tokens, seed=ecfg.seed, keep_samples=8)
    (out_dir / f"eval_{tag}.json").write_text(json.dumps(results, indent=2))
    return results


def _periodic_eval(engine, problems: list[Problem], verifier, cfg: RunConfig, step: int, rollouts: int) -> dict:
    """One ``eval.every`` row: held-out accuracy (eval.n samples at eval.temperature) after ``step``."""
    ecfg = cfg.eval
    r = evaluate_accuracy(engine, problems[: ecfg.num_problems], verifier, n=ecfg.n, temperature=ecfg.temperature,
                          max_new_tokens=ecfg.max_new_tokens, seed=ecfg.seed)
    return {"step": step, "rollouts": rollouts, "heldout_accuracy": r["accuracy"], "heldout_ci_low": r["ci_low"],
            "heldout_ci_high": r["ci_high"], "heldout_n": r["n"], "heldout_tokens": r["mean_completion_tokens"],
            "heldout_per_problem": r["per_problem"]}


def _fmt_eval(results: dict) -> str:
    return "  ".join(f"{k}: {r['accuracy']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}] (n={r['n']})"
                     for k, r in results.items())


# --------------------------------------------------------------------------- loop
def train(cfg: RunConfig, *, model=None, tokenizer=None, problems: tuple[list, list] | None = None,
          verifier: Callable | None = None, on_step: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Run GRPO as configured; returns a summary (final metrics, eval results, paths).

    ``model``/``tokenizer``/``problems``/``verifier`` may be injected (tests build
    tiny models in memory); otherwise they come from ``cfg``.
    """
    if cfg.distributed.fsdp:  # one rank of an FSDP2 learner, started by torchrun (rlvr.distributed.fsdp_train)
        from rlvr.distributed.fsdp_train import train_fsdp

        return train_fsdp(cfg, model=model, tokenizer=tokenizer, problems=problems, verifier=verifier,
                          on_step=on_step)
    if cfg.distributed.backend == "ray" and cfg.distributed.learner == "actor":  # this recipe, in a Ray actor
        from rlvr.distributed.ray_backend import train_on_cluster

        return train_on_cluster(cfg, model=model, tokenizer=tokenizer, problems=problems, verifier=verifier,
                                on_step=on_step)
    tcfg = cfg.train
    out_dir = Path(tcfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if tcfg.threads:
        torch.set_num_threads(tcfg.threads)
    torch.manual_seed(tcfg.seed)

    if model is None:
        model, tokenizer = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
    device = resolve_device(cfg.model.device)
    model.to(device)
    critic = critic_optimizer = critic_scheduler = None
    if cfg.algorithm.advantage == "gae":  # PPO: a learned critic (before LoRA: a separate one trains all weights)
        critic = build_critic(model, cfg.algorithm.value.critic)
    if cfg.model.lora.enabled:  # train adapters only (peft); the sampler gets merged weights
        model = apply_lora(model, cfg.model.lora)
    ref_model = None
    if cfg.algorithm.kl_coef > 0:  # a frozen copy; never loaded when the KL weight is 0
        from rlvr.models.frozen import frozen_copy

        ref_model = frozen_copy(model)
    train_problems, heldout = problems if problems is not None else build_task(cfg.task)
    injected_verifier = verifier  # what a rollout process is given (None: it builds cfg.reward.verifier)
    verifier = verifier or get_verifier(cfg.reward.verifier)
    estimator = get_advantage_estimator(cfg.algorithm.advantage, **cfg.algorithm.advantage_params)
    engine = make_engine(cfg, model, tokenizer)  # HFEngine by default; vLLM and/or Ray rollout workers if configured
    engine.generator.manual_seed(tcfg.seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tcfg.lr, betas=tuple(tcfg.betas),
                                  weight_decay=tcfg.weight_decay)
    scheduler = make_scheduler(optimizer, cfg)
    if critic is not None:
        critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=cfg.algorithm.value.lr,
                                             betas=tuple(tcfg.betas), weight_decay=tcfg.weight_decay)
        critic_scheduler = make_scheduler(critic_optimizer, cfg)
    sampler = PromptSampler(train_problems, seed=tcfg.seed)
    alg = cfg.algorithm
    dfilter = DifficultyFilter(alg.difficulty_low, alg.difficulty_high, alpha=alg.difficulty_alpha) \
        if alg.difficulty_filter else None
    ref_reset = ReferenceResetSchedule(alg.ref_reset_every, alg.ref_reset_kl) \
        if (alg.ref_reset_every or alg.ref_reset_kl) else None
    rollouts_done = 0  # completions generated so far (train.max_rollouts budget)

    start_step = 0
    if tcfg.resume:
        ckpt = latest_checkpoint(out_dir)
        if ckpt is None:
            log.warning("train.resume=true but no checkpoint in %s: starting from scratch", out_dir)
        else:
            state = load_checkpoint(ckpt, model, optimizer, scheduler,
                                    modules={"critic": critic} if critic is not None else None)
            if critic is not None:
                critic_optimizer.load_state_dict(state["critic_optimizer"])
                critic_scheduler.load_state_dict(state["critic_scheduler"])
            engine.sync_weights(model)
            start_step, sampler.position = state["step"], state["data_position"]
            set_rng_state(state["rng"], engine.generator)
            rollouts_done = state.get("rollouts", 0)
            if dfilter is not None and "difficulty_filter" in state:
                dfilter.load_state_dict(state["difficulty_filter"])
            if ref_reset is not None and "ref_reset" in state:
                ref_reset.load_state_dict(state["ref_reset"])
                if state.get("reference") is not None:
                    ref_model.load_state_dict(state["reference"])
            print(f"resumed from {ckpt} (step {start_step})")
    save_config(cfg, out_dir / "config.yaml")
    metrics_log = MetricsLogger(out_dir, resume_from_step=start_step if tcfg.resume else None)
    heldout_log = MetricsLogger(out_dir, resume_from_step=start_step if tcfg.resume else None,
                                tensorboard=False, name="heldout.jsonl") if cfg.eval.every and heldout else None

    summary: dict[str, Any] = {"output_dir": str(out_dir)}
    if cfg.eval.before_training and heldout and not (out_dir / "eval_before.json").exists():
        before = _evaluate(engine, heldout, verifier, cfg, "before", out_dir)
        print("held-out accuracy before training: " + _fmt_eval(before))
    if (out_dir / "eval_before.json").exists():
        summary["eval_before"] = json.loads((out_dir / "eval_before.json").read_text())

    def checkpoint(step: int) -> Path:
        state = {"data_position": sampler.position, "rng": rng_state(engine.generator), "rollouts": rollouts_done}
        if dfilter is not None:
            state["difficulty_filter"] = dfilter.state_dict()
        if critic is not None:
            state["critic_optimizer"] = critic_optimizer.state_dict()
            state["critic_scheduler"] = critic_scheduler.state_dict()
        if ref_reset is not None:  # the reference differs from the initial model after a reset
            state["ref_reset"] = ref_reset.state_dict()
            state["reference"] = ({k: v.cpu() for k, v in ref_model.state_dict().items()}
                                  if ref_reset.last_reset else None)
        return save_checkpoint(out_dir, step, model, tokenizer, optimizer, scheduler, state,
                               keep=tcfg.keep_checkpoints,
                               modules={"critic": critic} if critic is not None else None)

    params = SamplingParams(n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
                            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                            ignore_eos=cfg.rollout.ignore_eos)
    bar = None
    if tcfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=tcfg.steps, initial=start_step, desc="GRPO", unit="step", dynamic_ncols=True)
    step, row = start_step, {}
    acct = StepAccounting(device)  # per-step time split, tokens/s, peak memory
    worker = None
    try:
        if tcfg.async_steps > 0 or tcfg.rollout_worker:  # rollouts from a generator process, k steps ahead
            from rlvr.train.async_rollouts import AsyncRollouts

            worker = AsyncRollouts(model, tokenizer, train_problems, params, cfg, verifier=injected_verifier,
                                   dfilter=dfilter, start=start_step, end=tcfg.steps, max_ahead=tcfg.async_steps,
                                   data_position=sampler.position, generator_state=engine.generator.get_state(),
                                   device=device)
        for step in range(start_step, tcfg.steps):
            if tcfg.max_rollouts and rollouts_done >= tcfg.max_rollouts:
                print(f"rollout budget reached ({rollouts_done} >= train.max_rollouts={tcfg.max_rollouts})")
                break
            acct.start_step()
            # snapshot so that an interrupt during rollouts checkpoints the pre-step state exactly
            pre_state = (sampler.position, rng_state(engine.generator), rollouts_done,
                         None if dfilter is None else dfilter.state_dict())
            lag: dict[str, Any] = {}
            if worker is None:
                t0 = time.perf_counter()
                samples, verdicts, rewards, rounds, t_gen, generated = _collect_rollouts(
                    engine, sampler, verifier, params, cfg, step, dfilter,
                    budget_left=tcfg.max_rollouts - rollouts_done if tcfg.max_rollouts else None)
                acct.add_time("generate", t_gen)
                acct.add_time("verify", time.perf_counter() - t0 - t_gen)
            else:
                with acct.phase("wait"):
                    rb = worker.get(step)
                samples, verdicts, rewards, rounds, generated = rb.samples, rb.verdicts, rb.rewards, rb.rounds, \
                    rb.generated
                acct.add_time("generate", rb.gen_time)
                acct.add_time("verify", rb.verify_time)
                # the generator's state after this batch is what a checkpoint must resume from
                sampler.position = rb.state["data_position"]
                engine.generator.set_state(rb.state["generator"])
                if dfilter is not None:
                    dfilter.load_state_dict(rb.state["difficulty_filter"])
                lag = {"policy_version": rb.version, "staleness": rb.staleness,
                       "rollout_peak_rss_mb": rb.peak_rss_mb}
            rollouts_done += generated
            batch = collate(samples, torch.zeros(len(samples)), engine.pad_id)
            seq_kl = token_kl = None
            if alg.kl_in_reward:  # REINFORCE++: r_i - beta * sum_t k1_t, before the advantage
                token_kl = _reference_kl(ref_model, batch, cfg, device)
                seq_kl = token_kl.sum(-1)
                if critic is None:  # PPO subtracts it token by token instead (ppo_gae_advantages)
                    rewards = rewards - alg.kl_coef * seq_kl
            value_row: dict[str, float] = {}
            if critic is not None:  # PPO: GAE on the critic's values; the returns are its targets
                batch.values = _critic_values(critic, model, batch, cfg, device)
                advantages, batch.returns = ppo_gae_advantages(
                    rewards, batch.values, batch.completion_mask, kl=token_kl,
                    kl_coef=alg.kl_coef if token_kl is not None else 0.0, **alg.advantage_params)
                value_row = _value_diagnostics(batch)
            elif alg.advantage == "entropy_guided":  # zero-variance groups are shaped by the policy's entropy
                advantages = estimator(rewards, cfg.rollout.group_size,
                                       entropy=_policy_entropy(model, batch, cfg, device), mask=batch.completion_mask)
            else:
                advantages = estimator(rewards, cfg.rollout.group_size)
            batch.advantages = advantages.float()

            # The update and its log line are one unit: Ctrl-C waits for both.
            with _deferred_interrupts():
                with acct.phase("learn"):
                    learn = update_policy(model, optimizer, batch, cfg, ref_model, critic=critic,
                                          critic_optimizer=critic_optimizer,
                                          train_policy=step >= alg.value.warmup_steps or critic is None)
                    scheduler.step()
                    if critic_scheduler is not None:
                        critic_scheduler.step()
                with acct.phase("sync"):
                    engine.sync_weights(model)
                    if worker is not None:
                        worker.send_weights(step + 1, model)
                did_reset = False
                if ref_reset is not None:
                    kl_now = float(seq_kl.mean()) if seq_kl is not None else learn.get("kl")
                    if ref_reset.should_reset(step + 1, kl_now):
                        ref_model.load_state_dict(model.state_dict())
                        if alg.ref_reset_optimizer:
                            optimizer.state.clear()
                        ref_reset.mark_reset(step + 1)
                        did_reset = True
                gen_tokens = sum(s.num_tokens for s in samples)
                acct.add_tokens(gen_tokens)
                timing = acct.row()
                t_step = timing["step_time"]
                row = {
                    "step": step + 1,
                    "reward_mean": float(rewards.mean()),
                    "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
                    "accuracy": sum(v.correct for v in verdicts) / len(verdicts),
                    "response_length": gen_tokens / len(samples),
                    "stop_fraction": sum(s.finish_reason == "stop" for s in samples) / len(samples),
                    "zero_variance_groups": float(
                        group_stats(rewards, cfg.rollout.group_size)["zero_variance_frac"]),
                    "sampling_rounds": rounds, "rollouts": rollouts_done,
                    "adv_mean": float(advantages.mean()), "adv_std": float(advantages.std()) if len(advantages) > 1
                    else 0.0, "adv_abs_mean": float(advantages.abs().mean()),
                    "lr": scheduler.get_last_lr()[0],
                    **learn,
                    **value_row,  # PPO: explained variance and mean of the critic's values vs returns
                    **timing,  # gen/verify/learn/sync/wait/step time, tokens/s, peak_rss_mb
                    **lag,  # async: policy_version, staleness, rollout process peak memory
                }
                if seq_kl is not None:
                    row["kl_in_reward"] = float(seq_kl.mean())
                if ref_reset is not None:
                    row["ref_reset"] = int(did_reset)
                if dfilter is not None:
                    row["filter_tracked_prompts"] = len(dfilter)
                metrics_log.log(row)
                pre_state = None
            if on_step is not None:
                on_step(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward_mean']:.2f}", len=f"{row['response_length']:.0f}",
                                kl=f"{row.get('kl', 0):.3f}", s=f"{t_step:.1f}")
            if tcfg.save_every and (step + 1) % tcfg.save_every == 0:
                with _deferred_interrupts():
                    checkpoint(step + 1)
            if heldout_log is not None and (step + 1) % cfg.eval.every == 0:
                heldout_log.log(_periodic_eval(engine, heldout, verifier, cfg, step + 1, rollouts_done))
        else:
            step = tcfg.steps
    except KeyboardInterrupt:
        done = step + (0 if pre_state is not None else 1)
        if pre_state is not None:
            sampler.position, rngs, rollouts_done, fstate = pre_state
            set_rng_state(rngs, engine.generator)
            if dfilter is not None:
                dfilter.load_state_dict(fstate)
        if bar is not None:
            bar.close()
        path = checkpoint(done)
        metrics_log.close()
        print(f"\ninterrupted: checkpoint written to {path}; continue with train.resume=true")
        raise TrainingInterrupted() from None
    finally:
        if worker is not None:
            worker.close()
    if bar is not None:
        bar.close()
    metrics_log.close()
    if heldout_log is not None:
        if step > start_step and step % cfg.eval.every:  # the run ended between two evals: one at the end
            heldout_log.log(_periodic_eval(engine, heldout, verifier, cfg, step, rollouts_done))
        heldout_log.close()
    final = checkpoint(step) if tcfg.steps > start_step or latest_checkpoint(out_dir) is None else \
        latest_checkpoint(out_dir)
    summary.update({"final_checkpoint": str(final), "last_metrics": row, "steps": step})
    if cfg.eval.after_training and heldout:
        after = _evaluate(engine, heldout, verifier, cfg, "after", out_dir)
        summary["eval_after"] = after
        if "eval_before" in summary:
            print("held-out accuracy before training: " + _fmt_eval(summary["eval_before"]))
        print("held-out accuracy after training:  " + _fmt_eval(after))
    (out_dir / "summary.json").write_text(json.dumps(
        {k: v for k, v in summary.items() if k not in ("eval_before", "eval_after")}, indent=2, default=str))
    return summary
