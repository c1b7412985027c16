"""A run owns its output directory: the lock, refusals before anything loads, verified and fallback resume,
config changes on resume, atomic files, SIGTERM and a second Ctrl-C (rlvr.recipes.rundir and the recipe)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlvr.learner.checkpoint import latest_checkpoint, recover_checkpoints, verify_checkpoint
from rlvr.recipes.rl import TrainingInterrupted, train
from rlvr.recipes.rundir import RunDirectoryError, claim, config_changes
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict

from conftest import make_model, tiny_run_config


def parity(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _problems(n: int, prefix: str) -> list[Problem]:
    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


def _cfg(out: Path, *extra: str):
    return tiny_run_config(out, "train.steps=2", "train.save_every=1", "train.keep_checkpoints=5", *extra)


def _run(tok, out, *extra, model=None, on_step=None):
    model = model or make_model(tok)
    summary = train(_cfg(out, *extra), model=model, tokenizer=tok, problems=(_problems(8, "t"), _problems(2, "h")),
                    verifier=parity, on_step=on_step)
    return model, summary


def _loads_nothing(*a, **k):
    raise AssertionError("the model was loaded before the directory was checked")


# ---------------------------------------------------------------- one run per directory


def test_a_second_run_into_a_locked_directory_is_refused_naming_the_holder(tmp_path, tiny_tokenizer, monkeypatch):
    held = claim(_cfg(tmp_path / "run"))
    try:
        monkeypatch.setattr("rlvr.recipes.rl.load_policy", _loads_nothing)
        with pytest.raises(RunDirectoryError, match=f"in use by another run: PID {os.getpid()} on "):
            train(_cfg(tmp_path / "run"))
    finally:
        held.release()
    # released: nothing was written by the refused run, and the directory the claim created is gone again
    assert not (tmp_path / "run").exists()
    claim(_cfg(tmp_path / "run")).release()


def test_a_second_process_is_refused_while_the_first_holds_the_directory(tmp_path):
    """Two processes (the OS lock, not a file that a crash could leave behind): the second exits 2 naming the
    first's PID; once the holder is gone, its stale owner file does not block anyone."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from conftest import tiny_run_config
        from rlvr.recipes.rundir import claim
        held = claim(tiny_run_config({str(tmp_path / 'run')!r}))  # kept referenced: a collected lock is released
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        res = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", f"train.output_dir={tmp_path / 'run'}",
                              "train.steps=1"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, res.stderr
        assert f"PID {holder.pid}" in res.stderr and res.stderr.startswith("rlvr: error: ")
    finally:
        holder.kill()
        holder.wait()
    claim(tiny_run_config(tmp_path / "run")).release()  # killed -9: the kernel released its lock


