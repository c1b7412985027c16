"""Procedurally drawn visual problems with exact answers (Pillow): count shapes, compare bars, read a
clock, measure a small geometry figure, or locate a shape with a box.

Every problem is one image (``Problem.images``, a decoded ``PIL.Image``) and a question whose answer is
computed from the scene that was drawn, never read back from the pixels:

=========  ========================================================  ===============  ==================
kind       question                                                  answer           verifier
=========  ========================================================  ===============  ==================
count      how many <colour> <shape>s (among distractors)            an integer       numeric / math
bars       how much taller bar X is than bar Y (an axis with ticks)  an integer       numeric / math
clock      the time shown, as minutes after 12 o'clock               0 .. 719         numeric / math
geometry   area / perimeter / missing angle / side of a figure       an integer       numeric / math
locate     the pixel box [x1, y1, x2, y2] of one shape               box + image size grounding
=========  ========================================================  ===============  ==================

``difficulty`` (1 to 5) grows what makes each harder: more and smaller objects, more distractor kinds
and colours; more bars and closer heights; finer clock times (hours, halves, quarters, five minutes,
any minute); harder figures (rectangle area, perimeter or a triangle's third angle, a hypotenuse, a
missing leg, a trapezoid's area).  ``kind="mixed"`` draws the four numeric kinds in turn.

Splits are disjoint by construction: a problem is the full description of its scene (every object,
position, colour, value and style), the held-out problems are drawn first, and a training draw whose
scene is already held out (or already drawn) is rejected, so no image is in both splits; answers
repeat, as in any such set.  The held-out set does not move when ``num_train`` changes.
"""

from __future__ import annotations

import json
import math
import random
from typing import Literal

from rlvr.tasks.registry import TASKS, Split
from rlvr.types import Problem

__all__ = ["visual_task", "make_visual_problem", "KINDS", "SHAPES", "COLOURS"]

KINDS = ("count", "bars", "clock", "geometry", "locate")
SHAPES = ("circle", "square", "triangle", "star")
COLOURS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (30, 160, 60), "orange": (240, 150, 20)}
_BOXED = " Put the final answer in \\boxed{}."
_MAX_REJECTIONS = 100_000


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _canvas(size: int):
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    return img, ImageDraw.Draw(img)


def _shape(draw, shape: str, box: tuple[int, int, int, int], fill) -> None:
    x1, y1, x2, y2 = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([((x1 + x2) / 2, y1), (x2, y2), (x1, y2)], fill=fill)
    else:  # a five-pointed star
        cx, cy, r = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2
        pts = [(cx + (r if k % 2 == 0 else r * 0.45) * math.sin(k * math.pi / 5),
                cy - (r if k % 2 == 0 else r * 0.45) * math.cos(k * math.pi / 5)) for k in range(10)]
        draw.polygon(pts, fill=fill)


def _place(rng: random.Random, n: int, size: int, obj: int, overlap: bool) -> list[tuple[int, int, int, int]]:
    """``n`` boxes of side ``obj`` inside the image, non-overlapping unless ``overlap`` (None if they do not fit)."""
    boxes: list[tuple[int, int, int, int]] = []
    for _ in range(2000):
        if len(boxes) == n:
            return boxes
        x, y = rng.randint(2, size - obj - 2), rng.randint(2, size - obj - 2)
        b = (x, y, x + obj, y + obj)
        if overlap or all(b[2] + 2 <= c[0] or c[2] + 2 <= b[0] or b[3] + 2 <= c[1] or c[3] + 2 <= b[1] for c in boxes):
            boxes.append(b)
    return boxes if len(boxes) == n else []


