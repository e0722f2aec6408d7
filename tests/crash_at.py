"""A test callback that kills its process at a chosen step, to exercise restarts and
resumes (it replaces an environment hook the training loop used to read).

A run is given it on the command line as a user's callback would be, by the argument
:func:`override` writes. It exits with code 13 at the end of that optimizer step, after
the step's log point and before its step-N checkpoint, on the chosen rank and only on
the launcher's first attempt (a restarted worker trains on). The process needs the
repository on ``PYTHONPATH``, as the tests' launch helpers set.
"""

from __future__ import annotations

import os

EXIT_CODE = 13


def override(step: int, rank: int = 0) -> str:
    """The ``callbacks=`` override that crashes rank ``rank`` at ``step``.

    Example:
        >>> override(12)
        "callbacks=[{name: 'tests.crash_at:CrashAtStep', kwargs: {step: 12, rank: 0}}]"
    """
    kwargs = f"{{step: {step}, rank: {rank}}}"
    return f"callbacks=[{{name: 'tests.crash_at:CrashAtStep', kwargs: {kwargs}}}]"


class CrashAtStep:
    """Exit the process (``os._exit``: no clean-up, as a killed worker) at ``step``."""

    def __init__(self, step: int, rank: int = 0) -> None:
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        mine = int(os.environ.get("RANK", "0")) == rank
        self.step = step if first_attempt and mine else -1

    def on_step_end(self, ctx) -> None:
        if ctx.step == self.step:
            os._exit(EXIT_CODE)
