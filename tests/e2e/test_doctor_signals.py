"""SIGINT and SIGTERM stop a watched script, and the report still comes: printed, written
to --json with the findings the script's bug deserves, exit 128 + the signal. Real
processes: `python -m trainwell doctor` started, waited for (the script writes a marker
once it has trained some steps), then signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # real processes, several seconds each

HEAD = """
import sys, time
from pathlib import Path
import torch
from torch import nn
marker = Path(sys.argv[1])
torch.manual_seed(0)
"""

# A policy that never learns: the loop never ends, and every step's loss is kept with
# its graph.
LEAK_FOREVER = (
    HEAD
    + """
policy = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
history = []
episode = 0
while True:
    obs = torch.randn(24, 6)
    logp = torch.log_softmax(policy(obs), -1)
    loss = -(logp[:, 0] * torch.randn(24)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(loss)
    episode += 1
    if episode == 15:
        marker.write_text("trained")
"""
)

# Gradients never cleared, then the script waits forever (a hung evaluation server).
NO_ZERO_GRAD_THEN_SLEEP = (
    HEAD
    + """
model = nn.Linear(10, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(30):
    x = torch.randn(32, 10)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    loss.backward()
    opt.step()
marker.write_text("trained")
time.sleep(1000)
"""
)

# The script handles Ctrl-C itself (saves, prints) and ends normally.
CATCHES_KEYBOARD_INTERRUPT = (
    HEAD
    + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
kept = []
try:
    step = 0
    while True:
        x = torch.randn(16, 8)
        y = (x[:, 0] > 0).long()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        kept.append(loss)
        step += 1
        if step == 12:
            marker.write_text("trained")
except KeyboardInterrupt:
    print("caught Ctrl-C, saving", flush=True)
"""
)

# Stuck in a DataLoader wait: the worker's __getitem__ hangs after a few batches.
LOADER_HANG = (
    HEAD
    + """
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        if i >= 200:
            time.sleep(1000)
        x = torch.randn(8)
        return x, (x[0] > 0).long()

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for i, (x, y) in enumerate(DataLoader(Slow(), batch_size=20, num_workers=1)):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss)
    if i == 8:
        marker.write_text("trained")
"""
)


def _run_and_signal(
    tmp_path: Path, source: str, sig: int, group: bool = False
) -> tuple[int, str, dict, str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    marker, out = tmp_path / "marker", tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwell", "doctor", "--json", str(out), str(script),
         str(marker)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # SIGINT must not be inherited as ignored (a background job's): Python's default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        start_new_session=group,  # its own process group, as a terminal's job
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the script ended or hung before training: " + proc.communicate()[1])
        time.sleep(0.1)
    time.sleep(0.3)
    if group:
        os.killpg(proc.pid, sig)  # what Ctrl-C in a terminal does
    else:
        proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the doctor did not stop on the signal: " + proc.communicate()[1])
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, stderr, report, stdout


def _line(source: str, text: str) -> int:
    """The line of ``text`` in the script as written (not a number typed in)."""
    lines = textwrap.dedent(source).splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _codes(report: dict) -> set[tuple[str, int]]:
    return {(f["code"], f["line"]) for f in report.get("findings", [])}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_leak_loop_that_never_ends_is_reported_when_stopped(tmp_path, sig):
    code, stderr, report, _ = _run_and_signal(tmp_path, LEAK_FOREVER, sig)
    assert code == 128 + sig, stderr
    line = _line(LEAK_FOREVER, "history.append(loss)")
    assert ("graph-retained", line) in _codes(report), stderr
    assert report["exit_code"] == 128 + sig
    assert report["interrupted"] == signal.Signals(sig).name
    assert report["steps"] >= 15
    assert f"stopped by {signal.Signals(sig).name}" in stderr
    assert "error[graph-retained]" in stderr and f"train.py:{line}" in stderr


@pytest.mark.slow
def test_a_script_stuck_in_sleep_after_training_is_reported(tmp_path):
    code, stderr, report, _ = _run_and_signal(tmp_path, NO_ZERO_GRAD_THEN_SLEEP, signal.SIGINT)
    assert code == 130, stderr
    assert "missing-zero-grad" in {c for c, _ in _codes(report)}, stderr
    assert report["steps"] == 30
    # where it was when stopped: the sleep
    assert f"train.py:{_line(NO_ZERO_GRAD_THEN_SLEEP, 'time.sleep(1000)')}" in stderr


@pytest.mark.slow
def test_a_script_that_catches_keyboard_interrupt_keeps_its_handler(tmp_path):
    code, stderr, report, stdout = _run_and_signal(
        tmp_path, CATCHES_KEYBOARD_INTERRUPT, signal.SIGINT
    )
    assert "caught Ctrl-C, saving" in stdout
    assert code == 0, stderr  # it ended normally, as it would under python
    assert report["interrupted"] == "SIGINT" and report["exit_code"] == 0
    assert ("graph-retained", _line(CATCHES_KEYBOARD_INTERRUPT, "kept.append")) in _codes(report)


@pytest.mark.slow
def test_a_script_stuck_in_a_dataloader_wait_is_reported(tmp_path):
    code, stderr, report, _ = _run_and_signal(tmp_path, LOADER_HANG, signal.SIGTERM)
    assert code == 143, stderr
    assert ("graph-retained", _line(LOADER_HANG, "losses.append")) in _codes(report), stderr
    assert report["steps"] >= 9


# Hogwild children that never end; Ctrl-C in a terminal reaches the whole group.
CHILDREN_FOREVER = (
    HEAD
    + """
import torch.multiprocessing as mp

def train(rank, model, marker):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    step = 0
    while True:
        x = torch.randn(16, 8)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        loss.backward()
        opt.step()
        kept.append(loss)
        step += 1
        if step == 12 and rank == 0:
            marker.write_text("trained")

if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.share_memory()
    procs = [mp.Process(target=train, args=(r, model, marker)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""
)


@pytest.mark.slow
def test_ctrl_c_to_the_group_stops_forked_trainers_and_merges_their_findings(tmp_path):
    code, stderr, report, _ = _run_and_signal(tmp_path, CHILDREN_FOREVER, signal.SIGINT,
                                              group=True)  # fmt: skip
    assert code == 130, stderr
    line = _line(CHILDREN_FOREVER, "kept.append(loss)")
    assert ("graph-retained", line) in _codes(report), stderr
    assert len(report["children"]) == 2 and report["steps"] >= 12
