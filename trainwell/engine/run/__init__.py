"""One run from its start to its end: opening and settling its directory, the start summary, the
loggers, how it stopped and what fit returns."""
