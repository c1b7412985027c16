"""Rejection-sampling fine-tuning (RFT; STaR, Zelikman et al. 2022; RAFT, Dong et al. 2023): sample, keep what
the reward accepts, fine-tune on it, repeat.

:func:`run_rft` runs an :class:`~rlvr.recipes.rft_config.RFTConfig`; round ``i`` (1-based) in
``<output_dir>/round-<i>/``::

    samples  = k completions of rft.problems_per_round training problems       # the current model, or rft.sampler
    scored   = the reward section's pipeline (rlvr.rollout.collect: verifier, rubric, shaping)
    kept     = accepted (verdict correct, or reward >= rft.min_reward) | all; deduped; <= max_per_problem each
    round-<i>/samples.jsonl                                                    # an SFT file (prompt, completion)
    round-<i>/sft/  = the SFT recipe on it, from the current model             # its final/ is the next model
    round-<i>/done.json

Held-out accuracy (rlvr train's evaluation) is taken before the first round and after the last
(``eval_before.json`` / ``eval_after.json``; ``rft.eval_every_round``: after every round too, by its SFT run).

Resume (``train.resume``): a round with ``done.json`` is skipped; an interrupted round reuses its
``samples.jsonl`` (sampling is seeded by round, so a round interrupted while sampling samples the same again) and
resumes its SFT run from its last checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from rlvr.config import config_to_dict, load_config, save_config
from rlvr.engines import SamplingParams
from rlvr.plugins import load_plugins
from rlvr.recipes.rft_config import RFTConfig, load_rft_config
from rlvr.recipes.rundir import claim
from rlvr.recipes.sft import FINAL_MODEL, run_sft
from rlvr.recipes.sft_config import SFTConfig
from rlvr.recipes.stage_kinds import StageKind, register_stage_kind
from rlvr.rollout.collect import CollectSettings, collect_rollouts
from rlvr.tasks.jsonl import write_jsonl
from rlvr.tasks.registry import build_task
from rlvr.tasks.sampler import PromptSampler
from rlvr.trackers import open_trackers
from rlvr.types import Problem
from rlvr.utils.files import atomic_write_json, read_json_or_none
from rlvr.version import code_version

__all__ = ["run_rft", "load_rft_config", "select_samples", "sample_round", "evaluate_model"]

log = logging.getLogger(__name__)


def select_samples(problems: dict[str, Problem], samples, verdicts, rewards: torch.Tensor,
                   cfg: RFTConfig) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The SFT rows of the samples a round keeps, and the round's counts.

    A sample is *accepted* when its verdict is correct (``rft.min_reward`` null) or its reward is at least
    ``rft.min_reward``; ``rft.keep=accepted`` keeps only those, ``all`` every sample.  Truncated completions are
    dropped (``rft.drop_truncated``), and so are empty ones, identical completions of one problem kept once (``rft.dedupe``), at most
    ``rft.max_per_problem`` per problem, in sampling order.
    """
    r = cfg.rft
    rows: list[dict[str, Any]] = []
    per_problem: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    accepted_n = duplicates = truncated = 0
    for s, v, rew in zip(samples, verdicts, rewards.tolist()):
        accepted = bool(v.correct) if r.min_reward is None else rew >= r.min_reward
        accepted_n += accepted
        if r.keep == "accepted" and not accepted:
            continue
        if (r.drop_truncated and s.finish_reason == "length") or not s.text.strip():
            truncated += 1  # nothing to learn: no end of sequence, or no text before it
            continue
        key = (s.problem_id, s.text)
        if r.dedupe and key in seen:
            duplicates += 1
            continue
        if r.max_per_problem and per_problem.get(s.problem_id, 0) >= r.max_per_problem:
            continue
        seen.add(key)
        per_problem[s.problem_id] = per_problem.get(s.problem_id, 0) + 1
        p = problems[s.problem_id]
        row: dict[str, Any] = {"id": f"{s.problem_id}-{s.group_index}", "problem_id": s.problem_id,
                               "reward": rew, "correct": bool(v.correct), "answer": p.answer}
        if p.messages:
            row["messages"] = [dict(m) for m in p.messages] + [{"role": "assistant", "content": s.text}]
        else:
            row.update(prompt=p.prompt, completion=s.text)
        rows.append(row)
    n = max(len(samples), 1)
    stats = {"sampled": len(samples), "sampled_tokens": sum(len(s.completion_ids) for s in samples),
             "accepted": accepted_n, "kept": len(rows),
             "accepted_fraction": accepted_n / n, "kept_fraction": len(rows) / n,
             "problems": len({s.problem_id for s in samples}), "problems_kept": len(per_problem),
             "duplicates": duplicates, "dropped_truncated_or_empty": truncated}
    return rows, stats


