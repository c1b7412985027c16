"""On-policy distillation through the real wiring: config -> recipe (teacher loaded frozen, its chunked log-prob
pass) -> credit stage -> learner, on the tiny model as the student and another tiny model (same tokenizer, seed 1)
as the teacher.

The hand values come from independent full-logits forward passes (``torch.log_softmax`` of each model's logits
divided by ``rollout.temperature``): each token's advantage must be ``coef * (log pi_T - log pi_S) + reward_coef
* A_grpo``, and the learner's gradient the policy gradient ``-1/N sum_t A_t grad log pi_S(y_t)`` (token mean, ratio
1 at the first optimizer step).  A flipped sign, a dropped term or a wrong temperature fails them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import make_model, make_tokenizer, save_tiny_model
from rl_harness import RecordingSGD, assert_grads_close, grads_of, learner_logprobs, recipe, rollouts, samples, tiny
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.learner.batching import completion_start, policy_logprobs
from rlvr.recipes.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
COMPLETIONS = ["ab", "cdefgh", "ijk", "lmnopq"]
REWARDS = [1.0, 0.0, 1.0, 0.0]


@pytest.fixture
def teacher_dir(tmp_path):
    """Another tiny model with the student's tokenizer: the same architecture, weights drawn with seed 1."""
    return save_tiny_model(tmp_path / "teacher", seed=1)


def full_logprobs(model, b, temperature: float = 1.0) -> torch.Tensor:
    """log pi(y_t) of every completion token from the model's whole [B, T, V] logits (no rlvr helper), [B, C]."""
    start = completion_start(b)
    pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos).logits
    lp = torch.log_softmax(logits[:, start - 1:-1].double() / temperature, dim=-1)
    return lp.gather(-1, b.input_ids[:, start:, None]).squeeze(-1).float() * b.completion_mask[:, start:]


