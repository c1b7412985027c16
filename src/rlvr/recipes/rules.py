"""The cross-section rules of a run's config, each a small named function checked when the config loads.

Ranges and types are field constraints of the sections (``option(..., ge=...)``); a registered
component's options are checked against its registry entry.  What is left is a rule that reads
several sections: it raises ``ValueError`` with a message that names the keys, and
:class:`rlvr.recipes.config.RunConfig` runs :data:`RUN_RULES` in order after the fields are
validated (the first that fails is reported).  Each takes the ``RunConfig``.  Adding one is a decorated
function here::

    @rule
    def kl_in_reward_needs_a_reference(cfg):
        a = cfg.algorithm
        if a.kl_in_reward and a.kl_coef == 0:
            raise ValueError("algorithm.kl_in_reward needs a reference: set algorithm.kl_coef > 0")
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

# ``RunConfig`` in the annotations is rlvr.recipes.config.RunConfig, which imports this module (its rules); the
# name is not imported here, so the recipe modules import each other one way (checked by import-linter).

__all__ = ["RUN_RULES", "rule", "unsupported_with_fsdp", "in_process_only", "set_apart_from_default"]

RUN_RULES: list[Callable[[RunConfig], None]] = []
"""Every rule, in the order they run."""


def rule(fn: Callable[[RunConfig], None]) -> Callable[[RunConfig], None]:
    """Add ``fn`` to :data:`RUN_RULES`."""
    RUN_RULES.append(fn)
    return fn


def _traits(cfg: RunConfig):
    from rlvr.envs import environment_traits

    return environment_traits(cfg.env.name, cfg.env.params)  # multi-turn: read from its limits


def in_process_only(cfg: RunConfig, ray: bool = False) -> list[str]:
    """The settings that move sampling or learning out of this process (what an in-process-only feature names)."""
    t, d = cfg.train, cfg.distributed
    return [k for k, on in (("train.async_steps", t.async_steps > 0), ("train.rollout_worker", t.rollout_worker),
                            ("distributed.backend=ray", ray and d.backend == "ray"), ("distributed.fsdp", d.fsdp))
            if on]


# --------------------------------------------------------------------------- registered components
@rule
def algorithm_components(cfg: RunConfig) -> None:
    """The estimator, loss, KL estimator and importance correction are registered, with valid options."""
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS, IS_CORRECTIONS, KL_ESTIMATORS, POLICY_LOSSES

    a = cfg.algorithm
    entry = ADVANTAGE_ESTIMATORS.entry(a.advantage, key="algorithm.advantage")
    if "kl_coef" in a.advantage_params and "kl" in entry.inputs:
        raise ValueError(f"algorithm.advantage_params.kl_coef: the {a.advantage} advantage takes the KL penalty "
                         "of the reward from algorithm.kl_coef with algorithm.kl_in_reward=true")
    ADVANTAGE_ESTIMATORS.check(a.advantage, a.advantage_params, key="algorithm.advantage_params",
                               group_size=cfg.rollout.group_size)
    POLICY_LOSSES.entry(a.policy_loss, key="algorithm.policy_loss")
    POLICY_LOSSES.validate_params(a.policy_loss, a.policy_loss_params, key="algorithm.policy_loss_params")
    KL_ESTIMATORS.entry(a.kl_estimator, key="algorithm.kl_estimator")
    IS_CORRECTIONS.entry(a.is_correction, key="algorithm.is_correction")
    IS_CORRECTIONS.validate_params(a.is_correction, a.is_params, key="algorithm.is_params")


@rule
def verifier_and_engine(cfg: RunConfig) -> None:
    """``reward.verifier`` and ``rollout.engine`` are registered, with valid options."""
    from rlvr.engines.registry import ENGINES
    from rlvr.verifiers import VERIFIERS

    r = cfg.reward
    VERIFIERS.entry(r.verifier, key="reward.verifier")
    VERIFIERS.validate_params(r.verifier, r.verifier_params, key="reward.verifier_params")
    ENGINES.entry(cfg.rollout.engine, key="rollout.engine")
    ENGINES.validate_params(cfg.rollout.engine, cfg.rollout.engine_params, key="rollout.engine_params")


@rule
def sleep_while_learning_needs_the_hf_engine(cfg: RunConfig) -> None:
    if cfg.rollout.sleep_while_learning and (cfg.rollout.engine != "hf" or cfg.distributed.backend != "none"):
        raise ValueError("rollout.sleep_while_learning frees the in-process HF engine's copy of the weights: it "
                         "needs rollout.engine=hf and distributed.backend=none (vLLM: rollout.engine_params.sleep)")


@rule
def bf16_adamw_not_sharded(cfg: RunConfig) -> None:
    if cfg.train.optimizer == "adamw_bf16" and cfg.distributed.fsdp:
        raise ValueError("train.optimizer=adamw_bf16 is not supported with distributed.fsdp (its sharded "
                         "DTensor parameters are untested there): use train.optimizer=adamw")


@rule
def ray_workers_host_the_engine(cfg: RunConfig) -> None:
    from rlvr.distributed.engine_factory import RAY_ENGINES

    if cfg.distributed.backend == "ray" and cfg.rollout.engine not in RAY_ENGINES:
        raise ValueError(f"rollout.engine={cfg.rollout.engine} cannot run in Ray rollout workers "
                         f"(distributed.backend=ray hosts {', '.join(RAY_ENGINES)})")


@rule
def task_and_levels(cfg: RunConfig) -> None:
    """``task.name`` is registered, its file exists, its options (and each curriculum level's) are valid."""
    from rlvr.tasks.registry import TASKS, task_options
    from rlvr.tasks.settings import task_at_level

    task = cfg.task
    entry = TASKS.entry(task.name, key="task.name")
    path = task_options(task).get("path")
    if "needs_path" in entry.tags and not path:
        raise ValueError(f"task.path: task.name={task.name} reads its problems from task.path: set task.path=...")
    if task.name == "jsonl" and not Path(path).is_file():
        raise ValueError(f"task.path: {path}: " + ("not a file" if Path(path).exists() else "no such file"))
    levels = [("task.params", task)] + [(f"curriculum.levels[{i}]", task_at_level(task, lv, f"curriculum.levels[{i}]"))
                                         for i, lv in enumerate(cfg.curriculum.levels)]
    for key, t in levels:  # the held-out count is a task.* field unless the params set their own
        TASKS.check(t.name, t.params, key=key, num_heldout=t.params.get("num_heldout", t.num_heldout))


@rule
def environment(cfg: RunConfig) -> None:
    """``env.name`` is registered and its options are valid, checked against the task's options (all of them,
    defaults included: an environment that shows hidden tests reads the task's ``reveal_safe``)."""
    from rlvr.envs import ENVIRONMENTS

    from rlvr.tasks.registry import TASKS, task_options

    ENVIRONMENTS.entry(cfg.env.name, key="env.name")
    fields = TASKS.entry(cfg.task.name, key="task.name").params.model_fields
    options = {**{n: f.get_default(call_default_factory=True) for n, f in fields.items() if not f.is_required()},
               **task_options(cfg.task)}
    ENVIRONMENTS.check(cfg.env.name, cfg.env.params, key="env.params", task_options=options)


# --------------------------------------------------------------------------- rewards
@rule
def reward_source(cfg: RunConfig) -> None:
    """``reward.source`` fits the task and verifier, and the loop computes it (its tag says when)."""
    from rlvr.rewards.pipeline import source_stage
    from rlvr.rewards.sources import REWARD_SOURCES
    from rlvr.tasks.registry import TASKS

    r = cfg.reward
    # Every built-in task but a file or dataset of the user's carries reference answers; for those (tagged
    # user_answers) it is unknown before the file is read: None lets the source through, and a source that
    # reads the reference stops at the first problem without one when training.
    user = cfg.task.name in TASKS and "user_answers" in TASKS.entry(cfg.task.name).tags
    REWARD_SOURCES.check(r.source, r.source_params, key="reward.source", verifier=r.verifier,
                         has_reference=None if user else True)
    stage = source_stage(r.source)
    if r.source != "verifier" and (r.flip_false_positive or r.flip_false_negative):
        raise ValueError(f"reward.source={r.source}: reward.flip_false_positive / flip_false_negative shape the "
                         "verifier's verdict; use them with reward.source=verifier")
    a = cfg.algorithm
    if stage == "policy" and (a.dynamic_sampling or a.difficulty_filter or a.mopps):
        raise ValueError(f"reward.source={r.source} is computed from the policy after the rollouts are "
                         "collected: algorithm.dynamic_sampling / difficulty_filter / mopps cannot see it")


@rule
def reward_shaping(cfg: RunConfig) -> None:
    """Each ``reward.shaping`` term is registered, its options valid for the run; a term that reads the
    verdict needs the verifier's reward."""
    from rlvr.rewards.shaping import REWARD_SHAPING

    r = cfg.reward
    for name, opts in r.shaping.items():
        key = f"reward.shaping.{name}"
        REWARD_SHAPING.entry(name, key=key)
        if not isinstance(opts, dict):
            raise ValueError(f"{key}: expected a mapping of the term's options, got {opts!r}")
        _with_smallest_cap(cfg, lambda cap: REWARD_SHAPING.check(name, opts, key=key, max_new_tokens=cap))
        if "verdict" in REWARD_SHAPING.entry(name).tags and r.source != "verifier":
            raise ValueError(f"reward.source={r.source}: {key} shapes the verifier's verdict; use it with "
                             "reward.source=verifier")


def _with_smallest_cap(cfg: RunConfig, check) -> None:
    """``check(max_new_tokens)`` at ``rollout.max_new_tokens``, then at the smallest cap of
    ``rollout.length_schedule`` (a length window must fit every step's cap), naming the schedule if that fails."""
    r = cfg.rollout
    check(r.max_new_tokens)
    smallest = min((c for _, c in r.length_schedule), default=r.max_new_tokens)
    if smallest < r.max_new_tokens:
        try:
            check(smallest)
        except ValueError as e:
            raise ValueError(f"{e} (here the smallest cap of rollout.length_schedule, {smallest})") from None


def check_rubric(specs, key: str, cfg: RunConfig) -> None:
    """A list of reward-function entries (``reward.functions``, a mixture task's ``functions``): each a registered
    kind with valid options and a usable name, the names unique, one weight positive; each factory is built (it
    checks its options; nothing heavy loads before a first call)."""
    from rlvr.rewards.rubric import NAME_PATTERN, REWARD_FUNCTIONS, Rubric

    seen: dict[str, int] = {}
    for i, f in enumerate(specs):
        at = f"{key}[{i}]"
        REWARD_FUNCTIONS.entry(f.kind, key=f"{at}.kind")
        _with_smallest_cap(cfg, lambda cap: REWARD_FUNCTIONS.check(f.kind, f.params, key=f"{at}.params",
                                                                   max_new_tokens=cap))
        name = f.name or f.kind
        if not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"{at}.name: {name!r} is not a metric name (a letter, then letters, digits, _ . -; "
                             "at most 64)")
        if name in seen:
            raise ValueError(f"{at}.name: {name!r} is already the name of {key}[{seen[name]}]; "
                             "give one of them another name")
        seen[name] = i
    if not any(f.weight > 0 for f in specs):
        raise ValueError(f"{key}: every weight is 0, so nothing would be trained on; give one a weight > 0")
    Rubric.from_specs(specs, key=key)


