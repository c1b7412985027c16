"""The critic of PPO: a scalar value V(s_t) for every completion position.

Two layouts, chosen by ``algorithm.value.critic``:

``separate`` (the default; verl's and OpenRLHF's PPO)
    A copy of the policy's transformer trunk, without its LM head, plus a
    linear value head.  It has its own optimizer; value gradients never touch
    the policy.  Costs a second trunk in memory and a second forward/backward.

``shared``
    Only the linear head, on the policy's own last hidden state (the input of
    its LM head).  The value loss back-propagates into the policy's trunk
    (the PPO paper's shared network, TRL's ``AutoModelForCausalLMWithValueHead``).
    Costs almost nothing; the two losses compete for the same weights.

Alignment: ``V_t`` is the value of the state *before* completion token ``t``,
read from the hidden state at position ``t - 1``, the same position whose
logits give ``log p(token_t)``.  So values line up column for column with
:func:`rlvr.learner.batching.policy_logprobs`.

The head starts at zero (``V = 0``), so the first advantages are the returns
themselves (whitened), i.e. REINFORCE, until the critic has learnt something.
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import nn

__all__ = ["Critic", "build_critic", "critic_values", "lm_head_inputs"]


class Critic(nn.Module):
    """A value head, and (``separate`` layout) the trunk it reads from.

    ``backbone`` is a decoder returning ``last_hidden_state`` (e.g. a
    ``LlamaModel``), or None when the head reads the policy's hidden state.
    """

    def __init__(self, hidden_size: int, backbone: nn.Module | None = None):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @property
    def shared(self) -> bool:
        return self.backbone is None

    def values_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, H] hidden states -> [B, T] float32 values."""
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).float()


def build_critic(policy: nn.Module, layout: Literal["separate", "shared"] = "separate") -> Critic:
    """A critic for ``policy`` (any HF causal LM): a deep copy of its trunk, or a head on its hidden state.

    Call it before LoRA adapters are added to the policy: a separate critic
    trains all of its (copied) weights.
    """
    if layout not in ("separate", "shared"):
        raise ValueError(f"algorithm.value.critic must be 'separate' or 'shared', got {layout!r}")
    hidden = policy.config.hidden_size
    backbone = None
    if layout == "separate":
        backbone = copy.deepcopy(policy.get_decoder()).train().requires_grad_(True)
    critic = Critic(hidden, backbone)
    param = next(policy.parameters())
    return critic.to(device=param.device, dtype=param.dtype)


def critic_values(critic: Critic, policy: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  start: int) -> torch.Tensor:
    """Values ``[B, T - start]`` for the completion columns ``start:`` (see the module docstring for alignment).

    A separate critic runs its own trunk; a shared one runs the policy's trunk
    (``policy.get_decoder()``), which skips the LM head.
    """
    trunk = critic.backbone if critic.backbone is not None else policy.get_decoder()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).last_hidden_state
    return critic.values_from_hidden(hidden[:, start - 1:-1])


class lm_head_inputs:
    """Context manager that records what ``model``'s LM head is fed (its last hidden states).

    ``with lm_head_inputs(model) as rec: out = model(...)``; then ``rec.hidden``
    is the [B, K, H] input of the output projection, for the same K positions
    as ``out.logits`` (``logits_to_keep`` applies to both), still in the
    autograd graph.  Works for any model with ``get_output_embeddings()``,
    peft-wrapped ones included.
    """

    def __init__(self, model: nn.Module):
        self.head = model.get_output_embeddings()
        if self.head is None:
            raise ValueError(f"{type(model).__name__} has no output embeddings to read hidden states from")
        self.hidden: torch.Tensor | None = None
        self._handle = None

    def _hook(self, module, args):
        self.hidden = args[0]

    def __enter__(self) -> "lm_head_inputs":
        self._handle = self.head.register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
