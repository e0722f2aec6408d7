"""User loggers and callbacks that hang, for tests/e2e/test_procs_stop.py (imported by path)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def _mark() -> None:
    Path("hung.flag").write_text(str(os.getpid()))


class SleepingFlush:
    """flush (called at each checkpoint) never returns: a sleep."""

    def log_metrics(self, step, metrics):
        pass

    def flush(self):
        _mark()
        time.sleep(3600)


class SilentServerLogger:
    """log_metrics blocks reading a socket whose server accepts and never answers."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.calls = 0

    def log_metrics(self, step, metrics):
        self.calls += 1
        if self.calls >= 3:
            conn = socket.create_connection(self.server.getsockname())
            _mark()
            conn.recv(16)


class SleepingClose:
    """Healthy while training; close never returns (a stop then ends without it)."""

    def log_metrics(self, step, metrics):
        if step >= 3:
            _mark()

    def close(self):
        time.sleep(3600)


class SpinningCallback:
    """on_step_end spins in pure Python at step 3."""

    def on_step_end(self, ctx):
        if ctx.step == 3:
            _mark()
            while True:
                pass


class SlowButFineCallback:
    """on_step_end takes a while, but less than the grace: it is waited for."""

    def on_step_end(self, ctx):
        if ctx.step == 3:
            _mark()
            time.sleep(1.0)
            Path("finished.flag").write_text("yes")