@rule
def reward_functions(cfg: RunConfig) -> None:
    """``reward.functions`` is a valid rubric (:func:`check_rubric`); it replaces the verifier's scaled reward, so
    the options of that reward and other reward sources are refused beside it."""
    r = cfg.reward
    if not r.functions:
        return
    check_rubric(r.functions, "reward.functions", cfg)
    if r.source != "verifier":
        raise ValueError(f"reward.functions replaces the verifier's reward; reward.source={r.source} replaces it "
                         "too: use one of them")
    if (r.correct_reward, r.wrong_reward) != (1.0, 0.0):
        raise ValueError("reward.correct_reward / wrong_reward scale the reward of a run without reward.functions; "
                         "with functions, set the verifier function's params {correct: ..., wrong: ...}")


@rule
def task_mixture(cfg: RunConfig) -> None:
    """Each ``mixture.tasks`` entry is a registered task with valid options, a unique label and a verifier that exists
    (its own or ``reward.verifier``), with a valid rubric; the weights add up to a positive number; a mixture
    trains in the in-process recipe, without a curriculum or a reward source that replaces the verifier."""
    tasks = cfg.mixture.tasks
    if not tasks:
        return
    from rlvr.rewards.rubric import NAME_PATTERN
    from rlvr.tasks.registry import TASKS
    from rlvr.verifiers import VERIFIERS

    seen: dict[str, int] = {}
    for i, e in enumerate(tasks):
        key = f"mixture.tasks[{i}]"
        TASKS.entry(e.task, key=f"{key}.task")
        TASKS.validate_params(e.task, dict(e.params), key=f"{key}.params")
        if not NAME_PATTERN.fullmatch(e.name):
            raise ValueError(f"{key}.label: {e.name!r} is not a metric name (a letter, then letters, digits, _ . -)")
        if e.name in seen:
            raise ValueError(f"{key}.label: {e.name!r} is already the label of mixture.tasks[{seen[e.name]}]; set label:")
        seen[e.name] = i
        verifier = e.verifier or cfg.reward.verifier
        VERIFIERS.entry(verifier, key=f"{key}.verifier")
        VERIFIERS.check(verifier, e.verifier_params if e.verifier else cfg.reward.verifier_params,
                        key=f"{key}.verifier_params")
        if e.functions:
            check_rubric(e.functions, f"{key}.functions", cfg)
    if not sum(e.weight for e in tasks) > 0:
        raise ValueError("mixture.tasks: the weights add up to 0; give a task a weight > 0")
    if cfg.curriculum.levels:
        raise ValueError("mixture and curriculum.levels both choose the training problems: use one of them")
    if cfg.reward.source != "verifier":
        raise ValueError(f"mixture scores each problem by its task's verifier and rubric; reward.source="
                         f"{cfg.reward.source} replaces them: use reward.source=verifier")
    if bad := in_process_only(cfg, ray=True):
        raise ValueError(f"mixture runs in the in-process recipe only: not with {', '.join(bad)}")


