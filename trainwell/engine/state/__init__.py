"""The loop's own state that a checkpoint carries: counters and RNG states, metric sums, early
stopping, callbacks and the graceful-stop flag."""
