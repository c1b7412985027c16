"""SQL by execution: the predicted query's result set against the gold query's on the same SQLite database.

BIRD's execution accuracy (Li et al. 2023, "Can LLM Already Serve as A Database Interface? A BIg Bench for
Large-Scale Database Grounded Text-to-SQLs", arXiv 2305.03111; its ``evaluation.py``):
``EX = 1[set(rows(pred)) == set(rows(gold))]``, the rows compared as sets, so column order inside a row counts and
row order and duplicates do not (``ordered=True`` compares the row lists as they come, for ORDER BY questions).

Extraction -> checks -> comparison, as the other verifiers:

* **extraction**: the last fenced ```sql block of the completion (or the last ``\\boxed{...}`` when there is no
  block); several statements in it are refused (``sqlite3`` runs one);
* **checks**: the query runs on a fresh in-memory copy of the database with an authorizer that allows reading
  only (no INSERT / UPDATE / DELETE / CREATE / DROP / ATTACH / PRAGMA; ``load_extension`` stays disabled), under a
  step budget (a progress handler stops it after ``max_steps`` virtual-machine steps, so a runaway join cannot
  stall training) and a row cap (more than ``max_rows`` rows is refused: returning a whole table is not an answer
  unless the gold query does);
* **comparison**: the two result sets (or lists, ``ordered=True``); numbers are compared as SQLite returns them.

The reference is JSON: ``{"sql": "<gold query>", "schema": "<CREATE / INSERT statements>"}`` or with ``"db":
"<path to a .sqlite file>"`` in place of ``schema`` (the file is copied into memory, never written).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.numeric import _last_boxed

__all__ = ["sql_verifier", "extract_sql", "run_query", "SQLRefused"]

_SQL_FENCE = re.compile(r"```[ \t]*sql[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)

_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
"""What a checked query may do: select, read columns, call (built-in) functions, recurse in a CTE; the rest is
refused."""


MAX_VALUE_BYTES = 10_000_000
"""The largest string or blob a query may build."""


class SQLRefused(Exception):
    """A query that is not a read-only single statement within the budgets."""


def extract_sql(completion: str) -> str | None:
    """The last fenced ```sql block's text, else the last ``\\boxed{}``'s, stripped; None when neither."""
    blocks = _SQL_FENCE.findall(completion or "")
    if blocks:
        text = blocks[-1]
    else:
        text = _last_boxed(completion or "")
    text = (text or "").strip().rstrip(";").strip()
    return text or None


def _database(ref: dict[str, Any]) -> sqlite3.Connection:
    """A fresh in-memory connection holding the reference's database."""
    con = sqlite3.connect(":memory:")
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)  # zeroblob(2e9) / repeated strings stop here
    if "schema" in ref:
        con.executescript(str(ref["schema"]))
    else:
        src = sqlite3.connect(f"file:{Path(ref['db']).resolve()}?mode=ro", uri=True)
        try:
            src.backup(con)
        finally:
            src.close()
    return con


def run_query(con: sqlite3.Connection, query: str, *, max_rows: int, max_steps: int) -> list[tuple]:
    """The rows of one read-only ``query`` on ``con``; :class:`SQLRefused` for writes, several statements, more
    than ``max_rows`` rows or more than ``max_steps`` virtual-machine steps; ``sqlite3.Error`` for bad SQL."""
    def authorize(action, *_):
        return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY

    budget = {"left": max_steps // 1000 + 1}

    def progress():
        budget["left"] -= 1
        return 1 if budget["left"] < 0 else 0

    con.set_authorizer(authorize)
    con.set_progress_handler(progress, 1000)
    try:
        try:
            cur = con.execute(query)
            rows = cur.fetchmany(max_rows + 1)
        except sqlite3.ProgrammingError as e:  # "You can only execute one statement at a time."
            raise SQLRefused(str(e)) from None
        except sqlite3.DatabaseError as e:
            if budget["left"] < 0:
                raise SQLRefused(f"more than {max_steps} steps (max_steps)") from None
            if "not authorized" in str(e):
                raise SQLRefused(f"not a read-only query ({e})") from None
            raise
    finally:
        con.set_authorizer(None)
        con.set_progress_handler(None, 0)
    if len(rows) > max_rows:
        raise SQLRefused(f"more than {max_rows} rows (max_rows)")
    return [tuple(r) for r in rows]


@register_verifier("sql")
def sql_verifier(ordered: bool = False, max_rows: int = 10_000, max_steps: int = 10_000_000,
                 max_chars: int = 20_000) -> Verifier:
    """Execution accuracy (BIRD's EX): 1 when the predicted query returns the gold query's rows, as sets
    (``ordered``: as lists), on a read-only in-memory copy of the reference's database; see the module doc."""
    for name, v in (("max_rows", max_rows), ("max_steps", max_steps), ("max_chars", max_chars)):
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"sql verifier: {name} must be an integer >= 1, got {v!r}")

    def verify(completion: str, reference: str) -> Verdict:
        try:
            ref = json.loads(reference)
        except (TypeError, ValueError):
            ref = None
        if not (isinstance(ref, dict) and isinstance(ref.get("sql"), str) and ("schema" in ref or "db" in ref)):
            raise ValueError("the sql verifier's reference is JSON {\"sql\": ..., \"schema\": ...} (or \"db\": path)")
        query = extract_sql(completion)
        if query is None:
            return Verdict(0.0, None, reason="no ```sql block or box")
        if len(query) > max_chars:
            return Verdict(0.0, query[:80], reason=f"query longer than {max_chars} characters")
        con = _database(ref)
        try:
            gold = run_query(con, ref["sql"], max_rows=max_rows, max_steps=max_steps)
            try:
                got = run_query(con, query, max_rows=max_rows, max_steps=max_steps)
            except SQLRefused as e:
                return Verdict(0.0, query, reason=f"refused: {e}")
            except sqlite3.Error as e:
                return Verdict(0.0, query, reason=f"SQL error: {e}")
        finally:
            con.close()
        same = got == gold if ordered else set(got) == set(gold)
        return Verdict(1.0 if same else 0.0, query, reason="same rows" if same else "different rows")

    return verify
