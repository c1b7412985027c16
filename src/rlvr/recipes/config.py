"""The typed configuration tree of ``rlvr train`` / ``rlvr eval``.

Every field has a default and a one-line doc (shown by ``rlvr train --help``);
load from YAML and override with dotted keys, e.g. ``train.steps=20``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from rlvr.config import ConfigModel, option
from rlvr.credit.settings import CreditSettings, DistillSettings, ProcessSettings, TurnSettings
from rlvr.distributed.settings import DistributedConfig
from rlvr.engines.registry import EngineContext
from rlvr.envs.settings import EnvConfig
from rlvr.evaluate.settings import EvalConfig
from rlvr.learner.settings import LearnerSettings, ScheduleSettings
from rlvr.models.settings import ModelConfig
from rlvr.recipes.rules import RUN_RULES
from rlvr.rewards.settings import RewardConfig
from rlvr.rollout.async_rollouts import GeneratorSettings
from rlvr.rollout.collect import CollectSettings
from rlvr.rollout.settings import GuidanceConfig, RolloutConfig
from rlvr.tasks.settings import CurriculumConfig, MixtureConfig, TaskConfig, task_at_level

__all__ = [
    "ModelConfig",
    "TaskConfig",
    "RolloutConfig",
    "ValueConfig",
    "AlgorithmConfig",
    "RewardConfig",
    "EnvConfig",
    "CurriculumConfig",
    "GuidanceConfig",
    "TrainConfig",
    "EvalConfig",
    "DistributedConfig",
    "DistillConfig",
    "RunConfig",
    "task_at_level",
]


class ValueConfig(ConfigModel):
    """The critic of PPO, used when ``algorithm.advantage=gae`` (see rlvr.models.value_head)."""

    critic: Literal["separate", "shared"] = option(
        "separate", "separate: a copy of the policy's trunk plus a value head, own optimizer (verl/OpenRLHF); "
                    "shared: a value head on the policy's last hidden state, trained through its trunk")
    coef: float = option(0.5, "weight of the value loss (vf_coef)", gt=0)
    clip: float | None = option(0.2, "value clipping: new values stay within this of the rollout-time values "
                                     "(null: unclipped MSE)", gt=0)
    lr: float = option(1e-4, "critic learning rate (the head, and the trunk of a separate critic)", gt=0)
    warmup_steps: int = option(0, "first N steps train the critic only; the policy is not updated", ge=0)


class AlgorithmConfig(ConfigModel):
    advantage: str = option("grpo", "advantage estimator, a name in rlvr.algorithms.ADVANTAGE_ESTIMATORS "
                                    "(grpo, drgrpo, rloo, reinforce, reinforce_pp, passk, psr, nsr, w_reinforce, "
                                    "quantile, entropy_guided, noisy_backward, noisy_forward; gae: PPO with a "
                                    "learned critic, see algorithm.value)")
    advantage_params: dict[str, Any] = option(None, "estimator hyper-parameters, e.g. {k: 4} for passk, "
                                              "{rho0: 0.1, rho1: 0.2} for noisy_backward, "
                                              "{gamma: 1, lam: 0.95, whiten: true} for gae", default_factory=dict)
    turn_credit: str = option("none", "per-turn credit of multi-turn episodes, a name in rlvr.credit.TURN_CREDIT: "
                                      "none (the estimator's one advantage per episode), loo (per-turn returns minus "
                                      "a leave-one-out per-turn baseline; with algorithm.advantage=rloo), gigpo "
                                      "(GiGPO's episode + step-group advantage; with algorithm.advantage=grpo)")
    turn_credit_params: dict[str, Any] = option(None, "turn-credit options, e.g. {gamma: 0.95} for loo, "
                                                      "{gamma: 0.95, step_weight: 1} for gigpo", default_factory=dict)
    entropy_token_fraction: float = option(1.0, "keep the policy gradient of only this top share of a batch's "
                                                "completion tokens by the policy's entropy, the rest get advantage 0 "
                                                "(Beyond the 80/20 Rule: 0.2); 1: every token (off)", gt=0.0, le=1.0)
    entropy_bonus_fraction: float = option(
        1.0, "the entropy bonus (entropy_coef, entropy_floor) on only this top share of a batch's completion tokens "
             "by the policy's entropy (SIREN's peak-entropy mask, e.g. 0.2); 1: every token", gt=0.0, le=1.0)
    policy_loss: str = option("ppo_clip", "policy loss, a name in rlvr.algorithms.POLICY_LOSSES (ppo_clip, "
                                          "dual_clip, gspo, topr, cispo, sapo; clip_cov, kl_cov: entropy control)")
    policy_loss_params: dict[str, Any] = option(None, "extra loss hyper-parameters, e.g. {clip_ratio_c: 3} for "
                                                "dual_clip; gspo/topr clip ranges; {clip_low: 1, clip_high: 4} "
                                                "for cispo (IS-weight bounds); {tau_pos: 1, tau_neg: 1.05} for "
                                                "sapo; {ratio: 0.02, cov_low: 1, cov_high: 5} for clip_cov; "
                                                "{ratio: 0.02, coef: 1} for kl_cov", default_factory=dict)
    entropy_coef: float = option(0.0, "weight of the entropy bonus (0: off)", ge=0)
    entropy_floor: float = option(
        0.0, "adaptive entropy bonus (Skywork-OR1): target mean token entropy in nats; while the measured "
             "entropy is below it the bonus is on and its weight grows (0: off)", ge=0)
    entropy_floor_delta: float = option(0.001, "entropy floor: change of the bonus weight per step", gt=0)
    entropy_floor_max_coef: float = option(0.01, "entropy floor: largest bonus weight, added to entropy_coef", gt=0)
    is_correction: str = option(
        "none", "importance correction for sampler-vs-learner mismatch: truncated (tis) or masked (mis) weights")
    is_params: dict[str, Any] = option(None, "importance-correction options, e.g. {cap: 2, level: token}",
                                       default_factory=dict)
    dynamic_sampling: bool = option(False, "DAPO dynamic sampling: drop groups whose samples are all correct or "
                                           "all wrong (by the verdicts, not the shaped reward) and refill the batch")
    max_sampling_rounds: int = option(4, "generation rounds per step at most when dynamic_sampling is on", ge=1)
    clip_low: float = option(0.2, "PPO clip range below 1 (ratio >= 1 - clip_low); read by ppo_clip, dual_clip, "
                                  "clip_cov and kl_cov; acts from the second optimizer step of a batch "
                                  "(mini_batches or ppo_epochs > 1)", ge=0, le=1)
    clip_high: float = option(0.2, "PPO clip range above 1 (ratio <= 1 + clip_high); > clip_low is DAPO clip-higher; "
                                   "acts from the second optimizer step of a batch", ge=0)
    clip_schedule: list[list[float]] = option(
        None, "a schedule of the PPO clip range, [[from_step, clip_low, clip_high], ...] (steps from 1, increasing; "
              "clip_low in [0, 1], clip_high >= 0; clip_low / clip_high apply before the first entry): e.g. a "
              "clip-higher that widens as entropy falls; [] = clip_low / clip_high throughout", default_factory=list)
    kl_coef: float = option(0.0, "weight of the KL(policy || reference) loss term; 0 loads no reference model", ge=0)
    kl_estimator: str = option("k3", "per-token KL estimator (Schulman 2020) of the KL loss term, a name in "
                                     "rlvr.algorithms.KL_ESTIMATORS: k1, k2, k3; with kl_in_reward the penalty "
                                     "is k1 (recorded when not set; another is refused)")
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"] = option(
        "token_mean", "how per-token losses are averaged (policy, KL, entropy and value terms); when not set, the "
                      "policy loss's own: token_mean for ppo_clip / dual_clip / cispo, seq_mean_token_mean for "
                      "gspo / sapo, seq_mean_token_sum for topr")
    kl_in_reward: bool = option(False, "fold the KL penalty into the reward instead of adding a KL loss term: "
                                       "k1 = log pi_old - log pi_ref per token (pi_old: the learner before the "
                                       "step; demonstrations 0), r - kl_coef * sum_t k1 for sequence-level "
                                       "estimators, token by token for reinforce_pp and gae")
    ref_reset_every: int = option(0, "ProRL: copy the policy into the reference every N steps (0: never)", ge=0)
    ref_reset_kl: float | None = option(None, "ProRL: also reset the reference when the step's KL exceeds this", gt=0)
    ref_reset_optimizer: bool = option(True, "ProRL: clear the optimizer state when the reference is reset")
    difficulty_filter: bool = option(False, "online difficulty filter: skip prompts whose running pass rate lies "
                                            "outside [difficulty_low, difficulty_high] before generating")
    difficulty_low: float = option(0.0, "difficulty filter: lowest running pass rate kept (0 keeps unsolved ones)",
                                   ge=0, le=1)
    difficulty_high: float = option(0.9, "difficulty filter: highest running pass rate kept", ge=0, le=1)
    difficulty_alpha: float = option(0.5, "difficulty filter: EMA weight of the newest pass rate", gt=0, le=1)
    mopps: bool = option(False, "MoPPS prompt selection (Qu et al. 2025): a Beta posterior of each prompt's pass "
                                "rate, updated from its groups; each step keeps the prompts_per_step of "
                                "mopps_candidates x as many drawn whose Thompson sample is nearest mopps_target")
    mopps_candidates: int = option(4, "MoPPS: prompts drawn per prompt kept", ge=1, le=64)
    mopps_target: float = option(0.5, "MoPPS: the pass rate the chosen prompts are nearest to", ge=0, le=1)
    mopps_decay: float = option(1.0, "MoPPS: temporal discount lambda of the posterior counts (1: none)", gt=0,
                                le=1)
    ppo_epochs: int = option(1, "optimisation passes over each batch of rollouts", ge=1)
    mini_batches: int = option(
        1, "optimizer steps per pass: the batch's sequences are split, in order, into this many mini-batches, each "
           "normalised on its own and followed by an optimizer step (verl's ppo_mini_batch_size = batch / "
           "mini_batches); up to train.prompts_per_step x rollout.group_size.  With more than one optimizer step "
           "per batch, logp_old comes from a pass over the whole batch before the first, so the clip range, dual "
           "clip, TOPR's truncation and CISPO's / SAPO's weights act; the LR schedule still steps once per batch", ge=1)
    skip_zero_advantage: bool = option(
        True, "skip the learner pass on sequences whose advantage is 0 (exact when kl_coef and entropy_coef are 0)")
    value: ValueConfig = option(None, "PPO's critic (algorithm.advantage=gae)", default_factory=ValueConfig)

    @model_validator(mode="after")
    def _aggregation_of_the_loss(self) -> AlgorithmConfig:
        """Without ``loss_agg`` set, the loss's own aggregation (GSPO's sequence mean, TOPR's sequence sums),
        recorded in the saved config."""
        from rlvr.algorithms import POLICY_LOSSES
        from rlvr.algorithms.losses import loss_aggregation

        if "loss_agg" not in self.model_fields_set and self.policy_loss in POLICY_LOSSES \
                and loss_aggregation(self.policy_loss) != self.loss_agg:
            self.loss_agg = loss_aggregation(self.policy_loss)
        return self

    @model_validator(mode="after")
    def _estimator_of_the_reward_kl(self) -> AlgorithmConfig:
        """With ``kl_in_reward`` and ``kl_estimator`` not set, the estimator that acts (k1, the penalty's own),
        recorded in the saved config; a set estimator other than k1 is refused by the rules."""
        if self.kl_in_reward and "kl_estimator" not in self.model_fields_set:
            self.kl_estimator = "k1"
        return self

    @model_validator(mode="after")
    def _clips_can_act(self) -> AlgorithmConfig:
        """See :meth:`_check_clips`; a ``clip_schedule``'s entries are checked first."""
        from rlvr.algorithms import POLICY_LOSSES

        sched = self.clip_schedule
        if any(len(e) != 3 for e in sched):
            raise ValueError(f"algorithm.clip_schedule: each entry is [from_step, clip_low, clip_high], got {sched}")
        steps = [e[0] for e in sched]
        if any(s < 1 or s != int(s) for s in steps) or any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"algorithm.clip_schedule: the steps must be integers >= 1, strictly increasing, "
                             f"got {steps}")
        bad = [e for e in sched if not (0 <= e[1] <= 1 and e[2] >= 0)]
        if bad:
            raise ValueError(f"algorithm.clip_schedule: each clip_low must be in [0, 1] and clip_high >= 0, got {bad}")
        if self.policy_loss in POLICY_LOSSES:
            self._check_clips("clip_range" in POLICY_LOSSES.entry(self.policy_loss).tags)
        return self

    def optimizer_steps(self) -> int:
        """Optimizer steps per rollout batch: ``ppo_epochs x mini_batches``."""
        return self.ppo_epochs * self.mini_batches

    def _check_clips(self, takes_clip_range: bool) -> None:
        """Refuse clip options that cannot act: read by no loss, or with a ratio that is always 1.

        ``logp_old`` is the learner's own log-prob before the step's first optimizer step, so with one
        optimizer step per rollout batch every importance ratio is exactly 1 (the sampler's staleness and
        precision are ``is_correction``'s, not the ratio's): no clip range, dual clip or truncation acts.
        Defaults are never refused (the default clip range 0.2 is then inert but harmless).
        """
        fields = type(self).model_fields
        clip_set = (self.clip_low, self.clip_high) != (fields["clip_low"].default, fields["clip_high"].default) \
            or bool(self.clip_schedule)
        if clip_set and not takes_clip_range:
            raise ValueError(f"algorithm.clip_low / clip_high = {self.clip_low} / {self.clip_high} are read by the "
                             f"losses with a PPO clip range (ppo_clip, dual_clip, clip_cov, kl_cov), not by "
                             f"{self.policy_loss}: give its own options in algorithm.policy_loss_params")
        if self.optimizer_steps() > 1:
            return
        why = []
        if clip_set:
            why.append(f"algorithm.clip_low / clip_high = {self.clip_low} / {self.clip_high} (the PPO clip range"
                       + ("; DAPO's clip-higher" if self.clip_high > self.clip_low else "") + ")")
        if self.policy_loss == "dual_clip" or "dual_clip" in self.policy_loss_params:
            why.append("the dual clip (algorithm.policy_loss=dual_clip: it bounds the loss of negative-advantage "
                       "tokens whose ratio exceeds clip_ratio_c)")
        if self.policy_loss == "topr":
            why.append("algorithm.policy_loss=topr (it truncates the ratio of negative samples; at ratio 1 it is "
                       "plain REINFORCE: ppo_clip with loss_agg=seq_mean_token_sum)")
        if self.policy_loss == "gspo" and {"clip_low", "clip_high"} & set(self.policy_loss_params):
            why.append("algorithm.policy_loss_params clip_low / clip_high of gspo (its sequence-ratio clip)")
        if self.policy_loss in ("clip_cov", "kl_cov") and {"clip_low", "clip_high"} & set(self.policy_loss_params):
            why.append(f"algorithm.policy_loss_params clip_low / clip_high of {self.policy_loss} (its PPO clip range)")
        if self.policy_loss == "cispo":
            why.append("algorithm.policy_loss=cispo (it clips the importance weight, which is 1 at ratio 1: it is "
                       "then the token-mean policy gradient, ppo_clip's at ratio 1)")
        if self.policy_loss == "sapo":
            why.append("algorithm.policy_loss=sapo (its gate's gradient weight is 1 at ratio 1 whatever tau_pos / "
                       "tau_neg: it is then the policy gradient with loss_agg=seq_mean_token_mean)")
        if self.policy_loss == "kl_cov":
            why.append("algorithm.policy_loss=kl_cov (its |logp - logp_old| penalty and that penalty's gradient are 0 "
                       "at ratio 1: it is then the unclipped policy gradient, ppo_clip's at ratio 1)")
        if self.advantage == "gae" and self.value.clip is not None and self.value.clip > 0 \
                and self.value.clip != ValueConfig.model_fields["clip"].default:
            why.append(f"algorithm.value.clip={self.value.clip} (the critic's move from its rollout-time values)")
        if why:
            raise ValueError(f"{'; '.join(why)}: cannot act with one optimizer step per rollout batch "
                             "(algorithm.ppo_epochs=1, algorithm.mini_batches=1): the policy (and critic) has not moved "
                             "when the loss is taken, so every importance ratio is exactly 1 (logp_old is the learner's "
                             "own; a stale or low-precision sampler is algorithm.is_correction's). Set "
                             "algorithm.mini_batches > 1 "
                             "(several optimizer steps per batch, as verl's ppo_mini_batch_size) or "
                             "algorithm.ppo_epochs > 1")


