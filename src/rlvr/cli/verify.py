"""``rlvr verify INPUT.jsonl``: score completions against references with a verifier."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.cli._common import add_common


def _read_verify_input(ns) -> tuple[list, list, list, int]:
    """(completions, references, rows, bad_lines) from the JSONL; bad lines are reported by file:line."""
    completions, references, rows, bad = [], [], [], 0
    with open(ns.input, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
                completion, reference = row[ns.completion_field], row[ns.reference_field]
            except (ValueError, KeyError) as e:
                msg = f"{ns.input}:{lineno}: bad line ({type(e).__name__}: {e})"
                if ns.on_error == "stop":
                    from rlvr.tasks.jsonl import DatasetError

                    raise DatasetError(msg) from None
                print(f"rlvr: warning: {msg}; skipped", file=sys.stderr)
                bad += 1
                continue
            completions.append(completion)
            references.append(reference)
            rows.append(row.get(ns.id_field, lineno))
    return completions, references, rows, bad


def run(ns) -> int:
    from collections import Counter

    from tqdm import tqdm

    from rlvr.verifiers.batch import iter_verify

    if not Path(ns.input).is_file():
        from rlvr.tasks.jsonl import DatasetError

        raise DatasetError(f"input file not found: {ns.input}")
    completions, references, ids, bad = _read_verify_input(ns)
    opts = {"timeout": ns.timeout} if ns.timeout is not None else {}
    out = Path(ns.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    reasons: Counter = Counter()
    correct = 0
    with out.open("w", encoding="utf-8") as f:
        verdicts = iter_verify(ns.verifier, completions, references, workers=ns.workers, **opts)
        for row_id, v in zip(ids, tqdm(verdicts, total=len(completions), desc="verify", unit="ex",
                                       disable=ns.no_progress)):
            f.write(json.dumps({"id": row_id, "score": v.score, "correct": v.correct, "extracted": v.extracted,
                                "reason": v.reason}, ensure_ascii=False) + "\n")
            correct += v.correct
            reasons[v.reason.split(":")[0].strip()] += 1
    n = len(completions)
    summary = {"input": str(ns.input), "verifier": ns.verifier, "n": n, "correct": correct,
               "accuracy": correct / n if n else 0.0, "bad_lines": bad, "reasons": dict(reasons.most_common())}
    summary_path = Path(ns.summary) if ns.summary else out.with_name(out.stem + ".summary.json")
    summary_path.write_text(json.dumps(summary, indent=2))
    print(f"{correct}/{n} correct ({summary['accuracy']:.1%}), {bad} bad lines; verdicts in {out}, summary in {summary_path}")
    for reason, count in reasons.most_common(10):
        print(f"  {count:6d}  {reason}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="score completions in a JSONL file against references",
                       description="Read one JSON object per line with a completion and a reference answer, "
                                   "score each with a verifier (in parallel with --workers), and write one "
                                   "verdict per line (id, score, correct, extracted, reason) plus a summary JSON "
                                   "(counts, accuracy, histogram of reasons).")
    p.add_argument("input", help="input JSONL file")
    p.add_argument("--completion-field", default="completion", help="field holding the completion (default completion)")
    p.add_argument("--reference-field", default="reference", help="field holding the reference answer (default reference)")
    p.add_argument("--id-field", default="id", help="field copied to the output as id (default id; else the line number)")
    p.add_argument("--verifier", default="math", help="registered verifier name (default math)")
    p.add_argument("--workers", type=int, default=1, help="verifier processes (default 1)")
    p.add_argument("--timeout", type=float, default=None, help="per-check time limit in seconds (verifier default)")
    p.add_argument("--output", default="verdicts.jsonl", help="verdicts JSONL to write (default verdicts.jsonl)")
    p.add_argument("--summary", default=None, help="summary JSON to write (default OUTPUT with .summary.json)")
    p.add_argument("--on-error", choices=("skip", "stop"), default="skip",
                   help="a malformed input line: warn with file:line and skip it (default), or stop with an error")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_common(p)
    p.set_defaults(func=run)