@rule
def turn_credit(cfg: RunConfig) -> None:
    """``algorithm.turn_credit`` is registered with valid options, names the estimator it extends, and has turns to
    act on: a multi-turn environment, no PRM step credit and no critic beside it."""
    a = cfg.algorithm
    if a.turn_credit == "none":
        if a.turn_credit_params:
            raise ValueError("algorithm.turn_credit_params is set but algorithm.turn_credit=none: name a turn credit")
        return
    from rlvr.credit.turns import TURN_CREDIT, turn_credit_estimator

    TURN_CREDIT.check(a.turn_credit, a.turn_credit_params, key="algorithm.turn_credit_params")
    want = turn_credit_estimator(a.turn_credit)
    if want is not None and a.advantage != want:
        raise ValueError(f"algorithm.turn_credit={a.turn_credit} extends the {want} estimator to turns: set "
                         f"algorithm.advantage={want} (it is {a.advantage})")
    if cfg.reward.process_prm is not None:
        raise ValueError(f"algorithm.turn_credit={a.turn_credit} and reward.process_prm both assign credit inside an "
                         "episode: use one of them")
    traits = _traits(cfg)
    if not traits.multi_turn:
        raise ValueError(f"algorithm.turn_credit={a.turn_credit} credits the turns of multi-turn episodes, but "
                         f"env.name={cfg.env.name} has one turn per episode ({traits.why()}): use a multi-turn "
                         "environment or algorithm.turn_credit=none")


