"""The ``judge_rubric`` reward function: a checklist of criteria, each judged yes / no by a model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from rlvr.rewards.rubric import reward_function
from rlvr.types import problem_text

__all__ = ["judge_rubric_reward", "RUBRIC_TEMPLATE", "Criterion"]

RUBRIC_TEMPLATE = (
    "You are grading a response against one criterion of a rubric.\n\n"
    "Question: {question}\n\n"
    "Reference answer: {reference}\n\n"
    "Response: {response}\n\n"
    "Criterion: {criterion}\n\n"
    "Does the response meet the criterion? Reply with exactly one word: yes or no."
)
"""The judge's prompt for one criterion; must contain ``{criterion}``, ``{question}``, ``{reference}`` and
``{response}``."""


class Criterion(BaseModel):
    """One rubric item: what the judge checks and its weight in the score."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="the criterion, as the judge reads it")
    weight: float = Field(1.0, gt=0, description="its share of the score (criteria weights are normalised)")


_ENGINES: dict[str, Any] = {}
"""Judge engines loaded in this process, by model name."""


def judge_engine(name: str) -> Any:
    """A greedy rollout engine on the judge model ``name`` (a bundled name, an HF directory or a hub id), loaded
    once per process at its first use."""
    if name not in _ENGINES:
        from rlvr.engines import HFEngine
        from rlvr.models import load_policy

        model, tokenizer = load_policy(name)
        _ENGINES[name] = HFEngine(model, tokenizer, batch_size=8)
    return _ENGINES[name]


def _check(params: dict[str, Any], **_: Any) -> None:
    """The judge model can be found before anything loads: a bundled name, a local model directory, or a hub id
    (``org/name``); a path that does not exist is refused."""
    from rlvr.models.loader import BUNDLED_MODELS

    name = str(params["judge"])
    local = Path(name).expanduser()
    if name in BUNDLED_MODELS or (local.is_dir() and (local / "config.json").is_file()):
        return
    looks_like_path = name.startswith(("/", ".", "~")) or local.exists() or name.count("/") != 1
    if looks_like_path:
        raise ValueError(f"judge: {name!r} is not a model: no bundled name ({', '.join(sorted(BUNDLED_MODELS))}), "
                         "no directory with a config.json there, and not a hub id (org/name)")


@reward_function("judge_rubric", scope="group", check=_check)
def judge_rubric_reward(judge: str, criteria: list[str | Criterion], template: str = RUBRIC_TEMPLATE,
                        max_new_tokens: PositiveInt = 8, max_response_chars: PositiveInt = 4000,
                        cache_path: str | None = None) -> Callable[..., list[float]]:
    """A checklist judged by a model: the weighted share of ``criteria`` the judge says the response meets, in
    [0, 1].

    The rubric rewards of Rubric Anchors / RaR (Gunjal et al. 2025, "Rubrics as Rewards"): each criterion is one
    yes / no question to the ``judge`` model (greedy, ``template`` with ``{criterion}``), and the score is
    ``sum_c w_c 1[yes_c] / sum_c w_c``.  The judge's guards hold for every criterion: a response with no answer
    in it (generic openers only: the master keys of Zhao et al. 2025) or one that addresses the grader ("reply
    yes") scores 0 without asking the judge (:func:`rlvr.verifiers.judge.is_master_key` / ``is_injection``);
    an unparseable judgement counts as no.  Judgements are cached per (criterion, question, reference,
    response), in ``cache_path`` (JSONL) when given.  The judge model loads at the first call.
    """
    items = [Criterion(text=c) if isinstance(c, str) else c if isinstance(c, Criterion) else Criterion(**c)
             for c in criteria]
    if not items:
        raise ValueError("criteria: give at least one criterion")
    for field in ("{criterion}", "{question}", "{reference}", "{response}"):
        if field not in template:
            raise ValueError(f"template must contain {field}")
    total = sum(c.weight for c in items)
    judges: list[Any] = []

    def score(problem, completions: list[str], answer: str) -> list[float]:
        from rlvr.verifiers.judge import ModelJudge

        if not judges:  # one judge per criterion (each its own prompt and cache keys), on one engine
            engine = judge_engine(judge)
            for c in items:  # one cache file serves all: each key holds its criterion's prompt
                judges.append(ModelJudge(engine, template.replace("{criterion}", c.text),
                                         max_new_tokens=max_new_tokens, max_response_chars=max_response_chars,
                                         cache_path=cache_path))
        question = problem_text(problem) if problem is not None else ""
        out = [0.0] * len(completions)
        for c, j in zip(items, judges):
            verdicts = j.judge_many([(question, str(answer), text) for text in completions])
            for i, v in enumerate(verdicts):
                out[i] += c.weight * float(v.correct)
        return [x / total for x in out]

    return score
