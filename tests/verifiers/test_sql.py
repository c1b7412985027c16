"""The ``sql`` verifier: BIRD's execution accuracy on a read-only in-memory SQLite copy."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.verifiers import get_verifier
from rlvr.verifiers.sql import extract_sql

SCHEMA = ("CREATE TABLE emp(name TEXT, dept TEXT, pay INT);"
          "INSERT INTO emp VALUES ('ann','a',10),('bob','a',20),('cy','b',30),('dee','b',30);")


def _ref(sql: str, **kw) -> str:
    return json.dumps({"sql": sql, "schema": SCHEMA, **kw})


def _sql(q: str) -> str:
    return f"The query:\n```sql\n{q}\n```"


def test_execution_accuracy_by_hand():
    v = get_verifier("sql")
    ref = _ref("SELECT name FROM emp WHERE pay >= 30")
    assert v(_sql("select name from emp where dept = 'b'"), ref).score == 1.0  # another query, the same rows
    assert v(_sql("select name from emp where pay = 30 order by name desc"), ref).score == 1.0  # order: sets
    assert v(_sql("select name from emp"), ref).score == 0.0  # a superset hedges: refused
    assert v(_sql("select name, pay from emp where pay >= 30"), ref).score == 0.0  # other columns
    assert v("\\boxed{SELECT name FROM emp WHERE pay > 20}", ref).score == 1.0  # a box when no block
    assert v("no query", ref).score == 0.0
    ordered = get_verifier("sql", ordered=True)
    ref_o = _ref("SELECT name FROM emp ORDER BY pay, name")
    assert ordered(_sql("select name from emp order by pay, name"), ref_o).score == 1.0
    assert ordered(_sql("select name from emp order by name desc"), ref_o).score == 0.0
    assert extract_sql("```sql\nselect 1\n```\n```sql\nselect 2;\n```") == "select 2"  # the last block


@pytest.mark.parametrize("query,reason", [
    ("DELETE FROM emp", "not a read-only query"),
    ("UPDATE emp SET pay = 0", "not a read-only query"),
    ("DROP TABLE emp", "not a read-only query"),
    ("ATTACH DATABASE '/tmp/rlvr-sql-probe.db' AS x", "not a read-only query"),
    ("PRAGMA table_info(emp)", "not a read-only query"),
    ("SELECT 1; DELETE FROM emp", "one statement"),
    ("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r", "steps"),
    ("SELECT a.name FROM emp a, emp b, emp c, emp d, emp e, emp f, emp g", "rows"),
    ("SELECT zeroblob(2000000000)", "too big"),
    ("SELECT load_extension('/tmp/x')", "not a read-only query"),
])
def test_hostile_queries_are_refused_and_the_database_is_untouched(query, reason, tmp_path):
    db = tmp_path / "shop.sqlite"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    con.commit()
    con.close()
    before = db.read_bytes()
    v = get_verifier("sql", max_rows=1000, max_steps=2_000_000)
    t0 = time.perf_counter()
    verdict = v(_sql(query), json.dumps({"sql": "SELECT count(*) FROM emp", "db": str(db)}))
    assert verdict.score == 0.0 and reason in verdict.reason
    assert time.perf_counter() - t0 < 10
    assert db.read_bytes() == before  # the file is copied into memory, never written


@settings(max_examples=40, deadline=None)
@given(pays=st.lists(st.integers(0, 9), min_size=1, max_size=8), k=st.integers(0, 9), extra=st.integers(0, 9))
def test_a_query_earns_only_when_its_rows_are_the_golds(pays, k, extra):
    """Property: over generated tables, a predicted query earns 1 exactly when its row set equals the gold's; a
    query widened by an OR (a hedge) earns only when it adds no row."""
    schema = "CREATE TABLE t(x INT);" + "".join(f"INSERT INTO t VALUES ({p});" for p in pays)
    ref = json.dumps({"sql": f"SELECT x FROM t WHERE x > {k}", "schema": schema})
    v = get_verifier("sql")
    gold = {p for p in pays if p > k}
    wide = {p for p in pays if p > k or p == extra}
    assert v(_sql(f"select x from t where x > {k} or x = {extra}"), ref).score == float(wide == gold)
    assert v(_sql(f"select x from t where x >= {k + 1}"), ref).score == 1.0


def test_a_bad_reference_is_an_error_naming_the_format():
    with pytest.raises(ValueError, match="reference is JSON"):
        get_verifier("sql")(_sql("select 1"), "select 1")
    with pytest.raises(ValueError, match="max_rows must be"):
        get_verifier("sql", max_rows=0)
