"""The RL recipe: one class whose small named steps are the training loop (torchtune's recipes are the model).

One step of :meth:`RLRecipe.train`::

    rollouts = self.collect(step)        # prompts -> engine.generate -> verifiers -> rewards (DAPO refill)
    batch    = self.advantages(rollouts) # KL-in-reward, critic values / entropy if the estimator needs them,
                                         # the teacher's log-probs (on-policy distillation)
    learn    = self.learn(step, batch)   # update_policy (PPO epochs, micro-batches), LR schedule, weight sync
    row      = self.log(step, ...)       # one metrics.jsonl line, the progress bar
    self.checkpoint(step + 1)            # every train.save_every steps; Ctrl-C writes one too

Every algorithm runs through the same steps: the estimator's registry entry says
which extra inputs it needs (``entropy``, ``values``), the loss and KL estimator
are registry names, and PPO's critic is one more module the learner steps.
``logp_old`` is the learner's own log-prob before the step's first optimizer step
(detached), so the first optimizer step has ratio exactly 1 and the clip options act from the
second on (``algorithm.mini_batches`` / ``ppo_epochs``); the sampler's log-probs
(``Batch.sampler_logprobs``) are compared with it every step (``logprob_mismatch``).
Sequences whose advantage is exactly 0 contribute no policy gradient, so with no
KL term they are skipped by the learner (``algorithm.skip_zero_advantage``).

Other ways to run the same recipe change *how* a step runs, never the loop:
``train.async_steps`` swaps :meth:`collect`'s source for a generator process;
``distributed.learner=actor`` runs the recipe, passed as a value, in a Ray actor;
:class:`rlvr.recipes.fsdp.FSDPRecipe` shards the learner.
"""

from __future__ import annotations

import functools
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rlvr.algorithms import EntropyFloor, group_stats
from rlvr.algorithms.kl import ReferenceResetSchedule
from rlvr.algorithms.sampling import DifficultyFilter, MoPPSSelector
from rlvr.algorithms.token_gate import high_entropy_token_mask
from rlvr.config import ConfigError, config_to_dict, config_yaml, save_config
from rlvr.credit import CreditStage
from rlvr.distributed.engine_factory import make_engine
from rlvr.engines import SamplingParams
from rlvr.envs import build_environment, set_concurrency
from rlvr.envs.mixture import MixtureEnvironment
from rlvr.evaluate.accuracy import evaluate_accuracy
from rlvr.evaluate.samples import voting_key
from rlvr.learner.batching import collate, shared_mask_style
from rlvr.learner.checkpoint import (
    CheckpointError,
    NonFiniteWeightsError,
    check_finite_weights,
    latest_checkpoint,
    latest_intact_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_aside,
    set_rng_state,
)
from rlvr.learner.guards import NonFiniteError, StepGuard, TrainingDiverged, nonfinite_advantages, nonfinite_rewards
from rlvr.learner.optim import make_optimizer, sparse_update_masks
from rlvr.learner.passes import PolicyProbe, certainty_and_logit_pass
from rlvr.learner.update import (
    critic_value_pass,
    distill_logprobs,
    Terminated,
    deferred_interrupts,
    make_scheduler,
    sigterm_interrupts,
    policy_entropy,
    reference_kl,
    update_policy,
    value_diagnostics,
)
from rlvr.models import load_policy
from rlvr.models.lora import apply_lora
from rlvr.models.vision import as_tokenizer, is_vision_model
from rlvr.models.value_head import build_critic
from rlvr.plugins import load_plugins
from rlvr.rewards.monitors import HackMonitor
from rlvr.recipes.config import RunConfig, task_at_level
from rlvr.recipes.rundir import SCHEDULE_KEYS, RunClaim, claim
from rlvr.recipes.multimodal import check_vision_run
from rlvr.recipes.reward_sources import load_process_scorer, prm_step_inputs
from rlvr.rewards.pipeline import RewardPipeline, apply_keep, part_metrics
from rlvr.rollout.collect import Collected, collect_rollouts
from rlvr.rollout.episodes import episode_metrics
from rlvr.rollout.guidance import ReplayBuffer
from rlvr.rollout.settings import length_cap
from rlvr.tasks.curriculum import CurriculumSampler
from rlvr.tasks.mixture import MixtureSampler, build_mixture, learnable_groups, task_metrics
from rlvr.tasks.registry import build_task
from rlvr.tasks.sampler import PromptSampler
from rlvr.tasks.synthesis import FailureSynthesizer
from rlvr.trackers import open_trackers
from rlvr.types import Batch, Problem, Sample, Verdict, problem_text
from rlvr.utils.accounting import StepAccounting, set_malloc_mmap_threshold, set_onednn_cache_capacity
from rlvr.utils.device import resolve_device
from rlvr.utils.files import atomic_write_json, read_json_or_none
from rlvr.version import code_version
from rlvr.utils.determinism import deterministic_algorithms
from rlvr.verifiers import get_verifier

__all__ = ["RLRecipe", "train", "run_recipe", "actor_run", "TrainingInterrupted", "TrainingDiverged", "evaluate_heldout",
           "format_eval"]

log = logging.getLogger(__name__)


class TrainingInterrupted(KeyboardInterrupt):
    """Raised after Ctrl-C or SIGTERM once a checkpoint has been written (or a second interrupt stopped the write).

    ``exit_code``: 130 after Ctrl-C, 143 after SIGTERM (the shell's 128 + signal number).
    """

    def __init__(self, exit_code: int = 130):
        super().__init__()
        self.exit_code = exit_code


@dataclass
class Rollouts(Collected):
    """One step's scored samples (what :meth:`RLRecipe.collect` returns): the collection's result, and how stale it
    is when a generator process sampled it."""

    lag: dict[str, Any] = field(default_factory=dict)  # async: policy_version, staleness, rollout peak RSS

    def own_correct(self) -> list[float]:
        """Each sample's verdict as the policy's own: a guided sample (hinted, or a demonstration) counts 0."""
        return [float(v.correct and "guidance" not in s.info) for s, v in zip(self.samples, self.verdicts)]


@dataclass
class Scored:
    """A step's batch with its advantages, and what the log line reports about them."""

    batch: Batch
    rewards: torch.Tensor
    advantages: torch.Tensor
    seq_kl: torch.Tensor | None = None
    value_row: dict[str, float] = field(default_factory=dict)
    reward_row: dict[str, float] = field(default_factory=dict)  # reward source / process reward diagnostics


def advantage_row(advantages: torch.Tensor, completion_mask: torch.Tensor | None) -> dict[str, float]:
    """``adv_mean``, ``adv_std`` and ``adv_abs_mean`` of what the loss multiplies: one value per sequence for an
    outcome estimator ([B]); for per-token advantages ([B, T]: GAE, process or turn credit) the completion tokens
    only, so padding and prompt positions (advantage 0) do not shrink them."""
    vals = advantages
    if advantages.dim() == 2 and completion_mask is not None and completion_mask.shape == advantages.shape:
        vals = advantages[completion_mask.bool()]
    if vals.numel() == 0:
        return {"adv_mean": 0.0, "adv_std": 0.0, "adv_abs_mean": 0.0}
    return {"adv_mean": float(vals.mean()), "adv_std": float(vals.std()) if len(vals) > 1 else 0.0,
            "adv_abs_mean": float(vals.abs().mean())}


# --------------------------------------------------------------------------- evaluation
def evaluate_heldout(engine, problems: list[Problem], verifier, cfg: RunConfig, tag: str, out_dir: Path,
                     env=None) -> dict:
    """Held-out accuracy at eval.temperature and each of eval.extra_temperatures, written to eval_{tag}.json.

    With a multi-turn ``env`` whole episodes are evaluated (tool-call rate, accuracy per attempt).  With
    ``train.progress`` each temperature's decoding shows a bar with an ETA.
    """
    ecfg = cfg.eval
    probs = problems[: ecfg.num_problems]
    with eval_batch_size(engine, ecfg.batch_size):
        return _evaluate_heldout(engine, probs, verifier, ecfg, tag, out_dir, env, progress=cfg.train.progress)


@contextmanager
def eval_batch_size(engine, rows: int):
    """``engine.batch_size`` set to ``rows`` (eval.batch_size) inside the block when it is not 0; the rollout's
    batch size again after it."""
    old = engine.batch_size
    if not rows:
        yield
        return
    engine.batch_size = rows
    try:
        yield
    finally:
        engine.batch_size = old


