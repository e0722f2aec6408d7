"""chaos: an adversarial sweep of trainwell's crash, resume and refusal contracts.

Real processes, real signals, tiny CPU runs. ``python -m tests.chaos --full`` runs every
case and prints a table; ``tests/e2e/test_chaos_short.py`` runs the short set under pytest.
Each case runs in its own folder and returns pass/fail with the reason.
"""

from tests.chaos.cases import CASES, GROUPS, SHORT, Case, select
from tests.chaos.harness import Outcome

__all__ = ["CASES", "GROUPS", "SHORT", "Case", "Outcome", "select"]
