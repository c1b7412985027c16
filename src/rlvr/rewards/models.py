"""Learned reward models: an outcome reward model (ORM) and a process reward model (PRM), loaded from a directory.

* :class:`OutcomeRewardModel` - an ``AutoModelForSequenceClassification`` (e.g. a Bradley-Terry reward
  model, or one ``rlvr rm train kind=orm`` wrote); :meth:`OutcomeRewardModel.score_many` scores a batch.
* :class:`ProcessRewardModel` - a causal LM that follows the **Math-Shepherd convention** (Wang et al. 2024,
  "Math-Shepherd: Verify and Reinforce LLMs Step-by-step without Human Annotations"): the input is the
  question followed by the steps, each step followed by a step tag token (default ``"ки"``); the score of a
  step is ``softmax(logits[tag position, [good, bad]])[good]`` with good/bad tokens ``"+"`` / ``"-"``.
  Released PRMs in this format (``peiyi9979/math-shepherd-mistral-7b-prm``) load as they are.

Reward-model training (:mod:`rlvr.recipes.reward_model`) builds its inputs with :func:`orm_input_ids` and
:func:`prm_input_ids`; the reward stage scores with the models in the loop (the ``outcome_rm`` reward function,
``reward.process_prm``); test-time search ranks with them (:mod:`rlvr.search.scorers`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from rlvr.types import problem_text

__all__ = ["AGGREGATIONS", "aggregate_step_scores", "split_steps", "OutcomeRewardModel", "ProcessRewardModel",
           "orm_input_ids", "prm_input_ids", "check_reward_model_dir", "prm_format"]

AGGREGATIONS = ("min", "last", "mean", "prod")

PRM_FORMAT_DEFAULTS = {"step_tag": "ки", "good": "+", "bad": "-", "delimiter": "\n\n"}
"""Math-Shepherd's input format, used where a PRM directory's ``rlvr_reward_model.json`` does not say."""


def prm_format(path: str, **given: str | None) -> dict[str, str]:
    """A PRM's input format (``step_tag``, ``good``, ``bad``, ``delimiter``): each given value, else what
    ``rlvr rm train`` recorded in ``path/rlvr_reward_model.json``, else :data:`PRM_FORMAT_DEFAULTS`."""
    import json
    from pathlib import Path

    meta_file = Path(path) / "rlvr_reward_model.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    return {k: given.get(k) if given.get(k) is not None else meta.get(k, d) for k, d in PRM_FORMAT_DEFAULTS.items()}


def aggregate_step_scores(scores: Sequence[float], how: str = "min") -> float:
    """One score for a solution from its step scores: ``min`` (the weakest step; Lightman et al. 2023,
    Math-Shepherd), ``last`` (the last step's, which judges the whole prefix; Snell et al. 2024),
    ``mean``, or ``prod`` (the probability that every step is right, if independent).  No steps: 0."""
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")
    s = [float(x) for x in scores]
    if not s:
        return 0.0
    if how == "min":
        return min(s)
    if how == "last":
        return s[-1]
    if how == "mean":
        return sum(s) / len(s)
    return math.prod(s)


def split_steps(text: str, delimiter: str = "\n\n") -> list[str]:
    """The reasoning steps of a completion: ``text`` split at ``delimiter``, blank pieces dropped."""
    if not delimiter:
        raise ValueError("the step delimiter must be a non-empty string")
    return [s for s in text.split(delimiter) if s.strip()]


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def orm_input_ids(tokenizer, question: str, completion: str, max_length: int = 4096) -> list[int]:
    """The token ids an :class:`OutcomeRewardModel` scores (reward-model training builds the same): the chat
    of ``question`` and ``completion`` (the tokenizer's chat template, else ``question + "\\n\\n" +
    completion`` with special tokens), the last ``max_length`` of them."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question},
                                             {"role": "assistant", "content": completion}], tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        ids = list(ids)
    else:
        ids = tokenizer(question + "\n\n" + completion, add_special_tokens=True)["input_ids"]
    return list(ids)[-max_length:]


