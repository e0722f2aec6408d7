"""Test-only start-up hooks of every Python process that has this folder on its path: the
I/O faults that TRAINWELL_TEST_IO_FAULTS names (see tests/io_faults.py), and the crash in a
sharded checkpoint's write that TRAINWELL_TEST_CRASH_IN_SAVE names (tests/crash_in_save.py)."""

import os
import sys

if os.environ.get("TRAINWELL_TEST_IO_FAULTS") or os.environ.get("TRAINWELL_TEST_CRASH_IN_SAVE"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
if os.environ.get("TRAINWELL_TEST_IO_FAULTS"):
    from tests.io_faults import install_from_env

    install_from_env()
if os.environ.get("TRAINWELL_TEST_CRASH_IN_SAVE"):
    from tests.crash_in_save import install_from_env as install_crash

    install_crash()