@rule
def process_rewards(cfg: RunConfig) -> None:
    """``reward.process_prm`` is a PRM directory; its transforms, credit, filter and input format are valid."""
    r = cfg.reward
    if r.process_prm is None:
        return
    from rlvr.algorithms.process import PROCESS_CREDIT, PROCESS_FILTERS, STEP_TRANSFORMS
    from rlvr.rewards.models import check_reward_model_dir

    try:
        check_reward_model_dir(r.process_prm, "prm")
    except ValueError as e:
        raise ValueError(f"reward.process_prm: {e}") from None
    for name, opts in r.process_transform_list():
        STEP_TRANSFORMS.check(name, opts, key="reward.process_transforms")
    PROCESS_CREDIT.check(r.process_credit, r.process_credit_params, key="reward.process_credit")
    PROCESS_FILTERS.check(r.process_filter, r.process_filter_params, key="reward.process_filter")
    unknown = set(r.process_prm_params) - {"step_tag", "good", "bad", "delimiter"}
    if unknown:
        raise ValueError(f"reward.process_prm_params: unknown option(s) {', '.join(sorted(unknown))} "
                         "(step_tag, good, bad, delimiter)")


@rule
def sources_and_process_rewards_run_in_process(cfg: RunConfig) -> None:
    """A reward source other than the verifier, and process rewards, run in the in-process recipe on single
    completions."""
    r = cfg.reward
    if r.source == "verifier" and r.process_prm is None:
        return
    from rlvr.rewards.pipeline import source_stage

    what = f"reward.source={r.source}" if r.source != "verifier" else "reward.process_prm"
    if bad := in_process_only(cfg):
        raise ValueError(f"{what} runs in the in-process recipe only: not with {', '.join(bad)}")
    traits = _traits(cfg)
    if (source_stage(r.source) == "policy" or r.process_prm is not None) and traits.multi_turn:
        raise ValueError(f"{what} scores single completions: use env.name=single_turn ({traits.why()})")


