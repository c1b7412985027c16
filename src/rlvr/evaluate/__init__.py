"""Evaluation: accuracy of a policy on benchmark problems, with confidence intervals."""
