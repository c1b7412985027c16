"""The ``translation`` reward: sacrebleu's sentence chrF / BLEU of the one <translate> block (MT-R1-Zero)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import close
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.rewards.pipeline import GroupScores
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardFunctionSpec
from rlvr.types import Problem, Sample, Verdict

sacrebleu = pytest.importorskip("sacrebleu")  # the mt extra (installed with dev)

REF = "the cat is on the mat"


def _score(texts, params=None, answer=REF):
    r = Rubric.from_specs([RewardFunctionSpec(kind="translation", params=params or {})])
    samples = [Sample("p", [1], [5], [-1.0], t, "stop", i, verdict=Verdict(0.0, None, ""), env_return=0.0)
               for i, t in enumerate(texts)]
    return r.score(GroupScores.of(Problem("p", prompt="translate", answer=answer), samples, max_new_tokens=8)).reward


def test_the_metric_of_the_one_block():
    got = _score([f"<think>hm</think><translate>{REF}</translate>", "<translate>the cat sat on the mat</translate>",
                  "the cat is on the mat", "<translate>a</translate><translate>b</translate>",
                  "<translate>  </translate>"])
    partial = sacrebleu.sentence_chrf("the cat sat on the mat", [REF]).score / 100
    close(got, [1.0, partial, 0.0, 0.0, 0.0])  # no block / two blocks / an empty one: 0
    assert 0 < partial < 1
    bleu = _score(["<translate>the cat sat on the mat</translate>"], {"metric": "bleu"})
    close(bleu, [sacrebleu.sentence_bleu("the cat sat on the mat", [REF]).score / 100])
    whole = _score(["the cat is on the mat"], {"tag": None})
    close(whole, [1.0])


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet="abc ", min_size=1, max_size=30))
def test_the_reward_is_in_range_and_one_only_for_the_reference(text):
    """Property: chrF reward in [0, 1], 1 for the reference itself."""
    v = float(_score([f"<translate>{text}</translate>"], answer="abc cab")[0])
    assert 0.0 <= v <= 1.0
    assert v == pytest.approx(1.0) or text.strip() != "abc cab"


@pytest.mark.parametrize("params, match", [("{metric: ter}", "metric must be chrf or bleu"),
                                           ("{tag: 'a b'}", "tag must be a tag name")])
def test_bad_options_are_refused_at_load(tmp_path, params, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}",
                                      f"reward.functions=[{{kind: translation, params: {params}}}]"])
