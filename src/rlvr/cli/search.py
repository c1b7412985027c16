"""``rlvr search SAMPLES.jsonl``: test-time strategies and a budget sweep over stored samples."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.cli._common import add_common, csv_list, error


def _unescape(text: str) -> str:
    """``"\\n\\n"`` typed on a command line -> two newlines."""
    import codecs

    return codecs.decode(text, "unicode_escape")


def run(ns) -> int:
    from rlvr.search.run import format_sweep, search_samples

    if ns.power is not None or ns.mcts:
        try:
            return _run_power(ns) if ns.power is not None else _run_mcts(ns)
        except ValueError as e:
            error(e)
            return 2
    if not ns.samples and not ns.beam:
        from rlvr.config import ConfigError

        raise ConfigError("give a samples file (from `rlvr eval`), or --beam --task TASK, or --power ALPHA --task TASK")
    opts = {"step_tag": ns.step_tag, "delimiter": _unescape(ns.delimiter), "aggregate": ns.aggregate}
    out = Path(ns.output) if ns.output else Path(ns.samples or "runs/search/beam.jsonl").with_suffix("")
    if ns.output is None:
        out = out.with_name(out.name.replace(".samples", "") + ".search.json")
    plot = Path(ns.plot) if ns.plot else out.with_suffix(".png")
    try:
        extra = {}
        if ns.beam:
            beam = _run_beam(ns, opts)
            print(f"beam search ({beam['num_problems']} problems, width {ns.beam_width} x {ns.expansions}, "
                  f"{beam['scorer']}): accuracy {beam['accuracy']:.1%}, {beam['mean_tokens']:.0f} tokens/problem")
            extra["beam"] = [{k: beam[k] for k in ("n", "accuracy", "mean_tokens")}]
            if not ns.samples:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(beam, indent=2))
                print(f"results written to {out}")
                return 0
        report = search_samples(
            ns.samples, scorer=ns.scorer, strategies=csv_list(ns.strategies), budgets=csv_list(ns.budgets, int, "budget"),
            verifier=ns.verifier, workers=ns.workers, subsets=ns.subsets, draws=ns.draws, seed=ns.seed,
            probe=ns.probe, num_bins=ns.bins, folds=ns.folds, allocator=not ns.no_allocator,
            scorer_options=opts, output=out, plot=plot, extra_curves=extra, progress=not ns.no_progress)
        if ns.beam:
            report["beam"] = beam
            out.write_text(json.dumps(report, indent=2))
    except ValueError as e:  # SampleFileError (file:line), bad scorer / strategy / budgets
        error(e)
        return 2
    print(f"{report['model']} on {report['task']}: {report['num_problems']} problems, n={report['sampling']['n']}, "
          f"scorer {report['scorer']}" + (" (oracle: an upper bound)" if report["scorer_is_oracle"] else ""))
    print(format_sweep(report))
    print(f"report written to {report['output']}" + (f", chart to {report['plot']}" if report["plot"] else
                                                       " (no chart: matplotlib is not installed)"))
    return 0


def _live(ns, flag: str):
    """``(problems, verifier, engine)`` of a live search (``--power`` / ``--mcts``) on --task with --model."""
    from rlvr.engines import HFEngine
    from rlvr.evaluate.pipeline import load_problems
    from rlvr.models import load_policy

    if not ns.task:
        raise ValueError(f"{flag} needs --task (math500, gsm8k, aime24, amc23 or jsonl with --path)")
    problems = load_problems(ns.task, ns.path)[: ns.limit]
    verifier = ns.verifier or ("numeric" if ns.task == "gsm8k" else "math")
    model, tok = load_policy(ns.model)
    return problems, verifier, HFEngine(model, tok)


def _report(ns, rep: dict, default: str, line: str) -> int:
    out = Path(ns.output) if ns.output else Path(default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=2))
    print(line)
    print(f"results written to {out}")
    return 0


def _run_power(ns) -> int:
    """``--power ALPHA``: Metropolis-Hastings sampling of p^alpha with the model on --task; writes a JSON report."""
    from rlvr.search.power import PowerConfig
    from rlvr.search.run import run_power

    cfg = PowerConfig(alpha=ns.power, steps=ns.mcmc_steps, max_new_tokens=ns.max_new_tokens, seed=ns.seed)
    problems, verifier, engine = _live(ns, "--power")
    rep = run_power(problems, engine, cfg, verifier=verifier, progress=not ns.no_progress)
    return _report(ns, rep, "runs/search/power.json",
                   f"power sampling ({rep['num_problems']} problems, alpha {cfg.alpha}, {cfg.steps} proposals): "
                   f"accuracy {rep['accuracy']:.1%}, acceptance {rep['acceptance_rate']:.1%}, "
                   f"{rep['mean_tokens']:.0f} tokens/problem")


def _run_mcts(ns) -> int:
    """``--mcts``: Monte-Carlo tree search over steps with the model on --task, scored by --scorer."""
    from rlvr.search.mcts import MCTSConfig
    from rlvr.search.run import run_mcts
    from rlvr.search.scorers import load_scorer

    cfg = MCTSConfig(iterations=ns.iterations, expansions=ns.expansions, c_uct=ns.c_uct,
                     delimiter=_unescape(ns.delimiter), step_max_tokens=ns.step_max_tokens,
                     max_new_tokens=ns.max_new_tokens, temperature=ns.temperature, seed=ns.seed)
    if not ns.task:  # the scorer is checked before the policy loads
        raise ValueError("--mcts needs --task (math500, gsm8k, aime24, amc23 or jsonl with --path)")
    scorer = load_scorer(ns.scorer, verifier=ns.verifier or ("numeric" if ns.task == "gsm8k" else "math"),
                         delimiter=cfg.delimiter)
    problems, verifier, engine = _live(ns, "--mcts")
    rep = run_mcts(problems, engine, scorer, cfg, verifier=verifier, progress=not ns.no_progress)
    return _report(ns, rep, "runs/search/mcts.json",
                   f"mcts ({rep['num_problems']} problems, {cfg.iterations} iterations, {rep['scorer']}): accuracy "
                   f"{rep['accuracy']:.1%}, {rep['mean_tokens']:.0f} tokens/problem")


def _run_beam(ns, opts) -> dict:
    from rlvr.evaluate.pipeline import load_problems
    from rlvr.models import load_policy
    from rlvr.engines import HFEngine
    from rlvr.search.beam import BeamConfig
    from rlvr.search.run import run_beam
    from rlvr.search.scorers import load_scorer

    if not ns.task:
        raise ValueError("--beam needs --task (math500, gsm8k, aime24, amc23 or jsonl with --path)")
    problems = load_problems(ns.task, ns.path)[: ns.limit]
    cfg = BeamConfig(beam_width=ns.beam_width, expansions=ns.expansions, delimiter=opts["delimiter"],
                     aggregate=ns.aggregate, max_steps=ns.max_steps, step_max_tokens=ns.step_max_tokens,
                     temperature=ns.temperature, seed=ns.seed)
    verifier = ns.verifier or ("numeric" if ns.task == "gsm8k" else "math")
    scorer = load_scorer(ns.scorer, verifier=verifier, **opts)
    model, tok = load_policy(ns.model)
    return run_beam(problems, HFEngine(model, tok), scorer, cfg, verifier=verifier, progress=not ns.no_progress)


DESCRIPTION = """\
Test-time search over a stored-samples file (`rlvr eval ... --n 16` writes one).

