"""``rlvr contamination TRAIN EVAL``: n-gram overlap of a training task and an eval set."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.cli._common import add_common, csv_list


def run(ns) -> int:
    from rlvr.evaluate.contamination import contamination_report, load_texts

    fields = csv_list(ns.fields)
    train = [t for _, t in load_texts(ns.train, "train", fields)]
    items = load_texts(ns.eval, "eval", fields)
    rep = contamination_report(train, items, n=ns.n, threshold=ns.threshold)
    s = rep.summary()
    print(f"{ns.eval} vs {ns.train}: {s['flagged']} of {s['eval_items']} evaluation items have >= "
          f"{ns.threshold:.0%} of their {ns.n}-grams in the {s['train_texts']} training texts "
          f"({s['any_overlap']} with any overlap; mean overlap {s['mean_overlap']:.2%})")
    for it in sorted(rep.flagged, key=lambda r: -r["fraction"])[: ns.show]:
        print(f"  {it['id']}: {it['fraction']:.0%} ({it['overlapping']}/{it['ngrams']} {ns.n}-grams)")
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps(rep.to_dict(), indent=2))
        print(f"report written to {ns.output}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("contamination", help="n-gram overlap between a training task and an evaluation set",
                       description="For each evaluation item, the fraction of its word n-grams (NFKC, lower-case, "
                                   "whitespace-split) found anywhere in the training texts; items at or above "
                                   "--threshold are flagged. TRAIN and EVAL are task names (gsm8k: train split as "
                                   "TRAIN, test split as EVAL; math500, aime24, amc23, arithmetic) or JSONL files "
                                   "(text from --fields, default the first of prompt/problem/question/text/input).\n\n"
                                   "Example: rlvr contamination gsm8k math500 --n 8")
    p.add_argument("train", help="training task name or JSONL file")
    p.add_argument("eval", help="evaluation task name or JSONL file")
    p.add_argument("--n", type=int, default=13, help="n-gram length in words (default 13)")
    p.add_argument("--threshold", type=float, default=0.5, help="flag items with at least this overlap (0.5)")
    p.add_argument("--fields", help="JSONL fields holding the text, comma-separated (joined by newlines)")
    p.add_argument("--show", type=int, default=20, help="flagged items to print (default 20)")
    p.add_argument("--output", help="write the full report JSON here")
    add_common(p)
    p.set_defaults(func=run)
