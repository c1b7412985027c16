"""The interface every rollout engine implements (:class:`RolloutEngine`) and its defaults (:class:`EngineBase`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from rlvr.types import Problem, Sample

__all__ = ["SamplingParams", "RolloutEngine", "EngineBase", "eos_token_ids", "engine_members", "missing_members"]


@dataclass
class SamplingParams:
    """How to sample completions."""

    n: int = 1
    """Completions per prompt (the GRPO group size)."""
    max_new_tokens: int = 64
    """Hard cap on generated tokens per completion."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables it)."""
    stop: Sequence[str] = field(default_factory=tuple)
    """Extra stop strings (EOS always stops). The completion is cut after the stop string."""
    seed: int | None = None
    """Seed for this call's sampling (None: continue the engine's generator)."""
    seeds: Sequence[int] | None = None
    """One seed per problem (overrides ``seed``): each problem's samples are drawn from its own
    generator, so they do not depend on which other problems share the call (up to the float
    rounding of the batch layout), and a batched call draws what one call per problem would."""
    ignore_eos: bool = False
    """Keep generating past EOS up to max_new_tokens (benchmarks: fixed-length work)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def check_seeds(self, num_problems: int) -> None:
        """Raise unless ``seeds`` is unset or holds one seed per problem of the call (engines call this)."""
        if self.seeds is not None and len(self.seeds) != num_problems:
            raise ValueError(f"SamplingParams.seeds holds {len(self.seeds)} seeds for {num_problems} problems")


def eos_token_ids(tokenizer, generation_config=None) -> set[int]:
    """Token ids that end a completion: the generation config's ``eos_token_id`` (one id or several) plus the
    tokenizer's own (what the HF and vLLM engines stop on, and what multi-turn episodes close a turn with)."""
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates completions for problems: what the recipes, episodes, evaluation and search call on an engine.

    ``generate`` returns one list per problem, holding ``params.n`` samples in
    group order; each sample carries token ids and per-token log-probs under the
    sampling distribution (logits / temperature, before top-p truncation), which
    is what the learner recomputes for importance ratios.  An engine honours
    ``params.seed`` and, when given, ``params.seeds`` (one generator per problem:
    ``rlvr eval`` relies on it to batch problems and still resume exactly).

    Every member below is required (callers never probe for one); an optional capability has a defined "not
    supported" value (``prefix_cache()`` returns None, ``sleep()`` returns False).  :class:`EngineBase` gives
    those defaults, so a new engine writes ``generate`` and ``sync_weights`` (and ``load_state_dict`` when it can
    load tensors).  :func:`missing_members` lists what an object lacks; the engine registry refuses such an engine.
    """

    tokenizer: Any
    """The policy's tokenizer: renders prompts (chat template) and the environment's turns, decodes completions."""
    generator: torch.Generator
    """CPU generator drawing a call's randomness when ``params.seed`` is None (checkpointed: resumes exactly)."""
    pad_id: int
    """Token id the learner pads sample batches with."""
    eos_ids: set[int]
    """Token ids that end a completion (an episode's turn that ends without one gets one appended)."""
    batch_size: int
    """Most sequences decoded together; callers may set it (evaluation's ``eval.batch_size``) and restore it."""
    on_chunk: Callable[[int, int], None] | None
    """When set, called as ``on_chunk(done, total)`` as a ``generate`` call's problems finish (a progress hook)."""

    @property
    def sleeping(self) -> bool:
        """Whether :meth:`sleep` freed the weights (the next :meth:`sync_weights` wakes the engine)."""
        ...

    def generate(self, problems: Sequence[Problem], params: SamplingParams,
                 prefixes: Sequence[Sequence[int] | str] | None = None,
                 cache: Any | None = None) -> list[list[Sample]]:
        """``params.n`` samples per problem, continuing each problem's ``prefixes`` entry (token ids or text) when
        given; ``cache`` is a :meth:`prefix_cache` (None: none)."""
        ...

    def sync_weights(self, model) -> None:
        """Make the engine sample from ``model``'s current weights (waking it if asleep)."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Sample from these HF-named tensors (LoRA adapters merged) from now on."""
        ...

    def prefix_cache(self) -> Any | None:
        """A cache that lets a later ``generate`` continue sequences without recomputing them; None: unsupported."""
        ...

    def sleep(self) -> bool:
        """Free the engine's weights until the next :meth:`sync_weights`; False when there was nothing to free."""
        ...


def engine_members() -> tuple[str, ...]:
    """The names every engine must have: the members :class:`RolloutEngine` declares, sorted."""
    from typing_extensions import get_protocol_members

    return tuple(sorted(get_protocol_members(RolloutEngine)))


def missing_members(engine: Any) -> list[str]:
    """The :class:`RolloutEngine` members ``engine`` lacks (methods must be callable), sorted; [] when complete."""
    missing = []
    for name in engine_members():
        try:
            value = getattr(engine, name)
        except AttributeError:
            missing.append(name)
            continue
        declared = RolloutEngine.__dict__.get(name)
        if callable(declared) and not isinstance(declared, property) and not callable(value):
            missing.append(name)
    return missing


class EngineBase:
    """The defaults of :class:`RolloutEngine`: subclass it and write ``generate`` and ``sync_weights``.

    ``__init__`` sets ``tokenizer``, ``generator`` (seeded with ``seed``), ``pad_id`` (the tokenizer's, else its
    EOS; 0 without a tokenizer, for engines whose callers never collate or render, e.g. a judge's), ``eos_ids`` (given, else :func:`eos_token_ids` of the tokenizer), ``batch_size`` and ``on_chunk``.
    The optional capabilities answer "not supported": no prefix cache, no sleep, no state-dict loading.
    """

    def __init__(self, tokenizer, *, batch_size: int = 64, seed: int = 0, eos_ids: set[int] | None = None):
        self.tokenizer = tokenizer
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)
        pad = None if tokenizer is None else tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (getattr(tokenizer, "eos_token_id", None) or 0)
        self.eos_ids = set(eos_ids) if eos_ids is not None else eos_token_ids(tokenizer)
        self.batch_size = batch_size
        self.on_chunk: Callable[[int, int], None] | None = None

    @property
    def sleeping(self) -> bool:
        return False

    def generate(self, problems: Sequence[Problem], params: SamplingParams,
                 prefixes: Sequence[Sequence[int] | str] | None = None,
                 cache: Any | None = None) -> list[list[Sample]]:
        raise NotImplementedError(f"{type(self).__name__}.generate")

    def sync_weights(self, model) -> None:
        raise NotImplementedError(f"{type(self).__name__}.sync_weights")

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load a state dict: it samples through "
                                  "sync_weights(model) only")

    def prefix_cache(self) -> None:
        return None

    def sleep(self) -> bool:
        return False