def independent_teacher(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_each_tokens_advantage_and_the_gradient_are_the_hand_computed_distillation(tmp_path, teacher_dir,
                                                                                  temperature):
    tok, model = tiny()
    r = recipe(tmp_path / "run", tok, model, f"distill.teacher={teacher_dir}", "rollout.group_size=4",
               f"rollout.temperature={temperature}", "distill.chunk_size=3", "train.micro_batch_size=2",
               "train.max_grad_norm=0")
    assert r.teacher is not None and not r.teacher.training
    assert not any(p.requires_grad for p in r.teacher.parameters())
    sc = r.advantages(rollouts(samples(tok, COMPLETIONS, model=model), REWARDS))
    b = sc.batch
    start = completion_start(b)
    m = b.completion_mask[:, start:]
    lt = full_logprobs(independent_teacher(teacher_dir), b, temperature)
    ls = full_logprobs(model, b, temperature)
    want = (lt - ls) * m  # coef 1, reward_coef 0: the negative per-token reverse KL
    assert float(want.abs().min()) >= 0 and float((want != 0).float().sum()) == float(m.sum())  # every token counts
    assert sc.advantages.shape == b.input_ids.shape
    torch.testing.assert_close(sc.advantages[:, start:], want, rtol=1e-4, atol=1e-5)
    assert float(sc.advantages[:, :start].abs().sum()) == 0.0
    assert sc.reward_row["distill/reverse_kl"] == pytest.approx(float(((ls - lt) * m).sum() / m.sum()), abs=1e-5)
    assert sc.reward_row["distill/teacher_logprob"] == pytest.approx(float((lt * m).sum() / m.sum()), abs=1e-5)

    # the learner: one optimizer step at lr 0 records the gradient of the real loss
    r.optimizer = RecordingSGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    learn = r.learn(0, sc)
    logp = learner_logprobs(model, b, temperature)
    assert_grads_close(r.optimizer.seen[0], grads_of(-(want * logp).sum() / m.sum(), model))
    # at ratio 1 the token-mean loss is -mean_t A_t: the mean reverse KL
    assert learn["loss"] == pytest.approx(sc.reward_row["distill/reverse_kl"], abs=1e-5)


def test_kdrl_adds_grpos_advantage_weighted_by_reward_coef(tmp_path, teacher_dir):
    tok, model = tiny()
    r = recipe(tmp_path / "run", tok, model, f"distill.teacher={teacher_dir}", "rollout.group_size=4",
               "distill.coef=2", "distill.reward_coef=0.5", "distill.chunk_size=4")
    sc = r.advantages(rollouts(samples(tok, COMPLETIONS, model=model), REWARDS))
    b = sc.batch
    start = completion_start(b)
    m = b.completion_mask[:, start:]
    lt, ls = full_logprobs(independent_teacher(teacher_dir), b), full_logprobs(model, b)
    # GRPO on [1, 0, 1, 0]: mean 0.5, sample std sqrt(1/3); (r - mean) / (std + 1e-6)
    grpo = (torch.tensor(REWARDS) - 0.5) / ((1 / 3) ** 0.5 + 1e-6)
    want = (2.0 * (lt - ls) + 0.5 * grpo[:, None]) * m
    torch.testing.assert_close(sc.advantages[:, start:], want, rtol=1e-4, atol=1e-5)
    assert sc.rewards.tolist() == REWARDS and "distill/rl_adv_abs_mean" in sc.reward_row


def test_chunked_teacher_logprobs_equal_unchunked_and_never_build_full_logits(teacher_dir):
    from rlvr.learner.update import distill_logprobs
    from rlvr.models.teacher import load_teacher

    tok, model = tiny()
    teacher = load_teacher(str(teacher_dir))
    b = __import__("rl_harness").batch(tok, COMPLETIONS, [0.0] * 4, model=model)
    start = completion_start(b)
    settings = load_config(RunConfig, None, ["train.micro_batch_size=3", "rollout.temperature=0.8"]).learner_settings()
    calls = []
    teacher.get_output_embeddings().register_forward_hook(lambda *a: calls.append(1))  # the full-logits head
    with torch.no_grad():
        unchunked = policy_logprobs(teacher, b.input_ids, b.attention_mask, start, 0.8)[0] * b.completion_mask[:, start:]
    assert calls, "the unchunked path runs the LM head module"
    torch.testing.assert_close(unchunked, full_logprobs(teacher, b, 0.8), rtol=1e-5, atol=1e-5)
    for chunk in (1, 3, 1000):
        calls.clear()
        t, s = distill_logprobs(model, teacher, b, settings, "cpu", chunk)
        assert not calls, f"chunk_size={chunk}: the teacher's head ran on whole logits"
        torch.testing.assert_close(t[:, start:], unchunked, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(s[:, start:], full_logprobs(model, b, 0.8), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- refused at load, in one line
@pytest.fixture
def no_model_load(monkeypatch):
    """Loading any model's weights fails the test: the checks must come first."""
    import rlvr.models.teacher as teacher
    import rlvr.recipes.rl as rl

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the checks")

    monkeypatch.setattr(rl, "load_policy", refuse)
    monkeypatch.setattr(teacher, "load_policy", refuse)


TINY_RUN = ["train.steps=1", "train.prompts_per_step=1", "rollout.group_size=2", "rollout.max_new_tokens=4",
            "train.micro_batch_size=2", "train.save_every=0", "train.progress=false", "eval.before_training=false",
            "eval.after_training=false", "task.params.num_train=8", "task.num_heldout=4", "train.threads=1"]


def _other_tokenizer_teacher(path: Path, change: str) -> Path:
    tok = make_tokenizer()
    if change == "extra token":
        tok.add_tokens(["<extra>"])
    elif change == "eos":
        tok.eos_token = "<unk>"
    make_model(tok, seed=1).save_pretrained(path)
    tok.save_pretrained(path)
    if change == "swapped ids":  # same size, two tokens trade ids
        f = path / "tokenizer.json"
        data = json.loads(f.read_text())
        vocab = data["model"]["vocab"]
        vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
        f.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, why", [("extra token", "92 vs 93 tokens"), ("swapped ids", "token 'a' has id"),
                                         ("eos", "eos_token_id 2 vs 3")])
def test_a_teacher_with_another_tokenizer_is_refused_naming_both(tmp_path, tiny_model_dir, capsys, no_model_load,
                                                                  change, why):
    teacher = _other_tokenizer_teacher(tmp_path / "teacher", change)
    rc = main(["train", f"model.name={tiny_model_dir}", f"distill.teacher={teacher}",
               f"train.output_dir={tmp_path / 'run'}", *TINY_RUN])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"rlvr: error: distill.teacher: the teacher '{teacher}' has another tokenizer than the "
                          f"student '{tiny_model_dir}'") and why in err and len(err.splitlines()) == 1, err


def test_the_same_tokenizer_passes_the_check(tiny_model_dir, teacher_dir):
    from rlvr.models.loader import load_tokenizer
    from rlvr.models.teacher import check_teacher_tokenizer, tokenizer_mismatch

    assert tokenizer_mismatch(load_tokenizer(str(tiny_model_dir)), load_tokenizer(str(teacher_dir))) is None
    check_teacher_tokenizer(make_tokenizer(), "student", str(teacher_dir))