def prm_input_ids(tokenizer, question: str, steps: Sequence[str], tag_id: int) -> tuple[list[int], list[int]]:
    """Math-Shepherd input of a :class:`ProcessRewardModel` (reward-model training builds the same):
    ``[bos] + enc(question + " ")`` then per step ``enc(step.strip() + " ") + [tag_id] + enc("\\n")``;
    returns ``(ids, positions of the tags)``."""
    enc = lambda text: list(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    bos = tokenizer.bos_token_id
    ids = ([bos] if bos is not None else []) + enc(question + " ")
    positions = []
    for s in steps:
        ids += enc(s.strip() + " ")
        positions.append(len(ids))
        ids += [tag_id] + enc("\n")
    return ids, positions


class OutcomeRewardModel:
    """An outcome reward model: ``AutoModelForSequenceClassification`` from ``path``.

    The input is the chat of the problem and the completion (the tokenizer's chat
    template when it has one, else ``question + "\\n\\n" + completion``), truncated
    on the left to ``max_length`` tokens.  The score is ``sigmoid(logit)`` for a
    one-label head (a reward model) or the softmax probability of label 1 for a
    two-label head (a correct/incorrect classifier); both keep the model's
    ranking.  Sequences are scored one at a time (no padding, so no pad/EOS
    ambiguity in finding the last token).  ``score_steps`` scores each prefix.
    """

    def __init__(self, path: str, *, device: str = "cpu", max_length: int = 4096):
        import torch
        from transformers import AutoModelForSequenceClassification

        self.name = f"orm:{path}"
        self.tokenizer = _load_tokenizer(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path).to(device).eval()
        self.num_labels = int(self.model.config.num_labels)
        if self.num_labels not in (1, 2):
            raise ValueError(f"{path}: an outcome reward model needs 1 or 2 labels, it has {self.num_labels}")
        self.device, self.max_length, self._torch = device, max_length, torch

    def _ids(self, problem: Any, completion: str) -> list[int]:
        return orm_input_ids(self.tokenizer, problem_text(problem), completion, self.max_length)

    def score(self, problem: Any, completion: str) -> float:
        torch = self._torch
        with torch.inference_mode():
            ids = torch.tensor([self._ids(problem, completion)], device=self.device)
            logits = self.model(input_ids=ids).logits[0].float()
        if self.num_labels == 1:
            return float(torch.sigmoid(logits[0]))
        return float(logits.softmax(-1)[1])

    def score_steps(self, problem: Any, steps: list[str], delimiter: str = "\n\n") -> list[float]:
        return [self.score(problem, delimiter.join(steps[: k + 1])) for k in range(len(steps))]

    def score_many(self, items: Sequence[tuple[Any, str]], batch_size: int = 16) -> list[float]:
        """:meth:`score` of each ``(problem, completion)``, ``batch_size`` sequences per forward pass.

        A classifier with a linear ``score`` head over a decoder (the ``*ForSequenceClassification`` of Llama,
        Qwen, Mistral, ...) runs right-padded batches through its backbone and applies the head at each row's
        own last token (no pad-token guessing: the rows' lengths are known); any other model is scored one
        sequence at a time.  Equal to :meth:`score` up to float rounding.
        """
        torch = self._torch
        head = getattr(self.model, "score", None)
        if not isinstance(head, torch.nn.Linear) or batch_size <= 1:
            return [self.score(p, c) for p, c in items]
        out: list[float] = []
        backbone = self.model.base_model
        for i in range(0, len(items), batch_size):
            rows = [self._ids(p, c) for p, c in items[i:i + batch_size]]
            width = max(len(r) for r in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            for k, r in enumerate(rows):
                ids[k, :len(r)] = torch.tensor(r)
                mask[k, :len(r)] = 1
            last = torch.tensor([len(r) - 1 for r in rows])
            with torch.inference_mode():
                hidden = backbone(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))[0]
                logits = head(hidden[torch.arange(len(rows)), last.to(self.device)]).float()
            probs = torch.sigmoid(logits[:, 0]) if self.num_labels == 1 else logits.softmax(-1)[:, 1]
            out += [float(x) for x in probs]
        return out


class ProcessRewardModel:
    """A process reward model in the Math-Shepherd format: a causal LM from ``path``.

    Input token ids: ``enc(question + " ")``, then for each step
    ``enc(step.strip() + " ") + [tag] + enc("\\n")``, each piece encoded without
    special tokens (the tokenizer's BOS, if it has one, first).  The score of step
    ``k`` is ``P(good | logits at the k-th tag) = softmax(logits[pos_k, [good, bad]])[0]``.
    ``step_tag``, ``good`` and ``bad`` are strings whose *last* token is used (as
    Math-Shepherd's reference code does); one that maps to the unknown token is an error.
    ``score(problem, completion)`` splits the completion at ``delimiter`` and
    aggregates the step scores with ``aggregate`` (:func:`aggregate_step_scores`).
    """

    def __init__(self, path: str, *, step_tag: str = "ки", good: str = "+", bad: str = "-",
                 delimiter: str = "\n\n", aggregate: str = "min", device: str = "cpu", max_length: int = 4096):
        import torch
        from transformers import AutoModelForCausalLM

        if aggregate not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregate!r}")
        self.name = f"prm:{path}"
        self.tokenizer = _load_tokenizer(path)
        self.model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        self.tag_id = self._token_id(step_tag, "step_tag", path)
        self.good_id = self._token_id(good, "good", path)
        self.bad_id = self._token_id(bad, "bad", path)
        self.delimiter, self.aggregate = delimiter, aggregate
        self.device, self.max_length, self._torch = device, max_length, torch

    def _enc(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _token_id(self, text: str, what: str, path: str) -> int:
        ids = self._enc(text)
        unk = self.tokenizer.unk_token_id
        if not ids or (unk is not None and ids[-1] == unk):
            raise ValueError(f"{path}: {what} token {text!r} is not in the tokenizer's vocabulary")
        return ids[-1]

    def _ids(self, problem: Any, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        return prm_input_ids(self.tokenizer, problem_text(problem), steps, self.tag_id)

    def score_steps(self, problem: Any, steps: list[str]) -> list[float]:
        if not steps:
            return []
        torch = self._torch
        ids, positions = self._ids(problem, steps)
        cut = max(0, len(ids) - self.max_length)  # keep the end (all tags) when too long
        ids = ids[cut:]
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids], device=self.device)).logits[0].float()
        out = []
        for p in positions:
            if p - cut < 0:
                out.append(0.5)  # step truncated away: no information
                continue
            pair = logits[p - cut, [self.good_id, self.bad_id]]
            out.append(float(pair.softmax(-1)[0]))
        return out

    def score(self, problem: Any, completion: str) -> float:
        return aggregate_step_scores(self.score_steps(problem, split_steps(completion, self.delimiter)),
                                     self.aggregate)


