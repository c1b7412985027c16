"""Tests of rlvr.config: typed pydantic configs from YAML files and dotted key=value overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import pytest
import yaml

from rlvr.config import ConfigError, ConfigModel, config_to_dict, describe_config, load_config, option, save_config

VALIDATED: list[str] = []  # sections in the order their check() ran


class ModelSection(ConfigModel):
    name: str = option("tiny", "model name or path")
    revision: Optional[str] = option(None, "hub revision (None: latest)")
    dtype: Literal["float32", "bfloat16"] = option("float32", "parameter dtype")
    cache_dir: str = option("cache", "where converted weights live")


class TrainSection(ConfigModel):
    steps: int = option(100, "number of optimizer steps")
    lr: float = option(1e-5, "peak learning rate")
    resume: bool = option(False, "continue from the latest checkpoint")
    schedule: Literal["constant", "cosine"] = option("constant", "learning-rate schedule")
    betas: list[float] = option([0.9, 0.99], "AdamW betas")
    max_tokens: int | None = option(None, "token budget (None: unlimited)")

    def check(self) -> None:
        VALIDATED.append("train")
        if self.steps < 0:
            raise ValueError("steps must be >= 0")


class TaskSection(ConfigModel):
    operators: list[str] = option(None, "operators to draw from", default_factory=lambda: ["+"])
    weights: list[int] = option([1, 2], "sampling weights")
    extra: dict[str, float] = option({}, "free-form numeric settings")


class Config(ConfigModel):
    model: ModelSection = option(None, "which model to load", default_factory=ModelSection)
    train: TrainSection = option(None, "", default_factory=TrainSection)
    task: TaskSection = option(None, "", default_factory=TaskSection)
    seed: int = option(0, "global seed")

    def check(self) -> None:
        VALIDATED.append("root")
        if self.train.max_tokens is not None and self.train.max_tokens < self.train.steps:
            raise ValueError("train.max_tokens must be >= train.steps")


class NoDefault(ConfigModel):
    x: int


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(Config, *args, **kwargs)
    return str(info.value)


# ----------------------------------------------------------------------------- loading


def test_defaults():
    cfg = load_config(Config)
    assert cfg == Config()
    assert cfg.train.steps == 100 and cfg.model.cache_dir == "cache"
    assert cfg.task.operators == ["+"] and cfg.task.weights == [1, 2]
    cfg.task.weights.append(3)  # a list default given to option() is copied per instance
    assert Config().task.weights == [1, 2]


def test_yaml_applies_partial_sections(tmp_path):
    path = write(tmp_path, "train:\n  steps: 7\n  lr: 0.001\nmodel:\n  name: big\nseed: 3\n")
    cfg = load_config(Config, path)
    assert (cfg.train.steps, cfg.train.lr, cfg.model.name, cfg.seed) == (7, 0.001, "big", 3)
    assert cfg.train.resume is False and cfg.model.dtype == "float32"  # untouched keys keep defaults
    assert load_config(Config, str(path)) == cfg  # str paths work too


def test_yaml_empty_file_is_defaults(tmp_path):
    assert load_config(Config, write(tmp_path, "")) == Config()
    assert load_config(Config, write(tmp_path, "# only a comment\n")) == Config()


def test_yaml_top_level_must_be_mapping(tmp_path):
    path = write(tmp_path, "- 1\n- 2\n", "list.yaml")
    msg = error_of(path)
    assert str(path) in msg and "mapping" in msg and "list" in msg


def test_overrides_take_precedence_over_yaml_and_apply_in_order(tmp_path):
    path = write(tmp_path, "train:\n  steps: 7\n")
    cfg = load_config(Config, path, ["train.steps=8", "seed=1", "train.steps=9"])
    assert cfg.train.steps == 9 and cfg.seed == 1


def test_overrides_of_each_type():
    cfg = load_config(Config, None, [
        "train.steps=10",
        "train.lr=0.28",
        "train.resume=true",
        "train.schedule=cosine",
        "train.betas=[0.8, 0.95]",
        "train.max_tokens=500",
        "model.name=foo",
        "model.cache_dir=/tmp/weights",
        "task.operators=[+,-]",
        "task.weights=[3,4,5]",
        "task.extra={a: 1.5}",
        "task.extra.b=2",
        "seed=42",
    ])
    assert cfg.train.steps == 10 and type(cfg.train.steps) is int
    assert cfg.train.lr == 0.28
    assert cfg.train.resume is True
    assert cfg.train.schedule == "cosine"
    assert cfg.train.betas == [0.8, 0.95]
    assert cfg.train.max_tokens == 500
    assert cfg.model.name == "foo"
    assert cfg.model.cache_dir == "/tmp/weights"
    assert cfg.task.operators == ["+", "-"]
    assert cfg.task.weights == [3, 4, 5]
    assert cfg.task.extra == {"a": 1.5, "b": 2.0}  # a dotted key sets one entry of a dict field
    assert cfg.seed == 42
    assert load_config(Config, None, ["train.resume=false", "train.resume=True"]).train.resume is True


def test_override_whole_section_with_mapping():
    cfg = load_config(Config, None, ["train.steps=5", "train={lr: 0.5}"])
    assert cfg.train.lr == 0.5 and cfg.train.steps == 5  # a mapping updates, it does not reset


def test_string_field_keeps_raw_text():
    cfg = load_config(Config, None, ["model.name=1e5", "model.revision=0123"])
    assert cfg.model.name == "1e5" and cfg.model.revision == "0123"
    assert load_config(Config, None, ["model.name=true"]).model.name == "true"
    assert load_config(Config, None, ["model.name=null"]).model.name == "null"
    assert load_config(Config, None, ["model.name=[a, b]"]).model.name == "[a, b]"
    assert load_config(Config, None, ["model.name="]).model.name == ""


def test_int_accepted_for_float(tmp_path):
    cfg = load_config(Config, write(tmp_path, "train:\n  lr: 1\n"))
    assert cfg.train.lr == 1.0 and type(cfg.train.lr) is float
    cfg = load_config(Config, None, ["train.lr=2"])
    assert cfg.train.lr == 2.0 and type(cfg.train.lr) is float
    # PyYAML reads 1e-5 (no dot) as a string; float fields accept it anyway
    assert load_config(Config, write(tmp_path, "train:\n  lr: 3e-4\n")).train.lr == pytest.approx(3e-4)
    assert load_config(Config, None, ["train.lr=1e-6"]).train.lr == pytest.approx(1e-6)


def test_float_rejected_for_int():
    assert "train.steps: expected int, got float 2.5" in error_of(None, ["train.steps=2.5"])


def test_bool_rejected_for_int_and_float(tmp_path):
    assert "train.steps: expected int, got bool True" in error_of(None, ["train.steps=true"])
    assert "train.lr: expected float, got bool False" in error_of(None, ["train.lr=false"])
    assert "train.steps: expected int" in error_of(write(tmp_path, "train:\n  steps: yes\n"))


def test_non_bool_rejected_for_bool():
    assert "train.resume: expected bool, got int 1" in error_of(None, ["train.resume=1"])
    assert "train.resume: expected bool, got str 'maybe'" in error_of(None, ["train.resume=maybe"])


def test_wrong_type_names_dotted_key_and_expected_type():
    msg = error_of(None, ["train.steps=ten"])
    assert "train.steps: expected int, got str 'ten'" in msg
    assert "train.steps=ten" in msg  # names the offending override
    assert "train.max_tokens: expected int, got str 'lots'" in error_of(None, ["train.max_tokens=lots"])


def test_unknown_key_suggests_close_match():
    msg = error_of(None, ["train.stepz=3"])
    assert "unknown config key 'train.stepz'" in msg
    assert "did you mean 'train.steps'?" in msg
    assert "known keys in 'train':" in msg and "lr" in msg and "resume" in msg
    far = error_of(None, ["train.qqqqqqqq=3"])
    assert "unknown config key 'train.qqqqqqqq'" in far and "did you mean" not in far


def test_unknown_top_level_key(tmp_path):
    msg = error_of(None, ["sed=1"])
    assert "unknown config key 'sed'" in msg and "did you mean 'seed'?" in msg


def test_nested_unknown_section(tmp_path):
    msg = error_of(None, ["trian.steps=1"])
    assert "unknown config key 'trian'" in msg and "did you mean 'train'?" in msg
    path = write(tmp_path, "trian:\n  steps: 1\n")
    msg = error_of(path)
    assert str(path) in msg and "unknown config key 'trian'" in msg
    msg = error_of(write(tmp_path, "train:\n  lr: 0.1\n  stepz: 1\n", "b.yaml"))
    assert "unknown config key 'train.stepz'" in msg and "did you mean 'train.steps'?" in msg


def test_subkey_of_a_scalar_is_an_error():
    msg = error_of(None, ["train.steps.max=1"])
    assert "'train.steps' is a int, not a section" in msg


def test_section_given_a_scalar(tmp_path):
    msg = error_of(write(tmp_path, "train: 5\n"))
    assert "train: expected a mapping for section TrainSection, got int 5" in msg


@pytest.mark.parametrize("bad", ["train.steps", "train.steps:10", "=3", "train..steps=1", ".steps=1"])
def test_malformed_override(bad):
    msg = error_of(None, [bad])
    assert "malformed override" in msg and repr(bad) in msg and "key=value" in msg


def test_overrides_must_be_a_sequence_not_a_string():
    with pytest.raises(TypeError):
        load_config(Config, None, "train.steps=1")


def test_literal_rejection():
    msg = error_of(None, ["train.schedule=exponential"])
    assert "train.schedule: expected one of 'constant', 'cosine', got str 'exponential'" in msg
    assert "model.dtype: expected one of" in error_of(None, ["model.dtype=float16"])


def test_optional_none(tmp_path):
    cfg = load_config(Config, None, ["model.revision=v2", "train.max_tokens=1000"])
    assert cfg.model.revision == "v2" and cfg.train.max_tokens == 1000
    cfg = load_config(Config, None, ["model.revision=v2", "model.revision=null", "train.max_tokens=~"])
    assert cfg.model.revision is None and cfg.train.max_tokens is None
    cfg = load_config(Config, write(tmp_path, "model:\n  revision: null\ntrain:\n  max_tokens:\n"))
    assert cfg.model.revision is None and cfg.train.max_tokens is None
    assert "model.name: expected str, got NoneType None" in error_of(write(tmp_path, "model:\n  name: null\n"))


def test_list_parsing(tmp_path):
    assert load_config(Config, None, ["task.operators=[+, -, '*']"]).task.operators == ["+", "-", "*"]
    # `*` is a YAML alias marker; a bracketed list that is not valid YAML is split on commas
    assert load_config(Config, None, ["task.operators=[+,-,*]"]).task.operators == ["+", "-", "*"]
    assert load_config(Config, None, ["task.weights=[]"]).task.weights == []
    assert load_config(Config, write(tmp_path, "task:\n  weights: [7, 8]\n")).task.weights == [7, 8]
    assert "task.weights[1]: expected int, got str 'x'" in error_of(None, ["task.weights=[1, x]"])
    msg = error_of(None, ["task.weights=1,2"])
    assert "task.weights: expected list[int], got str '1,2'" in msg and "[a, b]" in msg
    assert "task.extra.a: expected float, got str 'big'" in error_of(None, ["task.extra={a: big}"])


def test_round_trip_save_load(tmp_path):
    cfg = load_config(Config, None, [
        "model.name=1e5", "model.revision=main", "model.cache_dir=/x/y", "train.steps=3", "train.lr=3e-4",
        "train.betas=[0.5, 0.6]", "train.max_tokens=10", "task.operators=[+,*]", "task.extra={k: 0.5}",
    ])
    path = tmp_path / "out" / "config.yaml"
    save_config(cfg, path)
    assert load_config(Config, path) == cfg

    plain = config_to_dict(cfg)
    assert plain["model"]["cache_dir"] == "/x/y" and plain["train"]["betas"] == [0.5, 0.6]
    assert plain["model"]["name"] == "1e5" and plain["task"]["operators"] == ["+", "*"]
    assert yaml.safe_load(path.read_text()) == plain
    assert list(plain) == ["model", "train", "task", "seed"]  # field order is kept
    assert config_to_dict(Config()) == yaml.safe_load(yaml.safe_dump(config_to_dict(Config())))


def test_describe_config_lists_keys_types_defaults_and_docs():
    text = describe_config(Config)
    lines = {line.split()[0]: line for line in text.splitlines()}
    assert "train.steps" in lines and "int = 100" in lines["train.steps"]
    assert "number of optimizer steps" in lines["train.steps"]
    assert "str | None = null" in lines["model.revision"] and "hub revision" in lines["model.revision"]
    assert "{float32,bfloat16}" in lines["model.dtype"]
    assert '["+"]' in lines["task.operators"] and "operators to draw from" in lines["task.operators"]
    assert "which model to load" in lines["model"]  # a section with a doc gets its own line
    assert "global seed" in lines["seed"]
    fields = [f"{s}.{name}" for s in ("model", "train", "task") for name in type(getattr(Config(), s)).model_fields]
    assert all(key in lines for key in fields + ["seed"])


def test_validate_hook_runs_leaves_first():
    VALIDATED.clear()
    load_config(Config, None, ["train.steps=1"])
    assert VALIDATED == ["train", "root"]


def test_validate_hook_error_names_section():
    msg = error_of(None, ["train.steps=-1"])
    assert "train" in msg and "steps must be >= 0" in msg
    assert "invalid config section 'train'" in msg
    msg = error_of(None, ["train.steps=50", "train.max_tokens=10"])
    assert "train.max_tokens must be >= train.steps" in msg


def test_yaml_errors_name_the_file(tmp_path):
    path = write(tmp_path, "train:\n  steps: ten\n", "bad_type.yaml")
    msg = error_of(path)
    assert str(path) in msg and "train.steps: expected int, got str 'ten'" in msg
    path = write(tmp_path, "train: [unclosed\n", "bad_syntax.yaml")
    msg = error_of(path)
    assert str(path) in msg and "invalid YAML" in msg
    missing = tmp_path / "missing.yaml"
    assert str(missing) in error_of(missing)


def test_class_without_defaults_is_an_error():
    with pytest.raises(ConfigError, match="needs a default"):
        load_config(NoDefault)


def test_option_rejects_default_and_factory():
    with pytest.raises(TypeError):
        option(1, "doc", default_factory=list)
    assert option(3, "three").description == "three"


def test_strict_types_and_numeric_strings(tmp_path):
    assert load_config(Config, write(tmp_path, "train:\n  lr: 1e-5\n")).train.lr == 1e-5  # PyYAML: a string
    assert "train.steps: expected int, got str '3'" in error_of(write(tmp_path, "train:\n  steps: '3'\n", "s.yaml"))


def test_the_run_config_has_a_default_and_a_doc_for_every_field():
    from rlvr.recipes.config import RunConfig

    def walk(cls, prefix=""):
        for name, f in cls.model_fields.items():
            yield f"{prefix}{name}", f
            sub = f.annotation if isinstance(f.annotation, type) and issubclass(f.annotation, ConfigModel) else None
            if sub is not None:
                yield from walk(sub, f"{prefix}{name}.")

    fields = list(walk(RunConfig))
    assert len(fields) > 100
    assert all(not f.is_required() for _, f in fields), [k for k, f in fields if f.is_required()]
    assert all(f.description for k, f in fields), [k for k, f in fields if not f.description]
    RunConfig()  # the defaults are a valid config
