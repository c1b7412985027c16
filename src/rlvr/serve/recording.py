"""What an episode's requests consumed and produced, token in and token out.

Every request of an episode is either a continuation of the episode's current *segment* or starts a new one:

* it **extends** the segment when its messages are the segment's conversation so far (every message sent
  plus the assistant message served, compared after normalisation) followed by new messages; its prompt is
  then the segment's recorded ids (the first prompt, every completion the sampler produced, every earlier
  rendering) plus only the new messages rendered as ids (:func:`continuation_ids`, the same difference of two
  chat-template renderings as :func:`rlvr.envs.rendering.observation_ids`).  The model's own tokens are never
  decoded and re-encoded.
* any other request (an agent that rewrites, summarises or truncates its history, changes its tools, or
  starts over) **starts a new segment** whose prompt is its messages rendered by the engine's chat template.
  Such requests are counted (``non_extending``, reported as ``env/non_extending``).

The episode's training :class:`~rlvr.types.Sample` is its **last** segment (the one that produced the final
answer, the one the reward scores): ``prompt_ids`` its first prompt, ``completion_ids`` everything after it,
``mask`` 1 on the sampler's tokens and 0 on the rendered messages, ``logprobs`` the sampler's on its tokens and
0 elsewhere.  Earlier segments are not trained on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.types import Problem, Sample, Verdict

__all__ = ["Segment", "EpisodeRecording", "continuation_ids"]

_A = "rlvr-assistant-placeholder"


def _render(tokenizer, messages, generation_prompt: bool, tools) -> str:
    extra = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)


def continuation_ids(tokenizer, conversation: list[dict], new: list[dict], tools, turn_ids: list[int],
                     eos_ids: set[int]) -> list[int] | None:
    """Ids that follow the served assistant turn ``turn_ids`` (the last message of ``conversation``) so that the
    model sees the ``new`` messages and the generation prompt, or None when the template renders the earlier
    turns differently once messages follow them (the request then starts a new segment).

    The served message is rendered as a placeholder (without its tool calls: the model's own ids hold them);
    what the template writes after the placeholder, and the new messages, are encoded without special tokens.
    """
    if not getattr(tokenizer, "chat_template", None):
        text = "\n\n".join(m["content"] for m in new)
        return list(tokenizer.encode("\n\n" + text + "\n\n", add_special_tokens=False))
    head = conversation[:-1] + [{"role": "assistant", "content": _A}]
    try:
        before = _render(tokenizer, head, False, tools)
        after = _render(tokenizer, head + new, True, tools)
    except Exception:  # noqa: BLE001 - a template that refuses this shape: a new segment renders it whole
        return None
    if not after.startswith(before):
        return None
    end = before.rfind(_A) + len(_A)
    ids = list(tokenizer.encode(before[end:] + after[len(before):], add_special_tokens=False))
    if turn_ids and turn_ids[-1] in eos_ids and ids and ids[0] == turn_ids[-1]:
        ids = ids[1:]  # the model already wrote the end-of-turn token
    return ids


@dataclass
class Segment:
    """A run of requests each extending the one before: one token sequence."""

    start: Problem
    """The segment's first request as a problem (its messages and tools): what the engine renders."""
    tools: list[dict] | None
    prompt_ids: list[int] = field(default_factory=list)
    """The first request's prompt ids as the engine consumed them."""
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    conversation: list[dict] = field(default_factory=list)
    """Normalised messages so far, ending with the assistant message served."""
    finish_reason: str = "stop"
    last_text: str = ""
    """The last served completion's text (what the verifier scores)."""

    @property
    def last_turn_ids(self) -> list[int]:
        start = self.turn_ends[-2] if len(self.turn_ends) > 1 else 0
        return self.completion_ids[start:self.turn_ends[-1]] if self.turn_ends else []


@dataclass
class Plan:
    """How one request is sampled: the engine's problem and prefix, and where its result is recorded."""

    segment: Segment
    new_segment: bool
    added_ids: list[int]
    """Ids appended before sampling (rendered new messages; empty for a new segment)."""
    messages: list[dict]

    @property
    def prefix(self) -> list[int]:
        return [] if self.new_segment else self.segment.completion_ids + self.added_ids


@dataclass
class EpisodeRecording:
    """The requests of one episode: its segments and counters."""

    id: str
    problem: Problem
    group_index: int = 0
    segments: list[Segment] = field(default_factory=list)
    requests: int = 0
    non_extending: int = 0
    """Requests after the first that did not extend the current segment (each started a new one)."""
    retemplated: int = 0
    """Of those, requests that did extend the conversation but whose template re-renders earlier turns."""
    busy: bool = False
    closed: str | None = None
    """Why the episode no longer takes requests (None: open)."""

    def plan(self, messages: list[dict], tools, tokenizer, eos_ids: set[int], key) -> Plan:
        """Where the request with normalised ``messages`` goes (``key``: :func:`rlvr.serve.chat.canonical`)."""
        seg = self.segments[-1] if self.segments else None
        if seg is not None:
            conv = seg.conversation
            extends = (tools == seg.tools and len(messages) > len(conv)
                       and [key(m) for m in messages[:len(conv)]] == [key(m) for m in conv])
            if extends:
                ids = continuation_ids(tokenizer, conv, messages[len(conv):], tools, seg.last_turn_ids, eos_ids)
                if ids is not None:
                    return Plan(seg, False, ids, messages)
                self.retemplated += 1
            self.non_extending += 1
        start = Problem(self.problem.id, messages=[dict(m) for m in messages], answer=self.problem.answer,
                        metadata=self.problem.metadata, tools=tools)
        return Plan(Segment(start, tools), True, [], messages)

    def record(self, plan: Plan, prompt_ids: list[int], sample: Sample, served: dict[str, Any]) -> None:
        """Append what ``plan``'s request consumed (``prompt_ids``, checked against the recording) and produced
        (``sample``: the sampler's ids and log-probs; ``served``: the normalised assistant message returned)."""
        seg = plan.segment
        if plan.new_segment:
            seg.prompt_ids = list(prompt_ids)
            self.segments.append(seg)
        else:
            expected = seg.prompt_ids + seg.completion_ids + plan.added_ids
            if list(prompt_ids) != expected:
                raise RuntimeError(f"episode {self.id}: the engine consumed {len(prompt_ids)} prompt ids that are "
                                   f"not the {len(expected)} recorded ones")
            seg.completion_ids += plan.added_ids
            seg.mask += [0] * len(plan.added_ids)
            seg.logprobs += [0.0] * len(plan.added_ids)
        seg.completion_ids += list(sample.completion_ids)
        seg.mask += [1] * len(sample.completion_ids)
        seg.logprobs += [float(x) for x in sample.logprobs]
        seg.turn_ends.append(len(seg.completion_ids))
        seg.conversation = [dict(m) for m in plan.messages] + [served]
        seg.finish_reason, seg.last_text = sample.finish_reason, sample.text
        self.requests += 1

    @property
    def final_text(self) -> str | None:
        """The last served completion's text (None: nothing was served)."""
        return self.segments[-1].last_text if self.segments else None

    def to_sample(self, tokenizer, verdict: Verdict, reward: float, info: dict[str, Any],
                  fallback_prompt: list[int], eos_id: int) -> Sample:
        """The training sample: the last segment (see the module doc).  An episode that was served nothing gets
        its problem's prompt and one masked end-of-sequence token (nothing to train on, reward as given)."""
        base = {"requests": self.requests, "segments": len(self.segments), "non_extending": self.non_extending,
                "retemplated": self.retemplated, **info}
        turns = len(self.segments[-1].turn_ends) if self.segments else 0
        base["turn_rewards"] = [0.0] * max(0, turns - 1) + [float(reward)]  # the outcome comes after the last turn
        if not self.segments:
            return Sample(self.problem.id, list(fallback_prompt), [eos_id], [0.0], "", "stop", self.group_index,
                          mask=[0], info={"turns": 0, "turn_ends": [], **base}, verdict=verdict, env_return=reward)
        seg = self.segments[-1]
        text = tokenizer.decode(seg.completion_ids, skip_special_tokens=True)
        return Sample(self.problem.id, list(seg.prompt_ids), list(seg.completion_ids), list(seg.logprobs), text,
                      seg.finish_reason, self.group_index, mask=list(seg.mask),
                      info={"turns": len(seg.turn_ends), "turn_ends": list(seg.turn_ends), **base},
                      verdict=verdict, env_return=reward)
