"""Monte-Carlo tree search over reasoning steps, guided by an outcome scorer (live: it samples with an engine).

RAP (Hao et al. 2023, "Reasoning with Language Model is Planning with World Model", arXiv 2305.14992) searches
over reasoning steps with MCTS: a node is a partial solution, an edge one more step sampled from the model, and
a node's value the mean reward of the simulations through it.  One iteration here:

1. **select**: from the root, while the node is fully expanded (``expansions`` children) and not final, go to the
   child of highest UCT ``Q + c * sqrt(ln N(parent) / N(child))`` (``Q`` its mean value, ties: the first child);
2. **expand**: sample one next step from the node (stopped at the step ``delimiter``), a new child; a step that
   ends the answer (EOS) makes a final node;
3. **simulate**: complete the child's solution with the model (to EOS or the token budget) and score the whole
   text with the scorer's *outcome* score (:meth:`Scorer.score`, in [0, 1]);
4. **back up**: add that value to the child and every ancestor.

After ``iterations`` iterations the answer is the simulated solution with the highest score (ties: the earliest),
what RAP calls its best reasoning trace.  With the oracle scorer it is an upper bound, as best-of-N is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvr.engines.base import SamplingParams

__all__ = ["MCTSConfig", "Node", "MCTSResult", "uct", "mcts_search", "mcts_search_many"]


@dataclass(frozen=True)
class MCTSConfig:
    """Knobs of :func:`mcts_search`."""

    iterations: int = 16
    expansions: int = 3
    """Children a node gets before selection goes below it."""
    c_uct: float = 1.0
    """The exploration weight of UCT."""
    delimiter: str = "\n\n"
    step_max_tokens: int = 128
    max_new_tokens: int = 512
    """A whole solution's token budget (a simulation completes up to it)."""
    temperature: float = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.expansions < 1 or self.step_max_tokens < 1 or self.max_new_tokens < 1:
            raise ValueError("iterations, expansions, step_max_tokens and max_new_tokens must be >= 1")
        if not self.c_uct >= 0:
            raise ValueError(f"c_uct must be >= 0, got {self.c_uct}")


@dataclass
class Node:
    ids: list[int] = field(default_factory=list)
    text: str = ""
    final: bool = False
    visits: int = 0
    value: float = 0.0
    """The sum of the simulated values through this node."""
    children: list["Node"] = field(default_factory=list)
    parent: "Node | None" = None

    @property
    def q(self) -> float:
        return self.value / self.visits if self.visits else 0.0


@dataclass
class MCTSResult:
    problem_id: str
    text: str
    score: float
    iterations: int
    nodes: int
    generated_tokens: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def uct(child: Node, parent_visits: int, c: float) -> float:
    """``Q + c sqrt(ln N(parent) / N(child))``; an unvisited child is infinitely urgent."""
    if child.visits == 0:
        return math.inf
    return child.q + c * math.sqrt(math.log(max(parent_visits, 1)) / child.visits)


def _select(root: Node, cfg: MCTSConfig) -> Node:
    node = root
    while not node.final and len(node.children) >= cfg.expansions:
        node = max(node.children, key=lambda ch: uct(ch, node.visits, cfg.c_uct))  # max keeps the first of ties
    return node


def mcts_search(engine: Any, scorer: Any, problem: Any, cfg: MCTSConfig = MCTSConfig(),
                seed: int | None = None) -> MCTSResult:
    """MCTS on one problem (see the module docstring)."""
    base = cfg.seed if seed is None else seed
    root = Node()
    best_text, best_score, tokens, nodes = "", -1.0, 0, 0
    tok = engine.tokenizer
    for it in range(cfg.iterations):
        node = _select(root, cfg)
        if node.final:  # a finished solution: simulate it again (its own text)
            child, text = node, node.text
        else:
            budget = cfg.max_new_tokens - len(node.ids)
            step = engine.generate([problem], SamplingParams(
                n=1, max_new_tokens=max(1, min(cfg.step_max_tokens, budget)), temperature=cfg.temperature,
                stop=(cfg.delimiter,), seed=base + 2 * it), prefixes=[node.ids])[0][0]
            tokens += step.num_tokens
            ids = node.ids + list(step.completion_ids)
            final = (step.finish_reason == "stop" and not step.text.endswith(cfg.delimiter)) \
                or len(ids) >= cfg.max_new_tokens
            child = Node(ids, tok.decode(ids, skip_special_tokens=True), final, parent=node)
            node.children.append(child)
            nodes += 1
            text = child.text
            if not final:  # simulate: complete the solution from the child
                rest = engine.generate([problem], SamplingParams(
                    n=1, max_new_tokens=cfg.max_new_tokens - len(ids), temperature=cfg.temperature,
                    seed=base + 2 * it + 1), prefixes=[ids])[0][0]
                tokens += rest.num_tokens
                text = tok.decode(ids + list(rest.completion_ids), skip_special_tokens=True)
        value = float(scorer.score(problem, text))
        if value > best_score:
            best_text, best_score = text, value
        n = child
        while n is not None:
            n.visits += 1
            n.value += value
            n = n.parent
    return MCTSResult(str(getattr(problem, "id", "")), best_text, best_score, cfg.iterations, nodes, tokens)


def mcts_search_many(engine: Any, scorer: Any, problems: Sequence[Any], cfg: MCTSConfig = MCTSConfig(),
                     progress: bool = False) -> list[MCTSResult]:
    """:func:`mcts_search` on each problem (problem ``i`` seeded with ``cfg.seed + 1000 * i``)."""
    it = enumerate(problems)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, total=len(problems), desc="mcts", unit="problem")
    return [mcts_search(engine, scorer, p, cfg, seed=cfg.seed + 1000 * i) for i, p in it]