@pytest.mark.parametrize("teacher, why", [("/nonexistent/teacher", "no such directory: /nonexistent/teacher"),
                                          ("EMPTY", "holds no config.json"),
                                          ("smollm2-135m-instruc", "did you mean the bundled")])
def test_a_teacher_that_does_not_exist_is_refused_before_any_model_loads(tmp_path, tiny_model_dir, capsys,
                                                                          no_model_load, teacher, why):
    if teacher == "EMPTY":
        teacher = str(tmp_path / "empty")
        Path(teacher).mkdir()
    rc = main(["train", f"model.name={tiny_model_dir}", f"distill.teacher={teacher}",
               f"train.output_dir={tmp_path / 'run'}", *TINY_RUN])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("rlvr: error: distill.teacher: ") and why in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_a_checkpoint_directory_is_a_teacher(tmp_path, teacher_dir):
    from rlvr.models.teacher import load_teacher, teacher_path_problem

    ckpt = tmp_path / "run" / "checkpoints" / "step-4"
    ckpt.mkdir(parents=True)
    teacher_dir.rename(ckpt / "model")
    assert teacher_path_problem(str(ckpt)) is None
    t = load_teacher(str(ckpt))
    assert not t.training and not any(p.requires_grad for p in t.parameters())


@pytest.mark.parametrize("overrides, why", [
    (["distill.coef=-1"], "distill.coef: must be >= 0, got -1"),
    (["distill.reward_coef=-0.5"], "distill.reward_coef: must be >= 0, got -0.5"),
    (["distill.chunk_size=0"], "distill.chunk_size: must be >= 1, got 0"),
    (["distill.coef=0", "distill.reward_coef=0"], "distill.coef and distill.reward_coef are both 0"),
    (["distill.teacher=null", "distill.coef=2"], r"distill.coef: distill.coef=2.0 cannot act: on-policy distillation "
                                                 r"is off \(distill.teacher=null\)"),
    (["distill.dtype=float16"], "distill.dtype"),
    (["distill.teacher=null", "distill.sleep_while_learning=false"], r"distill.sleep_while_learning: .* cannot act"),
    (["distill.teacher=x", "distributed.fsdp=true"], "distributed.fsdp=true does not support: .*distill.teacher"),
])
def test_distill_options_out_of_range_are_refused_naming_the_key(overrides, why):
    extra = [] if any(o.startswith("distill.teacher") for o in overrides) else ["distill.teacher=some/hub-id"]
    with pytest.raises(ConfigError, match=why):
        load_config(RunConfig, None, [*extra, *overrides])


def test_the_memory_estimate_counts_the_teacher(teacher_dir):
    from rlvr.models.loader import model_config
    from rlvr.recipes.preflight import run_sizes
    from rlvr.utils.memory import ModelShape, estimate_training_memory

    shape = ModelShape.from_config(model_config(str(teacher_dir)))
    without = estimate_training_memory(shape, run_sizes(load_config(RunConfig, None, []), shape, 40))
    for dtype, nbytes in (("policy", 4), ("bfloat16", 2)):
        cfg = load_config(RunConfig, None, [f"distill.teacher={teacher_dir}", f"distill.dtype={dtype}",
                                            "distill.sleep_while_learning=false"])
        sizes = run_sizes(cfg, shape, 40)
        assert sizes.teacher_weight_bytes == shape.params * nbytes and not sizes.teacher_sleeps
        assert sizes.teacher_pass_bytes > 0
        with_teacher = estimate_training_memory(shape, sizes)
        assert with_teacher.parts["teacher"] == shape.params * nbytes
        assert with_teacher.total - without.total == shape.params * nbytes
    # sleeping (the default), the teacher is resident only in its own pass: the learner step stays the peak here
    sizes = run_sizes(load_config(RunConfig, None, [f"distill.teacher={teacher_dir}"]), shape, 40)
    assert sizes.teacher_sleeps
    asleep = estimate_training_memory(shape, sizes)
    assert "teacher" not in asleep.parts and asleep.total == without.total


