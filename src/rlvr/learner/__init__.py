"""The learner: batching, per-token log-probs, the policy (and critic) update, checkpoints, metrics."""
