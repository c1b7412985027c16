"""Image columns of the JSON-lines and `datasets` tasks: images load with their rows; a missing or damaged image
names its file and row and costs that row only (or raises with bad_images=error)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from conftest import random_images
from rlvr.tasks.jsonl import DatasetError, load_jsonl_problems


def _write_images(d, n):
    from PIL import Image

    for i, arr in enumerate(random_images(n)):
        Image.fromarray(arr).save(d / f"img{i}.png")


def _rows(d):
    (d / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    rows = [{"prompt": "How many?", "answer": "1", "image": "img0.png", "level": 1},
            {"prompt": "Two images", "answer": "2", "image": ["img1.png", str(d / "img2.png")]},
            {"prompt": "Missing", "answer": "3", "image": "nope.png"},
            {"prompt": "Damaged", "answer": "4", "image": "broken.png"},
            {"prompt": "Text only", "answer": "5"}]
    path = d / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_images_load_and_bad_ones_cost_their_row_only(tmp_path, caplog):
    _write_images(tmp_path, 3)
    path = _rows(tmp_path)
    with caplog.at_level(logging.WARNING):
        probs = load_jsonl_problems(path, image_field="image")
    assert [p.answer for p in probs] == ["1", "2", "5"]
    assert probs[0].images == [str(tmp_path / "img0.png")] and probs[0].metadata == {"level": 1}
    assert probs[1].images == [str(tmp_path / "img1.png"), str(tmp_path / "img2.png")]
    assert probs[2].images is None  # a row without the column is a text problem
    text = caplog.text
    assert f"{path}:3: image {tmp_path / 'nope.png'}: file not found" in text
    assert f"{path}:4: image {tmp_path / 'broken.png'}: cannot be read" in text
    assert "2 row(s) left out for bad images" in text


def test_jsonl_bad_image_raises_when_asked(tmp_path):
    _write_images(tmp_path, 3)
    path = _rows(tmp_path)
    with pytest.raises(DatasetError, match=r"data.jsonl:3: image .*nope.png: file not found"):
        load_jsonl_problems(path, image_field="image", bad_images="error")
    with pytest.raises(DatasetError, match="no row has the image field 'picture'"):
        load_jsonl_problems(path, image_field="picture")
    assert all(p.images is None for p in load_jsonl_problems(path))  # without image_field: text as before


def test_jsonl_task_reads_images_through_task_params(tmp_path):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.tasks.registry import build_task

    _write_images(tmp_path, 3)
    path = _rows(tmp_path)
    cfg = load_config(RunConfig, None, ["task.name=jsonl", f"task.path={path}", "task.num_heldout=1",
                                        "task.params={image_field: image}"])
    train, held = build_task(cfg.task)
    assert len(train) + len(held) == 3 and sum(bool(p.images) for p in train + held) == 2


def test_hf_dataset_image_column_names_a_damaged_row(tmp_path, caplog):
    datasets = pytest.importorskip("datasets")
    from io import BytesIO

    from PIL import Image

    from rlvr.tasks.hf_dataset import load_hf_dataset_problems

    good = []
    for arr in random_images(2):
        buf = BytesIO()
        Image.fromarray(arr).save(buf, format="PNG")
        good.append({"bytes": buf.getvalue(), "path": None})
    bad = {"bytes": b"\x89PNG\r\n\x1a\n garbage", "path": "bad.png"}
    ds = datasets.Dataset.from_dict({"prompt": ["a", "b", "c"], "answer": ["1", "2", "3"], "image": [good[0], bad, good[1]]},
                                    features=datasets.Features({"prompt": datasets.Value("string"),
                                                                "answer": datasets.Value("string"),
                                                                "image": datasets.Image()}))
    ds.save_to_disk(str(tmp_path / "ds"))
    with caplog.at_level(logging.WARNING):
        probs = load_hf_dataset_problems(str(tmp_path / "ds"), image_field="image")
    assert [p.answer for p in probs] == ["1", "3"]
    assert "[train]:row 1: image bad.png: cannot be read" in caplog.text
    from rlvr.models.vision import load_image

    np.testing.assert_array_equal(np.asarray(load_image(probs[1].images[0])), random_images(2)[1])
    with pytest.raises(DatasetError, match=r"\[train\]:row 1: image bad.png"):
        load_hf_dataset_problems(str(tmp_path / "ds"), image_field="image", bad_images="error")
    with pytest.raises(DatasetError, match="no image column 'img'"):
        load_hf_dataset_problems(str(tmp_path / "ds"), image_field="img")
