"""Test-time search: spend more samples (or a scorer) at inference to answer better.

* :mod:`.strategies` - best-of-N, majority vote, score-weighted majority over stored samples;
* :mod:`.scorers` - pluggable scorers: verifier oracle, outcome reward model, process reward model;
* :mod:`.beam` - step-level beam search guided by a process scorer (live, with a rollout engine);
* :mod:`.allocator` - compute-optimal allocation by estimated difficulty (Snell et al. 2024);
* :mod:`.sweep` - accuracy against N and generated tokens for every strategy, one chart.
"""
