"""FSDP2 learner on CPU: two gloo processes against the one-process learner.

Every test starts its ranks with ``torch.multiprocessing`` from a forkserver that
has imported torch, transformers and rlvr once per session (a rank then starts in
well under a second, against ~10 s of imports per rank with spawn; plain fork is
not safe: on CUDA builds of torch a forked child's backward fails once the
parent has run autograd).
``RLVR_TEST_START_METHOD=spawn`` runs them the slow way.  Ranks meet through a
file rendezvous in ``tmp_path`` (parallel test runs never fight over a port),
one thread per process.  References are computed in the pytest process with the ordinary
``update_policy`` on the whole batch; workers assert against them and a failed
assertion in any rank fails the test with that rank's traceback.
"""

from __future__ import annotations

import copy
import datetime
import multiprocessing
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("torch.distributed.fsdp")
import torch.distributed as dist  # noqa: E402

from conftest import make_model, make_tokenizer  # noqa: E402
from rlvr.recipes.config import RunConfig  # noqa: E402
from rlvr.learner.update import update_policy  # noqa: E402
from rlvr.types import Batch  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

TOL = 2e-6
# importable without this file's sys.path (Python 3.11's forkserver ignores the parent's sys.path)
_PRELOAD = ["rlvr.recipes.rl", "transformers.models.llama.modeling_llama", "torch.distributed.fsdp",
            "torch.distributed.checkpoint"]


# --------------------------------------------------------------------------- harness
def _entry(rank: int, world: int, store: str, fn, args) -> None:
    torch.set_num_threads(1)
    # a missing collective on one rank fails after the timeout instead of hanging the suite
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        from rlvr.distributed.fsdp import init_distributed

        assert init_distributed("gloo")[:2] == (rank, world)
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path: Path, world: int, fn, *args) -> None:
    method = os.environ.get("RLVR_TEST_START_METHOD", "forkserver")
    if method == "forkserver":  # the server imports the heavy modules once; every rank is a fork of it
        multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    store = tmp_path / f"store-{fn.__name__}-{world}"
    torch.multiprocessing.start_processes(_entry, args=(world, str(store), fn, args), nprocs=world,
                                          join=True, start_method=method)


def _batch(seed: int = 0, rows: int = 7, vocab: int = 90) -> Batch:
    """Left-padded prompts, right-padded completions of different lengths, two zero advantages."""
    g = torch.Generator().manual_seed(seed)
    P, C = 5, 6
    ids = torch.randint(4, vocab, (rows, P + C), generator=g)
    am = torch.zeros(rows, P + C, dtype=torch.long)
    cm = torch.zeros(rows, P + C)
    for i in range(rows):
        p, c = 2 + i % 4, 1 + (3 * i) % C
        am[i, P - p:P + c] = 1
        cm[i, P:P + c] = 1
    ids[am == 0] = 0
    old = -torch.rand(rows, P + C, generator=g) * cm
    adv = torch.randn(rows, generator=g)
    adv[[1, 4]] = 0.0
    return Batch(ids, am, cm, old, adv)


def _cfg(micro_batch_size: int = 2, loss_agg: str = "token_mean", ppo_epochs: int = 1) -> RunConfig:
    cfg = RunConfig()
    cfg.train.micro_batch_size = micro_batch_size
    cfg.algorithm.loss_agg = loss_agg
    cfg.algorithm.ppo_epochs = ppo_epochs
    cfg.train.lr = 1e-2  # large enough that one AdamW step visibly moves every weight
    return cfg


def _model(seed: int = 0):
    return make_model(make_tokenizer(), seed=seed)


def _clean(name: str) -> str:
    return name.replace("_checkpoint_wrapped_module.", "")


