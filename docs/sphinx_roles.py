"""A griffe extension for the API reference: the docstrings' Sphinx markup rendered as Markdown.

rlvr's docstrings cross-reference with Sphinx roles (``:class:`~rlvr.types.Problem```, ``:func:`train```) and
open literal blocks with ``::``; mkdocstrings renders Markdown, where both would show raw.  This extension,
loaded through the mkdocstrings handler's ``extensions`` option (mkdocs.yml), rewrites each docstring as
griffe loads it:

- a role becomes a code span of what Sphinx would display: ``:class:`~rlvr.types.Problem``` -> ```Problem```,
  ``:func:`rlvr.train``` -> ```rlvr.train```, ``:meth:`title <target>``` -> ```title```;
- inside a literal block (after a ``::`` paragraph, or between fences) it becomes the bare name;
- a paragraph's closing ``::`` becomes ``:`` (a ``::`` alone on its line goes).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|data|const|class|meth|attr|exc|obj|type|any):`([^`]+)`")
FENCE = re.compile(r"^\s*(```|~~~)")


def _display(target: str) -> str:
    """What Sphinx shows for a role's content: the title of ``title <target>``, else the target without ``!``,
    shortened to its last component by a leading ``~``."""
    titled = re.fullmatch(r"(.*?)\s*<([^>]+)>", target.strip(), re.S)
    if titled and titled.group(1):
        return titled.group(1)
    text = target.strip().lstrip("!")
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return text


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rewrite(text: str) -> str:
    """``text`` (a docstring) with its Sphinx roles and ``::`` literal markers rendered as Markdown."""
    out: list[str] = []
    fenced = False
    literal_from: int | None = None  # the indentation of the paragraph that opened a ``::`` literal block
    for line in text.splitlines():
        if literal_from is not None and line.strip() and _indent(line) <= literal_from:
            literal_from = None
        if FENCE.match(line):
            fenced = not fenced
        if fenced or literal_from is not None:
            out.append(ROLE.sub(lambda m: _display(m.group(1)), line))
            continue
        line = ROLE.sub(lambda m: f"`{_display(m.group(1))}`", line)
        if line.rstrip().endswith("::"):
            literal_from = _indent(line)
            stripped = line.rstrip()[:-2].rstrip()
            if not stripped:  # a bare ``::`` line
                continue
            line = stripped + ":"
        out.append(line)
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`rewrite`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
