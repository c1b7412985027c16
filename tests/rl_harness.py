"""Small hand-built batches and gradient bookkeeping shared by the learner and reference-equivalence tests.

A batch here is a few completions of one prompt, tokenised by the character-level test tokenizer; its
sampler log-probs are the tiny model's own (so the sampler/learner mismatch is 0 unless a test says
otherwise).  Gradients are compared parameter by parameter.
"""

from __future__ import annotations

import torch

from conftest import make_model, make_tokenizer
from rlvr.learner.batching import collate, completion_start, policy_logprobs
from rlvr.recipes.rl import RLRecipe
from rlvr.types import Batch, Problem, Sample, Verdict

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


# --------------------------------------------------------------------------- the recipe's own wiring
def recipe(out, tok, model, *overrides: str, verifier=None):
    """An :class:`~rlvr.recipes.rl.RLRecipe` set up on the tiny model (engine, optimizer, reference, critic as the
    config asks) and ready for ``advantages()`` / ``learn()``; ``overrides`` are config ``key=value`` items."""
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import RLRecipe
    from rlvr.types import Problem, Verdict
    from rlvr.utils.accounting import StepAccounting

    cfg = load_config(RunConfig, None, [f"train.output_dir={out}", "train.progress=false", "train.threads=1",
                                        "train.save_every=0", "train.warmup_steps=0", "eval.before_training=false",
                                        "eval.after_training=false", *overrides])
    r = RLRecipe(cfg, model=model, tokenizer=tok, problems=([Problem("p", prompt=PROMPT, answer="4")], []),
                 verifier=verifier or (lambda completion, reference: Verdict(0.0)))
    r.setup()
    r.acct = StepAccounting(r.device)
    return r


def rollouts(sample_list, rewards, correct=None):
    """A step's :class:`~rlvr.recipes.rl.Rollouts` from hand-built samples and rewards (verdicts: ``correct``, or
    reward > 0)."""
    from rlvr.recipes.rl import Rollouts
    from rlvr.types import Verdict

    correct = [r > 0 for r in rewards] if correct is None else correct
    return Rollouts(sample_list, [Verdict(float(c)) for c in correct], torch.tensor(rewards, dtype=torch.float32),
                    rounds=1, generated=len(sample_list))


def perturb(model, scale: float = 0.05, seed: int = 1) -> None:
    """Add seeded Gaussian noise to every parameter (a reference or policy that differs from the other)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over the masked entries, sample (Bessel-corrected) std; 0 off the mask."""
    v = x[mask.bool()]
    return (x - v.mean()) / (v.std(correction=1) + eps) * mask


class Recorder(RLRecipe):
    """The RL recipe, keeping each step's rollouts and scored batch (``seen``: ``[(rollouts, scored), ...]``)."""

    def advantages(self, ro):
        scored = super().advantages(ro)
        self.seen = getattr(self, "seen", []) + [(ro, scored)]
        return scored


LOOP_PROBLEMS = ([Problem(f"t{i}", prompt=f"{i}*3", answer=str(i % 3)) for i in range(8)],
                 [Problem(f"h{i}", prompt=f"{i}*7", answer=str(i % 3)) for i in range(3)])
"""Eight training and three held-out problems whose answers are digits (for :func:`last_digit`)."""


def last_digit(completion: str, answer: str, **_) -> Verdict:
    """A verifier for the tiny model's random text: correct when the completion's last digit is the answer."""
    digits = [c for c in completion if c.isdigit()]
    got = digits[-1] if digits else None
    return Verdict(float(got == answer), got, "last digit")


def train_recorded(out, *overrides: str, steps: int = 2) -> Recorder:
    """A :class:`Recorder` trained ``steps`` steps on :data:`LOOP_PROBLEMS` with :func:`last_digit` (tiny model,
    6 new tokens, 2 prompts x 4 samples per step)."""
    from conftest import tiny_run_config

    tok = make_tokenizer()
    r = Recorder(tiny_run_config(out, f"train.steps={steps}", "rollout.max_new_tokens=6", *overrides),
                 model=make_model(tok, seed=0), tokenizer=tok, problems=LOOP_PROBLEMS, verifier=last_digit)
    r.train()
    return r