def sample_round(cfg: RFTConfig, model_name: str, problems: list[Problem], round_index: int, *, model=None,
                 tokenizer=None, verifier=None):
    """``rft.k`` completions of each of ``problems`` from ``model_name`` (or the injected model), scored by the
    reward section's pipeline; returns the :class:`~rlvr.rollout.collect.Collected`.  Seeded by ``train.seed``
    and the round, so an interrupted round samples the same again."""
    from rlvr.engines.registry import EngineContext, build_engine
    from rlvr.envs import build_environment
    from rlvr.utils.device import resolve_device
    from rlvr.verifiers import get_verifier

    r, m = cfg.rft, cfg.model
    if model is None:
        from rlvr.models import load_policy

        model, tokenizer = load_policy(model_name, dtype=m.dtype, cache=m.cache_dir)
        model.to(resolve_device(m.device))
    model.eval()
    seed = cfg.train.seed * 1_000_003 + round_index
    ctx = EngineContext(batch_size=r.batch_size, system_prompt=cfg.task.system_prompt, policy_dtype=m.dtype,
                        model_name=model_name, cache_dir=m.cache_dir, seed=seed)
    engine = build_engine("hf", model, tokenizer, ctx)
    engine.generator.manual_seed(seed)
    verifier = verifier or get_verifier(cfg.reward.verifier, **cfg.reward.verifier_params)
    env = build_environment("single_turn", verifier, tokenizer)
    params = SamplingParams(n=r.k, max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p)
    settings = CollectSettings(prompts_per_step=len(problems), seed=cfg.train.seed, reward=cfg.reward)
    with torch.no_grad():
        return collect_rollouts(engine, PromptSampler(problems, seed=seed), env, params, settings, round_index)


def _round_problems(cfg: RFTConfig, train: list[Problem], round_index: int) -> list[Problem]:
    """The problems of round ``round_index`` (1-based): the next ``problems_per_round`` of a seeded order over the
    training problems (reshuffled every pass), or all of them."""
    n = cfg.rft.problems_per_round
    if not n or n >= len(train):
        return list(train)
    order = PromptSampler(train, seed=cfg.train.seed, position=(round_index - 1) * n)
    return order.next(n)


def _round_sft_config(cfg: RFTConfig, model_name: str, samples: Path, out: Path, round_index: int) -> SFTConfig:
    """The SFT run of a round: the run's model, task, reward and ``train`` sections, the round's samples, its own
    directory (resumed when it holds a checkpoint, started over when it holds an unfinished run without one)."""
    from rlvr.learner.checkpoint import latest_intact_checkpoint

    r = cfg.rft
    train = config_to_dict(cfg.train)
    has_ckpt = out.is_dir() and latest_intact_checkpoint(out) is not None
    train.update(output_dir=str(out), resume=has_ckpt, overwrite=out.is_dir() and not has_ckpt)
    ev = config_to_dict(cfg.eval)  # the run evaluates before the first and after the last round itself
    ev.update(before_training=False, after_training=cfg.eval.after_training and r.eval_every_round,
              accuracy=r.eval_every_round)
    data = {"plugins": list(cfg.plugins), "model": {**config_to_dict(cfg.model), "name": model_name},
            "task": config_to_dict(cfg.task), "reward": config_to_dict(cfg.reward),
            "data": {"source": "jsonl", "path": str(samples), "format": "auto", "num_heldout": 0,
                     "max_length": cfg.max_length},
            "train": train, "eval": ev}
    return load_config(SFTConfig, None, [], data=data)


def evaluate_model(cfg: RFTConfig, model_name: str, problems: list[Problem], tag: str, out: Path) -> dict:
    """Held-out accuracy of ``model_name`` as rlvr train evaluates it (``eval`` section; ``eval_<tag>.json``)."""
    from rlvr.engines.registry import EngineContext, build_engine
    from rlvr.models import load_policy
    from rlvr.recipes.rl import evaluate_heldout, format_eval
    from rlvr.utils.device import resolve_device
    from rlvr.verifiers import get_verifier

    m = cfg.model
    model, tokenizer = load_policy(model_name, dtype=m.dtype, cache=m.cache_dir)
    model.to(resolve_device(m.device)).eval()
    ctx = EngineContext(batch_size=cfg.eval.batch_size or cfg.rft.batch_size, system_prompt=cfg.task.system_prompt,
                        policy_dtype=m.dtype, model_name=model_name, cache_dir=m.cache_dir, seed=cfg.train.seed)
    engine = build_engine("hf", model, tokenizer, ctx)
    verifier = get_verifier(cfg.reward.verifier, **cfg.reward.verifier_params)
    result = evaluate_heldout(engine, problems, verifier, cfg, tag, out)
    print(f"held-out accuracy {tag} rejection-sampling fine-tuning: {format_eval(result)}")
    return result


def run_rft(cfg: RFTConfig, *, verifier=None) -> dict[str, Any]:
    """Run rejection-sampling fine-tuning (module docstring); returns the summary (``rounds``: each round's counts
    and SFT results; ``final_model``; ``accuracy_before`` / ``accuracy_after``).  ``verifier`` (a callable
    ``(text, answer) -> Verdict``) replaces ``reward.verifier`` when sampling (tests)."""
    load_plugins(cfg.plugins)
    held = claim(cfg, extra_files=("round-*",))
    try:
        return _run(cfg, verifier)
    finally:
        held.release()


