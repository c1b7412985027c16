"""Images and vision-language processors: decoding, chat messages with image parts, the processor round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_vlm, random_images
from rlvr.models.loader import load_policy
from rlvr.models.vision import (ImageLoadError, as_tokenizer, image_messages, image_token_ids, is_vision_checkpoint,
                                is_vision_model, load_image, merge_image_inputs, processor_of, render_prompt)
from rlvr.types import Problem


def test_load_image_accepts_paths_arrays_and_pil(tmp_path):
    from PIL import Image

    arr = random_images(1)[0]
    Image.fromarray(arr).save(tmp_path / "a.png")
    for x in (str(tmp_path / "a.png"), tmp_path / "a.png", arr, Image.fromarray(arr), arr.astype(np.float32) / 255):
        im = load_image(x)
        assert im.mode == "RGB" and im.size == (40, 40)
        assert np.abs(np.asarray(im).astype(int) - arr).max() <= 1
    assert load_image("a.png", base=tmp_path).size == (40, 40)  # relative to the dataset's directory
    assert load_image(np.zeros((5, 7))).size == (7, 5)  # grey


@pytest.mark.parametrize("bad, match", [
    ("missing.png", "missing.png: file not found"),
    (np.zeros((2, 3, 5)), r"shape \(2, 3, 5\)"),
    (np.full((4, 4, 3), np.nan), "NaN"),
    (3.5, "not an image: float"),
])
def test_bad_images_are_named(tmp_path, bad, match):
    with pytest.raises(ImageLoadError, match=match):
        load_image(bad)


def test_a_damaged_file_names_the_file(tmp_path):
    p = tmp_path / "broken.png"
    p.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with pytest.raises(ImageLoadError, match="broken.png: cannot be read"):
        load_image(p)


def test_image_messages_put_images_before_the_first_user_text():
    p = Problem("p", prompt="How many?", images=random_images(2))
    msgs = image_messages(p, "Be brief.")
    assert msgs[0] == {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    assert msgs[1]["content"] == [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "How many?"}]
    listed = Problem("q", messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}],
                     images=random_images(1))
    assert image_messages(listed)[0]["content"][1] == {"type": "image"}  # where the messages put it
    with pytest.raises(ValueError, match="show 1 images but it has 2"):
        image_messages(Problem("r", messages=listed.messages, images=random_images(2)))


def test_processor_round_trip(tmp_path):
    """Render -> ids with one run of placeholders per image; the text around them decodes back; the saved
    processor and model load through load_policy as a VLM and render the same ids and pixels."""
    model, tok = make_vlm()
    proc = processor_of(tok)
    image_id = tok.convert_tokens_to_ids("<image>")
    assert image_token_ids(tok) == {image_id} and image_token_ids(make_vlm()[1]) == {image_id}
    p = Problem("p", prompt="How many circles?", images=random_images(2))
    ids, inputs = render_prompt(tok, p)
    assert inputs.num_image_tokens == 32 == ids.count(image_id)  # 2 images x (32 / 8)^2 patches
    assert inputs.tensors["pixel_values"].shape == (2, 3, 32, 32)
    text = tok.decode([t for t in ids if t != image_id])
    assert text == "<|im_start|>user\nHow many circles?<|im_end|>\n<|im_start|>assistant\n"
    # equal images -> equal key; different images -> different key
    assert render_prompt(tok, Problem("q", prompt="x", images=p.images))[1].key == inputs.key
    assert render_prompt(tok, Problem("q", prompt="How many circles?", images=random_images(2, seed=1)))[1].key \
        != inputs.key
    model.save_pretrained(tmp_path / "vlm")
    proc.save_pretrained(tmp_path / "vlm")
    assert is_vision_checkpoint(tmp_path / "vlm")
    model2, tok2 = load_policy(str(tmp_path / "vlm"))
    assert is_vision_model(model2) and processor_of(tok2) is not None and tok2.padding_side == "left"
    ids2, inputs2 = render_prompt(tok2, p)
    assert ids2 == ids
    torch.testing.assert_close(inputs2.tensors["pixel_values"], inputs.tensors["pixel_values"])
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_as_tokenizer_takes_a_processor_and_text_problems_render_as_before():
    from conftest import make_tokenizer
    from rlvr.engines import format_prompt

    model, tok = make_vlm()
    proc = processor_of(tok)
    assert as_tokenizer(proc) is proc.tokenizer and processor_of(as_tokenizer(proc)) is proc
    plain = make_tokenizer()
    p = Problem("t", prompt="What is 2 + 3?")
    assert format_prompt(tok, p) == format_prompt(plain, p)  # the vision template renders text as the text one


def test_merge_concatenates_rows_in_order():
    model, tok = make_vlm()
    a = render_prompt(tok, Problem("a", prompt="x", images=random_images(1, seed=1)))[1]
    b = render_prompt(tok, Problem("b", prompt="x", images=random_images(2, seed=2)))[1]
    merged = merge_image_inputs([a, None, b, a], dtype=torch.bfloat16)
    pv = merged["pixel_values"]
    assert pv.shape[0] == 4 and pv.dtype == torch.bfloat16
    torch.testing.assert_close(pv[1:3], b.tensors["pixel_values"].to(torch.bfloat16))
    assert merge_image_inputs([None, None]) == {}