class DistillConfig(ConfigModel):
    """On-policy distillation (GKD; Thinking Machines 2025; KDRL): the student samples, a frozen teacher scores
    every sampled token, and each token's advantage is ``coef * (log pi_teacher - log pi_student) +
    reward_coef * A_rl`` (rlvr.algorithms.distill)."""

    teacher: str | None = option(
        None, "the teacher: an HF model directory, an rlvr checkpoint directory (a run's checkpoints/step-N), a "
              "bundled name or a hub id, with the student's tokenizer (null: no distillation)")
    coef: float = option(1.0, "weight of the per-token log pi_teacher - log pi_student (the negative reverse KL) "
                              "in each token's advantage", ge=0)
    reward_coef: float = option(0.0, "weight of algorithm.advantage's advantage of the verifier reward, added to "
                                     "each token's (KDRL; 0: pure distillation, rewards only logged)", ge=0)
    chunk_size: int = option(128, "the teacher's log-probs from its last hidden states this many tokens at a "
                                  "time through its LM head (never the [batch, length, vocab] logits)", ge=1)
    dtype: Literal["policy", "float32", "bfloat16"] = option(
        "policy", "parameter dtype of the frozen teacher (policy: model.dtype, as the KL reference)")
    sleep_while_learning: bool = option(
        True, "free the teacher's weights after its log-prob pass and read them back from its files right before the "
              "next (same log-probs; the teacher is not resident during the learner step, the weight sync and "
              "sampling: -0.54 GB peak for a 135M float32 teacher)")

    def check(self) -> None:
        """Both weights 0 is refused.  (A teacher that does not exist is refused when the run starts, before any
        model loads: rlvr.recipes.preflight; a file's teacher may be overridden on the command line.)"""
        if self.coef == 0 and self.reward_coef == 0:
            raise ValueError("distill.coef and distill.reward_coef are both 0: every advantage would be 0 (set "
                             "distill.coef > 0 to distil, distill.reward_coef > 0 for the verifier reward)")


