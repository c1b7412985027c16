"""A misspelt bundled model name gets a "did you mean" before any hub lookup (and when the config loads); a
model's config.json is read without its weights; the conversion cache is checked before converting."""

from __future__ import annotations

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.models import ModelNotFoundError, resolve_model_path
from rlvr.models import loader
from rlvr.recipes.config import RunConfig


def test_a_typo_of_the_bundled_name_is_refused_before_any_hub_lookup(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("looked up on the hub"))
    with pytest.raises(ModelNotFoundError, match="did you mean the bundled 'smollm2-135m-instruct'"):
        resolve_model_path("smollm2-135m-instruc")
    assert loader.bundled_typo("smolm2-135m-instruct") == "smollm2-135m-instruct"
    for other in ("gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m-instruct", "SmolLM2-135M-Instruct"):
        assert loader.bundled_typo(other) is None, other  # hub ids and the bundled name itself


def test_a_typo_is_refused_when_the_config_loads(capsys):
    with pytest.raises(ConfigError, match=r"override 'model.name=smollm2-135m-instruc': model.name: unknown model "
                                          r"'smollm2-135m-instruc': did you mean"):
        load_config(RunConfig, None, ["model.name=smollm2-135m-instruc"])


def test_a_local_directory_with_a_close_name_is_a_model(tmp_path, monkeypatch, tiny_model_dir):
    local = tmp_path / "smollm2-135m-instruc"
    tiny_model_dir.rename(local)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("smollm2-135m-instruc") == "smollm2-135m-instruc"
    assert load_config(RunConfig, None, ["model.name=smollm2-135m-instruc"]).model.name == "smollm2-135m-instruc"


def test_model_config_reads_config_json_without_weights(tmp_path, tiny_model_dir):
    assert loader.model_config(str(tiny_model_dir))["max_position_embeddings"] == 512
    ckpt = tmp_path / "ckpt"
    (ckpt / "model").mkdir(parents=True)
    (ckpt / "model" / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    assert loader.model_config(str(ckpt))["hidden_size"] == 32  # an rlvr checkpoint directory
    # the bundled model before its conversion: its known sizes
    bundled = loader.model_config("smollm2-135m-instruct", cache=tmp_path / "empty-cache")
    assert bundled["max_position_embeddings"] == 8192 and bundled["num_hidden_layers"] == 30
    assert loader.model_config("no-such-org/no-such-model") is None


def test_an_unwritable_cache_is_refused_before_the_conversion(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_bundled_gguf", lambda name: tmp_path / "model.gguf")
    monkeypatch.setattr(loader, "_convert_gguf", lambda gguf, out: pytest.fail("converted"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ModelNotFoundError, match=r"cannot convert the bundled model .* is a file, not a directory; "
                                                 r"set model.cache_dir or \$RLVR_CACHE"):
        resolve_model_path("smollm2-135m-instruct", cache=blocker / "cache")
