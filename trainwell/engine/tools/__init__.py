"""The tools beside training: the learning-rate finder, the batch-size search, the overfit check,
the dry run and the step profiler."""
