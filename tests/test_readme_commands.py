"""Every `rlvr ...` command in the README's usage section, and in the guides' command sections, runs
with a tiny model and tiny sizes appended.

The commands are read from README.md and docs/*.md themselves, so the documents cannot drift from
the CLI: a renamed flag, key or choice fails here.  Placeholders (`/path/to/hf-model`, `my.jsonl`,
the demo's checkpoint path, a baseline sweep) are replaced by files made for the test.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from rlvr.cli import main

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (("README.md", "Using it"), ("docs/training.md", "Runs, configs and outputs"),
            ("docs/training.md", "Algorithms: pick by name, combine freely"),
            ("docs/environments.md", "Tool use, feedback, procedural tasks, a live curriculum"),
            ("docs/rewards.md", "Reward sources, reward models, process rewards, hints"))


def readme_commands() -> list[str]:
    out = []
    for path, title in SECTIONS:
        text = (ROOT / path).read_text()
        section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
        for block in re.findall(r"```bash\n(.*?)```", section, re.S):
            for line in block.splitlines():
                line = line.split(" #", 1)[0].strip()
                if line.startswith("rlvr "):
                    out.append(line)
    return out


def test_the_readme_has_usage_commands():
    cmds = readme_commands()
    assert len(cmds) >= 30 and any(c.startswith("rlvr eval") for c in cmds)
    readme = [c for c in cmds if c in (ROOT / "README.md").read_text()]
    for verb in ("rlvr train", "rlvr eval", "rlvr compare", "rlvr seeds", "rlvr sft", "rlvr rft", "rlvr pipeline"):
        assert any(c.startswith(verb) for c in readme), verb


SFT_TINY = ["train.steps=1", "train.batch_size=2", "train.micro_batch_size=2", "data.num_heldout=2"]
RL_TINY = ["train.steps=1", "train.prompts_per_step=1", "rollout.group_size=4", "rollout.max_new_tokens=4"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_tokenizer_module):
    from conftest import make_model

    tmp = tmp_path_factory.mktemp("readme")
    model_dir = tmp / "tiny-model"
    make_model(tiny_tokenizer_module).save_pretrained(model_dir)
    tiny_tokenizer_module.save_pretrained(model_dir)
    # `rlvr pipeline`: the shipped pipeline's two stage kinds (sft, then rl), at tiny sizes
    tiny = [f"model.name={model_dir}", "task.params.num_train=8", "task.num_heldout=4", "eval.num_problems=2",
            "eval.max_new_tokens=4", "train.progress=false", "'eval.extra_temperatures=[]'"]
    (tmp / "tiny_pipeline.yaml").write_text(
        f"output_dir: {tmp / 'pipeline'}\nmodel: {model_dir}\nstages:\n"
        f"  - {{kind: sft, config: {ROOT / 'configs' / 'sft_arithmetic.yaml'}, overrides: [{', '.join(tiny + SFT_TINY)}]}}\n"
        f"  - {{kind: rl, config: {ROOT / 'configs' / 'arithmetic_grpo.yaml'}, overrides: [{', '.join(tiny + RL_TINY)}]}}\n")
    (tmp / "my.jsonl").write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                                          for i in range(6)))
    return tmp, model_dir


@pytest.fixture(scope="module")
def tiny_tokenizer_module():
    from conftest import make_tokenizer

    return make_tokenizer()


def _argv(cmd: str, tmp: Path, model_dir: Path) -> list[str]:
    args = shlex.split(cmd)[1:]
    run = tmp / "run"
    ckpts = sorted((run / "checkpoints").glob("step-*")) if (run / "checkpoints").is_dir() else []
    subst = {"configs/arithmetic_grpo.yaml": str(ROOT / "configs" / "arithmetic_grpo.yaml"),
             "/path/to/hf-model": str(model_dir), "task.path=my.jsonl": f"task.path={tmp / 'my.jsonl'}",
             "runs/arithmetic_grpo/checkpoints/step-000040": str(ckpts[-1]) if ckpts else "missing-checkpoint",
             "runs/arithmetic_grpo": str(run),  # `rlvr seeds summarize`: the sweep `--seeds` trained there
             "runs/baseline": str(run),  # `rlvr compare`: that sweep against itself
             "configs/pipeline_sft_rl.yaml": str(tmp / "tiny_pipeline.yaml")}  # its stages at tiny sizes
    args = [subst.get(a, str(ROOT / a) if a.startswith("configs/") else a) for a in args]
    if args[0] == "train" and "--help" not in args:
        args += [f"model.name={model_dir}", f"train.output_dir={run}", "train.steps=1", "task.params.num_train=8",
                 "task.num_heldout=4", "train.prompts_per_step=1", "rollout.group_size=4", "rollout.max_new_tokens=4",
                 "eval.num_problems=2", "eval.max_new_tokens=4", "train.progress=false", "train.save_every=1"]
        if "--resume" not in args:  # every command trains into the same directory: each starts it over
            args.append("train.overwrite=true")
        if any(a.endswith("distill_arithmetic.yaml") for a in args):  # the teacher: the tiny model itself
            args.append(f"distill.teacher={model_dir}")
    elif args[0] in ("sft", "rft"):
        args += [f"model.name={model_dir}", f"train.output_dir={tmp / args[0]}", "task.params.num_train=8",
                 "task.num_heldout=4", "eval.num_problems=2", "eval.max_new_tokens=4", "eval.extra_temperatures=[]",
                 "train.progress=false", "train.overwrite=true"]
        args += SFT_TINY if args[0] == "sft" else ["rft.rounds=1", "rft.k=2", "rft.problems_per_round=2",
                                                   "rft.max_new_tokens=4"]
    elif args[0] == "pipeline":
        args.append("overwrite=true")
    elif args[:2] == ["rm", "train"]:
        args = [a.replace("runs/rm/", f"{tmp}/rm/") for a in args]
        args += [f"model={model_dir}", "num_problems=4", "n=2", "max_new_tokens=4", "samples_per_problem=1",
                 "rollouts_per_step=1", "max_steps=2", "batch_size=2"] + (["step_tag=#"] if "kind=prm" in args else [])
        # (the tiny test tokenizer has no 'ки', the PRM's default step tag)
    elif args[0] == "eval":
        args += ["--limit", "2", "--max-new-tokens", "4", "--no-progress", f"model.name={model_dir}"]
    return args


def test_every_readme_usage_command_runs(workspace, monkeypatch, capsys):
    tmp, model_dir = workspace
    monkeypatch.chdir(tmp)
    ran = []
    for cmd in readme_commands():
        argv = _argv(cmd, tmp, model_dir)
        try:
            code = main(argv)
        except SystemExit as e:  # --help exits through argparse
            code = e.code
        out = capsys.readouterr()
        assert code == 0, f"README command failed: {cmd}\n  ran: rlvr {' '.join(argv)}\n{out.err[-2000:]}"
        ran.append(cmd)
    assert len(ran) == len(readme_commands())
