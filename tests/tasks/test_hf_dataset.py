"""rlvr.tasks.load_hf_dataset_problems on local files (no hub access here)."""

from __future__ import annotations

import json
import sys

import pytest

datasets = pytest.importorskip("datasets", reason="the hf extra (pip install 'rlvr[hf]')")

from rlvr.tasks import DatasetError, load_hf_dataset_problems, load_jsonl_problems  # noqa: E402
from rlvr.tasks.benchmarks import data_file  # noqa: E402

ROWS = [
    {"question": "What is 2+2?", "answer": 4, "uid": "a", "level": 1},
    {"question": "What is 3*3?", "answer": "9", "uid": "b", "level": 2},
    {"question": "What is 10-7?", "answer": 3, "uid": "c", "level": 1},
]


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "hf-cache"


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_file_field_mapping_ids_metadata_and_limit(tmp_path, cache):
    f = _jsonl(tmp_path / "qa.jsonl", ROWS)
    probs = load_hf_dataset_problems(f, prompt_field="question", id_field="uid", cache_dir=cache)
    assert [(p.id, p.prompt, p.answer) for p in probs] == [
        ("a", "What is 2+2?", "4"), ("b", "What is 3*3?", "9"), ("c", "What is 10-7?", "3")]
    assert probs[0].metadata == {"level": 1}
    # default ids name the file stem, the split and the row; metadata_fields selects
    probs = load_hf_dataset_problems(str(f), split="test", prompt_field="question", metadata_fields=["level"],
                                     limit=2, cache_dir=cache)
    assert [p.id for p in probs] == ["qa-test-0", "qa-test-1"] and probs[1].metadata == {"level": 2}
    assert load_hf_dataset_problems(f, prompt_field="question", limit=0, cache_dir=cache) == []


def test_same_problems_as_the_jsonl_loader_on_the_packaged_gsm8k(cache):
    f = data_file("gsm8k_test.jsonl")  # the shipped .jsonl.gz
    hf = load_hf_dataset_problems(f, split="test", prompt_field="question", limit=50,
                                  answer_transform=lambda s: s.rsplit("####", 1)[1].strip(), cache_dir=cache)
    js = load_jsonl_problems(f, prompt_field="question", limit=50,
                             answer_transform=lambda s: s.rsplit("####", 1)[1].strip())
    assert [(p.prompt, p.answer) for p in hf] == [(p.prompt, p.answer) for p in js]
    assert hf[0].answer == "18"


def test_save_to_disk_dataset_dict_splits_and_messages(tmp_path, cache):
    msgs = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
            [{"role": "user", "content": "2+2?"}]]
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_list([{"chat": m, "ref": r} for m, r in zip(msgs, ["2", "4"])]),
        "test": datasets.Dataset.from_list([{"chat": msgs[1], "ref": "4"}]),
    })
    dd.save_to_disk(str(tmp_path / "saved"))
    probs = load_hf_dataset_problems(tmp_path / "saved", split="train", answer_field="ref", messages_field="chat")
    assert probs[0].messages == msgs[0] and probs[0].prompt is None and probs[0].answer == "2"
    assert probs[0].to_messages()[0] == {"role": "system", "content": "Be brief."}
    (test,) = load_hf_dataset_problems(tmp_path / "saved", split="test", answer_field="ref", messages_field="chat")
    assert test.id == "saved-test-0"
    with pytest.raises(DatasetError, match=r"saved: no split 'validation' \(the dataset has: train, test\)"):
        load_hf_dataset_problems(tmp_path / "saved", split="validation", answer_field="ref", messages_field="chat")


def test_parquet_and_csv_files_and_data_directory(tmp_path, cache):
    ds = datasets.Dataset.from_list([{"prompt": r["question"], "answer": str(r["answer"])} for r in ROWS])
    ds.to_parquet(str(tmp_path / "p.parquet"))
    ds.to_csv(str(tmp_path / "c.csv"), index=False)
    for f in ("p.parquet", "c.csv"):
        probs = load_hf_dataset_problems(tmp_path / f, cache_dir=cache)
        assert [p.answer for p in probs] == ["4", "9", "3"], f
    # a plain directory of data files, with data_files picking one
    d = tmp_path / "dir"
    d.mkdir()
    _jsonl(d / "train.jsonl", ROWS[:2])
    _jsonl(d / "test.jsonl", ROWS[2:])
    probs = load_hf_dataset_problems(d, split="test", prompt_field="question", cache_dir=cache)
    assert [p.prompt for p in probs] == ["What is 10-7?"]


def test_bad_rows_name_dataset_split_and_row(tmp_path, cache):
    f = _jsonl(tmp_path / "bad.jsonl", [ROWS[0], {"question": "no answer here", "uid": "x"}])
    with pytest.raises(DatasetError, match=r"bad\.jsonl\[train\]:row 1: missing answer field 'answer' "
                                           r"\(the line has: 'question', 'uid'\)"):
        load_hf_dataset_problems(f, prompt_field="question", cache_dir=cache)
    f = _jsonl(tmp_path / "dup.jsonl", [ROWS[0], ROWS[1], dict(ROWS[2], uid="a")])
    with pytest.raises(DatasetError, match=r"dup\.jsonl\[test\]:row 2: duplicate id 'a' \(first seen at row 0\)"):
        load_hf_dataset_problems(f, split="test", prompt_field="question", id_field="uid", cache_dir=cache)
    f = _jsonl(tmp_path / "typ.jsonl", [{"prompt": 5, "answer": "1"}])
    with pytest.raises(DatasetError, match=r"typ\.jsonl\[train\]:row 0: prompt field 'prompt' must be a string"):
        load_hf_dataset_problems(f, cache_dir=cache)
    with pytest.raises(DatasetError, match=r"row 0: answer_transform failed on 4"):
        load_hf_dataset_problems(_jsonl(tmp_path / "t.jsonl", ROWS), prompt_field="question",
                                 answer_transform=lambda a: a.upper(), cache_dir=cache)


def test_missing_sources_and_unknown_file_types(tmp_path, cache):
    with pytest.raises(DatasetError, match="no such file or directory"):
        load_hf_dataset_problems(str(tmp_path / "nope.jsonl"), cache_dir=cache)
    (tmp_path / "x.weird").write_text("hi")
    with pytest.raises(DatasetError, match="unknown data file type"):
        load_hf_dataset_problems(tmp_path / "x.weird", cache_dir=cache)
    f = _jsonl(tmp_path / "nothing.jsonl", [])
    with pytest.raises(DatasetError, match=r"nothing\.jsonl: cannot load split 'train'"):
        load_hf_dataset_problems(f, cache_dir=cache)


def test_missing_datasets_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[hf\]'"):
        load_hf_dataset_problems(tmp_path / "x.jsonl")