class TrainConfig(ConfigModel):
    steps: int = option(40, "optimizer steps (each consumes prompts_per_step x group_size rollouts)", ge=0)
    max_minutes: float = option(0.0, "stop before the next step once this many minutes of training have passed in "
                                     "this process (0: no limit; set-up and the evaluation before training are "
                                     "not counted); equal wall-clock budgets", ge=0)
    max_rollouts: int = option(0, "stop once this many completions have been generated (0: no limit); "
                                  "equalises budgets when dynamic sampling generates more per step", ge=0)
    prompts_per_step: int = option(8, "distinct prompts per step", ge=1)
    micro_batch_size: int = option(16, "sequences per forward/backward pass (gradient accumulation)", ge=1)
    lr: float = option(2e-5, "peak learning rate (AdamW)", gt=0)
    optimizer: Literal["adamw", "adamw_bf16"] = option(
        "adamw", "adamw: torch AdamW (fp32 moments); adamw_bf16: the same update with both moments stored in "
                 "bfloat16 with stochastic rounding (half the optimizer memory: -0.54 GB for the 135M model)")
    weight_decay: float = option(0.0, "AdamW weight decay", ge=0)
    update_fraction: float = option(1.0, "train a fixed random share of each weight tensor's entries, the rest frozen "
                                         "(the Multiple Ticket Hypothesis: 0.01 matched full RLVR); 1: all", gt=0,
                                    le=1)
    betas: list[float] = option(None, "AdamW betas", default_factory=lambda: [0.9, 0.99], min_length=2, max_length=2)
    warmup_steps: int = option(2, "linear warm-up steps", ge=0)
    schedule: Literal["constant", "cosine", "linear"] = option(
        "constant", "LR schedule after the linear warm-up: constant, or decayed to 0 at train.steps by cosine or "
                    "linearly (the demo: cosine)")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 disables)", ge=0)
    seed: int = option(0, "seed for sampling, data order and initialisation")
    output_dir: str = option("runs/default", "where metrics, checkpoints and eval results are written")
    save_every: int = option(10, "checkpoint every N steps (0: only at the end and on interrupt)", ge=0)
    keep_checkpoints: int = option(2, "how many recent checkpoints to keep", ge=0)
    resume: bool = option(False, "continue from the latest intact checkpoint in output_dir")
    overwrite: bool = option(False, "start over in an output_dir that holds an earlier run: its checkpoints, "
                                    "metrics, evaluations and config are deleted first (without it such a "
                                    "directory is refused unless resuming)")
    resume_changes: list[str] = option(None, "config keys (or sections, e.g. train.lr, algorithm) a resume may "
                                             "change from the checkpoint's config; any other change that alters "
                                             "the run is refused, naming it", default_factory=list)
    threads: int = option(0, "torch CPU threads (0: torch's default)", ge=0)
    autocast: Literal["none", "bfloat16"] = option(
        "none", "mixed precision for the learner's forward/backward (weights and optimizer stay in model.dtype)")
    progress: bool = option(True, "show a live progress bar")
    report_to: list[str] = option(None, "where metrics go besides metrics.jsonl (always written): tensorboard, "
                                        "wandb (offline without a key), mlflow, trackio", default_factory=list)
    async_steps: int = option(0, "asynchronous rollouts: a generator process samples up to N steps ahead of the "
                                 "learner (needs algorithm.is_correction; 0: synchronous)", ge=0)
    rollout_worker: bool = option(False, "sample in a separate generator process even when async_steps is 0 "
                                         "(on-policy; the baseline of benchmarks/async_rollouts.py)")
    logprob_chunk_size: int = option(0, "learner log-probs/entropy from the last hidden states this many tokens "
                                        "at a time, never holding [batch, length, vocab] logits (0: full logits)", ge=0)
    micro_batch_tokens: int = option(0, "learner micro-batches filled up to this many tokens with sequences packed "
                                        "into one row instead of padded (0: micro_batch_size rows, padded)", ge=0)
    share_prompts: bool = option(False, "with micro_batch_tokens: the completions of one prompt share one copy of "
                                        "it in the packed row (Prefix Grouper); needs sdpa or eager attention")

    malloc_mmap_threshold: int = option(0, "glibc only: allocations of at least this many bytes use mmap and go "
                                           "back to the OS when freed (65536 stops the heap growing step after "
                                           "step; same as MALLOC_MMAP_THRESHOLD_; 0: glibc's default)", ge=0)
    onednn_cache: int = option(0, "CPU bf16 sampler: compiled matmul kernels kept per cache (oneDNN's and ideep's, "
                                  "one per input shape, ~0.9 MiB each); multi-turn episodes' ever-new prefill shapes "
                                  "fill them by up to ~0.9 GB (0: the libraries' 1024; rlvr train and rlvr eval)", ge=0)
    deterministic: Literal["off", "warn", "error"] = option(
        "off", "torch.use_deterministic_algorithms for the run: deterministic kernels where torch has them, and a "
               "warning (warn) or an error (error) at any op whose result can depend on thread timing")
    activation_checkpointing: bool = option(False, "recompute each decoder layer's activations in the learner's "
                                                   "backward instead of storing them (less memory, ~30% more compute)")
    max_bad_steps: int = option(3, "stop the run with an error after this many steps in a row were skipped for "
                                   "non-finite rewards, advantages or gradients (a skipped step never updates the "
                                   "weights; the checkpoints written before stay)", ge=1)
    check_memory: bool = option(True, "estimate the run's peak memory from the model's shape and these sizes before "
                                      "the model loads (printed), and refuse a run whose estimate exceeds the memory "
                                      "available (false: run anyway)")

    @field_validator("betas")
    @classmethod
    def _betas_in_unit_interval(cls, betas: list[float]) -> list[float]:
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"train.betas: must be two numbers in [0, 1), got {betas}")
        return betas

    @model_validator(mode="after")
    def _shared_prompts_are_packed(self) -> TrainConfig:
        if self.share_prompts and self.micro_batch_tokens <= 0:
            raise ValueError("train.share_prompts packs sequences: set train.micro_batch_tokens > 0 too")
        if self.resume and self.overwrite:
            raise ValueError("train.resume continues the run in output_dir and train.overwrite deletes it: set one")
        return self


