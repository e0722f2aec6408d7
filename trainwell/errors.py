"""Errors that mean "the user's input is wrong", as opposed to a bug in trainwell.

The command line turns a :class:`UserError` into one clear line on stderr and exit
code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user: a config, a file, a path, a data set.

    The message is one line that names what is wrong and, where it can, how to fix it.

    Example:
        >>> raise UserError("data.batch_size: expected a positive int, got -3")
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: data.batch_size: expected a positive int, got -3
    """


class Diverged(RuntimeError):
    """Training ran, but its loss became NaN/Inf and stayed there: the run failed.

    Not bad input (exit code 1, not 2): the config was valid, the optimization was not
    (an lr too high, fp16 overflow, a log of zero). The run directory says ``failed``.
    """