# --------------------------------------------------------------------------- the loop and its backends
@rule
def backends_sample_single_turns(cfg: RunConfig) -> None:
    """Environments the FSDP recipe cannot run: it samples single completions scored by reward.verifier.  The
    generator process (``train.async_steps``, ``train.rollout_worker``) builds the environment from ``env.name``
    and ``env.params`` and runs its episodes; Ray rollout workers sample the turns of episodes run by the learner."""
    traits = _traits(cfg)
    if cfg.distributed.fsdp and not traits.single_turn:
        raise ValueError(f"{traits.why()}, which distributed.fsdp cannot run yet (it samples single completions "
                         "scored by reward.verifier): use the in-process learner, train.async_steps or "
                         "distributed.backend=ray")


@rule
def report_to(cfg: RunConfig) -> None:
    from rlvr.trackers import validate_report_to

    validate_report_to(cfg.train.report_to)


@rule
def group_size_fits_the_estimator(cfg: RunConfig) -> None:
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS

    adv = cfg.algorithm.advantage
    if cfg.rollout.group_size < 2 and "single_sample" not in ADVANTAGE_ESTIMATORS.entry(adv).tags:
        raise ValueError(f"the {adv} advantage compares samples within a group: rollout.group_size >= 2")


@rule
def mini_batches_fit_the_batch(cfg: RunConfig) -> None:
    n = cfg.train.prompts_per_step * cfg.rollout.group_size
    if cfg.algorithm.mini_batches > n:
        raise ValueError(f"algorithm.mini_batches={cfg.algorithm.mini_batches} splits a batch of "
                         f"train.prompts_per_step x rollout.group_size = {n} sequences: at most {n}")


@rule
def kl_options_need_a_reference(cfg: RunConfig) -> None:
    a = cfg.algorithm
    if (a.kl_in_reward or a.ref_reset_every or a.ref_reset_kl) and a.kl_coef == 0:
        raise ValueError("algorithm.kl_in_reward / ref_reset_* need a reference: set algorithm.kl_coef > 0")


