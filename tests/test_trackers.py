"""rlvr.trackers: train.report_to validation, the JSONL writer, TensorBoard and MLflow read back."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from rlvr.trackers import TRACKERS, JsonlTracker, open_trackers, read_metrics, validate_report_to

ROWS = [
    {"step": 1, "reward_mean": 0.25, "accuracy": 0.5, "lr": 1e-5, "kl": torch.tensor(0.125), "note": "warm-up",
     "bad": float("nan")},
    {"step": 2, "reward_mean": 0.5, "accuracy": 0.75, "lr": 2e-5, "kl": torch.tensor(0.25), "note": None,
     "bad": float("inf")},
    {"step": 3, "reward_mean": 0.75, "accuracy": 1.0, "lr": 3e-5, "kl": torch.tensor(0.5), "note": "x",
     "bad": 1.0},
]


def _log_all(tracker, rows=ROWS):
    for row in rows:
        tracker.log(row, row["step"])


# ---------------------------------------------------------------- validation


def test_validate_accepts_known_installed_names():
    validate_report_to([])
    validate_report_to(["jsonl"])
    validate_report_to(["jsonl", "tensorboard", "mlflow"])
    assert set(TRACKERS) == {"jsonl", "tensorboard", "wandb", "mlflow", "trackio"}


def test_validate_rejects_unknown_duplicate_and_non_list():
    with pytest.raises(ValueError, match=r"train\.report_to: unknown tracker 'comet'; known trackers: jsonl, "
                                         r"tensorboard, wandb, mlflow, trackio"):
        validate_report_to(["comet"])
    with pytest.raises(ValueError, match="twice"):
        validate_report_to(["tensorboard", "tensorboard"])
    with pytest.raises(ValueError, match="must be a list"):
        validate_report_to("tensorboard")


def test_missing_package_is_a_clear_error_before_anything_is_opened(tmp_path, monkeypatch):
    # a package that cannot be imported (sys.modules[name] = None makes find_spec raise)
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ValueError) as err:
        validate_report_to(["jsonl", "wandb"])
    msg = str(err.value)
    assert "train.report_to" in msg and "'wandb'" in msg and "pip install wandb" in msg
    with pytest.raises(ValueError, match="pip install wandb"):
        open_trackers(["wandb"], tmp_path / "run", {}, "r")
    assert not (tmp_path / "run").exists()  # checked before any file is written


def test_validation_does_not_import_the_tracker_packages():
    code = ("import sys; from rlvr.trackers import validate_report_to; "
            "validate_report_to(['tensorboard', 'mlflow']); "
            "print(sorted(m for m in ('tensorboard', 'mlflow', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- jsonl


# metrics.jsonl exactly as the former rlvr.learner.metrics.MetricsLogger wrote these rows (captured before it
# was removed): existing run directories and tools that read them see the same format
OLD_METRICS_JSONL = (
    '{"step": 1, "reward_mean": 0.25, "accuracy": 0.5, "lr": 1e-05, "kl": 0.125, "note": "warm-up", "bad": null}\n'
    '{"step": 2, "reward_mean": 0.5, "accuracy": 0.75, "lr": 2e-05, "kl": 0.25, "note": null, "bad": null}\n'
    '{"step": 3, "reward_mean": 0.75, "accuracy": 1.0, "lr": 3e-05, "kl": 0.5, "note": "x", "bad": 1.0}\n')


def test_jsonl_writes_exactly_what_the_metrics_logger_wrote(tmp_path):
    with open_trackers([], tmp_path / "new", {}, "r") as tracker:
        assert tracker.names == ["jsonl"]
        _log_all(tracker)
    new_text = (tmp_path / "new" / "metrics.jsonl").read_text()
    assert new_text == OLD_METRICS_JSONL
    rows = read_metrics(tmp_path / "new" / "metrics.jsonl")
    assert rows[0] == {"step": 1, "reward_mean": 0.25, "accuracy": 0.5, "lr": 1e-5, "kl": 0.125,
                       "note": "warm-up", "bad": None}
    assert rows[1]["bad"] is None and rows[2]["bad"] == 1.0


def test_jsonl_step_goes_first_and_must_agree(tmp_path):
    tracker = open_trackers(["jsonl"], tmp_path, {}, None)
    tracker.log({"loss": 1.5}, 7)
    with pytest.raises(ValueError, match="step=3 but was logged at step 4"):
        tracker.log({"step": 3, "loss": 1.0}, 4)
    tracker.close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 7, "loss": 1.5}\n'


def test_jsonl_groups_and_resume(tmp_path):
    with open_trackers([], tmp_path, groups=("train", "heldout")) as tracker:
        _log_all(tracker)
        tracker.log({"accuracy": 0.5}, 2, group="heldout")
        with pytest.raises(ValueError, match="group 'eval' was not opened"):
            tracker.log({"accuracy": 0.5}, 2, group="eval")
    assert read_metrics(tmp_path / "heldout.jsonl") == [{"step": 2, "accuracy": 0.5}]
    # resume from step 1: rows after it are dropped from every group's file
    with open_trackers([], tmp_path, resume_from_step=1, groups=("train", "heldout")) as tracker:
        assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]
        assert read_metrics(tmp_path / "heldout.jsonl") == []
        tracker.log(ROWS[1], 2)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    # a fresh run empties the files
    JsonlTracker(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == ""


# ---------------------------------------------------------------- tensorboard


def _tb_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_file_reads_back(tmp_path):
    pytest.importorskip("tensorboard", reason="validate_report_to refuses tensorboard without it (tested above)")
    with open_trackers(["jsonl", "tensorboard"], tmp_path, {"train": {"lr": 1e-5}}, "tb-run",
                       groups=("train", "heldout")) as tracker:
        assert tracker.names == ["jsonl", "tensorboard"]
        _log_all(tracker)
        tracker.log({"accuracy": 0.5}, 3, group="heldout")
    scalars = _tb_scalars(tmp_path / "tb")
    assert set(scalars) == {"reward_mean", "accuracy", "lr", "kl", "bad", "heldout/accuracy"}
    assert scalars["reward_mean"] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert scalars["kl"] == [(1, 0.125), (2, 0.25), (3, 0.5)]
    assert scalars["bad"] == [(3, 1.0)]  # NaN and inf rows are null in JSONL and not sent
    assert scalars["heldout/accuracy"] == [(3, 0.5)]
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


# ---------------------------------------------------------------- mlflow


def test_mlflow_run_reads_back(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="validate_report_to refuses mlflow without it (tested above)")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    config = {"train": {"lr": 1e-5, "steps": 3}, "model": {"name": "tiny"}}
    with open_trackers(["mlflow"], tmp_path, config, "ml-run", groups=("train", "heldout")) as tracker:
        _log_all(tracker)
        tracker.log({"accuracy": 0.5}, 3, group="heldout")
        uri = tracker.others["mlflow"].uri
    assert uri == f"sqlite:///{tmp_path / 'mlflow.db'}" and (tmp_path / "mlflow.db").is_file()
    client = MlflowClient(tracking_uri=uri)
    run_id = (tmp_path / "mlflow_run_id").read_text()
    run = client.get_run(run_id)
    assert run.info.run_name == "ml-run" and run.info.status == "FINISHED"
    assert run.data.params == {"train.lr": "1e-05", "train.steps": "3", "model.name": "tiny"}
    hist = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "reward_mean"))
    assert hist == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "bad")] == [(3, 1.0)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "heldout/accuracy")] == [(3, 0.5)]
    assert "note" not in run.data.metrics

    # resuming continues the same MLflow run
    with open_trackers(["mlflow"], tmp_path, config, "ml-run", resume_from_step=3) as tracker:
        tracker.log({"reward_mean": 1.0}, 4)
    assert (tmp_path / "mlflow_run_id").read_text() == run_id
    hist = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "reward_mean"))
    assert hist == [(1, 0.25), (2, 0.5), (3, 0.75), (4, 1.0)]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1]) == {"step": 4, "reward_mean": 1.0}


# ---------------------------------------------------------------- wandb (offline)


def _wandb_records(path):
    """The records of a W&B transaction log (``run-<id>.wandb``): a 7-byte ``:W&B`` header, then
    LevelDB-log framing (32 KiB blocks; 7-byte record headers: CRC, length, type full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunks, pending, block = 7, [], b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:  # zero padding to the end of the block
            pos += left
            continue
        if pos + 7 + length > len(data):  # a record still being written
            break
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
            pending = b""
    records = []
    for chunk in chunks:
        r = pb.Record()
        r.ParseFromString(chunk)
        records.append(r)
    return records


def _finished_wandb_records(path, timeout: float = 60.0):
    """The records once the log is complete (its closing ``exit`` record written).

    ``run.finish()`` returns before wandb-core has written the offline log: it ends by
    publishing a finish message to the service without waiting for a reply (wandb 0.31,
    ``ServiceConnection.inform_finish``), and the service's writer flushes when the stream
    closes. That is normally a few ms later, but a CI run beside the demo once read the file
    while it held only its 7-byte header (reproduced here under load: the service's log had not
    reached "stream: finishing up"). Process exit is safe (wandb's atexit teardown waits for
    the service); reading the file in the same process has to wait for it.
    """
    deadline = time.monotonic() + timeout
    while True:
        records = _wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def test_wandb_offline_without_key_or_network_reads_back(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="validate_report_to refuses wandb without it (tested above)")
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc, no wandb settings
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    with open_trackers(["jsonl", "wandb"], run_dir, {"train": {"lr": 0.125}}, "wb-run",
                       groups=("train", "heldout")) as tracker:
        _log_all(tracker)
        tracker.log({"accuracy": 0.5}, 3, group="heldout")
    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")  # offline: nothing was sent anywhere
    run_id = (run_dir / "wandb_run_id").read_text()
    assert log.name == f"run-{run_id}.wandb"
    records = _finished_wandb_records(log)
    assert records[-1].WhichOneof("record_type") == "exit"
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == run_id and run.display_name == "wb-run" and run.project == "rlvr"
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["train"] == {"lr": 0.125}
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    steps = {h["_step"]: {k: v for k, v in h.items() if not k.startswith("_")} for h in history}
    assert steps[1] == {"reward_mean": 0.25, "accuracy": 0.5, "lr": 1e-5, "kl": 0.125}
    assert steps[2] == {"reward_mean": 0.5, "accuracy": 0.75, "lr": 2e-5, "kl": 0.25}
    assert steps[3] == {"reward_mean": 0.75, "accuracy": 1.0, "lr": 3e-5, "kl": 0.5, "bad": 1.0,
                        "heldout/accuracy": 0.5}


def test_wandb_mode_env_wins(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="validate_report_to refuses wandb without it (tested above)")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with open_trackers(["wandb"], tmp_path / "run", {}, "off") as tracker:
        tracker.log({"x": 1.0}, 1)
    assert not list((tmp_path / "run").glob("wandb/offline-run-*"))  # disabled: no run written
    assert read_metrics(tmp_path / "run" / "metrics.jsonl") == [{"step": 1, "x": 1.0}]


# ---------------------------------------------------------------- through the recipe


def test_training_reports_to_tensorboard_and_heldout_curve(tmp_path):
    """train.report_to=[tensorboard] in a real (tiny) run: every metrics row and the eval.every curve arrive."""
    pytest.importorskip("tensorboard", reason="validate_report_to refuses tensorboard without it (tested above)")
    from conftest import make_model, make_tokenizer

    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train
    from rlvr.types import Problem, Verdict

    probs = [Problem(id=f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(6)]
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={tmp_path}", "train.steps=2", "train.prompts_per_step=2", "rollout.group_size=2",
        "rollout.max_new_tokens=4", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "eval.every=1", "eval.num_problems=2", "eval.max_new_tokens=4", "train.report_to=[tensorboard]"])
    tok = make_tokenizer()
    train(cfg, model=make_model(tok), tokenizer=tok, problems=(probs, probs[:2]),
          verifier=lambda c, r: Verdict(float(len(c) % 2 == 0), None, "parity"))
    scalars = _tb_scalars(tmp_path / "tb")
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [s for s, _ in scalars["reward_mean"]] == [1, 2]
    assert [v for _, v in scalars["reward_mean"]] == pytest.approx([r["reward_mean"] for r in rows])
    assert [s for s, _ in scalars["heldout/heldout_accuracy"]] == [1, 2]
    assert [r["step"] for r in read_metrics(tmp_path / "heldout.jsonl")] == [1, 2]
