"""What loading prints: one line explaining the bundled model's one-off conversion, and none of transformers'
own progress bars ("Loading weights", "Writing model shards"), at a load or at a later save."""

from __future__ import annotations

from pathlib import Path

import transformers

from conftest import make_model
from rlvr.models import loader


def test_loading_and_saving_draw_no_transformers_bars(tiny_model_dir, tmp_path, capsys):
    capsys.readouterr()
    model, _ = loader.load_policy(str(tiny_model_dir))
    model.save_pretrained(tmp_path / "saved")  # a checkpoint later in the run
    out = capsys.readouterr()
    assert "Loading weights" not in out.err and "Writing model shards" not in out.err
    assert out.out == "" and (tmp_path / "saved" / "config.json").is_file()


def test_the_conversion_says_what_it_does_once(tiny_tokenizer, tmp_path, monkeypatch, capsys):
    gguf = tmp_path / "pkg" / "Tiny.Q4_1.gguf"
    monkeypatch.setattr(loader, "_bundled_gguf", lambda name: gguf)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", staticmethod(lambda *a, **k: tiny_tokenizer))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        staticmethod(lambda *a, **k: make_model(tiny_tokenizer)))
    capsys.readouterr()
    path = loader.resolve_model_path(loader.DEFAULT_MODEL, tmp_path / "cache")
    out = capsys.readouterr()
    want = tmp_path / "cache" / "models" / loader.DEFAULT_MODEL
    assert Path(path) == want and (want / "config.json").is_file()
    assert out.out == (f"converting the bundled model's quantised GGUF (Tiny.Q4_1.gguf) into a float32 checkpoint "
                       f"in {want}: once; later runs load it from there\n")
    assert "Writing model shards" not in out.err
    loader.resolve_model_path(loader.DEFAULT_MODEL, tmp_path / "cache")
    assert capsys.readouterr().out == ""
