"""Pull the program out of a model completion."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["extract_code"]

# An opening fence (optionally tagged python/py/python3) at a line start, its body,
# and the closing fence.  Lazy body + explicit closing fence keeps it linear.
_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*(?P<lang>[A-Za-z0-9_+-]*)[^\n]*\n(?P<body>.*?)^[ \t]*```", re.M | re.S)
_PY_TAGS = {"python", "py", "python3", "py3"}


def extract_code(completion: Any) -> str | None:
    """The program in ``completion``: the last ```python fenced block (or the last
    untagged block when there is no python-tagged one), else the whole text.

    Returns None for non-strings and for text that is empty or whitespace only.
    """
    if not isinstance(completion, str) or not completion.strip():
        return None
    tagged, untagged = None, None
    for m in _FENCE_RE.finditer(completion):
        lang = m.group("lang").lower()
        if lang in _PY_TAGS:
            tagged = m.group("body")
        elif not lang:
            untagged = m.group("body")
    code = tagged if tagged is not None else untagged
    if code is None:
        code = completion
    return code if code.strip() else None