def _evaluate_heldout(engine, probs: list[Problem], verifier, ecfg, tag: str, out_dir: Path, env,
                      progress: bool = False) -> dict:
    first = "greedy" if ecfg.temperature == 0 else f"T={ecfg.temperature}"
    results = {first: evaluate_accuracy(
        engine, probs, verifier, n=ecfg.n, temperature=ecfg.temperature,
        max_new_tokens=ecfg.max_new_tokens, seed=ecfg.seed, keep_samples=8, env=env,
        progress=f"held-out {tag}, {first}" if progress else None)}
    for t in ecfg.extra_temperatures:
        results[f"T={t}"] = evaluate_accuracy(engine, probs, verifier, n=ecfg.n, temperature=t,
                                              max_new_tokens=ecfg.max_new_tokens, seed=ecfg.seed, keep_samples=8,
                                              env=env, progress=f"held-out {tag}, T={t}" if progress else None)
    atomic_write_json(out_dir / f"eval_{tag}.json", results, indent=2)  # a full disk leaves no empty file
    return results


def periodic_eval(engine, problems: list[Problem], verifier, cfg: RunConfig, step: int, rollouts: int,
                  env=None, reward_parts: Callable | None = None) -> dict:
    """One ``eval.every`` row: held-out accuracy (eval.n samples at eval.temperature) after ``step``; with
    ``reward_parts`` (a rubric's functions) each function's mean on the held-out samples as
    ``heldout_reward/<name>``."""
    ecfg = cfg.eval
    with eval_batch_size(engine, ecfg.batch_size):
        r = evaluate_accuracy(engine, problems[: ecfg.num_problems], verifier, n=ecfg.n,
                              temperature=ecfg.temperature, max_new_tokens=ecfg.max_new_tokens, seed=ecfg.seed,
                              env=env, reward_parts=reward_parts,
                              progress=f"held-out after step {step}" if cfg.train.progress else None)
    row = {"step": step, "rollouts": rollouts, "heldout_accuracy": r["accuracy"], "heldout_ci_low": r["ci_low"],
           "heldout_ci_high": r["ci_high"], "heldout_n": r["n"], "heldout_tokens": r["mean_completion_tokens"],
           "heldout_per_problem": r["per_problem"]}
    row.update({f"heldout_reward/{k}": v for k, v in r.get("reward_parts", {}).items()})
    row.update({f"heldout_accuracy/{k}": v["accuracy"] for k, v in r.get("by_task", {}).items()})
    return row


def format_eval(results: dict) -> str:
    parts = []
    for k, r in results.items():
        part = f"{k}: {r['accuracy']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}] (n={r['n']})"
        ep = r.get("episodes") or {}
        if "tool_call_rate" in ep:
            t = ep["tool_call_rate"]
            part += f", tool calls {t['accuracy']:.1%} [{t['ci_low']:.1%}, {t['ci_high']:.1%}]"
        for i, a in enumerate(ep.get("accuracy_by_turn", [])):
            part += f", by attempt {i + 1}: {a['accuracy']:.1%} [{a['ci_low']:.1%}, {a['ci_high']:.1%}]"
        if r.get("by_task"):  # a task mixture: each task's accuracy
            part += " (" + ", ".join(f"{t} {v['accuracy']:.1%}" for t, v in r["by_task"].items()) + ")"
        parts.append(part)
    return "  ".join(parts)


def describe_run(cfg: RunConfig) -> str:
    """What a run trains, for the progress bar: estimator (or distillation), loss and, when on, KL."""
    a = cfg.algorithm
    parts = [a.advantage, a.policy_loss]
    if a.kl_coef > 0:
        parts.append(f"kl={a.kl_coef:g}")
    d = cfg.distill
    if d.teacher is not None:
        parts = (["distill"] if d.reward_coef == 0 else [f"distill x{d.coef:g}", f"{a.advantage} x{d.reward_coef:g}"]) \
            + parts[1:]
    return " + ".join(parts)


def no_training_problems(task, heldout: int) -> str:
    """The error of a task whose problems all went to the held-out split."""
    what = f"task.name={task.name}" + (f" (task.path={task.path})" if task.path else "")
    if not heldout:
        return f"task.name: {what} gave no problems at all"
    return (f"task.num_heldout: all {heldout} problems of {what} are held out for evaluation "
            f"(task.num_heldout={task.num_heldout}), none is left to train on: set task.num_heldout below {heldout}, "
            f"e.g. task.num_heldout={max(heldout // 5, 1) if heldout > 1 else 0}")


