"""A reward as a weighted list of reward functions (a rubric), and the registry of reward-function kinds.

The model is the ``verifiers`` library's ``Rubric``: a run's reward is ::

    r_i = sum_k  w_k * f_k(sample_i)          over the functions with w_k > 0

and every function's value is logged per step under its name (``reward/<name>`` in
``metrics.jsonl``), whatever its weight; a function of weight 0 is a logged metric only and never
enters the reward (its value is not even multiplied by 0: a NaN it returns cannot reach the
gradient).  A config lists the functions under ``reward.functions``::

    reward:
      functions:
        - {kind: verifier}                         # the episode's verified return, weight 1
        - {kind: format, weight: 0.2, params: {think: false, answer: false, boxed: true}}
        - {kind: calibration, weight: 0}           # logged, not trained on

An empty list (the default) keeps the pipeline of :mod:`rlvr.rewards.pipeline` as it was (the
verifier's scaled return); a rubric of one ``verifier`` function gives the same rewards bit for bit.

**Kinds.**  A kind is registered in :data:`REWARD_FUNCTIONS` as a *factory*: ``factory(**params)``
returns the function that scores.  The factory runs when the config loads (its ``ValueError`` is
reported there, naming the entry), so it checks its options and loads nothing heavy: a kind that
needs a model loads it at its first call.  That function receives only the arguments it names (as in
``verifiers``): per sample (the default) from :data:`SAMPLE_INPUTS`, returning a number; a kind
registered with ``scope="group"`` is called once per group of G samples with the names of
:data:`GROUP_INPUTS`, returning G numbers.  Adding a kind is one file::

    from rlvr.rewards.rubric import reward_function

    @reward_function("brevity")
    def brevity(scale: float = 1.0):
        \"\"\"Minus the share of the token budget the completion used.\"\"\"
        def score(num_tokens, max_new_tokens):
            return -scale * num_tokens / max_new_tokens
        return score

A function that raises scores 0 for that sample (counted in ``reward/<name>/errors``), as a
verifier that raises does (:func:`rlvr.verifiers.safe_verify`); one that returns the wrong number of
values or a non-number is a broken component and stops the run at its first call.
"""

from __future__ import annotations

import inspect
import logging
import math
import re
import threading
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

import torch
from torch import Tensor

from rlvr.registry import Registry
from rlvr.types import ComponentError

if TYPE_CHECKING:
    from rlvr.rewards.pipeline import GroupScores

__all__ = ["REWARD_FUNCTIONS", "SAMPLE_INPUTS", "GROUP_INPUTS", "reward_function", "RewardFunction", "Rubric",
           "RubricScores", "NAME_PATTERN"]

REWARD_FUNCTIONS: Registry[Callable[..., Callable]] = Registry("reward function")
"""Reward-function factories by kind: ``factory(**params) -> score``; an entry tagged ``group`` scores a whole
group, the others one sample."""

SAMPLE_INPUTS: dict[str, str] = {
    "completion": "the completion's text (the episode's last policy turn for a single turn; its whole text else)",
    "answer": "the problem's reference answer (a string; '' when unlabelled)",
    "problem": "the rlvr.types.Problem",
    "verdict": "the episode's rlvr.types.Verdict from its task's verifier or environment",
    "correct": "1.0 when the verdict is correct, else 0.0 (after reward.flip_* noise)",
    "env_return": "the episode's return from its environment (the sum of its turn rewards; after noise)",
    "num_tokens": "tokens the policy generated",
    "max_new_tokens": "rollout.max_new_tokens, the length budget",
    "finish_reason": "'stop' or 'length'",
    "info": "the episode's facts (Sample.info: turns, turn rewards, tool calls, ...)",
    "sample": "the rlvr.types.Sample",
}
"""What a per-sample function may name (its parameters must be a subset)."""

GROUP_INPUTS: dict[str, str] = {
    "completions": "[G] the completions' texts",
    "answer": "the problem's reference answer",
    "problem": "the rlvr.types.Problem",
    "verdicts": "[G] the verdicts",
    "correct": "[G] tensor, 1.0 where correct (after noise)",
    "returns": "[G] tensor, the episodes' returns (after noise)",
    "lengths": "[G] tensor, tokens generated",
    "max_new_tokens": "rollout.max_new_tokens",
    "samples": "[G] the rlvr.types.Sample objects",
}
"""What a per-group function may name."""

DEFAULT_TIMEOUT_S = 600.0
"""How long a reward function that calls a model or other code may work on one group, unless its entry says."""

log = logging.getLogger(__name__)
_WARNED: set[str] = set()
"""Functions whose first error was logged in this process."""

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
"""A function's name: it becomes the metric key ``reward/<name>``."""


