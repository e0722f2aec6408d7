"""Output whose reader is gone is dropped, not the end of the run: rich's console raises
SystemExit(1) on a broken pipe, which turned a worker's graceful stop (its launcher
killed with the pipe it printed to) into a failed run."""

from __future__ import annotations

import os

import pytest
from rich.console import Console

from trainwell.engine.loop.progress import RunConsole, make_console


def _closed_pipe():
    read, write = os.pipe()
    os.close(read)  # nobody reads: a write now fails with EPIPE
    return os.fdopen(write, "w")


def test_rich_alone_ends_the_process_on_a_broken_pipe(monkeypatch):
    out = _closed_pipe()
    monkeypatch.setattr(os, "dup2", lambda *a: None)  # leave the test's own stdout alone
    with pytest.raises(SystemExit):
        Console(file=out).print("the interrupted line")


@pytest.mark.parametrize("lines", [1, 50])
def test_the_run_console_drops_the_output_and_goes_on(lines, monkeypatch):
    out = _closed_pipe()
    monkeypatch.setattr(os, "dup2", lambda *a: None)  # leave the test's own stdout alone
    console = make_console(out)
    assert isinstance(console, RunConsole)
    for i in range(lines):
        console.print(f"epoch {i}: interrupted at step 7; resume with ...")
    assert console.quiet  # what follows is not even formatted
    console.print("still no exception")
    with pytest.raises(OSError):
        out.close()  # the buffered bytes had nowhere to go
