"""A plumbing run of the multimodal path: a tiny randomly initialised VLM trained with GRPO on the drawn
``visual`` task through ``rlvr train``, then evaluated through ``rlvr eval`` (held-out accuracy with intervals).

No package on the reachable registries ships a small VLM's weights (see docs/multimodal.md), so the policy is the
LLaVA that ``rlvr.models.vision.tiny_random_vlm`` builds from ``transformers`` configs: a one-layer CLIP vision
tower, a two-layer Llama on a character tokenizer. It shows that images flow through sampling, rewards, the packed
learner, checkpoints and evaluation; it does not show a model learning to see.

    python benchmarks/visual_plumbing.py                      # 40 steps, configs/visual_grpo.yaml
    python benchmarks/visual_plumbing.py --steps 2 --out /tmp/vp   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # conftest.make_tokenizer: the character tokenizer of the test suite


def build_tiny_vlm(path: Path, seed: int = 0) -> None:
    from conftest import make_tokenizer

    from rlvr.models.vision import tiny_random_vlm

    model, processor = tiny_random_vlm(make_tokenizer(), seed=seed, hidden=64, layers=2)
    model.save_pretrained(path)
    processor.save_pretrained(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/visual_plumbing")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-problems", type=int, default=200)
    args = ap.parse_args()
    from rlvr.cli import main as cli

    out = Path(args.out)
    vlm = out / "tiny-vlm"
    if not (vlm / "config.json").is_file():
        build_tiny_vlm(vlm)
    common = [str(ROOT / "configs" / "visual_grpo.yaml"), f"model.name={vlm}", f"eval.num_problems={args.eval_problems}"]
    t0 = time.perf_counter()
    rc = cli(["train", *common, f"train.output_dir={out / 'train'}", f"train.steps={args.steps}",
              "eval.before_training=true", "eval.after_training=true", "train.progress=false"])
    if rc:
        return rc
    train_s = time.perf_counter() - t0
    ckpt = sorted((out / "train" / "checkpoints").iterdir())[-1]
    rc = cli(["eval", *common, "--model", str(ckpt), "--samples", str(out / "eval.samples.jsonl"),
              "--output", str(out / "eval.results.json"), "--no-progress"])
    if rc:
        return rc
    before = json.loads((out / "train" / "eval_before.json").read_text())
    after = json.loads((out / "train" / "eval_after.json").read_text())
    res = json.loads((out / "eval.results.json").read_text())
    rows = [json.loads(line) for line in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    print(json.dumps({"steps": len(rows), "train_seconds": round(train_s, 1),
                      "heldout_before": before, "heldout_after": after,
                      "rlvr_eval_pass@1": res["metrics"]["pass@k"]["1"],
                      "reward_first_5": [round(r["reward_mean"], 3) for r in rows[:5]],
                      "reward_last_5": [round(r["reward_mean"], 3) for r in rows[-5:]],
                      "learner_tokens": sum(r["learner_tokens"] for r in rows)}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