def check_reward_model_dir(path: str, kind: str) -> None:
    """Refuse (ValueError with the reason) a directory that is not a reward model of ``kind`` (``orm``/``prm``),
    reading only its ``config.json`` (and ``rlvr_reward_model.json`` when ``rlvr rm train`` wrote it), so a
    config can be checked when it loads, before any weights are read."""
    import json
    from pathlib import Path

    if kind not in ("orm", "prm"):
        raise ValueError(f"reward model kind must be orm or prm, got {kind!r}")
    d = Path(path)
    cfg_file = d / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"{path}: not a model directory (no config.json)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except ValueError as e:
        raise ValueError(f"{path}/config.json: not JSON ({e})") from None
    archs = cfg.get("architectures") or []
    meta_file = d / "rlvr_reward_model.json"
    if meta_file.is_file():
        meta_kind = json.loads(meta_file.read_text()).get("kind")
        if meta_kind and meta_kind != kind:
            raise ValueError(f"{path}: was trained as a {meta_kind.upper()} (rlvr_reward_model.json), "
                             f"used as a {kind.upper()}")
    if kind == "orm":
        if not any(a.endswith("ForSequenceClassification") for a in archs):
            raise ValueError(f"{path}: an ORM must be a sequence classifier (AutoModelForSequenceClassification); "
                             f"its architectures are {archs or 'not given'}")
        labels = len(cfg.get("id2label") or {}) or int(cfg.get("num_labels", 2))
        if labels not in (1, 2):
            raise ValueError(f"{path}: an ORM needs 1 or 2 labels, it has {labels}")
    elif archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise ValueError(f"{path}: a PRM in the Math-Shepherd format must be a causal LM; its architectures are "
                         f"{archs}")