Every strategy picks one of the first N samples per problem: best_of_n (the
highest scorer score; ties: the earliest sample), majority (the most frequent
normalised answer; ties: the answer seen first), weighted_majority (answers
weighted by scorer score). For each budget N it reports accuracy and the
generated tokens actually used, plus the compute-optimal allocation (Snell et
al. 2024: difficulty bins from the first --probe samples' scores, the best
(strategy, N) per bin chosen by cross-validation) and, per point, the
efficiency vs best-of-N (tokens best-of-N needs for that accuracy / tokens
used). Writes a JSON report and one PNG chart (accuracy vs tokens and vs N).

Scorers: oracle (the verifier: best-of-N is then pass@N, an upper bound),
logprob (the sampler's own geometric-mean token probability, from the stored
logprob_sum: no extra model), orm:PATH (AutoModelForSequenceClassification), prm:PATH (causal LM in the
Math-Shepherd format, step tag --step-tag after each step, P('+') scored), genrm:PATH (any causal LM asked
"Is the answer correct (Yes/No)?": p(Yes) / (p(Yes) + p(No)), reference-free).

--beam runs step-level beam search live with --model on --task, guided by a
process scorer (--scorer prm:PATH; --delimiter, --aggregate); with a samples
file too, its point joins the chart.

--mcts runs Monte-Carlo tree search over reasoning steps (UCT selection, one
new step per expansion, a completed simulation scored by --scorer, backed up
the path); the answer is the best-scored simulation.

--power ALPHA samples the power distribution p(x)^ALPHA of --model on --task by
Metropolis-Hastings over suffixes (training-free sharpening; --mcmc-steps
proposals per problem) and reports accuracy and the acceptance rate.