def set_apart_from_default(section, names) -> list[str]:
    """The fields of ``names`` that the config sets (``model_fields_set``) to a value other than their default: a
    field left at its default, or set to it (a saved config.yaml sets every field), never counts."""
    fields = type(section).model_fields
    return [n for n in names if n in section.model_fields_set
            and getattr(section, n) != fields[n].get_default(call_default_factory=True)]


@rule
def options_act(cfg: RunConfig) -> None:
    """An option set to a value other than its default that has no effect in this config is refused, with the
    reason: the setting it depends on is off, or another setting replaces what it would choose."""
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS

    a, g = cfg.algorithm, cfg.guidance
    inert: list[tuple[list[str], str]] = []  # (dotted keys, why they cannot act)

    def keys(section, prefix: str, names) -> list[str]:
        return [f"{prefix}.{n}={getattr(section, n)}" for n in set_apart_from_default(section, names)]

    if a.kl_in_reward and a.kl_estimator != "k1":  # left unset it is k1 (AlgorithmConfig records it)
        inert.append(([f"algorithm.kl_estimator={a.kl_estimator}"],
                      "the KL penalty folded into the reward (algorithm.kl_in_reward=true) is always k1 = log pi_old "
                      "- log pi_ref per token (its sum estimates the sequence KL without bias); leave "
                      "algorithm.kl_estimator unset or set it to k1"))
    elif a.kl_coef == 0:
        inert.append((keys(a, "algorithm", ["kl_estimator"]),
                      "algorithm.kl_coef=0: there is no KL term (set algorithm.kl_coef > 0)"))
    critic = a.advantage in ADVANTAGE_ESTIMATORS and "critic" in ADVANTAGE_ESTIMATORS.entry(a.advantage).tags
    if not critic:
        inert.append((keys(a.value, "algorithm.value", type(a.value).model_fields),
                      f"algorithm.advantage={a.advantage} learns without a critic (algorithm.value configures "
                      "PPO's critic: algorithm.advantage=gae)"))
    if not a.dynamic_sampling:
        inert.append((keys(a, "algorithm", ["max_sampling_rounds"]),
                      "it bounds the generation rounds of dynamic sampling, which is off (algorithm.dynamic_sampling"
                      "=false)"))
    if not a.difficulty_filter:
        inert.append((keys(a, "algorithm", ["difficulty_low", "difficulty_high", "difficulty_alpha"]),
                      "the online difficulty filter is off (algorithm.difficulty_filter=false)"))
    if not a.mopps:
        inert.append((keys(a, "algorithm", ["mopps_candidates", "mopps_target", "mopps_decay"]),
                      "MoPPS prompt selection is off (algorithm.mopps=false)"))
    if a.entropy_floor == 0 and a.entropy_coef == 0:
        inert.append((keys(a, "algorithm", ["entropy_bonus_fraction"]),
                      "there is no entropy bonus to restrict (algorithm.entropy_coef=0, algorithm.entropy_floor=0)"))
    if a.entropy_floor == 0:
        inert.append((keys(a, "algorithm", ["entropy_floor_delta", "entropy_floor_max_coef"]),
                      "the adaptive entropy bonus is off (algorithm.entropy_floor=0)"))
    if not (a.ref_reset_every or a.ref_reset_kl):
        inert.append((keys(a, "algorithm", ["ref_reset_optimizer"]),
                      "the reference is never reset (algorithm.ref_reset_every=0, algorithm.ref_reset_kl=null)"))
    if not g.hints:
        inert.append((keys(g, "guidance", ["hint_fractions"]), "hints are off (guidance.hints=false)"))
    if not (g.demonstrations or g.replay or g.regenerate != "none"):
        inert.append((keys(g, "guidance", ["shaping_gamma"]),
                      "no off-policy rows are added (guidance.demonstrations=false, guidance.replay=false, "
                      "guidance.regenerate=none)"))
    if g.regenerate == "none":
        inert.append((keys(g, "guidance", ["regenerate_samples"]), "regeneration is off (guidance.regenerate=none)"))
    if not g.replay:
        inert.append((keys(g, "guidance", ["replay_capacity"]), "replay is off (guidance.replay=false)"))
    if not g.synthesize:
        inert.append((keys(g, "guidance", ["synthesize_share", "synthesize_capacity"]),
                      "problem synthesis is off (guidance.synthesize=0)"))
    if cfg.distill.teacher is None:
        inert.append((keys(cfg.distill, "distill", ["coef", "reward_coef", "chunk_size", "dtype",
                                                    "sleep_while_learning"]),
                      "on-policy distillation is off (distill.teacher=null): set distill.teacher to a model"))
    for names, why in inert:
        if names:
            first = names[0].split("=")[0]
            raise ValueError(f"{first}: {' / '.join(names)} cannot act: {why}")


