"""Recipes: the RL training loop as a class of small named steps, and its typed config."""