def test_an_earlier_run_is_refused_without_resume_or_overwrite(tmp_path, tiny_tokenizer, monkeypatch):
    _run(tiny_tokenizer, tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    with monkeypatch.context() as m:
        m.setattr("rlvr.recipes.rl.load_policy", _loads_nothing)
        with pytest.raises(RunDirectoryError, match=r"earlier finished run .*--resume .*--overwrite"):
            train(_cfg(tmp_path))
    assert (tmp_path / "metrics.jsonl").read_text() == before  # nothing wiped
    # --overwrite: the earlier run's files go, the new run is the only one there
    _run(tiny_tokenizer, tmp_path, "train.overwrite=true", "train.steps=1")
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-000001"]


def test_a_directory_of_other_files_is_refused(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr("rlvr.recipes.rl.load_policy", _loads_nothing)
    with pytest.raises(RunDirectoryError, match="holds no run .*notes.txt"):
        train(_cfg(tmp_path))


def test_resume_and_overwrite_exclude_each_other():
    from rlvr.config import ConfigError

    with pytest.raises((ConfigError, ValueError), match="train.overwrite"):
        tiny_run_config("x", "train.resume=true", "train.overwrite=true")


def test_cli_refusal_is_one_line_with_exit_2(tmp_path, capsys):
    from rlvr.cli import main

    (tmp_path / "config.yaml").write_text("{}\n")  # an earlier run's file
    assert main(["train", f"train.output_dir={tmp_path}", "train.steps=1", "train.progress=false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlvr: error: train.output_dir=") and "--overwrite" in err[0]


# ---------------------------------------------------------------- resume checks what it resumes


def _corrupt(f: Path, offset: int = 4096, n: int = 256) -> None:
    data = bytearray(f.read_bytes())
    data[offset:offset + n] = bytes(n)
    f.write_bytes(bytes(data))


def test_a_damaged_checkpoint_is_set_aside_and_the_previous_one_resumed(tmp_path, tiny_tokenizer, capsys):
    _run(tiny_tokenizer, tmp_path)
    weights = tmp_path / "checkpoints" / "step-000002" / "model" / "model.safetensors"
    _corrupt(weights)  # 256 zeroed bytes: the load itself would not notice
    assert "model/model.safetensors does not match its checksum" in verify_checkpoint(weights.parents[1])
    _run(tiny_tokenizer, tmp_path, "train.resume=true")
    out = capsys.readouterr().out
    assert "step-000002 is damaged: model/model.safetensors does not match its checksum" in out
    assert "resuming from step-000001 instead" in out and "resumed from" in out and "(step 1)" in out
    assert (tmp_path / "checkpoints" / "damaged-step-000002").is_dir()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]  # step 2 trained again
    assert verify_checkpoint(latest_checkpoint(tmp_path)) is None


@pytest.mark.parametrize("damage", ["truncate", "nan"])
def test_checkpoints_without_a_manifest_fail_in_one_line_or_fall_back(tmp_path, tiny_tokenizer, capsys, damage):
    """Checkpoints written before manifests: a truncated file is named in one CheckpointError (not a raw
    UnpicklingError); NaN weights are set aside before any step trains on them."""
    from safetensors.torch import load_file, save_file

    from rlvr.learner.checkpoint import CheckpointError

    _run(tiny_tokenizer, tmp_path)
    last = tmp_path / "checkpoints" / "step-000002"
    for c in (tmp_path / "checkpoints").iterdir():
        (c / "MANIFEST.json").unlink()
    if damage == "truncate":
        f = last / "optimizer.pt"
        f.write_bytes(f.read_bytes()[:100])
        with pytest.raises(CheckpointError, match=r"optimizer.pt cannot be read \(damaged or truncated"):
            _run(tiny_tokenizer, tmp_path, "train.resume=true")
        return
    f = last / "model" / "model.safetensors"
    w = load_file(f)
    w[next(iter(w))].fill_(float("nan"))
    save_file(w, f, metadata={"format": "pt"})
    _run(tiny_tokenizer, tmp_path, "train.resume=true")
    out = capsys.readouterr().out
    assert "holds non-finite weights" in out and "damaged-step-000002" in out and "(step 1)" in out


def test_resume_refuses_a_config_that_changes_the_run_and_names_what_changed(tmp_path, tiny_tokenizer, monkeypatch):
    _run(tiny_tokenizer, tmp_path)
    monkeypatch.setattr("rlvr.recipes.rl.load_policy", _loads_nothing)
    with pytest.raises(RunDirectoryError) as e:
        train(_cfg(tmp_path, "train.resume=true", "rollout.group_size=2", "algorithm.advantage=rloo"))
    msg = str(e.value)
    assert "rollout.group_size: 4 -> 2" in msg and "algorithm.advantage: grpo -> rloo" in msg
    assert "train.resume_changes=[algorithm.advantage,rollout.group_size]" in msg
    # harmless changes pass: where it logs, how often it saves, budgets, evaluation
    changes = config_changes(_cfg(tmp_path).model_dump(), _cfg(tmp_path, "train.save_every=3", "eval.n=4",
                                                               "train.progress=true").model_dump())
    assert changes == {}


def test_an_extended_cosine_schedule_is_recomputed_not_left_at_zero(tmp_path, tiny_tokenizer, capsys, monkeypatch):
    sched = ("train.schedule=cosine", "train.lr=1e-2")
    model, _ = _run(tiny_tokenizer, tmp_path, *sched)
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["lr"] == pytest.approx(0.0, abs=1e-12)  # end of the decay
    with monkeypatch.context() as m:
        m.setattr("rlvr.recipes.rl.load_policy", _loads_nothing)
        with pytest.raises(RunDirectoryError, match=r"train.steps: 2 -> 3"):
            train(_cfg(tmp_path, *sched, "train.resume=true", "train.steps=3"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model2, _ = _run(tiny_tokenizer, tmp_path, *sched, "train.resume=true", "train.steps=3",
                     "train.resume_changes=[train.steps]")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    # step 3 of a 3-step cosine without warm-up trains at lr * (1 + cos(pi * 2/3)) / 2 = lr / 4
    assert "the learning-rate schedule follows the changed train.steps: step 3 trains at lr 0.0025" in \
        capsys.readouterr().out
    assert any(not torch.equal(before[k], v) for k, v in model2.state_dict().items())


def test_a_constant_schedule_extends_without_being_told(tmp_path, tiny_tokenizer):
    _run(tiny_tokenizer, tmp_path)
    _run(tiny_tokenizer, tmp_path, "train.resume=true", "train.steps=3")
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


# ---------------------------------------------------------------- files whole or absent


def test_an_interrupted_resave_and_unfinished_writes_are_recovered(tmp_path, tiny_tokenizer):
    _run(tiny_tokenizer, tmp_path, "train.keep_checkpoints=1")
    root = tmp_path / "checkpoints"
    # a kill between moving the saved step aside and renaming its re-save into place ...
    aside = root / ".replaced-step-000002-abc"
    aside.mkdir()
    os.replace(root / "step-000002", aside / "old")
    # ... and a full checkpoint write killed halfway
    (root / ".step-000003-xyz" / "model").mkdir(parents=True)
    assert latest_checkpoint(tmp_path) is None
    lines = recover_checkpoints(tmp_path)
    assert any("restored step-000002" in x for x in lines) and any(".step-000003-xyz" in x for x in lines)
    assert latest_checkpoint(tmp_path).name == "step-000002" and sorted(p.name for p in root.iterdir()) == \
        ["step-000002"]
    assert verify_checkpoint(root / "step-000002") is None


def test_a_resave_never_leaves_a_moment_without_a_checkpoint(tmp_path, tiny_tokenizer, monkeypatch):
    """Re-saving a step that exists: the old directory is moved aside, not deleted, before the new one is renamed
    into place (a kill between the two leaves it recoverable)."""
    import rlvr.learner.checkpoint as ck

    _run(tiny_tokenizer, tmp_path, "train.keep_checkpoints=1")
    real_replace, seen = os.replace, []

    def replace(src, dst):
        if Path(dst).name == "step-000002" and Path(src).name.startswith(".step-"):
            seen.append(sorted(p.name for p in (tmp_path / "checkpoints").iterdir()))
            raise KeyboardInterrupt  # killed here
        return real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", replace)
    model = make_model(tiny_tokenizer)
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(tmp_path, 2, model, tiny_tokenizer, opt, None, {}, keep=1)
    monkeypatch.undo()
    assert seen and not any(n == "step-000002" for n in seen[0])  # moved aside at that moment ...
    recover_checkpoints(tmp_path)
    assert verify_checkpoint(tmp_path / "checkpoints" / "step-000002") is None  # ... and put back whole


def test_a_torn_eval_before_file_is_evaluated_again(tmp_path, tiny_tokenizer):
    _run(tiny_tokenizer, tmp_path, "eval.before_training=true", "eval.num_problems=2", "eval.max_new_tokens=4")
    (tmp_path / "eval_before.json").write_text("")  # what a full disk left with the old writer
    _, summary = _run(tiny_tokenizer, tmp_path, "eval.before_training=true", "eval.num_problems=2",
                      "eval.max_new_tokens=4", "train.resume=true")
    assert "eval_before" in summary and json.loads((tmp_path / "eval_before.json").read_text())


def test_a_damaged_metrics_line_keeps_the_rows_after_it(tmp_path, tiny_tokenizer, capsys):
    _run(tiny_tokenizer, tmp_path, "train.steps=3")
    f = tmp_path / "metrics.jsonl"
    lines = f.read_text().splitlines()
    lines[1] = lines[1][:20] + "\x00\x00garbage"
    f.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"metrics.jsonl:2: damaged metrics line"):
        rows = read_metrics(f)
    assert [r["step"] for r in rows] == [1, 3]  # not silently cut at the damage
    # a torn last line (a kill mid-write) is ignored quietly
    f.write_text(f.read_text() + '{"step": 4, "rew')
    with pytest.warns(UserWarning) as caught:
        assert [r["step"] for r in read_metrics(f)] == [1, 3]
    assert len(caught) == 1  # line 2 only
    # resuming repairs the file and says so
    _run(tiny_tokenizer, tmp_path, "train.steps=4", "train.resume=true")
    assert "line 2 damaged (not JSON): removed" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(f)] == [1, 3, 4]


def test_atomic_writes_leave_the_old_file_on_a_full_disk(tmp_path, monkeypatch):
    from rlvr.utils.files import atomic_write_text

    f = tmp_path / "eval_before.json"
    f.write_text('{"greedy": 1}')
    real = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        atomic_write_text(f, '{"greedy": 2}')
    monkeypatch.setattr(os, "fsync", real)
    assert f.read_text() == '{"greedy": 1}' and [p.name for p in tmp_path.iterdir()] == ["eval_before.json"]


# ---------------------------------------------------------------- signals


def test_a_second_ctrl_c_during_the_checkpoint_stops_without_a_traceback(tmp_path, tiny_tokenizer, monkeypatch,
                                                                       capsys):
    from rlvr.recipes.rl import RLRecipe

    def stop(row):
        if row["step"] == 1:
            raise KeyboardInterrupt

    def interrupted_write(self, step):
        raise KeyboardInterrupt  # the second Ctrl-C arrives while the checkpoint is written

    monkeypatch.setattr(RLRecipe, "checkpoint", interrupted_write)
    with pytest.raises(TrainingInterrupted) as e:
        _run(tiny_tokenizer, tmp_path, "train.save_every=0", on_step=stop)
    assert e.value.exit_code == 130
    out = capsys.readouterr().out
    assert "interrupted again: stopped without writing that checkpoint; no checkpoint was written" in out


def test_cli_turns_a_stray_ctrl_c_into_exit_130_without_a_traceback(monkeypatch, capsys):
    import rlvr.cli as cli
    import rlvr.cli.train

    def boom(ns):
        raise KeyboardInterrupt

    monkeypatch.setattr(rlvr.cli.train, "run", boom)
    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), boom))
    assert cli.main(["train"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rlvr: interrupted" in err


def _with_func(parser, func):
    parser.set_defaults(func=func)
    for action in parser._subparsers._group_actions:
        for sub in action.choices.values():
            sub.set_defaults(func=func)
    return parser


SCRIPT = textwrap.dedent("""
    import sys
    from rlvr.verifiers import register_verifier

    from rlvr.types import Verdict

    @register_verifier("parity_rd")
    def _parity():
        return lambda c, r: Verdict(1.0 if len(c) % 2 == 0 else 0.0, str(len(c)), "parity")

    from rlvr.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigterm_checkpoints_and_exits_143_with_a_message(tmp_path, tiny_model_dir):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i}?", "answer": str(i)}) + "\n" for i in range(12)))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    import rlvr

    env = {**os.environ, "PYTHONPATH": str(Path(rlvr.__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), "train", f"model.name={tiny_model_dir}", "task.name=jsonl",
                             f"task.path={data}", "task.num_heldout=2", "reward.verifier=parity_rd",
                             f"train.output_dir={out}", "train.steps=500", "train.prompts_per_step=2",
                             "rollout.group_size=4", "rollout.max_new_tokens=8", "train.save_every=0",
                             "eval.before_training=false", "eval.after_training=false", "train.threads=1",
                             "train.progress=false"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not ((out / "metrics.jsonl").exists() and read_metrics(out / "metrics.jsonl")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, text[-2000:]
    assert "terminated (SIGTERM): checkpoint written to" in text and "Traceback" not in text
    ck = latest_checkpoint(out)
    assert ck is not None and verify_checkpoint(ck) is None
    assert torch.load(ck / "state.pt", weights_only=False)["step"] == read_metrics(out / "metrics.jsonl")[-1]["step"]
    assert not (out / ".rlvr.owner.json").exists()  # released on the way out