def _reference_step(cfg: RunConfig, batch: Batch, seed: int = 0) -> dict:
    """One-process update_policy on the whole batch: gradients, updated weights, diagnostics.

    On one thread, as the ranks (``_entry``): AdamW divides by sqrt(v), so a gradient element near 0 whose last bits
    differ between thread counts (another reduction order) moves its weight by up to lr in either direction."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _model(seed)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
        out = update_policy(model, opt, batch, cfg.learner_settings())
    finally:
        torch.set_num_threads(threads)
    return {"grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            "weights": {k: v.clone() for k, v in model.state_dict().items()}, "metrics": out}


def _sharded_step(rank: int, world: int, cfg: RunConfig, batch: Batch, *, seed: int = 0, mixed_precision="none",
                  activation_checkpointing=False):
    from rlvr.distributed.fsdp import fsdp_update_policy, shard_model, shard_rows

    model = shard_model(_model(seed), mixed_precision=mixed_precision,
                        activation_checkpointing=activation_checkpointing)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    out = fsdp_update_policy(model, opt, shard_rows(batch, rank, world), cfg.learner_settings())
    grads = {_clean(n): p.grad.full_tensor() for n, p in model.named_parameters()}
    return model, opt, grads, out


def _assert_close_dicts(got: dict, want: dict, tol: float, what: str) -> None:
    assert set(got) == set(want), f"{what}: keys differ {set(got) ^ set(want)}"
    for k in want:
        torch.testing.assert_close(got[k].float(), want[k].float(), atol=tol, rtol=0, msg=lambda m: f"{what} {k}: {m}")


# --------------------------------------------------------------------------- (a) 2 ranks == 1 rank
def _worker_grad_equivalence(rank, world, cases):
    from rlvr.distributed.sharded_checkpoint import export_full_state_dict

    for cfg, batch, ref in cases:
        model, _, grads, out = _sharded_step(rank, world, cfg, batch)
        assert all(p.grad.placements[0].is_shard() for p in model.parameters())  # really sharded
        _assert_close_dicts(grads, ref["grads"], TOL, f"grad ({cfg.algorithm.loss_agg})")
        weights = export_full_state_dict(model, rank0_only=False)
        _assert_close_dicts(weights, ref["weights"], 1e-5, "weight after AdamW")
        m = ref["metrics"]
        for k in ("grad_norm", "loss", "clip_frac", "entropy", "logprob_mismatch"):
            if k in m:
                assert abs(out[k] - m[k]) < 1e-5, (k, out[k], m[k])
        assert out["learner_tokens"] == m["learner_tokens"] and out["learner_seqs"] == m["learner_seqs"]


def test_two_ranks_match_one_process_gradient_and_step(tmp_path):
    """Global token-mean normaliser, uneven rows per rank, skipped zero-advantage rows, idle passes."""
    batch = _batch()
    cases = []
    for cfg in (_cfg(micro_batch_size=2, loss_agg="token_mean"),  # rank 0: 3 learner rows, rank 1: 2
                _cfg(micro_batch_size=1, loss_agg="seq_mean_token_mean"),  # rank 1 runs an idle pass
                _cfg(micro_batch_size=4, loss_agg="token_mean", ppo_epochs=2)):
        cases.append((cfg, batch, _reference_step(cfg, batch)))
    # the per-rank token counts really differ, so a per-rank normaliser would give a different gradient
    from rlvr.distributed.fsdp import shard_rows

    assert shard_rows(batch, 0, 2).completion_mask.sum() != shard_rows(batch, 1, 2).completion_mask.sum()
    _spawn(tmp_path, 2, _worker_grad_equivalence, cases)


def _worker_mini_batches(rank, world, cfg, batch, ref):
    from rlvr.distributed.fsdp import fsdp_update_policy, shard_model
    from rlvr.distributed.sharded_checkpoint import export_full_state_dict

    model = shard_model(_model(), mixed_precision="none")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    mine = torch.arange(rank * 4, rank * 4 + 4)  # rank 0: rows 0-3, rank 1: rows 4-7
    out = fsdp_update_policy(model, opt, type(batch)(**{k: None if v is None else v[mine]
                                                         for k, v in vars(batch).items()}), cfg.learner_settings())
    grads = {_clean(n): p.grad.full_tensor() for n, p in model.named_parameters()}
    _assert_close_dicts(grads, ref["grads"], TOL, "last mini-batch's gradient")
    _assert_close_dicts(export_full_state_dict(model, rank0_only=False), ref["weights"], 1e-5, "weights")
    assert out["clip_frac"] > 0 and abs(out["clip_frac"] - ref["metrics"]["clip_frac"]) < 1e-6


def test_two_ranks_with_mini_batches_match_one_process(tmp_path):
    """Each rank splits its own rows into the mini-batches (mini-batch m is the union of every rank's m-th part):
    two ranks holding rows 0-3 and 4-7 with two mini-batches are one process with mini-batches {0, 1, 4, 5} and
    {2, 3, 6, 7}.  The logp_old pass before the first step, the per-mini-batch global normalisers (rank 1's
    zero-advantage rows leave it one micro-batch short: idle passes) and the clip after the first step."""
    batch = _batch(rows=8)
    batch.advantages[[5, 6]] = 0.0
    cfg = _cfg(micro_batch_size=1)
    cfg.algorithm.mini_batches, cfg.algorithm.clip_high, cfg.train.lr = 2, 0.28, 0.05
    order = torch.tensor([0, 1, 4, 5, 2, 3, 6, 7])
    ref = _reference_step(cfg, type(batch)(**{k: None if v is None else v[order] for k, v in vars(batch).items()}))
    assert ref["metrics"]["clip_frac"] > 0  # the second optimizer step sees moved weights
    _spawn(tmp_path, 2, _worker_mini_batches, cfg, batch, ref)


def test_shard_rows_partitions_and_balances_learner_rows():
    from rlvr.distributed.fsdp import shard_rows

    batch = _batch(rows=9)
    parts = [shard_rows(batch, r, 3) for r in range(3)]
    assert sorted(torch.cat([p.advantages for p in parts]).tolist()) == sorted(batch.advantages.tolist())
    learner = [int((p.advantages != 0).sum()) for p in parts]
    assert max(learner) - min(learner) <= 1


# --------------------------------------------------------------------------- (b) N -> M checkpoints
def _full_optim_state(model, opt) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    osd = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {f"{_clean(k)}.{s}": torch.as_tensor(v).clone() for k, st in osd.get("state", {}).items() for s, v in st.items()}  # rank 0 only


def _worker_save(rank, world, cfg, batch, out_dir, ref_path):
    from rlvr.distributed.sharded_checkpoint import export_full_state_dict, save_checkpoint_sharded
    from rlvr.learner.update import make_scheduler

    model, opt, _, _ = _sharded_step(rank, world, cfg, batch)
    sched = make_scheduler(opt, cfg.schedule_settings())
    sched.step()
    path = save_checkpoint_sharded(out_dir, 1, model, opt, sched, {"data_position": 7}, tokenizer=make_tokenizer(),
                                   hf_export=True)
    weights = export_full_state_dict(model)
    optim = _full_optim_state(model, opt)
    if rank == 0:
        assert sorted(p.name for p in (path / "dcp").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
        torch.save({"weights": weights, "optim": optim}, ref_path)


def test_checkpoint_saved_on_two_ranks_loads_in_one_process(tmp_path):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from rlvr.distributed.sharded_checkpoint import load_checkpoint_sharded
    from rlvr.learner.checkpoint import latest_checkpoint
    from rlvr.learner.update import make_scheduler

    cfg, batch = _cfg(), _batch()
    _spawn(tmp_path, 2, _worker_save, cfg, batch, tmp_path / "run", tmp_path / "ref.pt")
    ref = torch.load(tmp_path / "ref.pt")
    ckpt = latest_checkpoint(tmp_path / "run")
    assert ckpt is not None and ckpt.name == "step-000001"

    model = _model(seed=1)  # different initial weights: the load must overwrite them
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    sched = make_scheduler(opt, cfg.schedule_settings())
    state = load_checkpoint_sharded(ckpt, model, opt, sched)
    assert state["step"] == 1 and state["data_position"] == 7 and state["world_size"] == 2
    assert sched.last_epoch == 1
    _assert_close_dicts(model.state_dict(), ref["weights"], 0, "weights 2 -> 1")
    _, osd = get_state_dict(model, opt)
    got = {f"{k}.{s}": torch.as_tensor(v) for k, st in osd["state"].items() for s, v in st.items()}
    _assert_close_dicts(got, ref["optim"], 0, "AdamW state 2 -> 1")
    assert all(int(st["step"]) == 1 for st in opt.state.values())

    # the HF export of the same checkpoint loads as an ordinary model
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(ckpt / "model")
    _assert_close_dicts(hf.state_dict(), ref["weights"], 0, "HF export")


def _worker_load_and_step(rank, world, cfg, batch, ckpt, ref_path):
    from rlvr.distributed.fsdp import fsdp_update_policy, shard_model, shard_rows
    from rlvr.distributed.sharded_checkpoint import export_full_state_dict, load_checkpoint_sharded

    ref = torch.load(ref_path)
    model = shard_model(_model(seed=1), mixed_precision="none")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    state = load_checkpoint_sharded(ckpt, model, opt)
    assert state["world_size"] == 1
    _assert_close_dicts(export_full_state_dict(model, rank0_only=False), ref["weights"], 0, "weights 1 -> 2")
    optim = _full_optim_state(model, opt)
    if rank == 0:
        _assert_close_dicts(optim, ref["optim"], 0, "AdamW state 1 -> 2")
    # resuming continues exactly like the one-process run would
    fsdp_update_policy(model, opt, shard_rows(batch, rank, world), cfg.learner_settings())
    _assert_close_dicts(export_full_state_dict(model, rank0_only=False), ref["next_weights"], 1e-5, "next step")


def test_checkpoint_saved_in_one_process_resumes_on_two_ranks(tmp_path):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from rlvr.distributed.sharded_checkpoint import save_checkpoint_sharded

    cfg, batch, batch2 = _cfg(), _batch(), _batch(seed=1)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    update_policy(model, opt, batch, cfg.learner_settings())
    ckpt = save_checkpoint_sharded(tmp_path / "run", 1, model, opt)
    _, osd = get_state_dict(model, opt)
    optim = {f"{k}.{s}": torch.as_tensor(v).clone() for k, st in osd["state"].items() for s, v in st.items()}
    weights = copy.deepcopy(model.state_dict())
    update_policy(model, opt, batch2, cfg.learner_settings())
    torch.save({"weights": weights, "optim": optim, "next_weights": model.state_dict()}, tmp_path / "ref.pt")
    _spawn(tmp_path, 2, _worker_load_and_step, cfg, batch2, ckpt, tmp_path / "ref.pt")


# --------------------------------------------------------------------------- (c) activation checkpointing
def _worker_activation_checkpointing(rank, world, cfg, batch, ref, out_dir):
    from rlvr.distributed.fsdp import decoder_layers
    from rlvr.distributed.sharded_checkpoint import save_checkpoint_sharded

    model, opt, grads, _ = _sharded_step(rank, world, cfg, batch, activation_checkpointing=True)
    assert all(type(m).__name__ == "FSDPCheckpointWrapper" for m in model.model.layers)
    assert len(decoder_layers(model)) == 2
    _assert_close_dicts(grads, ref["grads"], TOL, "grad with activation checkpointing")
    save_checkpoint_sharded(out_dir, 1, model, opt)

    # bf16 mixed precision: bf16 compute, fp32 master weights and gradients, close to the fp32 gradient
    model, _, grads, _ = _sharded_step(rank, world, cfg, batch, mixed_precision="bf16", activation_checkpointing=True)
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    num = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grads[k] - ref["grads"][k]) for k in grads]))
    den = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in ref["grads"].values()]))
    assert 0 < float(num / den) < 0.05, float(num / den)  # bf16 differs, but only by rounding


def test_activation_checkpointing_same_gradient_and_checkpoint_loads_without_it(tmp_path):
    from rlvr.distributed.sharded_checkpoint import load_checkpoint_sharded

    cfg, batch = _cfg(), _batch()
    ref = _reference_step(cfg, batch)
    _spawn(tmp_path, 2, _worker_activation_checkpointing, cfg, batch, ref, tmp_path / "run")
    model = _model(seed=1)
    load_checkpoint_sharded(tmp_path / "run" / "checkpoints" / "step-000001", model)
    _assert_close_dicts(model.state_dict(), ref["weights"], 1e-5, "weights saved with activation checkpointing")


# --------------------------------------------------------------------------- the recipe on 2 ranks
def _parity(completion: str, reference: str):
    from rlvr.types import Verdict

    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _recipe_cfg(out: Path, *extra: str) -> RunConfig:
    from rlvr.config import load_config

    return load_config(RunConfig, None, [
        f"train.output_dir={out}", "train.steps=2", "train.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=8", "train.micro_batch_size=3", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=1", "train.progress=false", "eval.num_problems=4", "eval.max_new_tokens=6",
        "train.seed=3", "distributed.fsdp=true", "distributed.mixed_precision=none", *extra])


def _worker_recipe(rank, world, out, extra):
    from rlvr.recipes.run import train
    from rlvr.types import Problem

    problems = [Problem(id=f"t{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(10)]
    tok = make_tokenizer()
    summary = train(_recipe_cfg(out, *extra), model=make_model(tok), tokenizer=tok,
                    problems=(problems, problems[:4]), verifier=_parity)
    assert summary["world_size"] == world


def test_recipe_runs_on_two_ranks_and_resumes_on_one(tmp_path):
    """rlvr train with distributed.fsdp=true: 2 steps on 2 gloo ranks, then step 3 resumed in 1 rank."""
    from rlvr.models import load_policy
    from rlvr.learner.checkpoint import latest_checkpoint
    from rlvr.trackers import read_metrics

    out = tmp_path / "run"
    _spawn(tmp_path, 2, _worker_recipe, out, ())
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["world_size"] == 2 for r in rows)
    assert all(0 <= r["accuracy"] <= 1 and 0 < r["response_length"] <= 8 for r in rows)
    # rollouts of both ranks are counted: 2 prompts x 4 samples per step
    assert [r["rollouts"] for r in rows] == [8, 16]
    # the sampler copies are re-synced after every update: the learner sees the sampler's log-probs
    assert all(r["logprob_mismatch"] < 1e-4 for r in rows if r["learner_seqs"])
    ckpt = latest_checkpoint(out)
    assert ckpt.name == "step-000002" and (out / "eval_before.json").is_file() and (out / "eval_after.json").is_file()
    hf, _ = load_policy(str(ckpt / "model"))  # the HF export is an ordinary model directory

    _spawn(tmp_path, 1, _worker_recipe, out, ("train.steps=3", "train.resume=true", "eval.before_training=false"))
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["world_size"] == 1 and rows[-1]["rollouts"] == 24
    assert latest_checkpoint(out).name == "step-000003"
    resumed, _ = load_policy(str(out / "checkpoints" / "step-000003" / "model"))
    assert any(not torch.equal(a, b) for a, b in zip(hf.state_dict().values(), resumed.state_dict().values()))


def test_recipe_rejects_what_it_does_not_support(tmp_path):
    with pytest.raises(ValueError, match="distributed.fsdp=true does not support: model.lora.enabled"):
        _recipe_cfg(tmp_path, "model.lora.enabled=true")
