"""Training in child processes is watched: the doctor runs in each child that
multiprocessing forks or spawns (Hogwild's mp.Process, the DDP tutorial's mp.spawn), and
the children's findings come back into one report, each saying which processes saw it.
Real processes: `python -m trainwell doctor` on scripts written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # real processes, several seconds each

# Hogwild (pytorch/examples mnist_hogwild): a shared model trained by N processes.
HOGWILD = """
import sys
import torch
import torch.multiprocessing as mp
from torch import nn

def train(rank, model):
    torch.manual_seed(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    for step in range(15):
        x = torch.randn(16, 8)
        y = (x[:, 0] > 0).long()
        opt.zero_grad()  # zero
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        history.append(loss)  # keep
    print(rank, "done", flush=True)

if __name__ == "__main__":
    mp.set_start_method(sys.argv[1])
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.share_memory()
    procs = [mp.Process(target=train, args=(rank, model)) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""

# The DDP tutorial's launcher: mp.spawn of a gloo trainer, 2 processes on the CPU.
DDP_SPAWN = """
import os
import sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

def demo_basic(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    ddp_model = DDP(nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5)))
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    for step in range(12):
        optimizer.zero_grad()  # zero
        outputs = ddp_model(torch.randn(20, 10))
        loss_fn(outputs, torch.randn(20, 5)).backward()
        optimizer.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(demo_basic, args=(2, port), nprocs=2, join=True)
"""


def _doctor(tmp_path: Path, source: str, *args: str) -> tuple[int, str, dict]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "trainwell", "doctor", "--json", str(out), str(script), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode, proc.stderr, json.loads(out.read_text())


def _line(source: str, text: str) -> int:
    lines = textwrap.dedent(source).splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _bad(report: dict) -> set[tuple[str, int]]:
    return {(f["code"], f["line"]) for f in report["findings"]
            if f["severity"] in ("warning", "error")}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_hogwild_children_keeping_their_losses_are_found(tmp_path, method):
    code, stderr, report = _doctor(tmp_path, HOGWILD, method)
    assert code == 0, stderr
    assert _bad(report) == {("graph-retained", _line(HOGWILD, "# keep"))}, stderr
    finding = report["findings"][0]
    assert len(finding["evidence"]["processes"]) == 2  # both children saw it
    assert report["steps"] == 30 and len(report["children"]) == 2
    assert "2 child process(es), watched" in stderr and "error[graph-retained]" in stderr


@pytest.mark.slow
def test_hogwild_children_without_zero_grad_forked_and_their_correct_twin(tmp_path):
    buggy = HOGWILD.replace("opt.zero_grad()  # zero", "pass").replace(
        "history.append(loss)  # keep", "history.append(loss.item())"
    )
    code, stderr, report = _doctor(tmp_path, buggy, "fork")
    assert code == 0, stderr
    assert {c for c, _ in _bad(report)} == {"missing-zero-grad"}, stderr
    correct = HOGWILD.replace("history.append(loss)  # keep", "history.append(loss.item())")
    code, stderr, report = _doctor(tmp_path, correct, "fork")
    assert code == 0 and _bad(report) == set(), stderr
    assert report["steps"] == 30


@pytest.mark.slow
def test_a_ddp_trainer_launched_by_mp_spawn_is_watched_and_its_twin_is_clean(tmp_path):
    buggy = DDP_SPAWN.replace("optimizer.zero_grad()  # zero", "pass")
    code, stderr, report = _doctor(tmp_path, buggy)
    assert code == 0, stderr
    assert _bad(report) == {("missing-zero-grad", _line(buggy, "optimizer.step()"))}, stderr
    labels = report["findings"][0]["evidence"]["processes"]
    assert sorted(label.split(" (")[0] for label in labels) == [
        "process 0 of mp.spawn", "process 1 of mp.spawn"
    ]  # fmt: skip
    code, stderr, report = _doctor(tmp_path, DDP_SPAWN)
    assert code == 0 and _bad(report) == set(), stderr
    assert report["steps"] == 24


@pytest.mark.slow
def test_a_crash_in_an_mp_spawn_child_is_explained_there_once(tmp_path):
    source = """
    import torch
    import torch.multiprocessing as mp
    from torch import nn

    def train(rank):
        model = nn.Linear(8, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            x = torch.randn(16, 8)
            y = torch.randint(1, 4, (16,))  # 1-based labels for 3 classes
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    if __name__ == "__main__":
        mp.spawn(train, nprocs=2)
    """
    code, stderr, report = _doctor(tmp_path, source)
    assert code == 1  # mp.spawn raised in the parent, as under python
    # Explained by the children at the labels' line; not again from the parent's copy
    # of the child's traceback at the mp.spawn line.
    assert _bad(report) == {("label-out-of-range", _line(source, "1-based labels"))}, stderr


@pytest.mark.slow
def test_a_child_that_never_reports_is_said_to_be_unwatched(tmp_path):
    source = """
    import os
    import multiprocessing as mp
    import torch

    def train():
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        os._exit(0)  # skips every exit hook, the doctor's report among them

    if __name__ == "__main__":
        p = mp.get_context("fork").Process(target=train)
        p.start()
        p.join()
    """
    code, stderr, report = _doctor(tmp_path, source)
    assert code == 0
    assert "1 child process(es) that were not watched" in stderr
    assert report["children"][0]["watched"] is False
