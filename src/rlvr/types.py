"""The few records that cross module boundaries.

Data flows  Problem -> (rollout) -> Sample -> (verifier) -> Verdict -> (reward stage: Sample.training_reward
and Sample.reward_parts; credit stage: advantages) -> Batch -> (loss).  Everything else is module-private.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Problem", "Sample", "Verdict", "Batch", "ImageInputs", "problem_text", "ComponentError",
           "component_name"]


class ComponentError(TypeError):
    """A component (a verifier, an environment) broke its contract, e.g. returned the wrong type.

    Raised at the first such call, naming the component: a programming error that no amount of
    retrying fixes, so it stops the run instead of being scored as a wrong answer.
    """


def component_name(obj: Any) -> str:
    """How messages name a component: its registry name when it was built from one, else its Python name."""
    name = getattr(obj, "rlvr_name", None)
    if name:
        return repr(name)
    fn = getattr(obj, "__name__", None) or type(obj).__name__
    return f"{fn} ({getattr(obj, '__module__', None) or type(obj).__module__})"


@dataclass
class Problem:
    """One task instance with a checkable answer.

    Either ``prompt`` (a plain user message) or ``messages`` (a full chat, list of
    ``{"role", "content"}`` dicts) is set; ``messages`` wins when both are.
    """

    id: str
    """Stable identifier, unique within a task (used for resume, dedup, reports)."""
    prompt: str | None = None
    """User message text; the chat template of the model wraps it."""
    answer: str = ""
    """Reference answer as a string (a number, LaTeX, a test suite, ...)."""
    messages: list[dict[str, str]] | None = None
    """Full chat history; overrides ``prompt`` when given."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form extra fields (subject, level, difficulty knobs, source line...)."""
    tools: list[dict] | None = None
    """JSON schemas of tools offered through the chat template (``apply_chat_template(tools=...)``)."""
    images: list[Any] | None = None
    """Images the question is about, in the order they are shown (any number): file paths (``str`` /
    ``PathLike``) or decoded images (``PIL.Image.Image``, or ``numpy`` arrays ``[H, W]`` / ``[H, W, C]``).
    A vision-language policy sees them before the text of the first user message (or where that message's
    content lists ``{"type": "image"}`` parts); None or empty: a text-only problem, rendered as before."""

    def __post_init__(self) -> None:
        if self.prompt is None and not self.messages:
            raise ValueError(f"Problem {self.id!r} has neither a prompt nor messages")

    def to_messages(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """Chat messages for this problem, with an optional system message first."""
        if self.messages:
            msgs = [dict(m) for m in self.messages]
        else:
            msgs = [{"role": "user", "content": self.prompt or ""}]
        if system_prompt and (not msgs or msgs[0].get("role") != "system"):
            msgs.insert(0, {"role": "system", "content": system_prompt})
        return msgs


@dataclass
class ImageInputs:
    """A prompt's image inputs as a vision-language processor made them (shared by the samples of a group).

    ``tensors`` are the processor's outputs besides the token ids and attention mask (``pixel_values``, and
    e.g. ``image_sizes`` / ``image_grid_thw``), each with the images along dimension 0, so the inputs of
    several rows are their concatenation in row order (:func:`rlvr.models.vision.merge_image_inputs`).
    """

    tensors: dict[str, Any]
    """Processor outputs other than ``input_ids`` / ``attention_mask``, images along dimension 0."""
    key: str
    """Content hash of the images: rows whose prompt ids are equal (the image placeholders are the same
    tokens for every image) share a prompt only when their keys are equal too."""
    num_image_tokens: int = 0
    """Image placeholder tokens in the prompt ids (never in a loss mask)."""


@dataclass
class Verdict:
    """What a verifier says about one completion."""

    score: float
    """Reward-ready score, 1.0 for correct and 0.0 for wrong in binary verifiers."""
    extracted: str | None = None
    """The answer the verifier pulled out of the completion (None if none found)."""
    reason: str = ""
    """Short human-readable explanation (why it failed, which rule matched...)."""

    @property
    def correct(self) -> bool:
        """True when the score is positive (binary verifiers: the answer matched)."""
        return self.score > 0


_REWARD_RENAMED = ("Sample.reward no longer exists: the environment's return is Sample.env_return, the reward "
                   "the step trained on Sample.training_reward (its named parts Sample.reward_parts)")


@dataclass
class Sample:
    """One sampled completion of one prompt, as the rollout engine returns it."""

    problem_id: str
    """Id of the Problem this completion answers."""
    prompt_ids: list[int]
    """Token ids of the (chat-formatted) prompt, no padding."""
    completion_ids: list[int]
    """Generated token ids, no padding; includes the EOS token if one was produced."""
    logprobs: list[float]
    """Per-token log-probability of ``completion_ids`` under the sampling policy
    (after temperature/top-p processing is *not* applied: raw model distribution
    divided by temperature, see rollout.hf)."""
    text: str
    """Decoded completion (special tokens removed, cut at a stop string)."""
    finish_reason: str
    """"stop" (EOS or a stop string) or "length" (hit max_new_tokens)."""
    group_index: int = 0
    """Index of this sample within its prompt's group of G samples."""
    mask: list[int] | None = None
    """Multi-turn episodes: 1 for each of ``completion_ids`` the policy sampled, 0 for the environment's
    (tool results, feedback, chat-template turn markers; their ``logprobs`` are 0).  None: all sampled."""
    info: dict[str, Any] = field(default_factory=dict)
    """Episode facts: ``turns``, ``turn_ends`` (index in
    ``completion_ids`` after each policy turn), ``turn_rewards``, tool-call counts, ``end`` (why it ended);
    with guidance (:mod:`rlvr.rollout.guidance`) ``guidance`` ("hint" or "demo"), ``hint_tokens``, ``hint_text``
    and ``off_policy`` (True for a demonstration, whose ``logprobs`` are 0: behaviour probability 1)."""
    image_inputs: ImageInputs | None = None
    """The prompt's image inputs (a problem with images sampled by a vision-language policy), which the
    learner's forward pass needs with ``prompt_ids``; None for text."""
    verdict: Verdict | None = None
    """The verifier's (or environment's) verdict on the episode's final answer; None until it is scored."""
    env_return: float | None = None
    """The episode's return from its environment (the sum of its turn rewards; for one verified turn the
    verdict's score), before the reward stage scales, composes and shapes it; None until it is scored."""
    training_reward: float | None = None
    """The reward the credit stage turned into this sample's advantage (the reward stage's, after a policy-computed
    source and KL in the reward); None until the step's credit is assigned."""
    reward_parts: dict[str, float] = field(default_factory=dict)
    """With a rubric (``reward.functions``): each reward function's value for this sample, unweighted, by name."""

    @property
    def reward(self):
        """Renamed: raises, naming the two fields it was split into (an old plugin fails loudly, never silently)."""
        raise AttributeError(_REWARD_RENAMED)

    @reward.setter
    def reward(self, value) -> None:
        raise AttributeError(_REWARD_RENAMED)

    @property
    def num_tokens(self) -> int:
        """Tokens the policy generated (the environment's tokens of an episode are not counted)."""
        return len(self.completion_ids) if self.mask is None else int(sum(self.mask))


@dataclass
class Batch:
    """Padded tensors for one policy-gradient update (built by ``train.batching``).

    Shapes: ``input_ids``/``attention_mask``/``completion_mask`` are [B, T];
    ``sampler_logprobs`` and ``ref_logprobs`` are [B, T] aligned with ``input_ids``
    (position t holds log p(input_ids[t] | input_ids[:t]); 0 where masked);
    ``advantages`` is [B] (one scalar per sequence, broadcast over tokens) or
    [B, T] (per-token estimators); ``values`` (the critic's predictions when the
    rollouts were scored) and ``returns`` (its targets) are [B, T], PPO only.
    ``off_policy`` is [B] bool, True for off-policy rows (guidance demonstrations, whose loss is
    LUFFY's shaped term), or None when every row is on-policy.  ``image_inputs`` (rows of a
    vision-language policy with images) go with the rows through every selection of rows.
    ``token_select`` is [B, T] bool, the tokens a batch-wide loss rule chose (Clip-Cov / KL-Cov, set by
    the learner), or None.
    """

    input_ids: Any
    attention_mask: Any
    completion_mask: Any
    sampler_logprobs: Any
    advantages: Any
    ref_logprobs: Any | None = None
    values: Any | None = None
    returns: Any | None = None
    off_policy: Any | None = None
    token_select: Any | None = None
    image_inputs: list[ImageInputs | None] | None = None
    """Per row, the prompt's :class:`ImageInputs` (None for a text row); None when no row has images."""
    entropy_select: Any | None = None
    """[B, T] 0/1, the tokens whose entropy the bonus raises (``algorithm.entropy_bonus_fraction``); None: all."""


def problem_text(problem: Any) -> str:
    """The question of a :class:`~rlvr.types.Problem` or a stored-samples record (its last user message)."""
    prompt = getattr(problem, "prompt", None)
    if prompt:
        return str(prompt)
    msgs = getattr(problem, "messages", None) or []
    users = [m.get("content", "") for m in msgs if m.get("role") == "user"]
    return users[-1] if users else ""
