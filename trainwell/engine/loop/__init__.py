"""The training loop: the Trainer that drives epochs and steps, evaluation, the monitored metric,
memory watching and progress."""
