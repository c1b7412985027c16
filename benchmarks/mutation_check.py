"""Does ``tests/algorithms/test_reference_equivalence.py`` catch a wrong formula?  Each mutation below changes one
formula of the learner's path (an advantage, the PPO ratio or clip, a loss aggregation, the KL term or penalty, the
entropy bonus, an importance weight, a normaliser) in a copy of ``src/rlvr``; the test file is run on that copy
(``PYTHONPATH``), and the mutation is *caught* when a test fails.  One table row per mutation:

    python benchmarks/mutation_check.py                      # all of them (about 10-20 s each on one thread)
    python benchmarks/mutation_check.py --only kl_sign,tis_cap_removed

The exit status is 1 when a mutation survives (or no longer applies: its text is not in the source exactly once),
so the script can gate CI; ``tests/benchmarks/test_mutation_check.py`` checks in the default suite that every
mutation still applies and that a few are caught, and runs them all under ``-m slow``.  Each mutation names the
tests that catch it (``catchers``, a ``-k`` expression); ``--fast`` runs only those, which is what the default
suite's check does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TEST_FILE = "tests/algorithms/test_reference_equivalence.py"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # under src/rlvr
    old: str  # text that must occur exactly once in the file
    new: str
    what: str
    catchers: str  # a pytest -k expression selecting the tests that catch it


MUTATIONS = [
    Mutation("grpo_no_std", "algorithms/advantages.py",
             "adv = r - r.mean(dim=1, keepdim=True)\n    if scale_by_std:\n"
             "        adv = adv / (_group_std(r).unsqueeze(1) + eps)",
             "adv = r - r.mean(dim=1, keepdim=True)\n    if scale_by_std:\n        adv = adv",
             "GRPO does not divide by the group std (it becomes Dr. GRPO)", "estimator and grpo"),
    Mutation("rloo_baseline_with_self", "algorithms/advantages.py",
             "* (group_size / (group_size - 1))", "* 1.0",
             "RLOO's leave-one-out baseline becomes the group mean", "estimator and rloo"),
    Mutation("reinforce_pp_not_whitened", "algorithms/advantages.py",
             "return masked_whiten(returns, mask, eps)", "return returns",
             "REINFORCE++ returns are not whitened over the batch", "estimator and reinforce_pp"),
    Mutation("gae_lambda_ignored", "algorithms/gae.py",
             "delta + gamma * lam * last", "delta + gamma * last",
             "GAE ignores lambda (Monte-Carlo returns)", "estimator and gae"),
    Mutation("ratio_inverted", "algorithms/losses.py",
             "    ratio = torch.exp(log_ratio)\n    unclipped = ratio * adv",
             "    ratio = torch.exp(-log_ratio)\n    unclipped = ratio * adv",
             "the PPO ratio is pi_old / pi", "estimator and grpo"),
    Mutation("clip_low_ignored", "algorithms/losses.py",
             "clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv",
             "clipped = torch.clamp(ratio, max=1.0 + clip_high) * adv",
             "the PPO clip has no lower bound", "clip"),
    Mutation("clip_high_ignored", "algorithms/losses.py",
             "clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv",
             "clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_low) * adv",
             "DAPO's clip-higher is ignored (the upper bound is 1 + clip_low)", "clip_higher"),
    Mutation("dual_clip_ignored", "algorithms/losses.py",
             "objective = torch.where(adv < 0, torch.maximum(objective, dual_clip * adv), objective)",
             "objective = objective",
             "the dual clip never bounds a negative advantage's loss", "mini_batches and dual_clip"),
    Mutation("gspo_sequence_sum", "algorithms/losses.py",
             "seq_log_ratio = masked_mean(log_ratio.detach(), mask, dim=-1)",
             "seq_log_ratio = masked_sum(log_ratio.detach(), mask, dim=-1)",
             "GSPO's sequence ratio is not length-normalised", "mini_batches and gspo"),
    Mutation("topr_untruncated", "algorithms/losses.py",
             "torch.exp(lr.clamp(max=0.0))", "torch.exp(lr)",
             "TOPR's negative-sample weight is not truncated at 1", "mini_batches and topr"),
    Mutation("token_mean_as_sequence_mean", "algorithms/losses.py",
             'if mode == "token_mean":\n        return masked_mean(per_token, mask)',
             'if mode == "token_mean":\n        return masked_mean(per_token, mask, dim=-1).sum() / max(B, 1)',
             "the token mean is a mean of per-sequence means", "grpo_by_hand"),
    Mutation("drgrpo_normaliser", "algorithms/losses.py",
             "return masked_sum(per_token, mask) / (max(B, 1) * max_len)",
             "return masked_sum(per_token, mask) / _mask_count(per_token, mask)",
             "Dr. GRPO's constant normaliser B x max_new_tokens becomes the token count", "drgrpo_loss"),
    Mutation("kl_sign", "algorithms/losses.py",
             "loss = loss if kl_term is None else loss + kl_coef * kl_term",
             "loss = loss if kl_term is None else loss - kl_coef * kl_term",
             "the KL term rewards moving away from the reference", "kl_loss_term"),
    Mutation("kl_aggregation", "algorithms/losses.py",
             "return aggregate_loss(kl, mask, agg, max_len), masked_mean(kl.detach(), on_mask)",
             "return masked_mean(kl, mask), masked_mean(kl.detach(), on_mask)",
             "the KL term is a token mean whatever algorithm.loss_agg", "kl_loss_term"),
    Mutation("kl_in_reward_sign", "recipes/rl.py",
             "rewards = rewards - alg.kl_coef * seq_kl", "rewards = rewards + alg.kl_coef * seq_kl",
             "the reward's KL penalty (sequence-level estimators) is a bonus", "kl_in_reward"),
    Mutation("kl_in_reward_token_sign", "algorithms/kl.py",
             "out = out - kl_coef * pen", "out = out + kl_coef * pen",
             "the per-token KL penalty of REINFORCE++ and PPO is a bonus", "kl_in_reward"),
    Mutation("entropy_sign", "algorithms/losses.py",
             "return -coef * aggregate_loss(entropy, mask, agg, max_len)",
             "return coef * aggregate_loss(entropy, mask, agg, max_len)",
             "the entropy bonus lowers the entropy", "entropy_bonus"),
    Mutation("is_weights_ignored", "algorithms/losses.py",
             "    if is_weights is None:\n        return per_token",
             "    if True:\n        return per_token",
             "the importance weights never multiply the loss", "importance"),
    Mutation("tis_cap_removed", "algorithms/importance.py",
             "w = torch.exp(lr.clamp(max=math.log(cap)))", "w = torch.exp(lr)",
             "TIS does not truncate its weights at the cap", "importance"),
    Mutation("mini_batch_normaliser", "learner/update.py",
             "local = batch.completion_mask.sum() if one else batch.completion_mask[part].sum()",
             "local = batch.completion_mask.sum()",
             "each mini-batch's token mean divides by the whole batch's tokens", "mini_batches and ppo_clip"),
]


def by_name(names: str | None) -> list[Mutation]:
    if not names:
        return list(MUTATIONS)
    known = {m.name: m for m in MUTATIONS}
    unknown = [n for n in names.split(",") if n not in known]
    if unknown:
        raise SystemExit(f"unknown mutation(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names.split(",")]


def applies(m: Mutation, src: Path = SRC) -> bool:
    """Whether the mutation's text occurs exactly once in its file (so it still mutates what it says)."""
    return (src / "rlvr" / m.path).read_text(encoding="utf-8").count(m.old) == 1


