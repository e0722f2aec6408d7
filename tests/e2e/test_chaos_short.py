"""The short chaos sweep: real processes killed, signalled and fed bad input.

The full sweep is ``python -m tests.chaos --full``; these are its short cases (SIGKILL
and resume, max_steps with a kill at step-12.pt, two processes on one run dir, crafted
checkpoints, configs refused up front, export onto the checkpoint itself).
"""

from __future__ import annotations

import pytest

from tests.chaos import SHORT, Case


@pytest.mark.slow
@pytest.mark.parametrize("case", SHORT, ids=[c.id for c in SHORT])
def test_chaos(case: Case, tmp_path):
    outcome = case.run(tmp_path)
    if outcome.skipped:
        pytest.skip(outcome.reason)
    assert outcome.ok, f"{case.id}: {outcome.reason}"
