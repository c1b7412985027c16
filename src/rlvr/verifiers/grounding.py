"""Grounding: a predicted bounding box against the gold box, by intersection over union.

Extraction -> checks -> comparison, as the other verifiers:

* **extraction**: the boxes ``[x1, y1, x2, y2]`` (or with parentheses) inside the last ``\\boxed{...}``
  of the completion, or in the whole completion when nothing is boxed;
* **checks** (each refusal scores 0 with its reason): no box; more boxes than ``max_boxes`` (listing
  candidates is not an answer); a coordinate that is NaN or infinite; corners not in the order
  ``x1 < x2, y1 < y2`` (swapped or zero-size boxes: ``allow_swapped=True`` reorders swapped corners,
  a zero-size box is refused either way); with the image size known, a box reaching outside the image;
* **comparison**: ``IoU = |P ∩ G| / |P ∪ G|``.  Binary (the default): 1 when ``IoU >= threshold``;
  ``continuous=True``: the chance-corrected IoU ``max(0, (IoU - IoU_0) / (1 - IoU_0))``, where ``IoU_0`` is
  the IoU of the whole image with the gold box (0 when the size is unknown), so that answering with
  the whole image earns exactly 0.  In binary mode the whole image never passes either, unless it
  *is* the gold box.

The reference is a box (``"[x1, y1, x2, y2]"``) or JSON ``{"box": [...], "image_size": [W, H]}`` (what
the drawn ``visual`` task's ``locate`` problems hold).  Both boxes are in the same pixel (or
normalised) frame.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.numeric import _last_boxed

__all__ = ["grounding_verifier", "box_iou", "parse_boxes", "parse_reference"]

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)"
_BOX_RE = re.compile(r"[\[(]\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*,\s*(" + _NUM
                     + r")\s*[\])]", re.IGNORECASE)

Box = tuple[float, float, float, float]


def parse_boxes(text: str) -> list[Box]:
    """Every 4-number box in ``text``, in order, as floats (NaN / inf kept, for the caller to refuse)."""
    return [tuple(float(g) for g in m.groups()) for m in _BOX_RE.finditer(text or "")]


def box_iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes ``(x1, y1, x2, y2)`` with ``x1 < x2`` and ``y1 < y2``."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def parse_reference(reference: str) -> tuple[Box, tuple[float, float] | None]:
    """``(gold box, image size or None)`` from a reference string; ValueError when it is not one."""
    size = None
    try:
        data: Any = json.loads(reference)
    except (TypeError, ValueError):
        data = None
    if isinstance(data, dict):
        box = data.get("box")
        if data.get("image_size") is not None:
            w, h = (float(v) for v in data["image_size"])
            if not (math.isfinite(w) and math.isfinite(h) and w > 0 and h > 0):
                raise ValueError(f"bad image_size {data['image_size']!r}")
            size = (w, h)
    elif isinstance(data, list):
        box = data
    else:
        found = parse_boxes(str(reference))
        if len(found) != 1:
            raise ValueError(f"reference {reference!r} is not one box")
        box = list(found[0])
    if not (isinstance(box, (list, tuple)) and len(box) == 4):
        raise ValueError(f"reference box {box!r} is not [x1, y1, x2, y2]")
    gold = tuple(float(v) for v in box)
    if not all(math.isfinite(v) for v in gold) or not (gold[0] < gold[2] and gold[1] < gold[3]):
        raise ValueError(f"reference box {box!r} is degenerate")
    return gold, size


def _fmt(box: Box) -> str:
    return "[" + ", ".join(f"{v:g}" for v in box) + "]"


@register_verifier("grounding", doc="predicted box vs gold box by IoU (threshold, or continuous chance-corrected "
                                    "IoU); refuses malformed, degenerate, out-of-image and multiple boxes")
def grounding_verifier(threshold: float = 0.5, continuous: bool = False, max_boxes: int = 1,
                       allow_swapped: bool = False) -> Verifier:
    """``threshold``: the IoU a box needs (binary mode); ``continuous``: score the chance-corrected IoU
    instead; ``max_boxes``: boxes an answer may hold (more is refused: candidates are not an answer);
    ``allow_swapped``: reorder corners given as (x2, y2, x1, y1) instead of refusing them."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"grounding: threshold must be in (0, 1], got {threshold}")
    if max_boxes < 1:
        raise ValueError(f"grounding: max_boxes must be >= 1, got {max_boxes}")

    def verify(completion: str, reference: str) -> Verdict:
        try:
            gold, size = parse_reference(reference)
        except (ValueError, TypeError) as e:
            return Verdict(0.0, None, reason=f"bad reference: {e}")
        text = completion if isinstance(completion, str) else ""
        boxed = _last_boxed(text)
        boxes = parse_boxes(boxed if boxed is not None else text)
        if not boxes:
            return Verdict(0.0, None, reason="no box [x1, y1, x2, y2] found")
        if len(set(boxes)) > max_boxes:
            return Verdict(0.0, _fmt(boxes[-1]), reason=f"{len(set(boxes))} boxes given, at most {max_boxes} accepted")
        box = boxes[-1]
        if not all(math.isfinite(v) for v in box):
            return Verdict(0.0, _fmt(box), reason="a coordinate is not finite")
        x1, y1, x2, y2 = box
        if (x1 > x2 or y1 > y2) and allow_swapped:
            x1, x2, y1, y2 = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
        if not (x1 < x2 and y1 < y2):
            what = "zero-size box" if x1 == x2 or y1 == y2 else "corners out of order (x1 < x2, y1 < y2 expected)"
            return Verdict(0.0, _fmt(box), reason=what)
        box = (x1, y1, x2, y2)
        base = 0.0
        if size is not None:
            w, h = size
            if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
                return Verdict(0.0, _fmt(box), reason=f"box outside the {w:g} x {h:g} image")
            base = box_iou((0.0, 0.0, w, h), gold)
        iou = box_iou(box, gold)
        if continuous:
            score = 1.0 if iou >= 1.0 else max(0.0, (iou - base) / (1.0 - base)) if base < 1.0 else 0.0
            return Verdict(score, _fmt(box), reason=f"IoU {iou:.3f} (whole image {base:.3f})")
        ok = iou >= threshold and (iou > base or iou >= 1.0)
        return Verdict(1.0 if ok else 0.0, _fmt(box), reason=f"IoU {iou:.3f} {'>=' if ok else '<'} {threshold:g}"
                       + ("" if ok or iou < threshold else f" (no better than the whole image, {base:.3f})"))

    return verify