# --------------------------------------------------------------------------- the recipe
class RLRecipe:
    """RL on verifiable rewards as configured by a :class:`RunConfig`; ``train()`` runs it and returns a summary.

    ``model``/``tokenizer``/``problems``/``verifier`` may be injected (tests build
    tiny models in memory); otherwise they come from ``cfg``.  ``on_step`` is
    called with every metrics row.  Subclasses change how a step runs by
    overriding a step (the FSDP recipe overrides set-up, learning and
    checkpointing); the order of the steps lives in :meth:`train` alone.
    """

    def __init__(self, cfg: RunConfig, *, model=None, tokenizer=None, problems: tuple[list, list] | None = None,
                 verifier: Callable | None = None, on_step: Callable[[dict], None] | None = None):
        load_plugins(cfg.plugins)  # a config copied into another process (a Ray actor) names its plugins
        self.cfg = cfg
        self.model, self.tokenizer, self.problems = model, tokenizer, problems
        self.injected_verifier = verifier  # what a rollout process is given (None: it builds cfg.reward.verifier)
        self.on_step = on_step
        self.out_dir = Path(cfg.train.output_dir)
        # what each layer is handed of the run (typed sections; nothing below the recipe sees the RunConfig)
        self.learner_settings = cfg.learner_settings()
        self.collect_settings = cfg.collect_settings()
        self.rewards = RewardPipeline(cfg.reward, max_new_tokens=cfg.rollout.max_new_tokens, seed=cfg.train.seed,
                                      task_functions=self.collect_settings.task_functions)
        self.credit = CreditStage(cfg.credit_settings())  # rewards -> advantages (outcome, per step, per turn)
        self.needs = self.credit.entry.needs
        self.params = SamplingParams(n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
                                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                     ignore_eos=cfg.rollout.ignore_eos)
        # built by setup(): data, model and its companions, components, optimizers, sampling state
        self.train_problems: list[Problem] = []
        self.heldout: list[Problem] = []
        self.curriculum_levels: list[list[Problem]] | None = None
        self.mixture_problems: dict[str, tuple[list[Problem], list[Problem]]] | None = None  # label -> splits
        self.prompts: dict[str, str] = {}  # problem id -> question (monitors, warnings)
        self.problem_by_id: dict[str, Problem] = {}
        self.device = None
        self.critic = self.critic_optimizer = self.critic_scheduler = self.ref_model = None
        self.teacher = None  # distill.teacher: the frozen teacher of on-policy distillation
        self.teacher_sleep = None  # distill.sleep_while_learning: frees and reloads the teacher's weights
        self.optimizer = self.scheduler = None
        self.verifier = self.env = self.engine = None
        self.sampler: PromptSampler | CurriculumSampler | MixtureSampler | None = None
        self.dfilter: DifficultyFilter | MoPPSSelector | None = None
        self.replay: ReplayBuffer | None = None
        self.synth: FailureSynthesizer | None = None
        self.update_masks: dict[str, torch.Tensor] = {}  # train.update_fraction: the trained entries of each weight
        self.ref_reset: ReferenceResetSchedule | None = None
        self.entropy_floor: EntropyFloor | None = None
        self.monitor = HackMonitor()  # verdict-reason histogram and reward-hack signatures, every step
        self.guard = StepGuard(cfg.train.max_bad_steps, cfg.reward.warn_verifier_errors)  # non-finite steps skipped
        self.probe: PolicyProbe | None = None  # the policy's passes for a policy-computed reward source
        self.process_scorer = None  # (PRM, delimiter) of reward.process_prm, loaded at its first use
        # the loop's state
        self.start_step = 0
        self.finished = 0  # steps whose update and log line are done
        self.snap: tuple | None = None  # the sampling state before the running step (an interrupt restores it)
        self.rollouts_done = 0  # completions generated so far (train.max_rollouts budget)
        self.periodic = False  # eval.every evaluations are on
        self.worker = None
        self.bar = None
        self.tracker = None
        self.acct: StepAccounting | None = None
        self.held: RunClaim | None = None  # the output directory, locked for this run (rlvr.recipes.rundir)

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        """Model (+ critic, LoRA, reference), data, verifier, engine, optimizers, sampling state."""
        cfg, tcfg = self.cfg, self.cfg.train
        if tcfg.threads:
            torch.set_num_threads(tcfg.threads)
        if tcfg.malloc_mmap_threshold and not set_malloc_mmap_threshold(tcfg.malloc_mmap_threshold):
            log.warning("train.malloc_mmap_threshold is ignored: the C library is not glibc")
        if tcfg.onednn_cache:
            set_onednn_cache_capacity(tcfg.onednn_cache)  # before the first bf16 matmul, when the caches are built
        self.setup_data()  # before the model loads: a task that cannot train fails in seconds, writing nothing
        from rlvr.recipes.preflight import check_before_model  # writable dirs, the context, a memory estimate

        check_before_model(cfg, self.train_problems + self.heldout, model=self.model)
        self.check_teacher()  # a teacher with another tokenizer is refused before any weight loads
        torch.manual_seed(tcfg.seed)
        if self.model is None:
            self.model, self.tokenizer = load_policy(cfg.model.name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
        self.tokenizer = as_tokenizer(self.tokenizer)  # an injected processor: its tokenizer, the processor attached
        if is_vision_model(self.model):
            check_vision_run(cfg)
        if not is_vision_model(self.model) and any(getattr(p, "images", None)
                                                   for p in self.train_problems + self.heldout):
            raise ValueError(f"task {cfg.task.name!r} has problems with images, but {cfg.model.name!r} is a text-only "
                             "model: use a vision-language model (AutoModelForImageTextToText + AutoProcessor)")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.setup_model()
        self.verifier = self.injected_verifier or get_verifier(cfg.reward.verifier, **cfg.reward.verifier_params)
        self.env = self.build_env()
        self.engine = self.make_engine()
        self.engine.generator.manual_seed(tcfg.seed)
        self.setup_optimizers()
        self.setup_sampling()
        self.prompts = {p.id: problem_text(p) for p in self.train_problems}
        self.problem_by_id = {p.id: p for p in self.train_problems}
        if self.rewards.stage == "policy":
            self.probe = PolicyProbe(self.model, self.tokenizer, self.learner_settings, self.device,
                                     self.engine.pad_id, cfg.rollout.group_size, self.problem_by_id)

    def check_teacher(self) -> None:
        """``distill.teacher``: its tokenizer (read without weights) must be the student's; refused naming both
        (:func:`rlvr.models.teacher.check_teacher_tokenizer`)."""
        cfg = self.cfg
        if cfg.distill.teacher is None:
            return
        from rlvr.models.loader import load_tokenizer
        from rlvr.models.teacher import check_teacher_tokenizer

        student = as_tokenizer(self.tokenizer) if self.tokenizer is not None else \
            load_tokenizer(cfg.model.name, cfg.model.cache_dir)
        check_teacher_tokenizer(student, cfg.model.name, cfg.distill.teacher, cfg.model.cache_dir)

    def build_env(self):
        """The run's environment; for a task mixture one per task, each with its own verifier, routed by label.
        ``env.max_concurrency`` (when set) is how many of its calls run at once."""
        cfg = self.cfg
        if not cfg.mixture.tasks:
            env = build_environment(cfg.env.name, self.verifier, self.tokenizer, **cfg.env.params)
            return set_concurrency(env, cfg.env.max_concurrency)
        envs = {}
        for e in cfg.mixture.tasks:
            verifier = get_verifier(e.verifier, **e.verifier_params) if e.verifier else self.verifier
            envs[e.name] = build_environment(cfg.env.name, verifier, self.tokenizer, **cfg.env.params)
        return set_concurrency(MixtureEnvironment(envs), cfg.env.max_concurrency)

    def setup_sampling(self) -> None:
        """The prompt sampler (a curriculum's, when levels are configured) and the sampling policies."""
        cfg, alg, cur = self.cfg, self.cfg.algorithm, self.cfg.curriculum
        seed = cfg.train.seed
        if self.mixture_problems is not None:
            m = cfg.mixture
            self.sampler = MixtureSampler({k: train for k, (train, _) in self.mixture_problems.items()},
                                          {e.name: e.weight for e in m.tasks}, seed=seed, adapt=m.adapt,
                                          alpha=m.adapt_alpha, floor=m.adapt_floor)
        elif self.curriculum_levels is None:
            self.sampler = PromptSampler(self.train_problems, seed=seed)
        else:
            self.sampler = CurriculumSampler(self.curriculum_levels, seed=seed, low=cur.low, high=cur.high,
                                             window=cur.window, min_groups=cur.min_groups,
                                             start_level=cur.start_level)
        self.dfilter = DifficultyFilter(alg.difficulty_low, alg.difficulty_high, alpha=alg.difficulty_alpha) \
            if alg.difficulty_filter else None
        if alg.mopps:
            self.dfilter = MoPPSSelector(alg.mopps_candidates, alg.mopps_target, alg.mopps_decay, seed=seed)
        self.replay = ReplayBuffer(cfg.guidance.replay_capacity) if cfg.guidance.replay else None
        g = cfg.guidance
        self.synth = FailureSynthesizer(g.synthesize, g.synthesize_share, g.synthesize_capacity,
                                        forbidden=[p.id for p in self.heldout], seed=seed) \
            if g.synthesize else None
        self.ref_reset = ReferenceResetSchedule(alg.ref_reset_every, alg.ref_reset_kl) \
            if (alg.ref_reset_every or alg.ref_reset_kl) else None
        self.entropy_floor = EntropyFloor(alg.entropy_floor, alg.entropy_floor_delta, alg.entropy_floor_max_coef) \
            if alg.entropy_floor > 0 else None

    def setup_data(self) -> None:
        """Training and held-out problems; with a curriculum, one training set per level and the held-out
        problems of ``curriculum.eval_level``."""
        cfg = self.cfg
        self.curriculum_levels = None
        self.mixture_problems = None
        if cfg.mixture.tasks:  # each task's problems, tagged with its label; held-out: every task's
            if self.problems is not None:
                raise ValueError("a task mixture builds its tasks from the mixture section: do not inject problems")
            self.mixture_problems = build_mixture(cfg.mixture.tasks, cfg.task)
            self.train_problems = [p for train, _ in self.mixture_problems.values() for p in train]
            # held-out problems interleaved task by task, so eval.num_problems keeps every task in the evaluation
            helds = [held for _, held in self.mixture_problems.values()]
            self.heldout = [h[i] for i in range(max(map(len, helds), default=0)) for h in helds if i < len(h)]
            empty = [k for k, (train, _) in self.mixture_problems.items() if not train]
            if empty:
                raise ConfigError(f"mixture.tasks: task {empty[0]!r} gave no training problems")
            return
        if not cfg.curriculum.levels:
            self.train_problems, self.heldout = self.problems if self.problems is not None else build_task(cfg.task)
            if not self.train_problems:
                raise ConfigError(no_training_problems(cfg.task, len(self.heldout)))
            return
        if self.problems is not None:
            raise ValueError("a curriculum builds its levels from task options: do not inject problems")
        splits = [build_task(task_at_level(cfg.task, lv, key=f"curriculum.levels[{i}]"))
                  for i, lv in enumerate(cfg.curriculum.levels)]
        self.curriculum_levels = [train for train, _ in splits]
        self.train_problems = [p for train in self.curriculum_levels for p in train]
        self.heldout = splits[cfg.curriculum.eval_level][1]

    def setup_model(self) -> None:
        """Place the policy; add PPO's critic, LoRA adapters and the KL reference as configured."""
        cfg = self.cfg
        self.device = resolve_device(cfg.model.device)
        self.model.to(self.device)
        if "values" in self.needs:  # PPO: a learned critic (before LoRA: a separate one trains all weights)
            self.critic = build_critic(self.model, cfg.algorithm.value.critic)
        if cfg.model.lora.enabled:  # train adapters only (peft); the sampler gets merged weights
            self.model = apply_lora(self.model, cfg.model.lora)
        if cfg.train.share_prompts:  # its custom attention mask: refuse kernels that take none, before sampling
            shared_mask_style(self.model)
        if cfg.algorithm.kl_coef > 0 or "logratio" in self.needs:  # a frozen copy (KL, or online DPO's reference)
            from rlvr.models.frozen import frozen_copy

            self.ref_model = frozen_copy(self.model)
        if cfg.distill.teacher is not None:  # on-policy distillation: a frozen teacher (no grad, eval mode)
            from rlvr.models.teacher import load_teacher

            d = cfg.distill
            dtype = cfg.model.dtype if d.dtype == "policy" else d.dtype
            self.teacher = load_teacher(d.teacher, dtype=dtype, device=self.device, cache=cfg.model.cache_dir)
            if d.sleep_while_learning:  # resident only during its log-prob pass (advantages())
                from rlvr.models.teacher import TeacherSleep

                self.teacher_sleep = TeacherSleep.for_teacher(self.teacher, d.teacher, dtype=dtype, device=self.device,
                                                              cache=cfg.model.cache_dir)
                self.teacher_sleep.sleep()

    def make_engine(self):
        """The rollout engine (HF by default; vLLM and/or Ray rollout workers if configured)."""
        cfg = self.cfg
        return make_engine(self.model, self.tokenizer, cfg.rollout, cfg.engine_context(), cfg.distributed)

    def setup_optimizers(self) -> None:
        cfg, tcfg = self.cfg, self.cfg.train
        if tcfg.update_fraction < 1:  # a random sparse subnetwork is trained, the rest frozen by gradient masks
            self.update_masks = sparse_update_masks(self.model, tcfg.update_fraction, tcfg.seed)
        self.optimizer = make_optimizer([p for p in self.model.parameters() if p.requires_grad], tcfg.optimizer,
                                        lr=tcfg.lr, betas=tcfg.betas, weight_decay=tcfg.weight_decay, seed=tcfg.seed)
        self.scheduler = make_scheduler(self.optimizer, cfg.schedule_settings())
        if self.critic is not None:
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=cfg.algorithm.value.lr,
                                                      betas=tuple(tcfg.betas), weight_decay=tcfg.weight_decay)
            self.critic_scheduler = make_scheduler(self.critic_optimizer, cfg.schedule_settings())

    def modules(self) -> dict | None:
        """Extra modules checkpointed beside the policy (PPO's critic)."""
        return {"critic": self.critic} if self.critic is not None else None

    # ------------------------------------------------------------------ checkpoints
    def resume(self) -> None:
        """With ``train.resume``: weights, optimizers, data position, RNG and sampling state of the latest checkpoint."""
        ckpt, state = self.load_intact()
        if ckpt is None:
            log.warning("train.resume=true but no intact checkpoint in %s: starting from scratch", self.out_dir)
            return
        if self.critic is not None:
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
            self.critic_scheduler.load_state_dict(state["critic_scheduler"])
        self.engine.sync_weights(self.model)
        self.start_step = state["step"]
        if isinstance(self.sampler, CurriculumSampler):
            self.sampler.load_state_dict(state["curriculum"])
        elif isinstance(self.sampler, MixtureSampler):
            self.sampler.load_state_dict(state["mixture"])
        else:
            self.sampler.position = state["data_position"]
        set_rng_state(state["rng"], self.engine.generator)
        self.rollouts_done = state.get("rollouts", 0)
        if self.dfilter is not None and "difficulty_filter" in state:
            self.dfilter.load_state_dict(state["difficulty_filter"])
        if self.replay is not None and "replay" in state:
            self.replay.load_state_dict(state["replay"])
        if self.synth is not None and "synthesis" in state:
            self.synth.load_state_dict(state["synthesis"])
        if "hack_monitor" in state:
            self.monitor.load_state_dict(state["hack_monitor"])
        self.guard.skipped = state.get("skipped_steps", 0)
        if self.entropy_floor is not None and "entropy_floor" in state:
            self.entropy_floor.load_state_dict(state["entropy_floor"])
        if self.ref_reset is not None and "ref_reset" in state:
            self.ref_reset.load_state_dict(state["ref_reset"])
            if state.get("reference") is not None:
                self.ref_model.load_state_dict(state["reference"])
        self.reschedule()
        print(f"resumed from {ckpt} (step {self.start_step})")

    def load_intact(self) -> tuple[Path | None, dict | None]:
        """Load the newest checkpoint whose files match their checksums and whose weights are finite (the one
        the directory claim verified, else the newest intact one); a damaged one is set aside, named, and the
        next older one is tried. Returns (checkpoint, its loop state) or (None, None)."""
        ckpt = self.held.checkpoint if self.held is not None else latest_intact_checkpoint(self.out_dir, warn=print)
        while ckpt is not None:
            state = load_checkpoint(ckpt, self.model, self.optimizer, self.scheduler, modules=self.modules())
            try:
                check_finite_weights(self.model, state["step"], self.modules())
                return ckpt, state
            except NonFiniteWeightsError as e:
                moved = set_aside(ckpt)
                print(f"checkpoint {ckpt} holds non-finite weights ({str(e).split(': ', 1)[-1].split(';')[0]}); "
                      f"set aside as {moved.name}")
                ckpt = latest_intact_checkpoint(self.out_dir, warn=print)
                if ckpt is None:
                    raise CheckpointError(f"no checkpoint with finite weights is left in {self.out_dir}: nothing "
                                          "to resume from; start over with --overwrite (train.overwrite=true)")
        return None, None

    def reschedule(self) -> None:
        """After a resume that changed the learning-rate schedule (``train.steps``, ``train.lr``,
        ``train.warmup_steps`` or ``train.schedule``, allowed by ``train.resume_changes``): the schedule is this
        config's, and the current rate is recomputed from it at the resumed step (a loaded rate would be the old
        schedule's: 0 at the end of a cosine decay)."""
        changed = sorted(k for k in (self.held.changes if self.held is not None else {}) if k in SCHEDULE_KEYS)
        if not changed:
            return
        pairs = [(self.optimizer, self.scheduler, self.cfg.train.lr)]
        if self.critic is not None:
            pairs.append((self.critic_optimizer, self.critic_scheduler, self.cfg.algorithm.value.lr))
        for optimizer, scheduler, lr in pairs:
            fresh = make_scheduler(optimizer, self.cfg.schedule_settings())
            fresh.last_epoch = scheduler.last_epoch
            fresh.base_lrs = [lr] * len(optimizer.param_groups)
            for group, f in zip(optimizer.param_groups, fresh.lr_lambdas):
                group["initial_lr"] = lr
                group["lr"] = lr * f(fresh.last_epoch)
            fresh._last_lr = [g["lr"] for g in optimizer.param_groups]
            if scheduler is self.scheduler:
                self.scheduler = fresh
            else:
                self.critic_scheduler = fresh
        print(f"the learning-rate schedule follows the changed {', '.join(changed)}: step {self.start_step + 1} "
              f"trains at lr {self.optimizer.param_groups[0]['lr']:.3g}")

    def checkpoint(self, step: int) -> Path:
        """Write a checkpoint of everything :meth:`resume` reads back."""
        state = {"data_position": self.sampler.position, "rng": rng_state(self.engine.generator),
                 "rollouts": self.rollouts_done, "hack_monitor": self.monitor.state_dict(),
                 "skipped_steps": self.guard.skipped}
        if isinstance(self.sampler, CurriculumSampler):
            state["curriculum"] = self.sampler.state_dict()
        if isinstance(self.sampler, MixtureSampler):
            state["mixture"] = self.sampler.state_dict()
        if self.dfilter is not None:
            state["difficulty_filter"] = self.dfilter.state_dict()
        if self.replay is not None:
            state["replay"] = self.replay.state_dict()
        if self.synth is not None:
            state["synthesis"] = self.synth.state_dict()
        if self.entropy_floor is not None:
            state["entropy_floor"] = self.entropy_floor.state_dict()
        if self.critic is not None:
            state["critic_optimizer"] = self.critic_optimizer.state_dict()
            state["critic_scheduler"] = self.critic_scheduler.state_dict()
        if self.ref_reset is not None:  # the reference differs from the initial model after a reset
            state["ref_reset"] = self.ref_reset.state_dict()
            state["reference"] = ({k: v.cpu() for k, v in self.ref_model.state_dict().items()}
                                  if self.ref_reset.last_reset else None)
        return save_checkpoint(self.out_dir, step, self.model, self.tokenizer, self.optimizer, self.scheduler, state,
                               keep=self.cfg.train.keep_checkpoints, modules=self.modules(),
                               config_text=config_yaml(self.cfg))

    def snapshot(self) -> tuple:
        """The pre-step sampling state, so that an interrupt during rollouts checkpoints it exactly."""
        stateful = isinstance(self.sampler, (CurriculumSampler, MixtureSampler))
        pos = self.sampler.state_dict() if stateful else self.sampler.position
        return (pos, rng_state(self.engine.generator), self.rollouts_done,
                None if self.dfilter is None else self.dfilter.state_dict(),
                None if self.replay is None else self.replay.state_dict(),
                None if self.synth is None else self.synth.state_dict())

    def restore(self, snap: tuple) -> None:
        pos, rngs, self.rollouts_done, fstate, rstate, sstate = snap
        if self.replay is not None:
            self.replay.load_state_dict(rstate)
        if self.synth is not None:
            self.synth.load_state_dict(sstate)
        if isinstance(self.sampler, (CurriculumSampler, MixtureSampler)):
            self.sampler.load_state_dict(pos)
        else:
            self.sampler.position = pos
        set_rng_state(rngs, self.engine.generator)
        if self.dfilter is not None:
            self.dfilter.load_state_dict(fstate)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, tag: str) -> dict:
        with self.isolated_rng():
            return evaluate_heldout(self.engine, self.heldout, self.verifier, self.cfg, tag, self.out_dir,
                                    env=self.env)

    @contextmanager
    def isolated_rng(self):
        """Evaluation leaves training's random streams as it found them.

        An evaluation seeds the engine's generator with ``eval.seed`` (its samples are the same whenever
        it runs); without this the training samples after it would be drawn from that seed's stream, so
        ``train.seed`` would not reach sampling and ``eval.every`` would change the training trajectory.
        """
        state = rng_state(self.engine.generator)
        try:
            yield
        finally:
            set_rng_state(state, self.engine.generator)

    # ------------------------------------------------------------------ one step
    def start_worker(self) -> None:
        """``train.async_steps`` / ``train.rollout_worker``: rollouts from a generator process, k steps ahead."""
        tcfg = self.cfg.train
        if not (tcfg.async_steps > 0 or tcfg.rollout_worker):
            return
        from rlvr.rollout.async_rollouts import AsyncRollouts

        self.worker = AsyncRollouts(self.model, self.tokenizer, self.train_problems, self.params,
                                    self.cfg.generator_settings(), verifier=self.injected_verifier,
                                    dfilter=self.dfilter, start=self.start_step, end=tcfg.steps,
                                    max_ahead=tcfg.async_steps, data_position=self.sampler.position,
                                    generator_state=self.engine.generator.get_state(), device=self.device)

    def collect(self, step: int) -> Rollouts:
        """Sample, verify and reward ``train.prompts_per_step`` groups (in process, or from the generator process)."""
        tcfg, acct = self.cfg.train, self.acct
        if self.worker is None:
            t0 = time.perf_counter()
            got = collect_rollouts(self.engine, self.sampler, self.env, self.params, self.collect_settings, step,
                                   self.dfilter,
                                   budget_left=tcfg.max_rollouts - self.rollouts_done if tcfg.max_rollouts else None,
                                   answer_key=functools.partial(voting_key, verifier=self.cfg.reward.verifier),
                                   replay=self.replay, synth=self.synth)
            if self.synth is not None:  # synthesised problems join the lookups the monitors and warnings use
                for p in self.synth.taken:
                    self.prompts.setdefault(p.id, problem_text(p))
                    self.problem_by_id.setdefault(p.id, p)
            acct.add_time("generate", got.generation_seconds)
            acct.add_time("verify", time.perf_counter() - t0 - got.generation_seconds)
            out = Rollouts(**vars(got))
        else:
            with acct.phase("wait"):
                rb = self.worker.get(step)
            acct.add_time("generate", rb.gen_time)
            acct.add_time("verify", rb.verify_time)
            # the generator's state after this batch is what a checkpoint must resume from
            self.sampler.position = rb.state["data_position"]
            self.engine.generator.set_state(rb.state["generator"])
            if self.dfilter is not None:
                self.dfilter.load_state_dict(rb.state["difficulty_filter"])
            out = Rollouts(**vars(rb.rollouts), lag={"policy_version": rb.version, "staleness": rb.staleness,
                                                     "rollout_peak_rss_mb": rb.peak_rss_mb})
        self.rollouts_done += out.generated
        if isinstance(self.sampler, MixtureSampler):  # adaptive task weights see which groups were learnable
            self.sampler.observe(learnable_groups(out.samples, out.rewards, self.cfg.rollout.group_size))
        if isinstance(self.sampler, CurriculumSampler) and not self.cfg.curriculum.fixed:
            G = self.cfg.rollout.group_size
            correct = out.own_correct()  # the policy's own pass rate (guided samples count 0)
            self.sampler.observe([sum(correct[i:i + G]) / G for i in range(0, len(correct), G)])
        return out

    def advantages(self, ro: Rollouts) -> Scored:
        """The batch, with a policy-computed reward source, KL folded into the reward if asked, advantages from the
        credit stage's advantages (:class:`rlvr.credit.CreditStage`: the estimator, process credit, turn credit).

        The estimator's registry entry says what else it needs: ``values`` (PPO's critic; an estimator tagged
        ``critic`` also returns the critic's targets) or ``entropy``.
        """
        cfg, alg = self.cfg, self.cfg.algorithm
        G = cfg.rollout.group_size
        batch = collate(ro.samples, torch.zeros(len(ro.samples)), self.engine.pad_id)
        rewards, keep, reward_row = ro.rewards, ro.keep, dict(ro.source_metrics)
        if self.probe is not None:  # self-certainty / reference likelihood: a no-grad pass of the policy
            rewards, keep, m = self.rewards.policy_source(
                ro.samples, G, lambda needs: self.probe.group_inputs(needs, ro.samples, batch))
            reward_row.update(m)
        seq_kl, token_kl = None, None
        takes = self.credit.takes  # per-call tensors the estimator requires or accepts
        if alg.kl_in_reward:  # r_i - beta * sum_t k1_t, before the advantage
            token_kl = reference_kl(self.model, self.ref_model, batch, self.learner_settings, self.device)
            seq_kl = token_kl.sum(-1)
            if "kl" not in takes:  # PPO and REINFORCE++ place it token by token instead
                rewards = rewards - alg.kl_coef * seq_kl
        inputs = self.estimator_inputs(batch, takes, token_kl, ro.samples)
        steps = self.process_steps(ro, batch)
        value_row: dict[str, float] = {}
        distill = None
        if self.teacher is not None:  # on-policy distillation: teacher and student log-probs of the sampled tokens
            t0 = time.perf_counter()
            if self.teacher_sleep is not None:  # read back from its files; freed again right after the pass
                self.teacher_sleep.wake()
                reward_row["distill/wake_time"] = time.perf_counter() - t0
            try:
                distill = distill_logprobs(self.model, self.teacher, batch, self.learner_settings, self.device,
                                           cfg.distill.chunk_size)
            finally:
                if self.teacher_sleep is not None:
                    self.teacher_sleep.sleep()
            reward_row["distill/pass_time"] = time.perf_counter() - t0
        # the credit stage: outcome estimator, process credit (PRM step scores) or per-turn credit; distillation
        credit = self.credit.assign(rewards, batch, inputs=inputs, steps=steps, samples=ro.samples,
                                    token_kl=token_kl, distill=distill)
        advantages, returns = credit.advantages, credit.returns
        for s, r in zip(ro.samples, rewards.tolist()):  # what each sample was trained on
            s.training_reward = r
        reward_row.update(credit.metrics)
        if self.critic is not None:
            batch.returns = returns
            value_row = value_diagnostics(batch)
        advantages = apply_keep(advantages, keep)  # samples a source dropped (e.g. RLPR's std filter): 0
        batch.advantages = advantages.float()
        if self.learner_settings.entropy_bonus_fraction < 1:  # SIREN's peak-entropy mask of the entropy bonus
            entropy = inputs.get("entropy")
            if entropy is None:
                entropy = policy_entropy(self.model, batch, self.learner_settings, self.device)
            batch.entropy_select, threshold = high_entropy_token_mask(
                entropy, batch.completion_mask, self.learner_settings.entropy_bonus_fraction)
            reward_row["entropy_bonus_threshold"] = threshold
        return Scored(batch, rewards, advantages, seq_kl, value_row, reward_row)

    def estimator_inputs(self, batch: Batch, takes: frozenset[str], token_kl: torch.Tensor | None,
                         samples: Sequence[Sample] = ()) -> dict[str, Any]:
        """The per-call tensors the estimator's entry names: the critic's values (also kept in the batch), the
        policy's entropy, the completion mask, the token-level KL penalty."""
        inputs: dict[str, Any] = {}
        if "values" in takes:  # PPO: the critic's value of every completion position (before this step's update)
            batch.values = inputs["values"] = critic_value_pass(self.critic, self.model, batch, self.learner_settings,
                                                                self.device)
        if self.credit.wants_entropy:  # the estimator takes it (RL-ZVP), or the entropy token gate is on
            inputs["entropy"] = policy_entropy(self.model, batch, self.learner_settings, self.device)
        if "certainty" in takes or "token_logits" in takes:  # UCAS: self-certainty and raw token logits, one pass
            inputs["certainty"], inputs["token_logits"] = certainty_and_logit_pass(
                self.model, batch, self.learner_settings, self.device)
        if "logratio" in takes:  # online DPO: log pi_old - log pi_ref per completion token
            inputs["logratio"] = reference_kl(self.model, self.ref_model, batch, self.learner_settings, self.device)
        if "seq_logprob" in takes:  # DisCO: each sample's mean sampler log-prob over its policy tokens
            m = batch.completion_mask.float()
            inputs["seq_logprob"] = (batch.sampler_logprobs * m).sum(-1) / m.sum(-1).clamp(min=1)
        if "forks" in takes:  # tree credit: which sample each branch was cut from, and where (rollout.branches)
            inputs["forks"] = torch.tensor([[s.info.get("branch_of", -1), s.info.get("branch_at", 0)]
                                            for s in samples], dtype=torch.long).view(-1, 2)
        if "mask" in takes:  # token-level estimators (REINFORCE++ whitens over every completion token)
            inputs["mask"] = batch.completion_mask
        if token_kl is not None and "kl" in takes:
            inputs.update(kl=token_kl, kl_coef=self.cfg.algorithm.kl_coef)
        return inputs

    def process_steps(self, ro: Rollouts, batch: Batch) -> tuple | None:
        """``reward.process_prm``'s step scores of every completion (None when process rewards are off)."""
        rcfg = self.cfg.reward
        if rcfg.process_prm is None:
            return None
        if self.process_scorer is None:
            self.process_scorer = load_process_scorer(rcfg, self.device)
        return prm_step_inputs(*self.process_scorer, ro.samples, self.prompts, self.tokenizer, batch)

    def learn(self, step: int, scored: Scored) -> dict[str, float]:
        """The policy (and critic) update, the LR schedules, the weight sync and any reference reset."""
        alg = self.cfg.algorithm
        try:
            with self.acct.phase("learn"):
                if self.cfg.rollout.sleep_while_learning:
                    self.engine.sleep()  # refilled by sync_weights in sync()
                floor = None if self.entropy_floor is None else self.entropy_floor.coef  # this update's bonus
                try:
                    settings = self.learner_settings.at_step(step)  # algorithm.clip_schedule
                    learn = update_policy(self.model, self.optimizer, scored.batch, settings, self.ref_model,
                                          critic=self.critic, critic_optimizer=self.critic_optimizer,
                                          train_policy=step >= alg.value.warmup_steps or self.critic is None,
                                          entropy_coef=None if floor is None else alg.entropy_coef + floor)
                    if settings.clip_schedule:
                        learn["clip_low"], learn["clip_high"] = settings.clip_low, settings.clip_high
                    if self.entropy_floor is not None:  # the entropy measured on this batch sets the next weight
                        learn["entropy_floor_coef"] = floor
                        self.entropy_floor.update(learn.get("entropy"))
                finally:
                    self.end_update()
        except NonFiniteError:  # raised before the optimizer stepped (learner/guards.py): unapplied, synced as usual
            self.sync(step)
            raise
        self.sync(step)
        if self.ref_reset is not None:
            kl_now = float(scored.seq_kl.mean()) if scored.seq_kl is not None else learn.get("kl")
            learn["ref_reset"] = 0
            if self.ref_reset.should_reset(step + 1, kl_now):
                self.ref_model.load_state_dict(self.model.state_dict())
                if alg.ref_reset_optimizer:
                    self.optimizer.state.clear()
                self.ref_reset.mark_reset(step + 1)
                learn["ref_reset"] = 1
        return learn

    def end_update(self) -> None:
        """After an update (or instead of one): free the gradients, step the LR schedules."""
        # free the gradients now, not at the next step's zero_grad: they would sit through the weight sync,
        # generation and evaluation (0.54 GB for the 135M model in fp32); update_policy leaves them for callers
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic_optimizer is not None:
            self.critic_optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.critic_scheduler is not None:
            self.critic_scheduler.step()

    def sync(self, step: int, weights: bool = True) -> None:
        """The sampler (``weights``) and the generator process get the weights after ``step``."""
        with self.acct.phase("sync"):
            if weights:
                self.engine.sync_weights(self.model)
            if self.worker is not None:
                self.worker.send_weights(step + 1, self.model)

    def log(self, step: int, ro: Rollouts, scored: Scored, learn: dict[str, float]) -> dict[str, Any]:
        """One metrics row: rollout statistics, advantages, learner diagnostics, timing; written and returned."""
        cfg, samples, rewards, advantages = self.cfg, ro.samples, scored.rewards, scored.advantages
        gen_tokens = sum(s.num_tokens for s in samples)
        self.acct.add_tokens(gen_tokens)
        timing = self.acct.row()
        ref_reset = learn.pop("ref_reset", None)
        row = {
            "step": step + 1,
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "accuracy": sum(ro.own_correct()) / len(ro.verdicts),  # the policy's own: guided samples count 0
            "response_length": gen_tokens / len(samples),
            "stop_fraction": sum(s.finish_reason == "stop" for s in samples) / len(samples),
            "zero_variance_groups": float(group_stats(rewards, cfg.rollout.group_size)["zero_variance_frac"]),
            "sampling_rounds": ro.rounds, "rollouts": self.rollouts_done,
            **advantage_row(advantages, scored.batch.completion_mask),
            "lr": self.scheduler.get_last_lr()[0],
            **learn,
            **scored.value_row,  # PPO: explained variance and mean of the critic's values vs returns
            **timing,  # gen/verify/learn/sync/wait/step time, tokens/s, peak_rss_mb
            **ro.lag,  # async: policy_version, staleness, rollout process peak memory
        }
        row.update(scored.reward_row)  # reward.source / process diagnostics (e.g. ttrl/label_accuracy)
        row.update(part_metrics(ro.reward_parts, ro.reward_part_errors))  # reward/<name>: each rubric function
        if ro.guidance_metrics:  # guidance/*: and the accuracy of the trained samples, guided ones included
            row.update(ro.guidance_metrics, **{"guidance/accuracy_with_guidance": sum(v.correct for v in ro.verdicts)
                                       / len(ro.verdicts)})
        if row.get("step_time"):  # the share of the step spent verifying (code checks run in child processes)
            row["verify_share"] = row.get("verify_time", 0.0) / row["step_time"]
        if "ttrl/label_accuracy" in row:
            row["reward/pseudo_label_accuracy"] = row["ttrl/label_accuracy"]
        if scored.seq_kl is not None:
            row["kl_in_reward"] = float(scored.seq_kl.mean())
        if ref_reset is not None:
            row["ref_reset"] = ref_reset
        if self.dfilter is not None:
            row["filter_tracked_prompts"] = len(self.dfilter)
        if cfg.rollout.length_schedule:
            row["max_new_tokens"] = length_cap(cfg.rollout.length_schedule, step, cfg.rollout.max_new_tokens)
        if not self.env.single_turn:
            row.update(episode_metrics(samples))
        if isinstance(self.sampler, CurriculumSampler):
            row.update(self.sampler.metrics())
        if isinstance(self.sampler, MixtureSampler):  # task/<label>/...: share, accuracy, reward, probability
            row.update(task_metrics(samples, ro.verdicts, rewards), **self.sampler.metrics())
        row.update(self.monitor.update([v.reason for v in ro.verdicts], rewards.tolist(),
                                       [s.num_tokens for s in samples],
                                       prompts=[self.prompts.get(s.problem_id, "") for s in samples],
                                       answers=[v.extracted for v in ro.verdicts]))
        row.update(self.guard.metrics(skipped=False))  # skipped_steps, once a step has been skipped
        self.tracker.log(row, row["step"])
        return row

    def show(self, row: dict[str, Any]) -> None:
        """The step's callback and progress-bar line."""
        if self.on_step is not None:
            self.on_step(row)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(reward=f"{row['reward_mean']:.2f}", len=f"{row['response_length']:.0f}",
                                 kl=f"{row.get('kl', 0):.3f}", s=f"{row['step_time']:.1f}", verdict=self.monitor.bar())

    # ------------------------------------------------------------------ the loop
    def begin(self) -> dict[str, Any]:
        """Resume if asked, write the config, open the logs and evaluate before training."""
        cfg, tcfg, out_dir = self.cfg, self.cfg.train, self.out_dir
        if tcfg.resume:
            self.resume()
        save_config(cfg, out_dir / "config.yaml")
        resume_from = self.start_step if tcfg.resume else None
        self.periodic = bool(cfg.eval.every and self.heldout)
        self.tracker = open_trackers(tcfg.report_to, out_dir, config_to_dict(cfg), run_name=out_dir.name,
                                     resume_from_step=resume_from,
                                     groups=("train", "heldout") if self.periodic else ("train",))
        summary: dict[str, Any] = {"output_dir": str(out_dir)}
        before = read_json_or_none(out_dir / "eval_before.json")
        if before is None and (out_dir / "eval_before.json").exists():
            print(f"{out_dir / 'eval_before.json'} is damaged (not JSON): evaluating before training again")
        if cfg.eval.before_training and self.heldout and before is None:
            before = self.evaluate("before")
            print("held-out accuracy before training: " + format_eval(before))
        if before is not None:
            summary["eval_before"] = before
        if tcfg.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=tcfg.steps, initial=self.start_step, desc=describe_run(cfg), unit="step",
                            dynamic_ncols=True)
        self.acct = StepAccounting(self.device)  # per-step time split, tokens/s, peak memory
        return summary

    def step(self, step: int) -> dict[str, Any]:
        """One training step: collect, advantages, learn, log (the update and its log line are one unit).

        A group holding a non-finite reward is left out of the update, which trains on the other groups (the row
        counts what was left out: ``dropped_groups``, ``nonfinite_rewards``).  A step with no finite group left, or
        whose advantages or gradients are not finite, is skipped (:mod:`rlvr.learner.guards`): the weights are not
        updated and the row says so.  A verifier that fails on every call stops the run (:meth:`check_rollouts`).
        """
        self.acct.start_step()
        ro = self.collect(step)
        ro, bad, dropped = self.check_rollouts(step, ro)
        scored = None
        if bad is None:
            scored = self.advantages(ro)
            scored.reward_row.update(dropped)  # groups left out for a non-finite reward (nothing when none were)
            bad = nonfinite_advantages(scored.rewards, scored.advantages, ro.samples,
                                       estimator=self.cfg.algorithm.advantage, source=self.cfg.reward.source,
                                       values=scored.batch.values, prompts=self.prompts)
        bad = self.any_rank(bad)
        with deferred_interrupts():  # Ctrl-C waits for the update and its log line
            closed = False  # the learner ran (and closed its update: schedules stepped, generator released)
            if bad is None:
                try:
                    learn = self.learn(step, scored)
                except NonFiniteError as e:  # raised before the optimizer stepped
                    bad, closed = str(e), True
            if bad is None:
                self.guard.passed()
                row = self.log(step, ro, scored, learn)
            else:
                row = self.skip(step, ro, bad, closed=closed, dropped=dropped)
            self.snap = None  # the step is done: an interrupt from here on checkpoints after it
            self.finished = step + 1
        return row

    def check_rollouts(self, step: int, ro: Rollouts) -> tuple[Rollouts, str | None, dict[str, float]]:
        """A step's rollouts checked before anything is computed from them: a high share of verifier errors warns;
        a verifier that failed on every call for ``reward.max_verifier_failed_steps`` steps in a row (or in every
        step of a shorter run, by its last) stops the run (:class:`~rlvr.learner.guards.VerifierFailed`); the
        groups holding a non-finite reward are left out.

        Returns the rollouts to train on, the reason to skip the step (None: train on them; set when no group is
        left) and the metrics of what was left out (``dropped_groups``, ``nonfinite_rewards``; empty when nothing
        was, so a run with finite rewards trains and logs exactly as without the check).
        """
        from rlvr.learner.guards import VerifierFailed, nonfinite_groups
        from rlvr.types import component_name

        rcfg = self.cfg.reward
        self.guard.verifier_errors(step + 1, ro.verdicts, ro.samples, rcfg.verifier, self.prompts)
        name = component_name(self.injected_verifier) if self.injected_verifier is not None else \
            f"{rcfg.verifier!r} (reward.verifier)"
        stop = self.guard.verifier_failures(step + 1, ro.verdicts, ro.samples, name, rcfg.max_verifier_failed_steps,
                                            last=step + 1 >= self.cfg.train.steps, prompts=self.prompts)
        if self.any_rank(stop) is not None:  # every rank stops at the same step (their collectives must match)
            raise VerifierFailed(stop or "the verifier failed on every call on another rank (its error names it)")
        reason = nonfinite_rewards(ro.rewards, ro.samples, ro.verdicts, verifier=rcfg.verifier,
                                   env=self.cfg.env.name, source=rcfg.source, prompts=self.prompts)
        G, n = self.cfg.rollout.group_size, len(ro.rewards)
        if reason is None or n % G or len(ro.samples) != n:
            return ro, reason, {}
        bad = set(nonfinite_groups(ro.rewards, G))
        dropped = {"dropped_groups": float(len(bad)), "nonfinite_rewards": float((~torch.isfinite(ro.rewards)).sum())}
        if len(bad) == n // G:  # nothing finite left to train on: the step is skipped
            return ro, reason, dropped
        self.guard.dropped(step + 1, len(bad), n // G, reason)
        return ro.subset([i for i in range(n) if i // G not in bad]), None, dropped

    def any_rank(self, bad: str | None) -> str | None:
        """The reason to skip this step on any rank (one process: this one's)."""
        return bad

    def skip(self, step: int, ro: Rollouts, reason: str, closed: bool,
             dropped: dict[str, float] | None = None) -> dict[str, Any]:
        """A skipped step: no update (the LR schedule still advances), a metrics row (with ``dropped``: the groups
        left out for non-finite rewards), a warning; stops the run at ``train.max_bad_steps`` in a row
        (:class:`TrainingDiverged`)."""
        if not closed:  # the learner never ran: the schedules still advance, the generator gets its version
            with self.acct.phase("learn"):
                self.end_update()
            self.sync(step, weights=False)
        self.guard.skip(step + 1, reason)
        samples = ro.samples
        timing = self.acct.row()
        row = {"step": step + 1, "reward_mean": float(ro.rewards.mean()) if len(ro.rewards) else 0.0,
               "accuracy": sum(ro.own_correct()) / max(len(ro.verdicts), 1),
               "response_length": sum(s.num_tokens for s in samples) / max(len(samples), 1),
               "rollouts": self.rollouts_done, "lr": self.scheduler.get_last_lr()[0],
               **(dropped or {}), **self.guard.metrics(skipped=True), **timing, **ro.lag}
        if self.tracker is not None:
            self.tracker.log(row, row["step"])
        self.guard.stop_if_diverged(step + 1, reason)
        return row

    def train(self) -> dict[str, Any]:
        """Set up, train ``train.steps`` steps (checkpointing, periodic evals), evaluate; returns a summary."""
        from rlvr.models.matmul import matmul_backend

        # model.matmul holds for this thread's products (every recipe, wherever it runs: in process, as an FSDP
        # rank, in a Ray learner actor); the async generator process enters it too
        with deterministic_algorithms(self.cfg.train.deterministic), matmul_backend(self.cfg.model.matmul):
            return self._train()

    def _train(self) -> dict[str, Any]:
        self.held = self.claim_directory()  # before anything loads: a directory the run may not use fails at once
        try:
            with sigterm_interrupts():  # SIGTERM (preemption) checkpoints and stops like Ctrl-C
                return self._run()
        finally:
            if self.held is not None:
                self.held.release()

    def claim_directory(self) -> RunClaim | None:
        """Lock ``train.output_dir`` for this run and check it may train there (:func:`rlvr.recipes.rundir.claim`)."""
        return claim(self.cfg)

    def _run(self) -> dict[str, Any]:
        cfg, tcfg = self.cfg, self.cfg.train
        self.setup()
        summary = self.begin()
        step, row, self.snap = self.start_step, {}, None
        self.finished = self.start_step  # steps whose update and log line are done
        t_start = time.perf_counter()
        try:
            self.start_worker()
            for step in range(self.start_step, tcfg.steps):
                if tcfg.max_rollouts and self.rollouts_done >= tcfg.max_rollouts:
                    print(f"rollout budget reached ({self.rollouts_done} >= train.max_rollouts={tcfg.max_rollouts})")
                    break
                if tcfg.max_minutes and time.perf_counter() - t_start >= 60 * tcfg.max_minutes:
                    print(f"time budget reached ({(time.perf_counter() - t_start) / 60:.2f} min >= "
                          f"train.max_minutes={tcfg.max_minutes})")
                    break
                self.snap = self.snapshot()
                row = self.step(step)
                self.show(row)
                # not after a skipped step: the checkpoints of the last good steps are not rotated out by its copies
                if tcfg.save_every and (step + 1) % tcfg.save_every == 0 and not self.guard.in_a_row:
                    with deferred_interrupts():
                        self.checkpoint(step + 1)
                if self.periodic and (step + 1) % cfg.eval.every == 0:
                    self.log_heldout(step + 1)
            else:
                step = tcfg.steps
        except KeyboardInterrupt as e:
            self.interrupted(self.finished, self.snap, e)
        except TrainingDiverged as e:
            self.diverged(e)
        finally:
            if self.worker is not None:
                self.worker.close()
        return self.finish(summary, step, row)

    def log_heldout(self, step: int) -> None:
        """An ``eval.every`` evaluation, logged to the trackers' ``heldout`` group (heldout.jsonl)."""
        with self.isolated_rng():
            row = periodic_eval(self.engine, self.heldout, self.verifier, self.cfg, step, self.rollouts_done,
                                env=self.env, reward_parts=self.rewards.rubric_parts
                                if (self.rewards.rubric or self.rewards.task_rubrics) else None)
        self.tracker.log(row, step, group="heldout")

    def interrupted(self, done: int, snap: tuple | None, interrupt: BaseException | None = None) -> None:
        """Ctrl-C: checkpoint after the ``done`` finished steps (restoring the pre-step sampling state) and raise.

        ``done`` is counted where the step's update and log line finish, not derived from the loop
        variable: an interrupt between two steps (or before the first) must not claim a step that
        never ran.
        """
        code, what = (143, "terminated (SIGTERM)") if isinstance(interrupt, Terminated) else (130, "interrupted")
        if snap is not None:
            self.restore(snap)
        if self.bar is not None:
            self.bar.close()
        if self.tracker is not None:  # None on the ranks of a sharded run that do not write logs
            self.tracker.close()
        print(f"\n{what}: writing a checkpoint of step {done} (interrupt again to stop without it)", flush=True)
        try:
            path = self.checkpoint(done)
        except KeyboardInterrupt:  # a second Ctrl-C: the write is abandoned whole (it is atomic)
            last = latest_checkpoint(self.out_dir)
            print(f"{what} again: stopped without writing that checkpoint; "
                  + (f"the latest is {last} (continue with --resume)" if last else "no checkpoint was written"))
            raise TrainingInterrupted(code) from None
        print(f"{what}: checkpoint written to {path}; continue with --resume (train.resume=true)")
        raise TrainingInterrupted(code) from None

    def diverged(self, err: TrainingDiverged) -> None:
        """``train.max_bad_steps`` skipped steps in a row (or a verifier that failed on every call): close the logs,
        write no checkpoint, and raise (the same exception class) saying what a resume starts from: the latest
        checkpoint (written before the bad steps, with finite weights), or scratch when none was written."""
        if self.bar is not None:
            self.bar.close()
        if self.tracker is not None:
            self.tracker.close()
        last = latest_checkpoint(self.out_dir)
        keep = f"the latest checkpoint is {last}; train.resume=true continues from it" if last is not None else \
            "no checkpoint was written, so train.resume=true would start from scratch"
        raise type(err)(f"{err}. Stopped; {keep}") from None

    def finish(self, summary: dict[str, Any], step: int, row: dict[str, Any]) -> dict[str, Any]:
        """Close the logs, write the final checkpoint, evaluate after training and write summary.json."""
        cfg, tcfg, out_dir = self.cfg, self.cfg.train, self.out_dir
        if self.bar is not None:
            self.bar.close()
        if self.periodic and step > self.start_step and step % cfg.eval.every:  # ended between two evals
            self.log_heldout(step)
        self.tracker.close()
        final = self.checkpoint(step) if tcfg.steps > self.start_step or latest_checkpoint(out_dir) is None else \
            latest_checkpoint(out_dir)
        summary.update({"final_checkpoint": str(final), "last_metrics": row, "steps": step, "code": code_version()})
        if cfg.eval.after_training and self.heldout:
            after = self.evaluate("after")
            summary["eval_after"] = after
            if "eval_before" in summary:
                print("held-out accuracy before training: " + format_eval(summary["eval_before"]))
            print("held-out accuracy after training:  " + format_eval(after))
        atomic_write_json(out_dir / "summary.json",
                          {k: v for k, v in summary.items() if k not in ("eval_before", "eval_after")}, indent=2,
                          default=str)
        return summary


def train(cfg: RunConfig, **kwargs: Any) -> dict[str, Any]:
    """Run :class:`RLRecipe` on ``cfg``; returns a summary (final metrics, eval results, paths).

    Keyword arguments (``model``, ``tokenizer``, ``problems``, ``verifier``, ``on_step``) are passed
    to the recipe.  With ``distributed.learner=actor`` the recipe class is passed, as a value, to a Ray
    learner actor.  A sharded learner (``distributed.fsdp``) is another recipe class:
    :func:`rlvr.recipes.run.train` (what ``rlvr train`` and ``rlvr.train`` call) picks it.
    """
    if cfg.distributed.fsdp:
        raise ValueError("distributed.fsdp=true runs rlvr.recipes.fsdp.FSDPRecipe: call rlvr.recipes.run.train "
                         "(or rlvr.train), which picks the recipe for the config")
    return run_recipe(RLRecipe, cfg, **kwargs)


def run_recipe(cls: type[RLRecipe], cfg: RunConfig, **kwargs: Any) -> dict[str, Any]:
    """``cls(cfg, **kwargs).train()`` in this process, or in a Ray learner actor (``distributed.learner=actor``)."""
    if cfg.distributed.backend == "ray" and cfg.distributed.learner == "actor":
        from rlvr.distributed.ray_backend import train_on_cluster

        return train_on_cluster(actor_run(cls, cfg, **kwargs), cfg.distributed)
    return cls(cfg, **kwargs).train()


def actor_run(cls: type[RLRecipe], cfg: RunConfig, **kwargs: Any) -> Callable[[], dict[str, Any]]:
    """What a Ray learner actor runs (a picklable callable): ``cls(cfg, **kwargs).train()`` there, with
    ``train.output_dir`` made absolute (the actor's working directory is Ray's) and ``distributed.learner=driver``
    (the learner is that process).  ``on_step`` callbacks cannot run in an actor."""
    if kwargs.pop("on_step", None) is not None:
        raise ValueError("on_step callbacks cannot run in the learner actor (distributed.learner=actor)")
    local = cfg.model_copy(update={
        "train": cfg.train.model_copy(update={"output_dir": str(Path(cfg.train.output_dir).resolve())}),
        "distributed": cfg.distributed.model_copy(update={"learner": "driver"})})
    return functools.partial(_train_here, cls, local, kwargs)


def _train_here(cls: type[RLRecipe], cfg: RunConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    return cls(cfg, **kwargs).train()
