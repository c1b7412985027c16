"""Tests of rlvr.tasks: the JSON-lines loader, the benchmark loaders and the arithmetic generator."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlvr.tasks import (
    BENCHMARKS,
    DEFAULT_TEMPLATE,
    ArithmeticSpec,
    DatasetError,
    arithmetic_split,
    evaluate_expression,
    find_data_dir,
    load_aime24,
    load_amc23,
    load_benchmark,
    load_gsm8k,
    load_jsonl_problems,
    load_math500,
    make_arithmetic_problem,
    read_jsonl,
    write_jsonl,
)
from rlvr.tasks.benchmarks import PACKAGED_DATA_DIR, data_file
from rlvr.types import Problem

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- jsonl loader


def test_field_mapping_ids_and_metadata():
    probs = load_jsonl_problems(FIXTURES / "tiny_problems.jsonl", prompt_field="question", answer_field="final",
                                id_field="qid")
    assert [p.id for p in probs] == ["a1", "a2", "a3"]
    assert probs[0].prompt == "What is 2 + 3?"
    assert [p.answer for p in probs] == ["5", "6", "42.0"]
    # metadata_fields=None keeps every field not used as prompt/answer/id
    assert probs[1].metadata == {"difficulty": "easy", "source": "hand"}


def test_default_ids_count_blank_lines_and_metadata_selection():
    probs = load_jsonl_problems(FIXTURES / "tiny_problems.jsonl", prompt_field="question", answer_field="final",
                                metadata_fields=["difficulty", "not_there"])
    # the blank line 2 is skipped but still counts for line numbers
    assert [p.id for p in probs] == ["tiny_problems-1", "tiny_problems-3", "tiny_problems-4"]
    assert probs[2].metadata == {"difficulty": "medium"}
    assert "qid" not in probs[0].metadata


def test_answer_transform_and_limit():
    probs = load_jsonl_problems(FIXTURES / "tiny_problems.jsonl", prompt_field="question", answer_field="final",
                                answer_transform=lambda a: str(int(float(a))), limit=2)
    assert [p.answer for p in probs] == ["5", "6"]


def test_answer_transform_error_names_line(tmp_path):
    f = _write(tmp_path / "t.jsonl", '{"prompt": "p", "answer": "1"}\n{"prompt": "q", "answer": "x"}\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl:2: answer_transform failed"):
        load_jsonl_problems(f, answer_transform=lambda a: str(int(a)))


def test_messages_field(tmp_path):
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}]
    f = _write(tmp_path / "chat.jsonl", json.dumps({"chat": chat, "answer": "2"}) + "\n")
    (p,) = load_jsonl_problems(f, messages_field="chat")
    assert p.prompt is None
    assert p.messages == chat
    assert p.to_messages()[1]["content"] == "1+1?"


def test_malformed_line_names_file_and_line(tmp_path):
    f = _write(tmp_path / "bad.jsonl", '{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", "answer": \n')
    with pytest.raises(DatasetError) as err:
        load_jsonl_problems(f)
    msg = str(err.value)
    assert f"{f}:3:" in msg and "malformed JSON" in msg
    assert isinstance(err.value, ValueError)


def test_line_that_is_not_an_object(tmp_path):
    f = _write(tmp_path / "list.jsonl", '{"prompt": "a", "answer": "1"}\n[1, 2]\n')
    with pytest.raises(DatasetError, match=r"list\.jsonl:2: expected a JSON object, got list"):
        load_jsonl_problems(f)


def test_missing_field_lists_fields(tmp_path):
    f = _write(tmp_path / "m.jsonl", '{"prompt": "a", "answer": "1"}\n{"question": "b", "answer": "2"}\n')
    with pytest.raises(DatasetError) as err:
        load_jsonl_problems(f)
    msg = str(err.value)
    assert "m.jsonl:2" in msg and "'prompt'" in msg and "'question', 'answer'" in msg

    with pytest.raises(DatasetError, match=r"m\.jsonl:1: missing answer field 'final'"):
        load_jsonl_problems(f, answer_field="final")


def test_empty_and_missing_files(tmp_path):
    empty = _write(tmp_path / "empty.jsonl", "\n  \n")
    with pytest.raises(DatasetError, match="empty"):
        load_jsonl_problems(empty)
    with pytest.raises(DatasetError, match="not found") as err:
        load_jsonl_problems(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in str(err.value)


def test_duplicate_ids_rejected(tmp_path):
    f = _write(tmp_path / "d.jsonl",
               '{"id": 1, "prompt": "a", "answer": "1"}\n{"id": "1", "prompt": "b", "answer": "2"}\n')
    with pytest.raises(DatasetError, match=r"d\.jsonl:2: duplicate id '1' \(first seen on line 1\)"):
        load_jsonl_problems(f, id_field="id")


def test_read_and_write_jsonl_roundtrip(tmp_path):
    out = tmp_path / "sub" / "rows.jsonl"
    n = write_jsonl(out, [{"a": 1, "b": "ü"}, Problem(id="x", prompt="p", answer="3")])
    assert n == 2
    rows = list(read_jsonl(out))
    assert rows[0] == (1, {"a": 1, "b": "ü"})
    assert rows[1][1]["id"] == "x" and rows[1][1]["answer"] == "3"
    assert [p.name for p in out.parent.iterdir()] == ["rows.jsonl"]  # no temporary left behind


def test_write_jsonl_failure_keeps_old_file(tmp_path):
    out = tmp_path / "rows.jsonl"
    write_jsonl(out, [{"a": 1}])

    def rows():
        yield {"a": 2}
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_jsonl(out, rows())
    assert out.read_text(encoding="utf-8") == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_read_jsonl_errors(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        read_jsonl(tmp_path / "missing.jsonl")  # raised at call time, not on first next()
    f = _write(tmp_path / "r.jsonl", '{"a": 1}\n"str"\n')
    it = read_jsonl(f)
    assert next(it) == (1, {"a": 1})
    with pytest.raises(DatasetError, match=r"r\.jsonl:2: expected a JSON object, got str"):
        next(it)


# ---------------------------------------------------------------- benchmarks


@pytest.fixture
def data_dir(monkeypatch) -> Path:
    """The benchmark data shipped inside the package (``$RLVR_DATA_DIR`` unset)."""
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    d = find_data_dir()
    assert d == PACKAGED_DATA_DIR and d.parent.name == "rlvr"
    return d


def test_packaged_data_is_the_documented_gzip_files(data_dir):
    names = sorted(p.name for p in data_dir.iterdir() if p.name != "__pycache__")
    assert names == ["README.md", "aime24_test.jsonl.gz", "amc23_test.jsonl.gz", "gsm8k_test.jsonl.gz",
                     "gsm8k_train.jsonl.gz", "math500_test.jsonl.gz", "search_corpus.jsonl.gz"]
    readme = (data_dir / "README.md").read_text()
    for name in names[1:]:
        assert name in readme  # every file has its provenance and licence
    assert "openai/grade-school-math" in readme and "MIT" in readme and "Qwen2.5-Math" in readme
    assert data_file("gsm8k_test.jsonl") == data_dir / "gsm8k_test.jsonl.gz"  # the .gz twin of the plain name


def test_gsm8k_test_split(data_dir):
    probs = load_gsm8k(data_dir / "gsm8k_test.jsonl.gz")
    assert len(probs) == 1319
    first = probs[0]
    assert first.id == "gsm8k_test-1"
    assert first.answer == "18"
    assert first.prompt.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert first.metadata["solution"].endswith("#### 18")
    assert len({p.id for p in probs}) == 1319
    # thousands separators are removed from the reference
    assert all("," not in p.answer and p.answer.lstrip("-").isdigit() for p in probs)


def test_gsm8k_default_location_split_and_limit(data_dir):
    probs = load_gsm8k(split="train", limit=5)
    assert len(probs) == 5 and probs[0].id == "gsm8k_train-1"
    assert len(load_gsm8k(data_dir, split="train")) == 7473  # a directory path works too
    with pytest.raises(ValueError, match="split"):
        load_gsm8k(split="dev")


def test_math500(data_dir):
    probs = load_math500()
    assert len(probs) == 500
    first = probs[0]
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first.prompt.startswith("Convert the point $(0,3)$")
    assert first.id == "test/precalculus/807.json"
    assert first.metadata["subject"] == "Precalculus" and first.metadata["level"] == 2
    assert first.metadata["unique_id"] == "test/precalculus/807.json"
    assert "\\boxed" in first.metadata["solution"]


def test_aime24_and_amc23(data_dir):
    aime = load_aime24()
    assert len(aime) == 30 and aime[0].answer == "204"
    assert "25" in [p.answer for p in aime]  # stored as "025"
    amc = load_amc23()
    assert len(amc) == 40
    assert amc[0].answer == "27" and amc[0].id == "amc23-0"
    assert all(not p.answer.endswith(".0") for p in amc)


def test_benchmark_registry(data_dir):
    assert set(BENCHMARKS) == {"gsm8k", "math500", "aime24", "amc23", "humaneval"}
    assert [p.answer for p in load_benchmark("gsm8k", limit=1)] == ["18"]
    with pytest.raises(ValueError, match="known benchmarks: aime24, amc23, gsm8k, humaneval, math500"):
        load_benchmark("mmlu")


def test_data_dir_env_var(tmp_path, monkeypatch):
    _write(tmp_path / "amc23_test.jsonl", '{"id": 3, "problem": "p", "answer": 2.5}\n')
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    assert find_data_dir() == tmp_path
    (p,) = load_amc23()
    assert p.answer == "2.5" and p.id == "amc23-3"
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path / "nope"))
    with pytest.raises(DatasetError, match="RLVR_DATA_DIR"):
        load_amc23()


def test_data_dir_env_var_with_plain_and_gzip_files(tmp_path, monkeypatch):
    import gzip

    _write(tmp_path / "aime24_test.jsonl", '{"id": 1, "problem": "plain", "answer": "007"}\n')
    with gzip.open(tmp_path / "aime24_test.jsonl.gz", "wt") as f:
        f.write('{"id": 1, "problem": "gz", "answer": "007"}\n')
    with gzip.open(tmp_path / "amc23_test.jsonl.gz", "wt") as f:
        f.write('{"id": 5, "problem": "p", "answer": 3.0}\n\n{"id": 5, "problem": "q", "answer": 1}\n')
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    (p,) = load_aime24()  # the plain file wins over its .gz twin
    assert p.prompt == "plain" and p.answer == "7"
    # only the .gz exists: it is read, and errors name the .gz file and the decompressed line
    with pytest.raises(DatasetError, match=r"amc23_test\.jsonl\.gz:3: duplicate id 'amc23-5'"):
        load_amc23()
    with pytest.raises(DatasetError, match=r"gsm8k_test\.jsonl: file not found"):
        load_gsm8k()  # $RLVR_DATA_DIR replaces the packaged data, it does not add to it


def test_damaged_gzip_is_a_dataset_error(tmp_path):
    import gzip

    data = gzip.compress(b'{"prompt": "a", "answer": "1"}\n' * 200)
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=r"cut\.jsonl\.gz: cannot read after line"):
        load_jsonl_problems(tmp_path / "cut.jsonl.gz")
    (tmp_path / "notgz.jsonl.gz").write_bytes(b'{"prompt": "a", "answer": "1"}\n')
    with pytest.raises(DatasetError, match=r"notgz\.jsonl\.gz: cannot read"):
        load_jsonl_problems(tmp_path / "notgz.jsonl.gz")


def test_missing_packaged_data_is_a_clear_error(tmp_path, monkeypatch):
    import rlvr.tasks.benchmarks as bm

    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    monkeypatch.setattr(bm, "PACKAGED_DATA_DIR", tmp_path / "gone")
    with pytest.raises(DatasetError) as err:
        find_data_dir()
    msg = str(err.value)
    assert "RLVR_DATA_DIR" in msg and str(tmp_path / "gone") in msg and "reinstall" in msg


# ---------------------------------------------------------------- arithmetic


def test_evaluate_honours_precedence():
    assert evaluate_expression([2, 3, 4], ["+", "*"]) == 14
    assert evaluate_expression([2, 3, 4], ["*", "+"]) == 10
    assert evaluate_expression([10, 2, 3, 4], ["-", "*", "+"]) == 8
    assert evaluate_expression([5, 3, 2], ["-", "-"]) == 0
    assert evaluate_expression([-4, -2], ["*"]) == 8


def test_split_is_reproducible_and_seed_dependent():
    spec = ArithmeticSpec(num_operands=3, operators=("+", "-", "*"))
    a = arithmetic_split(spec, 50, 20, seed=7)
    b = arithmetic_split(spec, 50, 20, seed=7)
    c = arithmetic_split(spec, 50, 20, seed=8)
    assert a == b
    assert [p.id for p in a[0]] != [p.id for p in c[0]]
    assert [p.id for p in a[1]] != [p.id for p in c[1]]


@pytest.mark.parametrize("spec", [ArithmeticSpec(), ArithmeticSpec(num_operands=4, max_value=99)],
                         ids=["enumerated", "sampled"])
def test_no_overlap_and_heldout_independent_of_n_train(spec):
    train, held = arithmetic_split(spec, 300, 100, seed=3)
    assert len(train) == 300 and len(held) == 100
    exprs = [p.metadata["expression"] for p in train + held]
    assert len(set(exprs)) == 400
    assert len({p.id for p in train + held}) == 400

    train_big, held_again = arithmetic_split(spec, 900, 100, seed=3)
    assert held_again == held
    assert train_big[:300] == train  # a larger train set extends the smaller one
    assert not {p.id for p in train_big} & {p.id for p in held}


def test_answers_and_prompt_format():
    spec = ArithmeticSpec(num_operands=3, min_value=1, max_value=9, operators=("+", "-", "*"))
    train, held = arithmetic_split(spec, 200, 50, seed=1)
    for p in train + held:
        ops, nums = p.metadata["operators"], p.metadata["operands"]
        # reference: multiply first, then add/subtract left to right
        terms, signs = [nums[0]], [1]
        for op, x in zip(ops, nums[1:]):
            if op == "*":
                terms[-1] *= x
            else:
                terms.append(x)
                signs.append(1 if op == "+" else -1)
        assert p.answer == str(sum(s * t for s, t in zip(signs, terms)))
        assert p.prompt == DEFAULT_TEMPLATE.format(expression=p.metadata["expression"])
        assert p.prompt.endswith("Put the final answer in \\boxed{}.")
        assert p.id == "arith-" + p.metadata["expression"].replace(" ", "")
        assert p.metadata["spec"]["operators"] == ["+", "-", "*"]


def test_specific_expression_answers():
    # all 3 * 3 * 2 = 18 expressions of 1..3 with + and *, checked by hand for a few
    spec = ArithmeticSpec(min_value=1, max_value=3, operators=("+", "*"))
    train, held = arithmetic_split(spec, 18, 0, seed=0)
    answers = {p.metadata["expression"]: p.answer for p in train}
    assert len(answers) == 18
    assert answers["3 * 3"] == "9" and answers["2 + 3"] == "5" and answers["1 * 1"] == "1"
    spec3 = ArithmeticSpec(num_operands=3, min_value=2, max_value=4, operators=("+", "*"))
    answers3 = {p.metadata["expression"]: p.answer for p in arithmetic_split(spec3, 108, 0)[0]}
    assert answers3["2 + 3 * 4"] == "14"
    assert answers3["4 * 3 + 2"] == "14"
    assert answers3["2 * 3 * 4"] == "24"


def test_negative_results_can_be_excluded():
    spec = ArithmeticSpec(num_operands=3, min_value=1, max_value=20, operators=("-",), allow_negative_results=False)
    train, held = arithmetic_split(spec, 100, 30)
    assert all(int(p.answer) >= 0 for p in train + held)
    allowed = arithmetic_split(ArithmeticSpec(num_operands=3, max_value=20, operators=("-",)), 100, 30)
    assert any(int(p.answer) < 0 for p in allowed[0])


def test_negative_operands_are_parenthesised():
    p = make_arithmetic_problem(random.Random(0), ArithmeticSpec(min_value=-9, max_value=-1, operators=("-",)))
    a, b = p.metadata["operands"]
    assert p.metadata["expression"] == f"({a}) - ({b})"
    assert p.answer == str(a - b)


def test_too_small_space_errors():
    spec = ArithmeticSpec(min_value=1, max_value=3)  # 3 * 3 = 9 expressions
    assert len(arithmetic_split(spec, 5, 4)[0]) == 5
    with pytest.raises(ValueError, match="only 9 distinct expressions"):
        arithmetic_split(spec, 6, 4)
    # every product of three negative numbers is negative: nothing is acceptable
    neg = ArithmeticSpec(num_operands=3, min_value=-3, max_value=-1, operators=("*",), allow_negative_results=False)
    with pytest.raises(ValueError, match="only 0 of the 27 expressions have a non-negative result"):
        arithmetic_split(neg, 1, 1)


def test_spec_and_template_validation():
    with pytest.raises(ValueError, match="num_operands"):
        ArithmeticSpec(num_operands=1)
    with pytest.raises(ValueError, match="min_value"):
        ArithmeticSpec(min_value=5, max_value=4)
    with pytest.raises(ValueError, match="operators"):
        ArithmeticSpec(operators=("+", "/"))
    assert ArithmeticSpec(operators=["+", "+", "*"]).operators == ("+", "*")
    with pytest.raises(ValueError, match="literal braces"):
        arithmetic_split(ArithmeticSpec(), 1, 1, template="What is {expression}? \\boxed{}")
    with pytest.raises(ValueError, match="expression"):
        arithmetic_split(ArithmeticSpec(), 1, 1, template="What is {expr}?")
    with pytest.raises(ValueError, match="n_train"):
        arithmetic_split(ArithmeticSpec(), -1, 1)
    (p,), _ = arithmetic_split(ArithmeticSpec(), 1, 0, template="Compute {expression}.")
    assert p.prompt == f"Compute {p.metadata['expression']}."


def test_make_arithmetic_problem_is_seeded():
    spec = ArithmeticSpec(num_operands=3, operators=("+", "*"))
    a = [make_arithmetic_problem(random.Random(5), spec) for _ in range(2)]
    assert a[0] == a[1]
    rng = random.Random(5)
    drawn = {make_arithmetic_problem(rng, spec).id for _ in range(20)}
    assert len(drawn) > 1
