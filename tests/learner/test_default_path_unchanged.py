"""The default learner path computes what it computed before mini-batches and the algorithm fixes: the metrics
rows of short seeded runs equal, float for float, rows recorded from the code before those changes
(``tests/fixtures/default_path_metrics.json``).

Three runs of ``tiny_run_config``: the plain default (padded micro-batches), the demo's learner settings
(``configs/arithmetic_grpo.yaml``: packed, shared-prompt micro-batches, chunked log-probs, activation
checkpointing, bf16 AdamW moments, a bf16 sampler freed while learning), and two PPO epochs with a KL loss
term (one mini-batch: the weights change only between epochs).  Timing and memory fields are left out.

The numbers depend on the platform's floating point (BLAS kernels, torch version): the fixture holds one
recording per platform (``tests/recorded.py``), compared exactly on its own platform and within float rounding
elsewhere.  To re-record after a change that is *meant* to move them, or to add a platform from a commit known
to compute the same, run ``PYTHONPATH=src python tests/learner/test_default_path_unchanged.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import make_model, make_tokenizer, tiny_run_config  # noqa: E402
from recorded import assert_matches, record  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "default_path_metrics.json"
RUNS = {
    "default": [],
    "demo_learner": ["rollout.dtype=bfloat16", "rollout.sleep_while_learning=true", "train.logprob_chunk_size=16",
                     "train.micro_batch_tokens=64", "train.share_prompts=true", "train.activation_checkpointing=true",
                     "train.optimizer=adamw_bf16", "train.warmup_steps=2", "train.lr=3e-3"],
    "two_epochs_kl": ["algorithm.ppo_epochs=2", "algorithm.kl_coef=0.05", "train.micro_batch_size=3"],
}
VOLATILE = {"tokens_per_s", "step_time", "gen_time", "learn_time", "verify_time", "sync_time", "wait_time",
            "peak_rss_mb", "rss_mb", "time", "verify_share"}  # verify_share: verify_time / step_time


def _verifier(completion: str, reference: str):
    from rlvr.types import Verdict

    return Verdict(float(sum(map(ord, completion)) % 2 == 0), completion, "parity")


def _problems(n: int, prefix: str):
    from rlvr.types import Problem

    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


def run_rows(name: str, out: Path) -> list[dict]:
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    tok = make_tokenizer()
    train(tiny_run_config(out, "train.threads=1", "train.steps=5", *RUNS[name]), model=make_model(tok), tokenizer=tok,
          problems=(_problems(10, "t"), []), verifier=_verifier)
    return [{k: v for k, v in r.items() if k not in VOLATILE and not k.endswith("_s")}
            for r in read_metrics(out / "metrics.jsonl")]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_default_learner_path_matches_the_recorded_rows(tmp_path, name):
    rows = run_rows(name, tmp_path)
    assert any(r["learner_seqs"] > 0 for r in rows)
    assert_matches(rows, FIXTURE, name)


if __name__ == "__main__":  # record this platform's rows (see the module docstring)
    import tempfile

    runs = {}
    for name in sorted(RUNS):
        with tempfile.TemporaryDirectory() as d:
            runs[name] = run_rows(name, Path(d))
    print(f"wrote the recording of {record(FIXTURE, runs)} in {FIXTURE}")