def _run(cfg: RFTConfig, verifier) -> dict[str, Any]:
    out = Path(cfg.train.output_dir)
    r = cfg.rft
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    train_problems, heldout = build_task(cfg.task)
    if not train_problems:
        from rlvr.config import ConfigError

        raise ConfigError(f"task.name={cfg.task.name} gave no training problems")
    by_id = {p.id: p for p in train_problems}
    save_config(cfg, out / "config.yaml")
    finished = 0  # rounds done before this process (their metrics rows stay)
    while cfg.train.resume and (out / f"round-{finished + 1:03d}" / "done.json").is_file():
        finished += 1
    tracker = open_trackers(cfg.train.report_to, out, config_to_dict(cfg), run_name=out.name,
                            resume_from_step=finished if cfg.train.resume else None)
    model_name = cfg.model.name
    summary: dict[str, Any] = {"output_dir": str(out), "rounds": [], "sampler": r.sampler or "policy"}
    before = read_json_or_none(out / "eval_before.json")  # a resumed run's: not evaluated again
    if before is None and cfg.eval.before_training and heldout:
        before = evaluate_model(cfg, model_name, heldout, "before", out)
    if before is not None:
        summary["accuracy_before"] = next(iter(before.values()))["accuracy"]
    try:
        for i in range(1, r.rounds + 1):
            rdir = out / f"round-{i:03d}"
            done = read_json_or_none(rdir / "done.json")
            if done is not None and cfg.train.resume:
                print(f"round {i}: done ({done['stats']['kept']} samples kept); skipped")
                model_name = done["model"]
                summary["rounds"].append(done)
                continue
            samples_file = rdir / "samples.jsonl"
            stats = read_json_or_none(rdir / "stats.json") if samples_file.is_file() else None
            if stats is None:
                sampler = r.sampler or model_name
                print(f"round {i}: sampling {r.k} completions of "
                      f"{min(r.problems_per_round or len(train_problems), len(train_problems))} problems from "
                      f"{sampler}")
                got = sample_round(cfg, sampler, _round_problems(cfg, train_problems, i), i, verifier=verifier)
                rows, stats = select_samples(by_id, got.samples, got.verdicts, got.rewards, cfg)
                stats["sample_accuracy"] = sum(v.correct for v in got.verdicts) / max(len(got.verdicts), 1)
                stats["reward_mean"] = float(got.rewards.mean()) if len(got.rewards) else 0.0
                write_jsonl(samples_file, rows)
                atomic_write_json(rdir / "stats.json", stats, indent=2)  # after the samples: marks them complete
            print(f"round {i}: kept {stats['kept']} of {stats['sampled']} samples ({stats['kept_fraction']:.1%}; "
                  f"accepted {stats['accepted_fraction']:.1%}) from {stats['problems_kept']} problems")
            result: dict[str, Any] = {"round": i, "stats": stats, "model_in": model_name}
            if stats["kept"]:
                sft = run_sft(_round_sft_config(cfg, model_name, samples_file, rdir / "sft", i))
                model_name = sft["final_model"]
                result["sft"] = {k: v for k, v in sft.items() if k not in ("eval_before", "eval_after")}
                for tag in ("before", "after"):
                    if f"accuracy_{tag}" in sft:
                        result[f"accuracy_{tag}"] = sft[f"accuracy_{tag}"]
            else:
                print(f"round {i}: nothing kept; the model is unchanged")
            result["model"] = model_name
            tracker.log({"step": i, **{k: v for k, v in stats.items()},
                         **{k: result[k] for k in ("accuracy_before", "accuracy_after") if k in result},
                         **({"sft_loss": result["sft"]["last_metrics"].get("loss")} if "sft" in result else {})}, i)
            atomic_write_json(rdir / "done.json", result, indent=2, default=str)
            summary["rounds"].append(result)
    finally:
        tracker.close()
    summary["final_model"] = model_name
    summary["code"] = code_version()
    if cfg.eval.after_training and heldout:
        last = summary["rounds"][-1] if summary["rounds"] else {}
        after = read_json_or_none(Path(last["sft"]["output_dir"]) / "eval_after.json") \
            if "accuracy_after" in last else None  # evaluated by the last round's SFT already
        if after is None:
            after = evaluate_model(cfg, model_name, heldout, "after", out)
        elif not (out / "eval_after.json").is_file():  # the run's own result file, as rlvr train and rlvr sft write
            atomic_write_json(out / "eval_after.json", after, indent=2)
        summary["accuracy_after"] = next(iter(after.values()))["accuracy"]
    atomic_write_json(out / "summary.json", summary, indent=2, default=str)
    return summary


register_stage_kind("rft", StageKind(RFTConfig, run_rft),
                    doc="rlvr rft: rounds of sampling, keeping accepted samples and fine-tuning on them")
