"""What `rlvr train` refuses before its model loads: unwritable directories, a token limit beyond the model's
context, an estimated peak memory above the memory available (printed at the start of every run)."""

from __future__ import annotations

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig

TINY_RUN = ["train.steps=1", "train.prompts_per_step=1", "rollout.group_size=2", "rollout.max_new_tokens=4",
            "train.micro_batch_size=2", "train.save_every=0", "train.progress=false", "eval.before_training=false",
            "eval.after_training=false", "task.params.num_train=8", "task.num_heldout=4"]


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading the policy fails the test: the checks must come first."""
    import rlvr.recipes.rl as rl

    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the checks")

    monkeypatch.setattr(rl, "load_policy", refuse)


def test_a_token_limit_beyond_the_models_context_is_refused_before_it_loads(tmp_path, tiny_model_dir, capsys,
                                                                          no_model_load):
    # the tiny model's config.json: max_position_embeddings 512
    rc = main(["train", f"model.name={tiny_model_dir}", f"train.output_dir={tmp_path / 'run'}", *TINY_RUN,
               "rollout.max_new_tokens=600"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("rlvr: error: rollout.max_new_tokens: 600 new tokens plus the longest prompt")
    assert "(512 tokens, max_position_embeddings" in err and len(err.splitlines()) == 1


def test_a_run_above_the_available_memory_is_refused_with_the_estimate_printed(tmp_path, tiny_model_dir, capsys,
                                                                              monkeypatch, no_model_load):
    import rlvr.recipes.preflight as preflight

    monkeypatch.setattr(preflight, "available_memory", lambda device: 10**6)  # 1 MB left
    rc = main(["train", f"model.name={tiny_model_dir}", f"train.output_dir={tmp_path / 'run'}", *TINY_RUN])
    out = capsys.readouterr()
    assert rc == 2
    assert "memory: estimated peak " in out.out and "weights" in out.out and "0.0 GB available" in out.out
    assert out.err.startswith("rlvr: error: train.check_memory: the run needs an estimated 0.5 GB, more than the "
                              "0.0 GB available") and "train.check_memory=false" in out.err


def test_check_memory_false_runs_anyway(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import rlvr.recipes.preflight as preflight

    monkeypatch.setattr(preflight, "available_memory", lambda device: 10**6)
    rc = main(["train", f"model.name={tiny_model_dir}", f"train.output_dir={tmp_path / 'run'}", *TINY_RUN,
               "train.check_memory=false"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "memory: estimated peak" in out.out


def test_an_unwritable_cache_for_the_bundled_model_is_refused_before_its_conversion(tmp_path, capsys, no_model_load):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc = main(["train", f"model.cache_dir={blocker / 'cache'}", f"train.output_dir={tmp_path / 'run'}", *TINY_RUN])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("rlvr: error: model.cache_dir: the bundled model 'smollm2-135m-instruct' is converted")
    assert f"{blocker} is a file, not a directory" in err


def test_a_misplaced_output_dir_is_named(tmp_path):
    from rlvr.recipes.preflight import check_before_model

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = load_config(RunConfig, None, [f"train.output_dir={blocker / 'run'}"])
    with pytest.raises(ConfigError, match=r"^train.output_dir: cannot write the run there: .* is a file"):
        check_before_model(cfg, [])


def test_the_estimate_reads_an_injected_models_shape(tmp_path, tiny_model):
    from rlvr.recipes.preflight import check_before_model
    from rlvr.types import Problem

    cfg = load_config(RunConfig, None, [f"train.output_dir={tmp_path}", "train.check_memory=false"])
    printed = []
    est = check_before_model(cfg, [Problem(id="1", prompt="What is 1 + 1?", answer="2")], model=tiny_model,
                             out=printed.append)
    assert est.parts["weights"] == 4 * sum(p.numel() for p in tiny_model.parameters())
    assert printed and printed[0].startswith("memory: estimated peak")
