"""Look at the data before training (``trainwell data``): what every split holds.

For each split: its size, the label counts (classes that never appear, a split missing a
class another has, labels that are not ``0..C-1``, the majority class's share), the
inputs' statistics (mean, std, min, max, NaN/Inf; per channel for images), the lengths of
variable-length samples, the first batch after the collate, and a grid of labelled
images. Problems come back as warnings in plain words.

Modules, bottom up: ``fields`` (a sample taken apart), ``stats`` (running statistics),
``labels`` (label checks), ``split`` (reading one split), ``checks`` (input warnings),
``report`` (every split of a config), ``render`` (text, JSON, the dry run's line),
``grid`` (the PNG).

Example:
    >>> from trainwell.config import load_config
    >>> from trainwell.datacheck.report import inspect_data
    >>> report = inspect_data(load_config())  # the default: scikit-learn's digits
    >>> {name: s.size for name, s in report.splits.items()}, report.warnings
    ({'train': 1257, 'val': 270, 'test': 270}, [])
"""