@rule
def difficulty_band(cfg: RunConfig) -> None:
    a = cfg.algorithm
    if a.difficulty_filter and not a.difficulty_low <= a.difficulty_high:
        raise ValueError("need algorithm.difficulty_low <= algorithm.difficulty_high")
    if a.difficulty_filter and a.mopps:
        raise ValueError("algorithm.mopps: MoPPS and algorithm.difficulty_filter both choose the step's prompts; "
                         "turn one off")


@rule
def generator_process_is_hf(cfg: RunConfig) -> None:
    t, d = cfg.train, cfg.distributed
    if (d.backend != "none" or cfg.rollout.engine != "hf") and (t.async_steps or t.rollout_worker):
        raise ValueError("train.async_steps / train.rollout_worker use their own HF generator process: "
                         "combine them with rollout.engine=hf and distributed.backend=none")


@rule
def async_needs_importance_correction(cfg: RunConfig) -> None:
    k = cfg.train.async_steps
    if k > 0 and cfg.algorithm.is_correction == "none":
        raise ValueError(f"train.async_steps={k} samples from a policy up to {k} updates old: set "
                         "algorithm.is_correction=tis (or mis) to correct for it")


@rule
def curriculum_in_process(cfg: RunConfig) -> None:
    if cfg.curriculum.levels and (in_process_only(cfg) or cfg.distributed.learner == "actor"):
        raise ValueError("curriculum.levels runs in the in-process recipe only: not with train.async_steps, "
                         "train.rollout_worker, distributed.fsdp or distributed.learner=actor")


@rule
def guidance_in_process_on_verdicts(cfg: RunConfig) -> None:
    """Hints and demonstrations guide single completions in this process, by the verifier's verdict."""
    g, r = cfg.guidance, cfg.reward
    if not g.active:
        return
    what = " / ".join(k for k, on in (("guidance.hints", g.hints), ("guidance.demonstrations", g.demonstrations),
                                      ("guidance.replay", g.replay),
                                      (f"guidance.regenerate={g.regenerate}", g.regenerate != "none"),
                                      ("guidance.synthesize", g.synthesize > 0)) if on)
    if g.synthesize and (cfg.task.name != "arithmetic" or cfg.mixture.tasks or cfg.curriculum.levels):
        raise ValueError("guidance.synthesize re-draws generated arithmetic problems with fresh operands: it needs "
                         f"task.name=arithmetic without a mixture or curriculum (task.name={cfg.task.name})")
    if cfg.env.name != "single_turn":
        raise ValueError(f"{what} guides single completions: use env.name=single_turn, not {cfg.env.name}")
    if bad := in_process_only(cfg, ray=True):
        raise ValueError(f"{what} runs in the in-process recipe only: not with {', '.join(bad)}")
    if r.source != "verifier" or r.process_prm is not None:
        fix = f"use reward.source=verifier, not {r.source}" if r.source != "verifier" else "not with reward.process_prm"
        raise ValueError(f"{what} decides failure and success by the verifier's verdict and trains on "
                         f"reference solutions: {fix}")