class RunConfig(ConfigModel):
    """Top-level config: one section per stage of the loop."""

    plugins: list[str] = option(None, "modules to import before the config is checked, for the components they "
                                      "register (as --import MODULE; rlvr.plugins entry points load by themselves)",
                                default_factory=list)
    model: ModelConfig = option(None, "the policy: which model, dtype, device, LoRA", default_factory=ModelConfig)
    task: TaskConfig = option(None, "where training and held-out problems come from", default_factory=TaskConfig)
    mixture: MixtureConfig = option(None, "a task mixture: several tasks in one run, prompts drawn by weight, each "
                                          "problem scored by its own task's verifier and rubric",
                                    default_factory=MixtureConfig)
    rollout: RolloutConfig = option(None, "sampling completions: group size, lengths, temperature, engine", default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = option(None, "advantage estimator, policy loss, KL, clipping, sampling policies", default_factory=AlgorithmConfig)
    reward: RewardConfig = option(None, "verifier and reward shaping", default_factory=RewardConfig)
    env: EnvConfig = option(None, "the environment episodes run in (single-turn, tools, feedback)",
                            default_factory=EnvConfig)
    curriculum: CurriculumConfig = option(None, "a live curriculum over task difficulty levels",
                                          default_factory=CurriculumConfig)
    guidance: GuidanceConfig = option(None, "hints, demonstrations, replay and regeneration for all-fail groups",
                                      default_factory=GuidanceConfig)
    train: TrainConfig = option(None, "optimisation, checkpoints, threads, async rollouts", default_factory=TrainConfig)
    eval: EvalConfig = option(None, "held-out evaluation before, during and after training", default_factory=EvalConfig)
    distributed: DistributedConfig = option(None, "Ray rollout workers and FSDP sharding", default_factory=DistributedConfig)
    distill: DistillConfig = option(None, "on-policy distillation from a frozen teacher (off without distill.teacher)",
                                    default_factory=DistillConfig)

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any) -> Any:
        """Plugin modules (and entry points) are imported before any field is validated: their names must be known."""
        from rlvr.plugins import load_config_plugins

        return load_config_plugins(data)

    def check(self) -> None:
        """The cross-section rules (:data:`rlvr.recipes.rules.RUN_RULES`), in order; the first that fails is
        reported."""
        for check_rule in RUN_RULES:
            check_rule(self)

    # ------------------------------------------------------------------ what each layer is handed
    def learner_settings(self) -> LearnerSettings:
        """The learner's slice of the run (``algorithm.*``, ``train.*``, ``rollout.*``, ``guidance.shaping_gamma``)."""
        a, t = self.algorithm, self.train
        return LearnerSettings(
            temperature=self.rollout.temperature, max_new_tokens=self.rollout.max_new_tokens,
            micro_batch_size=t.micro_batch_size, micro_batch_tokens=t.micro_batch_tokens,
            share_prompts=t.share_prompts, logprob_chunk_size=t.logprob_chunk_size,
            activation_checkpointing=t.activation_checkpointing, autocast=t.autocast, max_grad_norm=t.max_grad_norm,
            ppo_epochs=a.ppo_epochs, mini_batches=a.mini_batches, skip_zero_advantage=a.skip_zero_advantage,
            policy_loss=a.policy_loss, policy_loss_params=dict(a.policy_loss_params), loss_agg=a.loss_agg,
            clip_low=a.clip_low, clip_high=a.clip_high, kl_coef=a.kl_coef, kl_estimator=a.kl_estimator,
            kl_in_reward=a.kl_in_reward, entropy_coef=a.entropy_coef, is_correction=a.is_correction,
            is_params=dict(a.is_params), value_coef=a.value.coef, value_clip=a.value.clip,
            shaping_gamma=self.guidance.shaping_gamma,
            clip_schedule=tuple(tuple(float(v) for v in e) for e in a.clip_schedule),
            entropy_bonus_fraction=a.entropy_bonus_fraction)

    def credit_settings(self) -> CreditSettings:
        """The credit stage's slice (``algorithm.advantage*``, ``algorithm.turn_credit*``, ``reward.process_*``,
        ``distill.coef`` / ``reward_coef``)."""
        a, r = self.algorithm, self.reward
        process = ProcessSettings(transforms=tuple(r.process_transform_list()), credit=r.process_credit,
                                  credit_params=dict(r.process_credit_params), filter=r.process_filter,
                                  filter_params=dict(r.process_filter_params), baseline=r.process_baseline,
                                  process_coef=r.process_coef, outcome_coef=r.outcome_coef)
        d = self.distill
        return CreditSettings(group_size=self.rollout.group_size, advantage=a.advantage,
                              advantage_params=dict(a.advantage_params), kl_coef=a.kl_coef, process=process,
                              turns=TurnSettings(name=a.turn_credit, params=dict(a.turn_credit_params)),
                              entropy_token_fraction=a.entropy_token_fraction,
                              distill=None if d.teacher is None else DistillSettings(coef=d.coef,
                                                                                     reward_coef=d.reward_coef))

    def engine_context(self) -> EngineContext:
        """What every rollout engine is given (``rollout.*``, ``model.*``, ``task.system_prompt``, ``train.seed``)."""
        m = self.model
        return EngineContext(batch_size=self.rollout.batch_size, system_prompt=self.task.system_prompt,
                             dtype=self.rollout.dtype, policy_dtype=m.dtype, merge_lora=m.lora.merge_for_rollout,
                             model_name=m.name, cache_dir=m.cache_dir, seed=self.train.seed)

    def collect_settings(self) -> CollectSettings:
        """What collection reads (``train.prompts_per_step``, ``train.seed``, dynamic sampling, ``reward``,
        ``guidance``, ``env.timeout_s``)."""
        a, g = self.algorithm, self.guidance
        return CollectSettings(prompts_per_step=self.train.prompts_per_step, seed=self.train.seed,
                               dynamic_sampling=a.dynamic_sampling, max_sampling_rounds=a.max_sampling_rounds,
                               reward=self.reward, guidance=g if g.active else None,
                               task_functions={e.name: list(e.functions) for e in self.mixture.tasks if e.functions},
                               env_timeout_s=self.env.timeout_s,
                               length_schedule=tuple((int(s), int(c)) for s, c in self.rollout.length_schedule),
                               branches=self.rollout.branches)

    def generator_settings(self) -> GeneratorSettings:
        """What the asynchronous generator process reads (``train.async_steps`` / ``train.rollout_worker``)."""
        r = self.rollout
        return GeneratorSettings(collect=self.collect_settings(), engine=self.engine_context(),
                                 engine_params=dict(r.engine_params) if r.engine == "hf" else {},
                                 verifier=self.reward.verifier,
                                 verifier_params=dict(self.reward.verifier_params), plugins=list(self.plugins),
                                 threads=self.train.threads, matmul=self.model.matmul, env=self.env.name,
                                 env_params=dict(self.env.params), env_max_concurrency=self.env.max_concurrency)

    def schedule_settings(self) -> ScheduleSettings:
        """The learning-rate schedule (``train.warmup_steps``, ``train.steps``, ``train.schedule``)."""
        t = self.train
        return ScheduleSettings(warmup_steps=t.warmup_steps, total_steps=t.steps, kind=t.schedule)