def reward_function(kind: str, *, scope: Literal["sample", "group"] = "sample", doc: str | None = None,
                    check: Callable[..., None] | None = None, tags: Iterable[str] = ()) -> Callable:
    """Decorator registering a reward-function factory as ``kind`` in :data:`REWARD_FUNCTIONS`.

    ``scope``: ``sample`` (the built function scores one sample) or ``group`` (G samples at once).  ``tags``:
    ``bounded`` for a kind whose work is its own arithmetic (no model, no outside code): it runs without the
    default timeout's thread.
    ``check(params, **context)`` may refuse options that do not fit the run when the config loads
    (context: ``max_new_tokens``).
    """
    if scope not in ("sample", "group"):
        raise ValueError(f"reward function {kind!r}: scope must be 'sample' or 'group', got {scope!r}")
    return REWARD_FUNCTIONS.register(kind, doc=doc, check=check, tags={scope, *tags})


def _named_inputs(fn: Callable, allowed: dict[str, str], where: str) -> tuple[str, ...]:
    """The parameters of ``fn`` (each must be one of ``allowed``): what it is called with."""
    names = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in allowed:
            raise ComponentError(f"{where}: its function asks for {p.name!r}, which is not an input; "
                                 f"it may name: {', '.join(allowed)}")
        names.append(p.name)
    return tuple(names)


