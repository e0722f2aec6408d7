"""Test-only: install the I/O faults that TRAINWELL_TEST_IO_FAULTS names, at start-up of
every Python process that has this folder on its path (see tests/io_faults.py)."""

import os
import sys

if os.environ.get("TRAINWELL_TEST_IO_FAULTS"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    from tests.io_faults import install_from_env

    install_from_env()