# ----------------------------------------------------------------------------- the shipped config runs
def test_the_distillation_config_trains_the_tiny_student_for_two_steps(tmp_path, tiny_model_dir, teacher_dir, capsys):
    from rlvr.trackers import read_metrics

    out = tmp_path / "run"
    rc = main(["train", str(ROOT / "configs" / "distill_arithmetic.yaml"), f"model.name={tiny_model_dir}",
               f"distill.teacher={teacher_dir}", f"train.output_dir={out}", "train.steps=2", "train.threads=1",
               "train.progress=false", "eval.num_problems=4", "eval.extra_temperatures=[]", "rollout.dtype=float32",
               "train.prompts_per_step=2", "rollout.max_new_tokens=8", "eval.max_new_tokens=8"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["distill/reverse_kl"] != 0 and row["distill/teacher_logprob"] < 0
        assert row["loss"] == pytest.approx(row["distill/reverse_kl"], abs=1e-4)  # coef 1, ratio 1: -mean_t A_t
        assert "reward_mean" in row  # rewards still logged
    assert load_config(RunConfig, out / "config.yaml").distill.teacher == str(teacher_dir)


# ----------------------------------------------------------------------------- distill.sleep_while_learning
def _numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("how, dtype", [("files", "policy"), ("files", "bfloat16"), ("rebuild", "policy")])
def test_a_sleeping_teacher_is_freed_between_passes_and_scores_bit_for_bit_the_same(tmp_path, teacher_dir,
                                                                                    monkeypatch, how, dtype):
    from rlvr.models.teacher import TeacherSleep

    if how == "rebuild":  # files that do not hold the parameters under their names: loaded again as at the start
        monkeypatch.setattr(TeacherSleep, "file_plan", staticmethod(lambda *a, **k: None))
    tok, model = tiny()
    common = [f"distill.teacher={teacher_dir}", f"distill.dtype={dtype}", "rollout.group_size=4",
              "distill.chunk_size=3", "train.micro_batch_size=2"]
    awake = recipe(tmp_path / "awake", tok, model, *common, "distill.sleep_while_learning=false")
    assert awake.teacher_sleep is None and _numel(awake.teacher) > 0
    asleep = recipe(tmp_path / "asleep", tok, model, *common)  # the default: sleeping
    ts = asleep.teacher_sleep
    assert (ts.plan is None) == (how == "rebuild")
    assert ts.sleeping and _numel(asleep.teacher) == 0  # freed once loaded: not resident while sampling either
    ro = rollouts(samples(tok, COMPLETIONS, model=model), REWARDS)
    want = awake.advantages(ro)
    for _ in range(2):  # woken for the pass, freed after it, and again
        got = asleep.advantages(ro)
        assert ts.sleeping and _numel(asleep.teacher) == 0
        assert torch.equal(got.advantages, want.advantages)
        assert got.reward_row["distill/teacher_logprob"] == want.reward_row["distill/teacher_logprob"]
        assert got.reward_row["distill/wake_time"] >= 0 and "distill/wake_time" not in want.reward_row
    ts.wake()
    for (name, a), (_, b) in zip(asleep.teacher.state_dict().items(), awake.teacher.state_dict().items()):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert not any(p.requires_grad for p in asleep.teacher.parameters()) and not asleep.teacher.training
    t = asleep.teacher
    assert t.get_output_embeddings().weight is t.get_input_embeddings().weight  # the tied head still shares


def test_two_steps_with_a_sleeping_teacher_train_the_same_weights(tmp_path, tiny_model_dir, teacher_dir, capsys):
    from safetensors.torch import load_file

    from rlvr.trackers import read_metrics

    runs = {}
    for sleep in ("true", "false"):
        out = tmp_path / f"run-{sleep}"
        rc = main(["train", str(ROOT / "configs" / "distill_arithmetic.yaml"), f"model.name={tiny_model_dir}",
                   f"distill.teacher={teacher_dir}", f"distill.sleep_while_learning={sleep}",
                   f"train.output_dir={out}", "train.steps=2", "train.save_every=2", "train.threads=1",
                   "train.progress=false", "eval.before_training=false", "eval.after_training=false",
                   "rollout.dtype=float32", "train.prompts_per_step=2", "rollout.max_new_tokens=8"])
        assert rc == 0, capsys.readouterr().err
        runs[sleep] = (load_file(out / "checkpoints" / "step-000002" / "model" / "model.safetensors"),
                       read_metrics(out / "metrics.jsonl"))
    (w_on, rows_on), (w_off, rows_off) = runs["true"], runs["false"]
    assert w_on.keys() == w_off.keys()
    for k in w_on:
        assert torch.equal(w_on[k], w_off[k]), k
    for a, b in zip(rows_on, rows_off):
        assert a["distill/teacher_logprob"] == b["distill/teacher_logprob"] and a["loss"] == b["loss"]
    assert rows_on[0]["lr"] > 0 and rows_on[1]["grad_norm"] > 0  # the weights did move
