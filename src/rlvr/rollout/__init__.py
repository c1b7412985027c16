"""Rollouts: turning prompts into scored groups of samples with an engine (in-process or a generator process)."""
