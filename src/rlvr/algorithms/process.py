"""Process rewards (PRM step scores) turned into token-level rewards and advantages.

A process reward model scores each reasoning *step* of a completion (Math-Shepherd,
Wang et al. 2024; Lightman et al. 2023).  To train on those scores the step scores
must become per-token quantities, combined with the outcome (verifier) reward, with
the safeguards the literature found necessary against PRM reward hacking.  The
pipeline, every stage a registered name::

    step scores s [B, K]  --STEP_TRANSFORMS (in order)-->  step rewards r [B, K]
                          --PROCESS_CREDIT-->               credited rewards r* [B, K]
    r* on the last token of each step  -->  returns-to-go  G_t = sum_{steps k ending at or after t} r*_k
    outcome reward on the last token   -->  GRPO-normalised outcome advantage, broadcast
    PROCESS_FILTERS: samples whose process and outcome rewards disagree get advantage 0

Shapes (``K``: the most steps of any sample, padded): ``step_scores`` [B, K] float,
``step_ends`` [B, K] long (the *token index in the [B, T] tensors* of the last
token of each step; :func:`step_end_tokens` finds them from a completion's tokens),
``step_mask`` [B, K] bool (which steps exist), ``mask`` [B, T] (completion tokens),
``outcome`` [B].  Samples are grouped in consecutive blocks of ``group_size`` as in
:mod:`rlvr.algorithms.advantages`.

Two entry points:

* :func:`process_advantages` -> [B, T] advantages for the GRPO family (pass the
  result where a token-level estimator's output goes);
* :func:`process_token_rewards` -> [B, T] per-token rewards for PPO (GAE over them
  in place of :func:`rlvr.algorithms.kl.outcome_token_rewards`).

Everything here is a pure tensor function; nothing carries gradient.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr.registry import Registry

__all__ = [
    "STEP_TRANSFORMS",
    "PROCESS_CREDIT",
    "PROCESS_FILTERS",
    "center_steps",
    "normalize_steps",
    "clip_steps",
    "clip_range_steps",
    "delta_steps",
    "sum_credit",
    "min_credit",
    "no_filter",
    "disagreement_filter",
    "apply_transforms",
    "process_token_rewards",
    "process_advantages",
    "step_end_offsets",
    "step_end_tokens",
    "token_pieces",
]


# --------------------------------------------------------------------------- helpers
def _check_steps(scores: Tensor, step_mask: Tensor) -> tuple[Tensor, Tensor]:
    scores = torch.as_tensor(scores)
    if not scores.is_floating_point():
        scores = scores.to(torch.get_default_dtype())
    step_mask = torch.as_tensor(step_mask).bool()
    if scores.dim() != 2 or scores.shape != step_mask.shape:
        raise ValueError(f"need step scores and step_mask of the same shape [B, K], got {tuple(scores.shape)} "
                         f"and {tuple(step_mask.shape)}")
    return scores.detach(), step_mask


def _group_rows(x: Tensor, group_size: int) -> Tensor:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if x.shape[0] % group_size:
        raise ValueError(f"batch of {x.shape[0]} is not divisible by group_size ({group_size})")
    return x.reshape(x.shape[0] // group_size, group_size, *x.shape[1:])


def _group_step_stats(scores: Tensor, step_mask: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """Per-sample (broadcast [B, 1]) mean and sample std of all valid step scores of its group."""
    s, m = _group_rows(scores, group_size), _group_rows(step_mask, group_size).to(scores.dtype)
    n = m.sum(dim=(1, 2))                                              # [groups]
    mean = (s * m).sum(dim=(1, 2)) / n.clamp(min=1)
    var = (((s - mean[:, None, None]) ** 2) * m).sum(dim=(1, 2)) / (n - 1).clamp(min=1)
    std = torch.where(n > 1, var.sqrt(), torch.zeros_like(var))
    rep = lambda v: v.repeat_interleave(group_size)[:, None]  # noqa: E731
    return rep(mean), rep(std)


# --------------------------------------------------------------------------- step transforms
StepTransform = Callable[..., Tensor]


def center_steps(scores: Tensor, step_mask: Tensor, group_size: int) -> Tensor:
    """Centring: ``r_k = s_k - mean(S_group)``, the mean over every valid step of the sample's group.

    Removes the PRM's offset so that more steps do not mean more reward (a step is
    worth what it adds over the group's typical step).  0 on padded steps.
    """
    s, m = _check_steps(scores, step_mask)
    mean, _ = _group_step_stats(s, m, group_size)
    return torch.where(m, s - mean, torch.zeros_like(s))


def normalize_steps(scores: Tensor, step_mask: Tensor, group_size: int, *, eps: float = 1e-6) -> Tensor:
    """Process-supervision normalisation of DeepSeekMath (Shao et al. 2024, Sec. 4.1.3)::

        r_k = (s_k - mean(S_group)) / (std(S_group) + eps)

    over all valid steps of all samples of the group (sample std).  A group whose
    steps all score the same gets 0.
    """
    s, m = _check_steps(scores, step_mask)
    mean, std = _group_step_stats(s, m, group_size)
    out = (s - mean) / (std + eps)
    out = torch.where(std > 0, out, torch.zeros_like(out))
    return torch.where(m, out, torch.zeros_like(s))


def clip_steps(scores: Tensor, step_mask: Tensor, group_size: int, *, eta: float | None = None) -> Tensor:
    """The Clip mechanism of Gao et al. 2024 ("On Designing Effective RL Reward at Training Time for LLM
    Reasoning", Sec. 4)::

        r_k = min(s_k - eta, 0)

    Every step reward is at most 0, so the policy cannot farm process reward by
    writing more (or more trivially correct) steps; only steps the PRM doubts are
    penalised.  ``eta=None`` uses the group mean of the step scores (``min(s - mean, 0)``).
    """
    s, m = _check_steps(scores, step_mask)
    if eta is None:
        center, _ = _group_step_stats(s, m, group_size)
    else:
        center = torch.full_like(s[:, :1], float(eta))
    return torch.where(m, (s - center).clamp(max=0.0), torch.zeros_like(s))


def clip_range_steps(scores: Tensor, step_mask: Tensor, group_size: int, *, c: float = 1.0) -> Tensor:
    """Clip step rewards to ``[-c, c]`` (bounds the influence of any one step score)."""
    if c <= 0:
        raise ValueError(f"c must be > 0, got {c}")
    s, m = _check_steps(scores, step_mask)
    return torch.where(m, s.clamp(-c, c), torch.zeros_like(s))


def delta_steps(scores: Tensor, step_mask: Tensor, group_size: int) -> Tensor:
    """The Delta mechanism of Gao et al. 2024 (Sec. 4)::

        r_k = s_k - s_{k+1}  (k < last step),      r_last = s_last

    The return from step k telescopes to ``s_k``: a trajectory's process return is
    bounded by one step score whatever its length.  Steps must be left-aligned
    (valid steps first) as :func:`step_end_tokens` gives them.
    """
    s, m = _check_steps(scores, step_mask)
    nxt = torch.zeros_like(s)
    nxt[:, :-1] = torch.where(m[:, 1:], s[:, 1:], torch.zeros_like(s[:, 1:]))
    return torch.where(m, s - nxt, torch.zeros_like(s))


STEP_TRANSFORMS: Registry[StepTransform] = Registry("step-reward transform", skip=3)
"""Step-score transforms ``(scores [B, K], step_mask [B, K], group_size, **options) -> [B, K]``, applied in the
configured order before credit assignment."""
STEP_TRANSFORMS.add("center", center_steps)
STEP_TRANSFORMS.add("normalize", normalize_steps)
STEP_TRANSFORMS.add("clip", clip_steps)
STEP_TRANSFORMS.add("clip_range", clip_range_steps)
STEP_TRANSFORMS.add("delta", delta_steps)


def apply_transforms(scores: Tensor, step_mask: Tensor, group_size: int,
                     transforms: Sequence[str | tuple[str, dict]] = ()) -> Tensor:
    """``scores`` through each named transform in order (a name, or ``(name, options)``)."""
    out, m = _check_steps(scores, step_mask)
    for t in transforms:
        name, opts = (t, {}) if isinstance(t, str) else (t[0], dict(t[1] or {}))
        STEP_TRANSFORMS.validate_params(name, opts, key=f"transform {name}")
        out = STEP_TRANSFORMS[name](out, m, group_size, **opts)
    return out


# --------------------------------------------------------------------------- credit assignment
Credit = Callable[..., Tensor]


def sum_credit(rewards: Tensor, step_mask: Tensor) -> Tensor:
    """Sum-form credit (Math-Shepherd step-by-step PPO; DeepSeekMath process supervision): each step keeps its
    reward, and the return of token ``t`` is the sum of the rewards of the steps ending at or after ``t``::

        G_t = sum_{k : end_k >= t} r_k
    """
    r, m = _check_steps(rewards, step_mask)
    return torch.where(m, r, torch.zeros_like(r))


def min_credit(rewards: Tensor, step_mask: Tensor, *, temperature: float = 0.1) -> Tensor:
    """Min-form credit assignment of PURE (Cheng et al. 2025, "Stop Summation: Min-Form Credit Assignment Is All
    Process Reward Model Needs for Reasoning", Eq. 5): each step reward is re-weighted by a softmin over the
    trajectory's steps::

        w_k  = exp(-r_k / T) / sum_j exp(-r_j / T)       (valid steps j only)
        r*_k = w_k * r_k

    so the trajectory's return ``G_0 = sum_k r*_k`` tends to ``min_k r_k`` as ``T -> 0``: a trajectory is
    worth its worst step, and writing many good-looking steps earns nothing beyond it.  (Later
    returns-to-go are the suffix sums of ``r*``.)  Rows without steps get 0.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    r, m = _check_steps(rewards, step_mask)
    logits = torch.where(m, -r / temperature, torch.full_like(r, float("-inf")))
    has = m.any(dim=1, keepdim=True)
    w = torch.where(has, torch.softmax(torch.where(has, logits, torch.zeros_like(logits)), dim=1),
                    torch.zeros_like(r))
    return torch.where(m, w * r, torch.zeros_like(r))


PROCESS_CREDIT: Registry[Credit] = Registry("process credit assignment", skip=2)
"""How step rewards become per-step credited rewards ``(rewards [B, K], step_mask, **options) -> [B, K]``
whose suffix sums are the returns-to-go."""
PROCESS_CREDIT.add("sum", sum_credit)
PROCESS_CREDIT.add("min", min_credit)


# --------------------------------------------------------------------------- filters
ProcessFilter = Callable[..., Tensor]

_AGG = ("min", "mean", "last")


def _aggregate(scores: Tensor, step_mask: Tensor, how: str) -> Tensor:
    s, m = scores, step_mask
    if how == "min":
        return torch.where(m, s, torch.full_like(s, float("inf"))).amin(dim=1)
    if how == "mean":
        return (s * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)
    if how == "last":
        pos = torch.arange(s.shape[1], device=s.device).expand_as(m)
        last = torch.where(m, pos, torch.full_like(pos, -1)).amax(dim=1).clamp(min=0)
        return s.gather(1, last[:, None]).squeeze(1)
    raise ValueError(f"aggregate must be one of {_AGG}, got {how!r}")


def no_filter(scores: Tensor, step_mask: Tensor, outcome: Tensor) -> Tensor:
    """Keep every sample."""
    return torch.ones(torch.as_tensor(outcome).shape[0], dtype=torch.bool)


def disagreement_filter(scores: Tensor, step_mask: Tensor, outcome: Tensor, *, low: float = 0.3,
                        high: float = 0.7, correct_above: float = 0.5, aggregate: str = "min") -> Tensor:
    """Drop samples whose process and outcome rewards disagree (keep -> True)::

        p = aggregate(step scores)      (min by default: the weakest step)
        drop if  outcome > correct_above  and  p < low     (right answer, broken reasoning: a lucky guess
                                                             or a PRM the policy has learnt to fool)
        drop if  outcome <= correct_above and  p > high    (wrong answer the PRM likes: PRM hacking)

    The consensus filtering of Zhang et al. 2025 ("The Lessons of Developing Process Reward Models in
    Mathematical Reasoning") applied at training time; PURE (Cheng et al. 2025) reports the same
    failure (high process reward on wrong answers) as the start of reward hacking.  Samples without
    steps are kept (no process evidence).
    """
    s, m = _check_steps(scores, step_mask)
    o = torch.as_tensor(outcome).to(s.dtype).reshape(-1)
    if o.shape[0] != s.shape[0]:
        raise ValueError(f"outcome has {o.shape[0]} rows, step scores {s.shape[0]}")
    p = _aggregate(s, m, aggregate)
    correct = o > correct_above
    drop = (correct & (p < low)) | (~correct & (p > high))
    return ~(drop & m.any(dim=1))


def _check_disagreement(params: dict, **_) -> None:
    if params["aggregate"] not in _AGG:
        raise ValueError(f"aggregate must be one of {', '.join(_AGG)}, got {params['aggregate']!r}")
    if params["low"] > params["high"]:
        raise ValueError(f"low ({params['low']}) must not exceed high ({params['high']})")


PROCESS_FILTERS: Registry[ProcessFilter] = Registry("process/outcome filter", skip=3)
"""Sample filters ``(step_scores [B, K], step_mask, outcome [B], **options) -> keep [B] bool``."""
PROCESS_FILTERS.add("none", no_filter)
PROCESS_FILTERS.add("disagreement", disagreement_filter, check=_check_disagreement)


# --------------------------------------------------------------------------- to tokens
def _place(step_values: Tensor, step_ends: Tensor, step_mask: Tensor, mask: Tensor) -> Tensor:
    """[B, T] with each valid step's value added at its end token."""
    mask = torch.as_tensor(mask)
    if mask.dim() != 2 or mask.shape[0] != step_values.shape[0]:
        raise ValueError(f"mask must be [B, T] with B={step_values.shape[0]}, got {tuple(mask.shape)}")
    ends = torch.as_tensor(step_ends).long()
    if ends.shape != step_values.shape:
        raise ValueError(f"step_ends {tuple(ends.shape)} must match the step scores {tuple(step_values.shape)}")
    T = mask.shape[1]
    if bool(((ends < 0) | (ends >= T))[step_mask].any()):
        raise ValueError(f"a step end lies outside the {T} token positions")
    out = torch.zeros(mask.shape, dtype=step_values.dtype)
    vals = torch.where(step_mask, step_values, torch.zeros_like(step_values))
    out.scatter_add_(1, ends.clamp(0, T - 1), vals)
    return out * mask.to(out.dtype)


def _reverse_cumsum(x: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(x.dtype)
    return (x * m).flip(-1).cumsum(-1).flip(-1) * m


def _last_token(mask: Tensor) -> Tensor:
    m = mask.bool()
    pos = torch.arange(m.shape[1]).expand_as(m)
    return torch.where(m, pos, torch.full_like(pos, -1)).amax(-1)


def process_token_rewards(step_scores: Tensor, step_ends: Tensor, step_mask: Tensor, mask: Tensor,
                          outcome: Tensor | None = None, *, group_size: int = 1,
                          transforms: Sequence[str | tuple[str, dict]] = (), credit: str = "sum",
                          credit_params: dict | None = None, process_coef: float = 1.0,
                          outcome_coef: float = 1.0) -> Tensor:
    """Per-token rewards for PPO: ``process_coef * r*_k`` on the last token of step ``k`` and
    ``outcome_coef * outcome`` on the last completion token (0 elsewhere), ``r*`` the step scores after
    ``transforms`` and ``credit``.  GAE with gamma = lambda = 1 over these gives the returns-to-go
    of the sum- or min-form.  [B, T]."""
    s, m = _check_steps(step_scores, step_mask)
    r = apply_transforms(s, m, group_size, transforms)
    PROCESS_CREDIT.validate_params(credit, credit_params or {}, key="credit_params")
    r = PROCESS_CREDIT[credit](r, m, **(credit_params or {}))
    out = process_coef * _place(r, step_ends, m, mask)
    if outcome is not None and outcome_coef:
        o = torch.as_tensor(outcome).to(out.dtype).reshape(-1)
        last = _last_token(torch.as_tensor(mask))
        rows = (last >= 0).nonzero().squeeze(-1)
        out[rows, last[rows]] += outcome_coef * o[rows]
    return out


def _masked_group_norm(x: Tensor, keep: Tensor, group_size: int, scale: bool, eps: float) -> Tensor:
    """GRPO normalisation of ``x`` [B] within groups, statistics over kept samples only; 0 for the others
    and for groups whose kept values are all equal."""
    g, k = _group_rows(x, group_size), _group_rows(keep, group_size).to(x.dtype)
    n = k.sum(1, keepdim=True)
    mean = (g * k).sum(1, keepdim=True) / n.clamp(min=1)
    var = (((g - mean) ** 2) * k).sum(1, keepdim=True) / (n - 1).clamp(min=1)
    std = torch.where(n > 1, var.sqrt(), torch.zeros_like(var))
    adv = g - mean
    if scale:
        adv = adv / (std + eps)
    adv = torch.where(std > 0, adv, torch.zeros_like(adv)) * k
    return adv.reshape(-1)


def process_advantages(step_scores: Tensor, step_ends: Tensor, step_mask: Tensor, outcome: Tensor,
                       group_size: int, mask: Tensor, *, transforms: Sequence[str | tuple[str, dict]] = (),
                       credit: str = "sum", credit_params: dict | None = None, filter: str = "none",
                       filter_params: dict | None = None, baseline: str = "steps", outcome_coef: float = 1.0,
                       process_coef: float = 1.0, scale_by_std: bool = True,
                       eps: float = 1e-6) -> tuple[Tensor, dict[str, float]]:
    """Token-level advantages [B, T] for the GRPO family from PRM step scores and the outcome reward.

    ::

        keep   = filter(step_scores, outcome)                                 (PROCESS_FILTERS)
        r      = transforms(step_scores)                                      (STEP_TRANSFORMS, in order)
        r      = normalize_steps(r)           if baseline == "steps"          (DeepSeekMath Sec. 4.1.3)
        r*     = credit(r)                                                    (PROCESS_CREDIT: sum | min)
        G_t    = sum_{k : end_k >= t} r*_k                                    (returns-to-go)
        G_t    = (G_t - mean_g G_0) / std_g G_0   if baseline == "returns"    (group baseline on the
                                                                               trajectory's process return)
        A_t    = outcome_coef * GRPO(outcome)_i + process_coef * G_t,   0 where mask is 0 or the sample is dropped

    ``baseline="steps"`` is DeepSeekMath's process supervision (the step rewards are
    normalised over the group, then summed); ``"returns"`` suits min-form (``G_0`` is
    about the worst step, so the first tokens' advantage is "worst step relative to
    the group"); ``"none"`` uses raw returns.  Group statistics use kept samples only.
    ``scale_by_std=False`` is the Dr. GRPO outcome term.

    Returns:
        ``(advantages [B, T], info)`` with ``info`` floats: ``process/kept_share``,
        ``process/return_mean`` (mean ``G_0`` before any baseline), ``process/min_step_mean``
        (mean over samples with steps of their weakest step score).
    """
    if baseline not in ("steps", "returns", "none"):
        raise ValueError(f"baseline must be steps, returns or none, got {baseline!r}")
    s, m = _check_steps(step_scores, step_mask)
    mask = torch.as_tensor(mask)
    o = torch.as_tensor(outcome).to(s.dtype).reshape(-1)
    if o.shape[0] != s.shape[0] or mask.shape[0] != s.shape[0]:
        raise ValueError(f"outcome [{o.shape[0]}], mask {tuple(mask.shape)} and step scores {tuple(s.shape)} "
                         "must have the same batch size")
    PROCESS_FILTERS.validate_params(filter, filter_params or {}, key="filter_params")
    keep = PROCESS_FILTERS[filter](s, m, o, **(filter_params or {})).bool()

    r = apply_transforms(s, m, group_size, transforms)
    if baseline == "steps":
        # statistics over kept samples' steps only
        r = normalize_steps(r, m & keep[:, None], group_size, eps=eps)
    PROCESS_CREDIT.validate_params(credit, credit_params or {}, key="credit_params")
    r_star = PROCESS_CREDIT[credit](r, m, **(credit_params or {}))
    G = _reverse_cumsum(_place(r_star, step_ends, m, mask), mask)
    G0 = r_star.sum(dim=1)
    if baseline == "returns":
        k = _group_rows(keep, group_size).to(G0.dtype)
        g0 = _group_rows(G0, group_size)
        n = k.sum(1, keepdim=True)
        mean0 = (g0 * k).sum(1, keepdim=True) / n.clamp(min=1)
        std0 = ((((g0 - mean0) ** 2) * k).sum(1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()
        std0 = torch.where(n > 1, std0, torch.zeros_like(std0))
        denom = (std0 + eps) if scale_by_std else torch.ones_like(std0)
        denom = torch.where(std0 > 0, denom, torch.ones_like(denom))  # all-equal group: centre only
        G = (G - mean0.reshape(-1, 1).repeat_interleave(group_size, 0)) \
            / denom.reshape(-1, 1).repeat_interleave(group_size, 0) * mask.to(G.dtype)
    out_adv = _masked_group_norm(o, keep, group_size, scale_by_std, eps)
    adv = outcome_coef * out_adv[:, None] * mask.to(s.dtype) + process_coef * G
    adv = adv * keep[:, None].to(adv.dtype)
    has = m.any(dim=1)
    info = {
        "process/kept_share": float(keep.to(s.dtype).mean()) if keep.numel() else 1.0,
        "process/return_mean": float(G0.mean()) if G0.numel() else 0.0,
        "process/min_step_mean": float(_aggregate(s, m, "min")[has].mean()) if bool(has.any()) else math.nan,
    }
    return adv.detach(), info


# --------------------------------------------------------------------------- step boundaries
def token_pieces(tokenizer, ids: Sequence[int], skip_special_tokens: bool = True) -> list[str]:
    """The text each token adds to the decoded string: ``decode(ids[:i+1])`` minus ``decode(ids[:i])``.

    Decoding prefixes (rather than tokens one by one) keeps byte-level BPE pieces of
    a multi-byte character together (the piece lands on the token that completes it),
    so ``"".join(pieces) == decode(ids)``.
    """
    pieces, prev = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(list(ids[: i + 1]), skip_special_tokens=skip_special_tokens)
        if text.startswith(prev):
            pieces.append(text[len(prev):])
        else:  # a replacement character resolved by this token: give it the difference in length
            pieces.append(text[len(prev):] if len(text) > len(prev) else "")
        prev = text
    return pieces


def step_end_offsets(text: str, delimiter: str = "\n\n") -> list[int]:
    """Character offset (exclusive end) of each step of ``text`` split at ``delimiter``, blank steps
    dropped exactly as :func:`rlvr.search.scorers.split_steps` drops them (so step ``k`` here is the
    step the PRM scores as ``k``)."""
    if not delimiter:
        raise ValueError("the step delimiter must be a non-empty string")
    ends, start = [], 0
    for part in text.split(delimiter):
        if part.strip():
            ends.append(start + len(part.rstrip()))
        start += len(part) + len(delimiter)
    return ends


def step_end_tokens(pieces: Sequence[str], delimiter: str = "\n\n", *, last_to_end: bool = True) -> list[int]:
    """Index of the token holding the last (non-space) character of each step of ``"".join(pieces)``.

    ``pieces``: the decoded text of each completion token (:func:`token_pieces`).
    Steps are those of :func:`rlvr.search.scorers.split_steps` (blank ones
    dropped), so ``len(result) == len(split_steps(text, delimiter))``.  With
    ``last_to_end`` the final step ends on the last token (an EOS that decodes to
    nothing included), where the outcome reward sits too.  Pure: no tokenizer.
    """
    text = "".join(pieces)
    ends_chr = step_end_offsets(text, delimiter)
    # cumulative end offset of each token; the token holding char c is the first with cum_end > c
    cum, pos = [], 0
    for p in pieces:
        pos += len(p)
        cum.append(pos)
    out = []
    j = 0
    for e in ends_chr:
        c = e - 1  # last character of the step
        while j < len(cum) and cum[j] <= c:
            j += 1
        out.append(min(j, len(pieces) - 1))
    if out and last_to_end:
        out[-1] = len(pieces) - 1
    return out
