"""The ``reward`` section of a run: the verifier, how its verdicts become rewards, reward sources and process
rewards (:mod:`rlvr.rewards.pipeline` reads it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from rlvr.config import ConfigModel, option

__all__ = ["RewardConfig", "RewardFunctionSpec"]


class RewardFunctionSpec(ConfigModel):
    """One entry of ``reward.functions``: a registered reward-function kind, its name, weight and options."""

    kind: str = option("verifier", "registered reward-function kind (rlvr.rewards.rubric.REWARD_FUNCTIONS): "
                                   "verifier, format, overlong, laser, length, calibration, outcome_rm, prm, "
                                   "judge_rubric, or a plugin's")
    name: str | None = option(None, "the name it is logged under (reward/<name>); default: the kind")
    weight: float = option(1.0, "its weight in the reward; 0: computed and logged, never trained on", ge=0)
    params: dict[str, Any] = option(None, "the kind's options", default_factory=dict)
    timeout_s: float | None = option(None, "seconds its work on one group may take; past it the group scores 0 on "
                                            "it (counted in reward/<name>/errors) and training goes on; 0: no "
                                            "limit; None: 600 for kinds that call a model or other code, no limit "
                                            "for the built-in arithmetic ones (tagged bounded)", ge=0)

    @model_validator(mode="before")
    @classmethod
    def _a_bare_kind(cls, data: Any) -> Any:
        """``format`` is short for ``{kind: format}``."""
        return {"kind": data} if isinstance(data, str) else data


class RewardConfig(ConfigModel):
    verifier: str = option("numeric", "registered verifier name scoring each completion")
    verifier_params: dict[str, Any] = option(None, "options of the verifier, e.g. {tolerance: 0.01} for numeric",
                                             default_factory=dict)
    warn_verifier_errors: float = option(0.2, "warn on the console, with the first error, when more than this "
                                              "share of a step's verdicts are verifier errors (exceptions, scored "
                                              "0); 1: never", ge=0, le=1)
    max_verifier_failed_steps: int = option(3, "stop the run with an error (exit status 1) after this many steps in "
                                               "a row in which every verifier call failed (an exception or a "
                                               "timeout), or at the last step of a shorter run in which every step "
                                               "did; 0: never", ge=0)
    functions: list[RewardFunctionSpec] = option(
        None, "the reward as a weighted rubric: each entry {kind, name, weight, params}, the reward the sum of "
              "weight * value over the entries of weight > 0, every entry logged as reward/<name>; empty: the "
              "verifier's reward scaled by correct_reward / wrong_reward (rlvr.rewards.rubric)",
        default_factory=list)
    correct_reward: float = option(1.0, "reward when the verifier accepts")
    wrong_reward: float = option(0.0, "reward when the verifier rejects")
    shaping: dict[str, dict[str, Any]] = option(
        None, "reward shaping terms applied in the order listed, names in rlvr.rewards.shaping.REWARD_SHAPING with "
              "their options, e.g. {overlong: {cache_len: 16}} (DAPO's soft overlong punishment over the last 16 "
              "tokens before rollout.max_new_tokens) or {laser: {target_length: 64, alpha: 0.5}} (LASER's bonus "
              "for correct answers of at most 64 tokens)", default_factory=dict)
    flip_false_positive: float = option(0.0, "experiments: probability a wrong answer is rewarded as correct (rho0)",
                                        ge=0, lt=1)
    flip_false_negative: float = option(0.0, "experiments: probability a correct answer is rewarded as wrong (rho1)",
                                        ge=0, lt=1)
    source: str = option("verifier", "where a group's rewards come from, a name in rlvr.rewards.REWARD_SOURCES: "
                                     "verifier (the verdict, scaled by correct_reward/wrong_reward), majority_vote "
                                     "(TTRL: agreement with the group's majority answer, no labels), self_certainty "
                                     "(INTUITOR), reference_likelihood (VeriFree/RLPR: the policy's probability of "
                                     "the reference after its reasoning), random and format_only (controls)")
    source_params: dict[str, Any] = option(None, "options of the reward source, e.g. {min_share: 0.5} for "
                                                 "majority_vote, {p: 0.5, seed: 1} for random, {debias: false} for "
                                                 "reference_likelihood", default_factory=dict)
    process_prm: str | None = option(None, "process rewards in the loop: a PRM directory written by `rlvr rm train "
                                           "kind=prm`; its step scores shape the advantages (None: off)")
    process_prm_params: dict[str, Any] = option(None, "PRM input format overrides {step_tag, good, bad, delimiter} "
                                                      "(default: the PRM's rlvr_reward_model.json)",
                                                default_factory=dict)
    process_transforms: list[Any] = option(None, "step-score transforms applied in order, names in "
                                                 "rlvr.algorithms.process.STEP_TRANSFORMS (center, normalize, clip, "
                                                 "clip_range, delta), each a name or {name: {options}}",
                                           default_factory=list)
    process_credit: str = option("sum", "process credit assignment, a name in PROCESS_CREDIT: sum or min (PURE "
                                        "min-form: a trajectory is worth its worst step)")
    process_credit_params: dict[str, Any] = option(None, "credit options, e.g. {temperature: 0.1} for min",
                                                   default_factory=dict)
    process_filter: str = option("none", "process/outcome filter, a name in PROCESS_FILTERS: none or disagreement "
                                         "(samples whose PRM and outcome rewards disagree get advantage 0)")
    process_filter_params: dict[str, Any] = option(None, "filter options, e.g. {low: 0.3, high: 0.7}",
                                                   default_factory=dict)
    process_baseline: Literal["steps", "returns", "none"] = option(
        "steps", "GRPO family: baseline of the process returns (steps: DeepSeekMath step normalisation; returns: "
                 "group baseline on the trajectory's process return; none: raw)")
    process_coef: float = option(1.0, "weight of the process term in the advantage (or PPO token reward)")
    outcome_coef: float = option(1.0, "weight of the outcome term (the estimator's advantage, or PPO's final "
                                      "token reward) when process rewards are on")

    moved = {"overlong_cache_len": "reward.shaping.overlong.cache_len (reward.shaping={overlong: {cache_len: N}})",
             "laser_target_length": "reward.shaping.laser.target_length (reward.shaping={laser: {target_length: N}})",
             "laser_alpha": "reward.shaping.laser.alpha (reward.shaping={laser: {target_length: N, alpha: A}})"}

    def process_transform_list(self) -> list[tuple[str, dict]]:
        """``process_transforms`` as ``(name, options)`` pairs (a name, or a one-key mapping name -> options)."""
        out = []
        for t in self.process_transforms:
            if isinstance(t, str):
                out.append((t, {}))
            elif isinstance(t, dict) and len(t) == 1:
                (name, opts), = t.items()
                out.append((str(name), dict(opts or {})))
            else:
                raise ValueError(f"reward.process_transforms: each item is a name or {{name: {{options}}}}, got {t!r}")
        return out

