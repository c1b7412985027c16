"""Write the search_qa task's fictional encyclopedia: src/rlvr/data/search_corpus.jsonl.gz.

Deterministic: the rows are ``rlvr.tasks.search_qa.generate_corpus()`` (seeded) and the gzip stream carries no
name and no timestamp, so running this again rewrites the same file (tests/tasks/test_search_qa.py checks it).

    python scripts/make_search_corpus.py [--out PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.tasks.search_qa import CORPUS_FILE, corpus_bytes, generate_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=CORPUS_FILE, help="where to write (default: the packaged file)")
    args = ap.parse_args()
    rows = generate_corpus()
    data = corpus_bytes(rows)
    args.out.write_bytes(data)
    print(f"{args.out}: {len(rows)} entries, {len(data)} bytes")


if __name__ == "__main__":
    main()