Examples:
  rlvr eval --task math500 --limit 30 --n 8 --temperature 0.8 --max-new-tokens 256
  rlvr search runs/eval/math500-smollm2-135m-instruct-n8-T0.8.samples.jsonl
  rlvr search SAMPLES.jsonl --scorer orm:/path/to/reward-model --budgets 1,2,4,8
"""


def add_parser(sub) -> None:
    p = sub.add_parser("search", help="test-time search: strategies and budget sweeps over stored samples",
                       description=DESCRIPTION)
    p.add_argument("samples", nargs="?", help="samples file written by `rlvr eval` (*.samples.jsonl)")
    p.add_argument("--strategies", default="best_of_n,majority,weighted_majority",
                   help="comma list of best_of_n, majority, weighted_majority (default all three)")
    p.add_argument("--scorer", default="oracle",
                   help="oracle (the verifier: an upper bound), logprob (the sampler's mean token probability, "
                        "stored), orm:PATH (sequence classifier), prm:PATH (Math-Shepherd-style process reward "
                        "model) or genrm:PATH (a causal LM's p(Yes) that the answer is correct); default oracle")
    p.add_argument("--budgets", help="samples per problem to sweep, e.g. 1,2,4,8 (default powers of 2 up to n)")
    p.add_argument("--verifier", help="verifier for correctness and vote answers (default numeric for gsm8k, else math)")
    p.add_argument("--workers", type=int, default=1, help="verifier processes (default 1)")
    p.add_argument("--subsets", choices=("first", "random"), default="first",
                   help="which N of the n samples: the first N (default) or random N-subsets averaged over --draws")
    p.add_argument("--draws", type=int, default=16, help="random N-subsets per problem with --subsets random")
    p.add_argument("--seed", type=int, default=0, help="seed of subsets, folds and beam sampling (default 0)")
    p.add_argument("--probe", type=int, default=4, help="compute-optimal: samples used to estimate difficulty (4)")
    p.add_argument("--bins", type=int, default=5, help="compute-optimal: difficulty bins (default 5)")
    p.add_argument("--folds", type=int, default=5, help="compute-optimal: cross-validation folds (default 5)")
    p.add_argument("--no-allocator", action="store_true", help="skip the compute-optimal allocation")
    p.add_argument("--delimiter", default="\\n\\n", help="step delimiter, escapes allowed (default \\n\\n)")
    p.add_argument("--aggregate", choices=("min", "last", "mean", "prod"), default="min",
                   help="how a PRM's step scores make one score (default min)")
    p.add_argument("--step-tag", default="ки", help="PRM step tag token (default ки, as Math-Shepherd)")
    p.add_argument("--output", help="report JSON (default SAMPLES with .search.json)")
    p.add_argument("--plot", help="budget-sweep chart PNG (default the report path with .png)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_common(p)
    g = p.add_argument_group("live beam search (--beam)")
    g.add_argument("--beam", action="store_true", help="run step-level beam search with the model on --task")
    g.add_argument("--task", help="math500, gsm8k, aime24, amc23 or jsonl (with --path)")
    g.add_argument("--path", help="data file override / the jsonl file")
    g.add_argument("--limit", type=int, default=None, help="first N problems only")
    g.add_argument("--model", default="smollm2-135m-instruct", help="policy to sample steps from")
    g.add_argument("--beam-width", type=int, default=4, help="beams kept per step (default 4)")
    g.add_argument("--expansions", type=int, default=4, help="next steps sampled per beam (default 4)")
    g.add_argument("--max-steps", type=int, default=8, help="steps per beam at most (default 8)")
    g.add_argument("--step-max-tokens", type=int, default=128, help="tokens per step at most (default 128)")
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    g = p.add_argument_group("live power sampling (--power; --task, --path, --limit, --model as above)")
    g.add_argument("--power", type=float, default=None, metavar="ALPHA",
                   help="sample p(x)^ALPHA by Metropolis-Hastings with the model (Reasoning with Sampling; e.g. 4)")
    g.add_argument("--mcmc-steps", type=int, default=8, help="suffix proposals per problem (default 8)")
    g.add_argument("--max-new-tokens", type=int, default=256, help="completion token budget (default 256)")
    g = p.add_argument_group("live tree search (--mcts; the other options as above)")
    g.add_argument("--mcts", action="store_true",
                   help="Monte-Carlo tree search over steps, each simulation scored by --scorer (RAP)")
    g.add_argument("--iterations", type=int, default=16, help="MCTS iterations per problem (default 16)")
    g.add_argument("--c-uct", type=float, default=1.0, help="UCT exploration weight (default 1.0)")
    p.set_defaults(func=run)
