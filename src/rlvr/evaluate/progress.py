"""A progress bar with an ETA over an evaluation's decoding, fed by the engine's chunks."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

__all__ = ["generation_bar"]


@contextmanager
def generation_bar(engine, prompts: int, desc: str | None, *, leave: bool = False) -> Iterator[None]:
    """A tqdm bar (count, rate, ETA) over the prompts ``engine`` decodes inside the block, ``prompts`` of them in
    its first ``generate`` call; none when ``desc`` is None.  Every engine has the ``on_chunk`` hook: the HF engine
    reports each decoded chunk, Ray workers each shard, vLLM the whole call.

    Every ``generate`` call inside the block counts: the later turns of a multi-turn evaluation add their prompts
    to the bar's total as they start.  The bar only watches: the samples are those drawn without it.
    """
    if desc is None:
        yield
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=prompts, desc=desc, unit="prompt", leave=leave, dynamic_ncols=True)
    left = [prompts]  # prompts of the running generate call not reported yet

    def hook(done: int, total: int) -> None:
        if left[0] <= 0:  # a new generate call: a multi-turn evaluation's next turn
            bar.total += total
            left[0] = total
        left[0] -= done
        bar.update(done)

    previous, engine.on_chunk = engine.on_chunk, hook
    try:
        yield
    finally:
        engine.on_chunk = previous
        bar.close()