def unsupported_with_fsdp(cfg: RunConfig) -> list[str]:
    """Config settings the FSDP recipe cannot honour (empty when the config is fine)."""
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS

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
        "algorithm.mopps": alg.mopps,
        "algorithm.entropy_floor": alg.entropy_floor > 0,
        "algorithm.entropy_bonus_fraction": alg.entropy_bonus_fraction < 1,
        "train.update_fraction": tcfg.update_fraction < 1,
        "eval.every": bool(cfg.eval.every),
        "distill.teacher (on-policy distillation)": cfg.distill.teacher is not None,
        # the chunked path reads lm_head.weight outside the head's forward (no all-gather of the shard);
        # packing changes the micro-batch count per rank
        "train.logprob_chunk_size": tcfg.logprob_chunk_size > 0,
        "train.micro_batch_tokens": tcfg.micro_batch_tokens > 0,
        "train.activation_checkpointing (use distributed.activation_checkpointing)": tcfg.activation_checkpointing,
    }
    needs = ADVANTAGE_ESTIMATORS.entry(alg.advantage).needs if alg.advantage in ADVANTAGE_ESTIMATORS else set()
    if needs:  # the FSDP learner calls the estimator on rewards alone
        bad[f"algorithm.advantage={alg.advantage} (needs {', '.join(sorted(needs))}, which the FSDP learner "
            "does not compute)"] = True
    elif alg.advantage in ADVANTAGE_ESTIMATORS and "mask" in ADVANTAGE_ESTIMATORS.entry(alg.advantage).inputs:
        bad[f"algorithm.advantage={alg.advantage} (whitens over every completion token of the step's batch; "
            "the FSDP recipe computes advantages per rank)"] = True
    return [k for k, on in bad.items() if on]


@rule
def online_dpo_is_exact(cfg: RunConfig) -> None:
    """Online DPO's weights are its loss's gradient at the current policy: one optimizer step per batch, with the
    policy gradient summed over each sequence's tokens."""
    a = cfg.algorithm
    if a.advantage != "online_dpo":
        return
    if a.loss_agg != "seq_mean_token_sum" or a.policy_loss != "ppo_clip" or a.optimizer_steps() > 1:
        raise ValueError("algorithm.advantage=online_dpo gives DPO's gradient as per-sequence weights: it needs "
                         "algorithm.loss_agg=seq_mean_token_sum, algorithm.policy_loss=ppo_clip and one optimizer "
                         f"step per batch (got loss_agg={a.loss_agg}, policy_loss={a.policy_loss}, "
                         f"{a.optimizer_steps()} optimizer steps)")
    if a.kl_coef > 0:
        raise ValueError("algorithm.advantage=online_dpo: DPO's beta (advantage_params.beta) is its KL constraint; "
                         "set algorithm.kl_coef=0")


@rule
def tree_credit_needs_branches(cfg: RunConfig) -> None:
    if cfg.algorithm.advantage == "tree" and not cfg.rollout.branches:
        raise ValueError("algorithm.advantage=tree credits the forks of branched groups: set rollout.branches > 0 "
                         "(without branches it is Dr. GRPO's mean baseline: use algorithm.advantage=drgrpo)")


@rule
def branches_need_single_turn(cfg: RunConfig) -> None:
    """Branches re-sample a single completion from a prefix of another and score it with the environment once."""
    if cfg.rollout.branches and not _traits(cfg).single_turn:
        raise ValueError(f"rollout.branches={cfg.rollout.branches} re-samples single completions from a fork: use a "
                         f"single-turn environment (env.name={cfg.env.name} is multi-turn)")


@rule
def sparse_updates_freeze_exactly(cfg: RunConfig) -> None:
    """``train.update_fraction`` freezes entries by zeroing their gradients: AdamW's decoupled weight decay would
    still move them."""
    t = cfg.train
    if t.update_fraction < 1 and t.weight_decay > 0:
        raise ValueError(f"train.update_fraction={t.update_fraction} trains a random subset of the weights by masking "
                         f"gradients, but train.weight_decay={t.weight_decay} decays the frozen ones too: set "
                         "train.weight_decay=0")


@rule
def fsdp_supports_the_run(cfg: RunConfig) -> None:
    if cfg.distributed.fsdp and (bad := unsupported_with_fsdp(cfg)):
        raise ValueError(f"distributed.fsdp=true does not support: {', '.join(bad)}")
