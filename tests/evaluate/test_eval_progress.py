"""Held-out evaluations show a progress bar with an ETA (fed by the HF engine's chunks), without changing what
is sampled; training's ``train.progress=false`` keeps them quiet."""

from __future__ import annotations

import functools

import pytest
import tqdm.auto

from conftest import tiny_run_config
from rlvr.engines.base import EngineBase
from rlvr.engines import HFEngine, SamplingParams
from rlvr.evaluate.accuracy import evaluate_accuracy
from rlvr.evaluate.progress import generation_bar
from rlvr.recipes.rl import evaluate_heldout
from rlvr.types import Problem, Verdict

PROBLEMS = [Problem(id=str(i), prompt=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(5)]


@pytest.fixture(autouse=True)
def every_frame(monkeypatch):
    """Bars drawn at every update (not at most every 0.1 s), so the output holds each count they reached."""
    monkeypatch.setattr(tqdm.auto, "tqdm", functools.partial(tqdm.auto.tqdm, mininterval=0, miniters=1))


def verifier(text: str, answer: str) -> Verdict:
    return Verdict(float(answer in text), None, "")


def test_an_evaluation_shows_its_progress_and_samples_the_same(tiny_model, tiny_tokenizer, capsys):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=4)  # n=2: 2 problems a chunk, 3 chunks
    quiet = evaluate_accuracy(engine, PROBLEMS, verifier, n=2, temperature=1.0, max_new_tokens=4, keep_samples=10)
    assert capsys.readouterr().err == ""
    seen: list[tuple[int, int]] = []
    engine.on_chunk = lambda done, total: seen.append((done, total))
    shown = evaluate_accuracy(engine, PROBLEMS, verifier, n=2, temperature=1.0, max_new_tokens=4, keep_samples=10,
                              progress="held-out before, T=1.0")
    err = capsys.readouterr().err
    assert "held-out before, T=1.0" in err and "5/5" in err and "prompt" in err
    assert shown["examples"] == quiet["examples"] and shown["per_problem"] == quiet["per_problem"]
    assert engine.on_chunk is not None and seen == []  # the bar's hook is gone, the previous one back
    engine.generate(PROBLEMS[:3], SamplingParams(n=2, max_new_tokens=2))
    assert seen == [(2, 3), (1, 3)]  # each chunk: its problems, the call's


class TurnsEngine(EngineBase):
    """An engine whose generate calls report their chunks, as the HF engine's do."""

    def __init__(self):
        super().__init__(None)

    def generate(self, prompts: int, chunk: int = 2):
        for start in range(0, prompts, chunk):
            self.on_chunk(min(chunk, prompts - start), prompts)


def test_later_turns_grow_the_total(capsys):
    engine = TurnsEngine()
    with generation_bar(engine, 5, "episodes"):
        engine.generate(5)  # the first turn: 5 prompts in 3 chunks
        engine.generate(3)  # 3 episodes go on to a second turn
        engine.generate(1)
    err = capsys.readouterr().err
    assert "9/9" in err and engine.on_chunk is None


def test_no_description_shows_no_bar(capsys):
    engine, seen = TurnsEngine(), []
    engine.on_chunk = lambda done, total: seen.append(done)
    with generation_bar(engine, 5, None):
        engine.generate(5)
    assert capsys.readouterr().err == "" and seen == [2, 2, 1]  # the engine's own hook ran, untouched


def test_the_recipe_evaluation_follows_train_progress(tiny_model, tiny_tokenizer, tmp_path, capsys):
    engine = HFEngine(tiny_model, tiny_tokenizer, batch_size=4)
    for shown in (False, True):
        cfg = tiny_run_config(tmp_path, f"train.progress={str(shown).lower()}", "eval.num_problems=3",
                              "eval.max_new_tokens=4", "eval.extra_temperatures=[1.0]")
        evaluate_heldout(engine, PROBLEMS, verifier, cfg, "before", tmp_path)
        err = capsys.readouterr().err
        assert ("held-out before, greedy" in err and "held-out before, T=1.0" in err and "3/3" in err) == shown
        assert shown or err == ""