def _count(rng: random.Random, d: int, size: int):
    kinds = SHAPES[: min(1 + d, 4)] if d > 1 else SHAPES[:1]
    colours = list(COLOURS)[: 1 if d < 3 else 2 + (d >= 4) + (d >= 5)]
    target_shape, target_colour = rng.choice(kinds), rng.choice(colours)
    total = rng.randint(max(1, d - 1), 3 + 3 * d)
    obj = max(8, size // (4 + d))
    boxes = _place(rng, total, size, obj, overlap=False)
    while not boxes:
        total -= 1
        boxes = _place(rng, total, size, obj, overlap=False)
    objects = []
    for b in boxes:
        objects.append((rng.choice(kinds), rng.choice(colours), b))
    img, draw = _canvas(size)
    for s, c, b in objects:
        _shape(draw, s, b, COLOURS[c])
    answer = sum(1 for s, c, _ in objects if s == target_shape and c == target_colour)
    what = f"{target_colour} {target_shape}s" if len(colours) > 1 else f"{target_shape}s"
    return (("count", target_shape, target_colour, tuple(objects)), img, f"How many {what} are in the image?",
            str(answer), {"target": [target_colour, target_shape]})


def _bars(rng: random.Random, d: int, size: int):
    n = min(2 + d, 7)
    top = 5 * d + 5
    heights = [rng.randint(1, top) for _ in range(n)]
    i, j = rng.sample(range(n), 2)
    if heights[i] < heights[j]:
        i, j = j, i
    if d >= 3:  # closer pairs at higher difficulty
        heights[j] = max(1, heights[i] - rng.randint(0, max(1, top // (2 * d))))
    labels = "ABCDEFG"[:n]
    img, draw = _canvas(size)
    font = _font(max(8, size // 12))
    left, bottom, right, up = size // 6, size - size // 8, size - 4, 6
    scale = (bottom - up) / top
    step = 1 if top <= 10 else 5
    for v in range(0, top + 1, step):
        y = bottom - v * scale
        draw.line([(left - 3, y), (right, y)], fill=(225, 225, 225) if v else (0, 0, 0))
        draw.text((2, y - size // 24), str(v), fill=(0, 0, 0), font=font)
    draw.line([(left, up), (left, bottom)], fill=(0, 0, 0))
    width = (right - left) / n
    for k, h in enumerate(heights):
        x1 = left + k * width + width * 0.2
        draw.rectangle([x1, bottom - h * scale, x1 + width * 0.6, bottom], fill=(70, 110, 200))
        draw.text((x1, bottom + 1), labels[k], fill=(0, 0, 0), font=font)
    q = f"How much taller is bar {labels[i]} than bar {labels[j]}? Read the heights on the axis."
    return (("bars", tuple(heights), i, j), img, q, str(heights[i] - heights[j]),
            {"heights": dict(zip(labels, heights)), "pair": [labels[i], labels[j]]})


def _clock(rng: random.Random, d: int, size: int):
    step = {1: 60, 2: 30, 3: 15, 4: 5}.get(d, 1)
    h, m = rng.randrange(12), rng.randrange(0, 60, step)
    face = rng.choice([(255, 255, 255), (250, 245, 225), (230, 240, 250)])
    ticks = rng.choice([4, 12]) if d <= 2 else 12
    img, draw = _canvas(size)
    r = (size / 2 - 3) * rng.choice([0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0])
    slack = int(size / 2 - 3 - r)
    cx, cy = size / 2 + rng.randint(-slack, slack), size / 2 + rng.randint(-slack, slack)
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=face, outline=(0, 0, 0), width=2)
    font = _font(max(8, size // 10))
    for k in range(12):
        a = k * math.pi / 6
        inner = r * (0.8 if k % 3 == 0 else 0.88)
        draw.line([(cx + inner * math.sin(a), cy - inner * math.cos(a)), (cx + r * math.sin(a), cy - r * math.cos(a))],
                  fill=(0, 0, 0), width=2 if k % 3 == 0 else 1)
        if ticks == 12 or k % 3 == 0:
            label = str(k or 12)
            draw.text((cx + 0.65 * r * math.sin(a) - size / 30 * len(label), cy - 0.65 * r * math.cos(a) - size / 20),
                      label, fill=(0, 0, 0), font=font)
    ha = (h + m / 60) * math.pi / 6
    ma = m * math.pi / 30
    draw.line([(cx, cy), (cx + 0.45 * r * math.sin(ha), cy - 0.45 * r * math.cos(ha))], fill=(0, 0, 0), width=4)
    draw.line([(cx, cy), (cx + 0.8 * r * math.sin(ma), cy - 0.8 * r * math.cos(ma))], fill=(40, 40, 40), width=2)
    q = ("What time does the clock show? Answer with the number of minutes after 12 o'clock "
         "(for example, 2:30 is 150).")
    return (("clock", h, m, face, ticks, r, cx, cy), img, q, str(60 * h + m), {"time": f"{h or 12}:{m:02d}"})


_TRIPLES = [(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (6, 8, 10), (9, 12, 15), (12, 16, 20), (20, 21, 29)]


def _geometry(rng: random.Random, d: int, size: int):
    img, draw = _canvas(size)
    font = _font(max(8, size // 11))
    ink = (0, 0, 0)
    m = size // 6
    form = d  # one figure family per level
    if form == 1 or (form == 2 and rng.random() < 0.5):
        w, h = rng.randint(2, 12 + 3 * d), rng.randint(2, 12 + 3 * d)
        ask = "area" if form == 1 else "perimeter"
        x1, y1 = rng.randint(4, m), rng.randint(4, m + size // 8)
        x2, y2 = size - m - rng.randint(0, m // 2), size - m - rng.randint(0, m // 2)
        draw.rectangle([x1, y1, x2, y2], outline=ink, width=2)
        draw.text(((x1 + x2) // 2 - 6, y2 + 2), str(w), fill=ink, font=font)
        draw.text((x2 + 3, (y1 + y2) // 2), str(h), fill=ink, font=font)
        ans = w * h if ask == "area" else 2 * (w + h)
        return (("rect", ask, w, h, x1, y1, x2, y2), img, f"The rectangle's sides are labelled. What is its {ask}?",
                str(ans),
                {"figure": "rectangle", "w": w, "h": h, "ask": ask})
    if form == 2:
        a, b = rng.randint(20, 100), rng.randint(20, 100)
        if a + b >= 170:
            b = 170 - a if 170 - a >= 10 else 10
        pts = [(m, size - m), (size - m, size - m), (size // 2 + rng.randint(-m, m), m)]
        draw.polygon(pts, outline=ink, width=2)
        draw.text((pts[0][0] + 4, pts[0][1] - size // 6), f"{a}°", fill=ink, font=font)
        draw.text((pts[1][0] - size // 4, pts[1][1] - size // 6), f"{b}°", fill=ink, font=font)
        draw.text((pts[2][0] - 3, pts[2][1] + size // 12), "?", fill=ink, font=font)
        return (("angle", a, b, pts[2][0]), img, "Two angles of the triangle are labelled. What is the angle marked "
                "? in degrees?", str(180 - a - b), {"figure": "triangle", "angles": [a, b]})
    if form in (3, 4):
        x, y, z = rng.choice(_TRIPLES)
        k = rng.randint(1, 4)
        x, y, z = k * x, k * y, k * z
        if rng.random() < 0.5:
            x, y = y, x
        x0, y0 = rng.randint(m // 2 + 8, m + 6), rng.randint(size - m - 6, size - m)
        x1, y1 = rng.randint(size - m, size - 6), rng.randint(6, m)
        pts = [(x0, y0), (x1, y0), (x0, y1)]
        draw.polygon(pts, outline=ink, width=2)
        draw.rectangle([x0, y0 - 8, x0 + 8, y0], outline=ink)
        known = {"bottom": x, "left": y, "hyp": z}
        hidden = "hyp" if form == 3 else rng.choice(["bottom", "left"])
        at = {"bottom": ((x0 + x1) // 2 - 6, y0 + 2), "left": (2, (y0 + y1) // 2),
              "hyp": ((x0 + x1) // 2 + 4, (y0 + y1) // 2 - 10)}
        for side, v in known.items():
            draw.text(at[side], "?" if side == hidden else str(v), fill=ink, font=font)
        return (("right", x, y, z, hidden, tuple(pts)), img, "The triangle has a right angle. What is the length of "
                "the side marked ??", str(known[hidden]), {"figure": "right triangle", "sides": known, "unknown": hidden})
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    h = rng.randrange(2, 21, 2) if (a + b) % 2 else rng.randint(2, 20)
    top_w = (size - 2 * m) * min(a, b) / max(a, b)
    pts = [(m, size - m), (size - m, size - m), (size / 2 + top_w / 2, m + 8), (size / 2 - top_w / 2, m + 8)]
    draw.polygon(pts, outline=ink, width=2)
    draw.line([(size / 2, m + 8), (size / 2, size - m)], fill=(120, 120, 120))
    draw.text((size // 2 - 6, size - m + 2), str(max(a, b)), fill=ink, font=font)
    draw.text((size // 2 - 6, 0), str(min(a, b)), fill=ink, font=font)
    draw.text((size // 2 + 3, size // 2), str(h), fill=ink, font=font)
    return (("trapezoid", a, b, h), img, "The trapezoid's parallel sides and height are labelled. What is its area?",
            str((a + b) * h // 2), {"figure": "trapezoid", "parallel": [a, b], "height": h})


def _locate(rng: random.Random, d: int, size: int):
    kinds = SHAPES[: min(1 + d, 4)]
    colours = list(COLOURS)[: min(1 + d, 4)]
    n = 1 + 2 * (d - 1)
    obj = max(10, size // (2 + d))
    boxes = _place(rng, n, size, obj, overlap=False)
    while not boxes:
        n -= 1
        boxes = _place(rng, n, size, obj, overlap=False)
    target = (rng.choice(kinds), rng.choice(colours))
    objects = [(target[0], target[1], boxes[0])]
    for b in boxes[1:]:  # distractors never look like the target
        s, c = target
        while (s, c) == target:
            s, c = rng.choice(kinds), rng.choice(colours)
        objects.append((s, c, b))
    rng.shuffle(objects)
    img, draw = _canvas(size)
    for s, c, b in objects:
        _shape(draw, s, b, COLOURS[c])
    box = list(boxes[0])
    q = (f"The image is {size} x {size} pixels. Give the bounding box of the {target[1]} {target[0]} as "
         "[x1, y1, x2, y2] in pixels (x to the right, y down).")
    return (("locate", target, tuple(objects)), img, q, json.dumps({"box": box, "image_size": [size, size]}),
            {"target": list(target)})


_GENERATORS = {"count": _count, "bars": _bars, "clock": _clock, "geometry": _geometry, "locate": _locate}


def make_visual_problem(kind: str, difficulty: int, rng: random.Random, size: int = 112, pid: str = "visual"):
    """One drawn problem: ``(scene key, Problem)`` (the key describes everything drawn)."""
    if kind not in _GENERATORS:
        raise ValueError(f"visual: unknown kind {kind!r} (one of {', '.join(KINDS)} or mixed)")
    key, img, question, answer, meta = _GENERATORS[kind](rng, difficulty, size)
    prompt = question + (" Put the box in \\boxed{}." if kind == "locate" else _BOXED)
    return key, Problem(pid, prompt=prompt, answer=answer, images=[img],
                        metadata={"kind": kind, "difficulty": difficulty, **meta})


@TASKS.register("visual", doc="drawn images (Pillow): kind count | bars | clock | geometry | locate | mixed, "
                              "difficulty 1-5; disjoint train/held-out scenes (locate: reward.verifier=grounding)")
def visual_task(kind: Literal["count", "bars", "clock", "geometry", "locate", "mixed"] = "count",
                difficulty: int = 1, num_train: int = 2000, num_heldout: int = 256, seed: int = 0,
                image_size: int = 112) -> Split:
    """``(train, held_out)`` drawn problems (see the module doc); held-out scenes are drawn first."""
    if not 1 <= difficulty <= 5:
        raise ValueError(f"visual: difficulty must be in 1..5, got {difficulty}")
    if not 48 <= image_size <= 1024:
        raise ValueError(f"visual: image_size must be in 48..1024, got {image_size}")
    if num_train < 0 or num_heldout < 0:
        raise ValueError("visual: num_train and num_heldout must be >= 0")
    kinds = ["count", "bars", "clock", "geometry"] if kind == "mixed" else [kind]
    rng = random.Random(f"visual/{kind}/{difficulty}/{image_size}/{seed}")
    seen: set = set()
    out: list[Problem] = []
    rejected = 0
    while len(out) < num_heldout + num_train:
        k = kinds[len(out) % len(kinds)]
        key, problem = make_visual_problem(k, difficulty, rng, image_size)
        if key in seen:  # a scene already drawn (held out, or earlier in training) is never drawn again
            rejected += 1
            if rejected > _MAX_REJECTIONS:
                raise ValueError(f"visual: kind={kind} difficulty={difficulty} has too few distinct scenes for "
                                 f"{num_train + num_heldout} problems ({len(out)} drawn)")
            continue
        rejected = 0
        seen.add(key)
        tag = "heldout" if len(out) < num_heldout else "train"
        problem.id = f"visual-{kind}-d{difficulty}-{tag}-{len(out)}"
        problem.metadata["scene"] = repr(key)
        out.append(problem)
    return out[num_heldout:], out[:num_heldout]
