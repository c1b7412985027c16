"""No deprecation warning from rlvr's own calls into its libraries in a default run: sampling (dynamic,
shared-prefix, prefix-cached and static decoding) and training steps, with the installed transformers.

A warning counts as rlvr's when the first frame outside the libraries (walking out from where it was
raised) is rlvr's source: rlvr called the deprecated API.  transformers' "use `cache` instead" log
records (its deprecated output fields) count too."""

from __future__ import annotations

import logging
import traceback
import warnings
from pathlib import Path

import rlvr
from conftest import make_model, make_tokenizer, tiny_run_config
from rlvr.engines import HFEngine, SamplingParams
from rlvr.engines.static_decode import static_decode_available
from rlvr.recipes.rl import train
from rlvr.types import Problem

SRC = str(Path(rlvr.__file__).resolve().parent)  # the rlvr package under test
LIBRARIES = ("site-packages", "dist-packages", "/lib/python3", "<frozen")
PROBLEMS = [Problem(id=str(i), prompt=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(3)]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _caller(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame outside the libraries (stack: outermost first, ending at warnings.warn's caller)."""
    for frame in reversed(stack):
        if not any(part in frame.filename for part in LIBRARIES):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def _run_recording(fn) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(deprecation warnings raised from rlvr's call sites, transformers' deprecation log lines) while ``fn`` runs."""
    found: list[tuple[str, str, str]] = []

    def hook(message, category, filename, lineno, file=None, line=None):
        caller = _caller(traceback.extract_stack()[:-1])
        if issubclass(category, (DeprecationWarning, FutureWarning)) and caller.startswith(SRC):
            found.append((category.__name__, str(message), caller))

    records = _Records()
    tf_logger = logging.getLogger("transformers")
    once = getattr(logging.Logger, "warning_once", None)
    if hasattr(once, "cache_clear"):
        once.cache_clear()  # transformers logs each deprecation once per process: let this run see it
    tf_logger.addHandler(records)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = hook
            fn()
    finally:
        tf_logger.removeHandler(records)
    return found, [m for m in records.messages if "deprecat" in m.lower()]


def test_sampling_and_training_raise_no_deprecation_warning_from_rlvr(tmp_path):
    tok = make_tokenizer()
    model = make_model(tok)
    params = SamplingParams(n=2, max_new_tokens=5, temperature=1.0, seed=1)

    def run():
        HFEngine(model, tok).generate(PROBLEMS, params)
        HFEngine(model, tok, share_prefix=2).generate(PROBLEMS, params)
        if static_decode_available():  # (not on a transformers older than the static decode needs)
            HFEngine(model, tok, decode="static").generate(PROBLEMS, params)
        engine = HFEngine(model, tok)
        cache = engine.prefix_cache()
        engine.generate(PROBLEMS, params, cache=cache)
        engine.generate(PROBLEMS, params, cache=cache)
        train(tiny_run_config(tmp_path / "run", "train.steps=2"), model=model, tokenizer=tok)

    warned, logged = _run_recording(run)
    assert not warned, warned[:3]
    assert not logged, logged[:3]


def test_the_check_sees_a_deprecated_call_from_rlvr_source(tmp_path):
    """The recorder is not blind: the old call (past_key_values=) made from a module under src/rlvr is caught
    where the installed transformers deprecates it, and nothing is reported where it does not."""
    import transformers
    from transformers.modeling_outputs import CausalLMOutputWithPast

    renamed = "cache" in CausalLMOutputWithPast.__dataclass_fields__
    tok = make_tokenizer()
    model = make_model(tok)
    probe = Path(SRC) / "_deprecation_probe.py"  # code compiled as if it were rlvr source (no file is written)
    source = ("def call(model, ids, cache):\n"
              "    return model(input_ids=ids, past_key_values=cache, use_cache=True).past_key_values\n")
    namespace: dict = {}
    exec(compile(source, str(probe), "exec"), namespace)
    from transformers.cache_utils import DynamicCache

    ids = tok("What is 1 + 1?", return_tensors="pt").input_ids
    warned, logged = _run_recording(lambda: namespace["call"](model, ids, DynamicCache()))
    assert bool(warned) == renamed, (transformers.__version__, warned)
    if renamed:
        assert "past_key_values" in warned[0][1] and warned[0][2].startswith(str(probe))
        assert logged
