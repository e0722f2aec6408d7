"""Building a run's parts from the config and the arguments of fit: model, data, steps, optimizer
and schedule, metric objects, and the checks before the first step."""
