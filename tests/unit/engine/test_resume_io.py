"""Resume over I/O errors: a checkpoint the OS will not let be read is never taken for a
torn one (no skip, no start from scratch over it, nothing written); checkpoints that are
all damaged stop the run too; only a run without checkpoints starts afresh.

The tests run as root, whose ``chmod 000`` blocks nothing: the faults come from
``tests/io_faults.py`` (in this process, or in a real ``python -m trainwell`` through its
start-up shim). A real ``chmod`` variant runs where the tests are not root.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import trainwell
from tests import io_faults
from tests.conftest import REPO, SYNTHETIC, read_summary
from tests.finished_run import finished_run_fixture, run_copy_fixture
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import Unreadable, load_checkpoint, save_atomic
from trainwell.engine.checkpointing.resume import find
from trainwell.errors import UserError

QUIET = Console(quiet=True)
RUN = [*SYNTHETIC, "train.epochs=2", "checkpoint.every_steps=5", "checkpoint.keep_last=2"]
PATCHED = [(builtins, "open"), (io, "open")] + [
    (os, name)
    for name in (
        "open",
        "stat",
        "listdir",
        "scandir",
        "mkdir",
        "unlink",
        "remove",
        "rmdir",
        "rename",
        "replace",
    )  # fmt: skip
]


finished = finished_run_fixture("io", RUN)


run = run_copy_fixture()


@pytest.fixture
def faults(monkeypatch):
    """``faults(rules)`` puts (only) these I/O faults in force until the test ends."""
    real = [(module, name, getattr(module, name)) for module, name in PATCHED]
    for module, name, value in real:
        monkeypatch.setattr(module, name, value)

    def install(rules: list[dict]) -> None:
        for module, name, value in real:
            setattr(module, name, value)
        io_faults.install(rules)

    return install


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: its content hash and modification time."""
    return {
        str(p.relative_to(folder)): (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def resume_in_process(run: Path, *overrides: str) -> str:
    console = Console(record=True, width=400)
    cfg = load_config(overrides=[*RUN, f"run.dir={run}", "train.epochs=3", *overrides])
    try:
        trainwell.fit(cfg, resume="auto", console=console)
    finally:
        said = console.export_text()
    return said


def cli(args: list[str], cwd: Path, rules: list[dict]) -> subprocess.CompletedProcess:
    base = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "trainwell", *args], cwd=cwd,
                          env=io_faults.env(rules, base), capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# --- in this process ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("denied", ["last.pt", "*.pt", "*"])
def test_an_unreadable_checkpoint_stops_resume_and_touches_nothing(run, faults, denied):
    before = snapshot(run)
    newest = find(run, say=lambda m: None)[0].name  # last.pt (best.pt has the same time)
    faults([{"path": str(run / "checkpoints" / denied), "kind": "deny-file"}])
    with pytest.raises(Unreadable) as caught:
        resume_in_process(run)
    message = str(caught.value)
    assert "cannot read checkpoint" in message and "[Errno 13] Permission denied" in message
    assert "truncated" not in message and "not a checkpoint" not in message
    assert str(run / "checkpoints" / newest) in message
    faults([])
    assert snapshot(run) == before


@pytest.mark.slow
def test_only_the_newest_is_read_so_an_old_unreadable_one_does_not_block(run, faults):
    faults([{"path": str(run / "checkpoints" / "step-20.pt"), "kind": "deny-file"}])
    said = resume_in_process(run)
    assert "resuming from" in said and "last.pt at step 28" in said
    assert read_summary(run)["status"] == "completed" and read_summary(run)["steps"] == 42


@pytest.mark.slow
@pytest.mark.parametrize("after", [0, 100, 5000])
def test_a_disk_error_mid_file_is_an_io_error_not_a_torn_file(run, faults, after):
    last = run / "checkpoints" / "last.pt"
    before = snapshot(run)
    faults([{"path": str(last), "kind": "eio", "after": after}])
    with pytest.raises(Unreadable, match=r"cannot read checkpoint .*last\.pt: \[Errno 5\]"):
        load_checkpoint(last)
    with pytest.raises(Unreadable, match=r"\[Errno 5\] Input/output error"):
        resume_in_process(run)
    faults([])
    assert snapshot(run) == before


@pytest.mark.slow
def test_an_unreadable_checkpoints_folder_is_one_line(run, faults):
    before = snapshot(run)
    faults([{"path": str(run / "checkpoints"), "kind": "deny-dir"}])
    denied = r"cannot read checkpoint folder .*checkpoints: \[Errno 13\]"
    with pytest.raises(Unreadable, match=denied):
        resume_in_process(run)
    faults([])  # snapshot reads the folder
    assert snapshot(run) == before


def test_load_checkpoint_names_the_errno_for_any_oserror(tmp_path, faults):
    path = tmp_path / "a.pt"
    save_atomic({"model": {}, "step": 1}, path)
    faults([{"path": str(path), "kind": "deny-file"}])
    with pytest.raises(Unreadable) as caught:
        load_checkpoint(path)
    assert f"cannot read checkpoint {path}: [Errno 13] Permission denied" in str(caught.value)
    assert isinstance(caught.value, UserError)  # the CLI makes it one line, exit 2


@pytest.mark.slow
def test_checkpoints_that_are_all_damaged_stop_instead_of_starting_over(run):
    for p in (run / "checkpoints").glob("*.pt"):
        p.write_bytes(p.read_bytes()[:500])  # torn, every one
    before = snapshot(run)
    with pytest.raises(UserError, match=r"no checkpoint of .* can be resumed: all 4 are damaged"):
        resume_in_process(run)
    assert snapshot(run) == before


@pytest.mark.slow
@pytest.mark.parametrize("leftover", [None, ".last.pt.abc123.tmp"])
def test_a_run_without_checkpoint_files_starts_from_scratch(tmp_path, leftover):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    if leftover:  # a write a kill interrupted: never a checkpoint
        (run / "checkpoints" / leftover).write_bytes(b"half")
    said = resume_in_process(run, "train.epochs=1")
    assert "starting from scratch" in said
    assert read_summary(run)["status"] == "completed"


@pytest.mark.slow
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root reads files at mode 000")  # fmt: skip
def test_real_mode_000_checkpoints_stop_resume(run):
    before = snapshot(run)
    for p in (run / "checkpoints").glob("*.pt"):
        p.chmod(0)
    try:
        with pytest.raises(Unreadable, match=r"\[Errno 13\]"):
            resume_in_process(run)
    finally:
        for p in (run / "checkpoints").glob("*.pt"):
            p.chmod(0o644)
    assert snapshot(run) == before


# --- real processes -----------------------------------------------------------------------


@pytest.mark.slow
def test_cli_resume_auto_with_every_checkpoint_unreadable(run, tmp_path):
    before = snapshot(run)
    rules = [{"path": str(run / "checkpoints" / "*.pt"), "kind": "deny-file"}]
    proc = cli(["train", *RUN, f"run.dir={run}", "train.epochs=3", "--resume", "auto"],
               tmp_path, rules)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith("trainwell: error: cannot read checkpoint ")
    assert "last.pt: [Errno 13] Permission denied" in line
    assert "starting from scratch" not in proc.stdout and "resuming" not in proc.stdout
    assert snapshot(run) == before
    assert read_summary(run)["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("target", ["file", "run_dir"])
def test_cli_resume_path_or_run_dir_over_a_disk_error(run, tmp_path, target):
    last = run / "checkpoints" / "last.pt"
    before = snapshot(run)
    where = str(last) if target == "file" else str(run)
    proc = cli(["train", *RUN, "train.epochs=3", "--resume", where], tmp_path,
               [{"path": str(last), "kind": "eio", "after": 64}])  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert "cannot read checkpoint" in line and "last.pt: [Errno 5] Input/output error" in line
    assert snapshot(run) == before


@pytest.mark.slow
def test_cli_checkpoints_folder_at_mode_000_is_one_line(run, tmp_path):
    before = snapshot(run)
    proc = cli(["train", *RUN, f"run.dir={run}", "--resume", "auto"], tmp_path,
               [{"path": str(run / "checkpoints"), "kind": "deny-dir"}])  # fmt: skip
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert f"cannot read checkpoint folder {run / 'checkpoints'}: [Errno 13]" in line
    assert "Traceback" not in proc.stderr
    assert snapshot(run) == before


@pytest.mark.slow
@pytest.mark.parametrize("keep", [10, 200, 1000, 5000, 20000, -30])
def test_a_file_cut_short_is_torn_not_unreadable(run, keep):
    """torch raises an OSError of its own (EINVAL) for some cuts: still a torn file."""
    last = run / "checkpoints" / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[:keep])
    with pytest.raises(UserError) as caught:
        load_checkpoint(last)
    assert not isinstance(caught.value, Unreadable), caught.value
    assert "truncated or not a checkpoint" in str(caught.value) or "corrupt" in str(caught.value)


@pytest.mark.slow
def test_a_torn_sharded_temporary_alone_starts_from_scratch(tmp_path):
    """A sharded save killed before its commit marker leaves .last.tmp/: said, and not
    counted as a checkpoint (a restarted job begins afresh)."""
    run = tmp_path / "run"
    torn = run / "checkpoints" / ".last.tmp"
    torn.mkdir(parents=True)
    (torn / "__0_0.distcp").write_bytes(b"half")
    said = resume_in_process(run, "train.epochs=1")
    assert "is torn" in said and "starting from scratch" in said
    assert read_summary(run)["status"] == "completed"
