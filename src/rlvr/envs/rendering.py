"""Token ids of an environment turn, rendered with the tokenizer's chat template once per turn boundary.

The policy's own tokens are never decoded and re-encoded: a trajectory is the
sampler's ids with the environment's ids appended.  For a message observation the
ids to append are the difference between two renderings of a dummy conversation,
one ending with an assistant message and one with the observation after it (and
the generation prompt), so whatever the template puts between turns (end-of-turn
token, newline, role header) is reproduced exactly.  If the policy's turn already
ended with the end-of-turn token the template would write, that token is not
written twice.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["observation_ids", "supports_tools"]

_U, _A = "rlvr-user-placeholder", "rlvr-assistant-placeholder"


def supports_tools(tokenizer) -> bool:
    """True when the chat template renders a ``tools`` list (mentions ``tools``)."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        tpl = tpl.get("tool_use") or tpl.get("default")
    return bool(tpl) and "tools" in str(tpl)


def _render(tokenizer, messages, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def observation_ids(tokenizer, text: str, role: str, turn_ids: Sequence[int], eos_ids: set[int]) -> list[int]:
    """Ids to append after the policy's turn ``turn_ids`` so that the policy sees ``text``.

    ``role="inline"``: the text's own ids (no special tokens) inside the same
    assistant message.  ``role="user"``/``"tool"``: the assistant message is closed
    and a new message of that role plus the generation prompt follow, as the chat
    template renders them.  Without a chat template, two newlines, the text and two
    newlines.
    """
    if role == "inline":
        return list(tokenizer.encode(text, add_special_tokens=False))
    if not getattr(tokenizer, "chat_template", None):
        return list(tokenizer.encode("\n\n" + text + "\n\n", add_special_tokens=False))
    base = [{"role": "user", "content": _U}, {"role": "assistant", "content": _A}]
    before = _render(tokenizer, base, False)
    after = _render(tokenizer, base + [{"role": role, "content": text}], True)
    if not after.startswith(before):
        raise ValueError("the chat template renders earlier turns differently once a message follows them; "
                         "use role='inline' for this tokenizer")
    end = before.rfind(_A) + len(_A)
    between = before[end:] + after[len(before):]  # end of the assistant turn + the new message + header
    ids = list(tokenizer.encode(between, add_special_tokens=False))
    if turn_ids and turn_ids[-1] in eos_ids and ids and ids[0] == turn_ids[-1]:
        ids = ids[1:]  # the policy already wrote the end-of-turn token
    return ids
