"""The 30-line environment in docs/environments.md runs as written and trains in the recipe."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import make_model
from rlvr.config import load_config
from rlvr.envs import ENVIRONMENTS
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import train
from rlvr.trackers import read_metrics
from rlvr.types import Problem

DOC = Path(__file__).resolve().parents[2] / "docs" / "environments.md"


def test_documented_environment_runs(tmp_path, tiny_tokenizer):
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    assert len(code.strip().splitlines()) <= 32
    ENVIRONMENTS.unregister("guess_number") if "guess_number" in ENVIRONMENTS else None
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    try:
        env = ENVIRONMENTS.get("guess_number")(None, None, max_guesses=3)
        st = env.reset(Problem("p", prompt="-", answer="42"))
        assert env.step(st, "50").observation == "Lower."
        st.turn = 1
        r = env.step(st, "I guess 42")
        assert r.done and r.reward == 0.5
        cfg = load_config(RunConfig, None, [
            f"train.output_dir={tmp_path}", "train.steps=1", "train.prompts_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=4", "train.progress=false", "eval.num_problems=2", "eval.max_new_tokens=4",
            "env.name=guess_number", "env.params={max_guesses: 2}"])
        probs = [Problem(f"t{i}", prompt="-", answer=str(i)) for i in range(4)]
        train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(probs, probs[:2]))
        assert read_metrics(tmp_path / "metrics.jsonl")[0]["env/turns"] >= 1
    finally:
        ENVIRONMENTS.unregister("guess_number")
