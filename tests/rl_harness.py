"""Small hand-built batches and gradient bookkeeping shared by the learner and reference-equivalence tests.

A batch here is a few completions of one prompt, tokenised by the character-level test tokenizer; its
sampler log-probs are the tiny model's own (so the sampler/learner mismatch is 0 unless a test says
otherwise).  Gradients are compared parameter by parameter.
"""

from __future__ import annotations

import torch

from conftest import make_model, make_tokenizer
from rlvr.learner.batching import collate, completion_start, policy_logprobs
from rlvr.types import Batch, Sample

PROMPT = "What is 2+2?"


def samples(tok, completions: list[str], prompt: str = PROMPT, model=None, problem_id: str = "p",
            off_policy: tuple[int, ...] = ()) -> list[Sample]:
    """One :class:`Sample` per completion text (one token per character, no EOS); with ``model`` the sampler
    log-probs are its own (the learner's, temperature 1), else 0."""
    p_ids = tok.encode(prompt, add_special_tokens=False)
    out = []
    for i, text in enumerate(completions):
        ids = tok.encode(text, add_special_tokens=False)
        info = {"off_policy": True} if i in off_policy else {}
        out.append(Sample(problem_id, p_ids, ids, [0.0] * len(ids), text, "stop", i, info=info))
    if model is not None:
        batch = collate(out, torch.zeros(len(out)), tok.pad_token_id)
        logp = learner_logprobs(model, batch).detach()
        start = completion_start(batch)
        for i, s in enumerate(out):
            if i not in off_policy:  # demonstrations have no sampler
                s.logprobs[:] = logp[i, :len(s.completion_ids)].tolist()
            assert batch.completion_mask[i, start:start + len(s.completion_ids)].all()
    return out


def batch(tok, completions: list[str], advantages, model=None, **kw) -> Batch:
    """:func:`samples` collated, with the given advantages ([N] or [N, T])."""
    b = collate(samples(tok, completions, model=model, **kw), torch.zeros(len(completions)), tok.pad_token_id)
    b.advantages = torch.as_tensor(advantages, dtype=torch.float32)
    return b


def learner_logprobs(model, b: Batch, temperature: float = 1.0) -> torch.Tensor:
    """Log-probs [N, C] of the completion tokens (columns from the completion start; 0 past a row's end),
    with the autograd graph."""
    start = completion_start(b)
    logp, _ = policy_logprobs(model, b.input_ids, b.attention_mask, start, temperature)
    return logp * b.completion_mask[:, start:]


def completion_mask(b: Batch) -> torch.Tensor:
    return b.completion_mask[:, completion_start(b):]


def grads_of(loss: torch.Tensor, model) -> list[torch.Tensor]:
    """d loss / d parameter for every parameter of ``model`` (zeros where it does not depend on one)."""
    params = [p for p in model.parameters() if p.requires_grad]
    gs = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g.detach().clone() for p, g in zip(params, gs)]


def current_grads(model) -> list[torch.Tensor]:
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
            for p in model.parameters() if p.requires_grad]


def assert_grads_close(got: list[torch.Tensor], want: list[torch.Tensor], rtol: float = 1e-4,
                       atol: float = 1e-6) -> None:
    assert len(got) == len(want)
    assert any(float(w.abs().max()) > 0 for w in want), "the reference gradient is zero: nothing is compared"
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m, i=i: f"parameter {i}: {m}")


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that keeps a copy of the gradients at every ``step`` (what each optimizer step saw)."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.seen: list[list[torch.Tensor]] = []

    @torch.no_grad()
    def step(self, closure=None):
        self.seen.append([torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                          for g in self.param_groups for p in g["params"]])
        return super().step(closure)


def tiny():
    """``(tokenizer, model)``: the tests' tiny Llama, float32, seed 0."""
    tok = make_tokenizer()
    return tok, make_model(tok)
