"""``rlvr contamination TRAIN EVAL``: n-gram overlap of a training task and an eval set."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.cli._common import add_common, csv_list, error


def _completion(ns, fields) -> int:
    from rlvr.evaluate.contamination import completion_audit, greedy_text_generator, load_texts
    from rlvr.models import load_policy

    if not 0 < ns.fraction < 1:
        error(f"--fraction must be in (0, 1), got {ns.fraction}")
        return 2
    if ns.threshold is None:
        ns.threshold = 0.8
    items = load_texts(ns.sets[0], "eval", fields)[: ns.limit or None]
    model, tok = load_policy(ns.model)
    model.eval()
    rep = completion_audit(greedy_text_generator(model, tok, ns.max_new_tokens), items, fraction=ns.fraction,
                           threshold=ns.threshold, batch_size=ns.batch_size)
    s = rep["summary"]
    print(f"{ns.sets[0]} completed by {ns.model} from its first {ns.fraction:.0%}: mean ROUGE-L "
          f"{s['mean_rouge_l']:.3f}, exact matches {s['exact_match_rate']:.1%} of {s['items']} items, "
          f"{s['flagged']} flagged (ROUGE-L >= {ns.threshold} or exact)")
    for it in sorted((r for r in rep["items"] if r["flagged"]), key=lambda r: -r["rouge_l"])[: ns.show]:
        print(f"  {it['id']}: ROUGE-L {it['rouge_l']:.2f}{' exact' if it['exact_match'] else ''}")
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps(rep, indent=2))
        print(f"report written to {ns.output}")
    return 0


def run(ns) -> int:
    from rlvr.evaluate.contamination import contamination_report, load_texts

    fields = csv_list(ns.fields)
    if ns.completion:
        if len(ns.sets) != 1 or not ns.model:
            error("--completion audits one evaluation set with one model: rlvr contamination EVAL --completion "
                  "--model MODEL")
            return 2
        return _completion(ns, fields)
    if len(ns.sets) != 2:
        error("give a training set and an evaluation set: rlvr contamination TRAIN EVAL")
        return 2
    ns.train, ns.eval = ns.sets
    if ns.threshold is None:
        ns.threshold = 0.5
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
                                   "Example: rlvr contamination gsm8k math500 --n 8\n\n"
                                   "--completion audits memorisation instead (Wu et al. 2025, \"Reasoning or "
                                   "Memorization\"): each item of EVAL is cut after --fraction of its words, MODEL "
                                   "continues the prefix greedily as plain text, and the continuation is compared "
                                   "with the true remainder (ROUGE-L F1, exact match).\n\n"
                                   "Example: rlvr contamination math500 --completion --model smollm2-135m-instruct "
                                   "--limit 50")
    p.add_argument("sets", nargs="+", metavar="SET", help="TRAIN EVAL (task names or JSONL files); with "
                                                          "--completion, EVAL alone")
    p.add_argument("--n", type=int, default=13, help="n-gram length in words (default 13)")
    p.add_argument("--threshold", type=float, default=None, help="flag items with at least this overlap (0.5), "
                                                                 "or with --completion this ROUGE-L (0.8)")
    p.add_argument("--completion", action="store_true", help="the partial-prompt completion audit (needs --model)")
    p.add_argument("--model", help="--completion: the model (an HF directory or a hub id; the bundled one by name)")
    p.add_argument("--fraction", type=float, default=0.6, help="--completion: share of each item's words shown "
                                                               "(default 0.6)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="--completion: tokens generated per item")
    p.add_argument("--batch-size", type=int, default=16, help="--completion: items decoded together")
    p.add_argument("--limit", type=int, default=0, help="--completion: the first N items only (0: all)")
    p.add_argument("--fields", help="JSONL fields holding the text, comma-separated (joined by newlines)")
    p.add_argument("--show", type=int, default=20, help="flagged items to print (default 20)")
    p.add_argument("--output", help="write the full report JSON here")
    add_common(p)
    p.set_defaults(func=run)