@dataclass
class RewardFunction:
    """One built entry of a rubric: its name, weight, scope and the function that scores."""

    name: str
    kind: str
    weight: float
    scope: str
    fn: Callable[..., Any]
    inputs: tuple[str, ...]
    timeout_s: float = 0.0
    """Seconds its work on one group may take (0: no limit)."""

    @classmethod
    def build(cls, kind: str, *, name: str | None = None, weight: float = 1.0,
              params: dict[str, Any] | None = None, key: str = "reward.functions",
              timeout_s: float | None = 0.0) -> RewardFunction:
        """The function of ``kind`` with its options; ``timeout_s`` None: :data:`DEFAULT_TIMEOUT_S` unless the kind
        is tagged ``bounded`` (its own arithmetic, no model or outside code: no limit)."""
        entry = REWARD_FUNCTIONS.entry(kind, key=f"{key}.kind")
        if not (isinstance(weight, Real) and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"{key}.weight: must be a finite number >= 0, got {weight!r}")
        REWARD_FUNCTIONS.validate_params(kind, params, key=f"{key}.params")
        try:
            fn = entry.obj(**dict(params or {}))
        except ValueError as e:
            raise ValueError(f"{key}.params: {e} (the reward function {kind!r})") from None
        scope = "group" if "group" in entry.tags else "sample"
        name = name or kind
        inputs = _named_inputs(fn, GROUP_INPUTS if scope == "group" else SAMPLE_INPUTS,
                               f"reward function {name!r} ({kind})")
        if timeout_s is None:
            timeout_s = 0.0 if "bounded" in entry.tags else DEFAULT_TIMEOUT_S
        return cls(name, kind, float(weight), scope, fn, inputs, float(timeout_s))

    def __call__(self, g: GroupScores) -> tuple[Tensor, int]:
        """This function's [G] values on group ``g`` (float32) and how many samples raised (scored 0); the first
        error of each function is logged as a warning with its message (the rest are counted).

        With ``timeout_s`` the group's work runs in a daemon thread: past the limit the whole group scores 0
        (counted as G errors) and the step goes on.  Python cannot stop a thread, so a call that never returns
        keeps its thread until the process ends; it no longer holds up training.
        """
        if not self.timeout_s:
            return self._score(g)
        done: dict[str, Any] = {}

        def work() -> None:
            try:
                done["out"] = self._score(g)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                done["error"] = e

        thread = threading.Thread(target=work, name=f"reward-{self.name}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._warn(TimeoutError(f"no result after {self.timeout_s:g} s (timeout_s) on a group"))
            return torch.zeros(len(g.samples)), len(g.samples)
        if "error" in done:
            raise done["error"]
        return done["out"]

    def _score(self, g: GroupScores) -> tuple[Tensor, int]:
        G = len(g.samples)
        if self.scope == "group":
            try:
                out = self.fn(**{k: _group_input(g, k) for k in self.inputs})
            except Exception as e:  # noqa: BLE001 - a reward must never crash training
                self._warn(e)
                return torch.zeros(G), G
            values = _as_values(out, G, self.name)
            return values, 0
        vals, errors = [], 0
        for i in range(G):
            try:
                v = self.fn(**{k: _sample_input(g, i, k) for k in self.inputs})
            except Exception as e:  # noqa: BLE001
                self._warn(e)
                v, errors = 0.0, errors + 1
            vals.append(v)
        return _as_values(vals, G, self.name), errors

    def _warn(self, e: Exception) -> None:
        if self.name not in _WARNED:
            _WARNED.add(self.name)
            log.warning("reward function %r (%s) raised %s: %s; it scores 0 where it raises (counted as "
                        "reward/%s/errors)", self.name, self.kind, type(e).__name__, str(e)[:300], self.name)


def _as_values(out: Any, G: int, name: str) -> Tensor:
    """A function's output as a float32 [G] tensor; a wrong length or a non-number is a broken component."""
    if isinstance(out, Tensor):
        t = out.detach().reshape(-1).to(torch.float32)
    else:
        try:
            items = list(out)
        except TypeError:
            raise ComponentError(f"reward function {name!r} returned {type(out).__name__} {out!r:.80}; "
                                 f"expected {G} numbers") from None
        bad = [x for x in items if isinstance(x, bool) or not isinstance(x, Real)]
        if bad:
            raise ComponentError(f"reward function {name!r} returned {type(bad[0]).__name__} {bad[0]!r:.80}: a "
                                 "reward function returns a number (per sample) or numbers (per group)")
        t = torch.tensor([float(x) for x in items], dtype=torch.float32)
    if t.numel() != G:
        raise ComponentError(f"reward function {name!r} returned {t.numel()} values for a group of {G}")
    return t


def _sample_input(g: GroupScores, i: int, key: str) -> Any:
    s = g.samples[i]
    if key == "completion":
        return s.text
    if key == "answer":
        return "" if g.problem is None else g.problem.answer
    if key == "problem":
        return g.problem
    if key == "verdict":
        return g.verdicts[i]
    if key == "correct":
        return float(g.correct[i])
    if key == "env_return":
        return float(g.returns[i])
    if key == "num_tokens":
        return s.num_tokens
    if key == "max_new_tokens":
        return g.max_new_tokens
    if key == "finish_reason":
        return s.finish_reason
    if key == "info":
        return s.info
    return s  # "sample"


def _group_input(g: GroupScores, key: str) -> Any:
    return {"completions": lambda: [s.text for s in g.samples],
            "answer": lambda: "" if g.problem is None else g.problem.answer,
            "problem": lambda: g.problem, "verdicts": lambda: list(g.verdicts), "correct": lambda: g.correct.clone(),
            "returns": lambda: g.returns.clone(), "lengths": lambda: g.lengths.clone(),
            "max_new_tokens": lambda: g.max_new_tokens, "samples": lambda: list(g.samples)}[key]()


@dataclass
class RubricScores:
    """A group's rubric result: the weighted reward, every function's values and error counts."""

    reward: Tensor
    """[G] sum of weight * value over the functions of positive weight."""
    parts: dict[str, Tensor]
    """Function name -> [G] its values (unweighted), every function."""
    errors: dict[str, int]
    """Function name -> samples whose call raised (scored 0)."""


class Rubric:
    """The built functions of ``reward.functions``; :meth:`score` turns one group into its rewards and parts."""

    def __init__(self, functions: Sequence[RewardFunction]):
        names = [f.name for f in functions]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"reward.functions: names must be unique, {dup[0]!r} appears twice (set name:)")
        if functions and not any(f.weight > 0 for f in functions):
            raise ValueError("reward.functions: every weight is 0, so nothing is trained on; give one a weight > 0")
        self.functions = list(functions)

    @classmethod
    def from_specs(cls, specs: Sequence[Any], key: str = "reward.functions") -> Rubric:
        """From the config's entries (anything with ``kind``, ``name``, ``weight``, ``params``, ``timeout_s``)."""
        return cls([RewardFunction.build(s.kind, name=s.name, weight=s.weight, params=s.params, key=f"{key}[{i}]",
                                         timeout_s=s.timeout_s) for i, s in enumerate(specs)])

    def __bool__(self) -> bool:
        return bool(self.functions)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.functions]

    def score(self, g: GroupScores) -> RubricScores:
        """The weighted sum over the functions of positive weight, in the order listed (weight-0 functions are
        computed and logged, never added)."""
        parts, errors, total = {}, {}, None
        for f in self.functions:
            values, n_err = f(g)
            parts[f.name], errors[f.name] = values, n_err
            if f.weight > 0:
                term = values if f.weight == 1.0 else f.weight * values
                total = term if total is None else total + term
        return RubricScores(total if total is not None else torch.zeros(len(g.samples)), parts, errors)