def mutated_copy(m: Mutation, into: Path, src: Path = SRC) -> Path:
    """A copy of ``src/rlvr`` under ``into/src`` with the mutation applied; returns the copy's ``src``."""
    out = into / "src"
    shutil.copytree(src / "rlvr", out / "rlvr", ignore=shutil.ignore_patterns("__pycache__", "data"))
    f = out / "rlvr" / m.path
    text = f.read_text(encoding="utf-8")
    if text.count(m.old) != 1:
        raise ValueError(f"mutation {m.name}: its text occurs {text.count(m.old)} times in {m.path}, not once")
    f.write_text(text.replace(m.old, m.new), encoding="utf-8")
    (out / "rlvr" / "data").symlink_to(src / "rlvr" / "data")  # the benchmark sets, unchanged
    return out


def run_tests(src: Path, k: str | None = None, test_file: str = TEST_FILE) -> subprocess.CompletedProcess:
    """The test file on the code under ``src``: stops at the first failure (``-x``)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", test_file]
    if k:
        cmd += ["-k", k]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


def check(m: Mutation, fast: bool = False, test_file: str = TEST_FILE) -> str:
    """``caught``, ``SURVIVED`` or ``ERROR: ...`` (the mutated copy could not be tested: not a catch)."""
    if not applies(m):
        return "ERROR: no longer applies"
    with tempfile.TemporaryDirectory(prefix=f"mutation-{m.name}-") as d:
        res = run_tests(mutated_copy(m, Path(d)), m.catchers if fast else None, test_file)
    if res.returncode == 0:
        return "SURVIVED"
    if res.returncode == 1:  # a test failed
        return "caught"
    tail = (res.stdout + res.stderr).strip().splitlines()[-1:] or [""]
    return f"ERROR: pytest exit {res.returncode}: {tail[0][:120]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutation names (default: all)")
    ap.add_argument("--fast", action="store_true", help="run only each mutation's catching tests (-k)")
    ap.add_argument("--test-file", default=TEST_FILE)
    args = ap.parse_args(argv)
    chosen = by_name(args.only)
    baseline = run_tests(SRC, None, args.test_file)
    if baseline.returncode != 0:
        print((baseline.stdout + baseline.stderr)[-3000:])
        print(f"{args.test_file} fails on the unmutated source: fix it first")
        return 2
    width = max(len(m.name) for m in chosen)
    print(f"{'mutation':<{width}}  {'result':<8}  what it changes")
    bad = 0
    for m in chosen:
        result = check(m, args.fast, args.test_file)
        bad += result != "caught"
        print(f"{m.name:<{width}}  {result:<8}  {m.what} ({m.path})", flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} mutations caught by {args.test_file}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
