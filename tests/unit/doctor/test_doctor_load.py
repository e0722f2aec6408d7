"""``data-bottleneck`` on a busy machine: CPU-burning processes beside the run must not
make a tiny loop look data-bound, nor hide a real bottleneck. The doctor's timings are
taken less the time the training thread sat queued for a CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainwell.doctor.clock import others_queued, queued
from trainwell.doctor.events import BatchEvent
from trainwell.doctor.probes.data_bottleneck import winnable

CORPUS = Path(__file__).resolve().parents[2] / "doctor_corpus"
TINY = ["ok_tiny_mnist_examples_style", "ok_tiny_mnist_quickstart_style",
        "ok_tiny_mnist_cnn_augment"]  # fmt: skip
# Waits on files (sleeps stand for them), and one that computes (numpy FFTs per item).
REAL = ["slow_data_decode_per_sample", "bottleneck_csv_rows_parsed_per_item",
        "bottleneck_cpu_numpy_features_per_item"]  # fmt: skip


@pytest.fixture
def busy_machine():
    """Three processes spinning on the CPU for the length of the test."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    yield
    for p in burners:
        p.kill()
        p.wait()


def bottlenecks(scripts: list[str], tmp_path: Path) -> dict[str, list[dict]]:
    """Each script's data-bottleneck findings, the doctors run side by side: each is one
    more busy process for the others (and the machine's cores are spent once, not once
    per script)."""
    # In processes of their own: threads other tests left in this one (a logger's, a stop
    # watcher's) would take the GIL from the loop, a wait the kernel does not count as
    # queued, and this test is about other processes.
    procs = {}
    for script in scripts:
        cmd = [sys.executable, "-m", "trainwell", "doctor", "--json",
               str(tmp_path / f"{script}.json"), str(CORPUS / f"{script}.py")]  # fmt: skip
        procs[script] = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    found = {}
    for script, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        report = json.loads((tmp_path / f"{script}.json").read_text())
        found[script] = [f for f in report["findings"] if f["code"] == "data-bottleneck"]
    return found


@pytest.mark.slow
def test_tiny_loops_beside_busy_processes_are_no_bottleneck(tmp_path, busy_machine):
    found = bottlenecks(TINY, tmp_path)
    # The evidence (wait and work per batch, share) says which timing the load inflated.
    assert all(f == [] for f in found.values()), {
        script: [(f["line"], f["evidence"]) for f in fs] for script, fs in found.items() if fs
    }


@pytest.mark.slow
def test_real_bottlenecks_beside_busy_processes_are_still_found(tmp_path, busy_machine):
    found = bottlenecks(REAL, tmp_path)
    for script, fs in found.items():
        assert len(fs) == 1 and fs[0]["severity"] == "warning", (script, fs)
        # The wait per batch is the loading's own (30-90 ms here alone), not inflated by
        # the queue for a CPU.
        assert 30 < fs[0]["evidence"]["wait_ms"] < 120, (script, fs[0]["evidence"])


@pytest.mark.slow
def test_the_queued_time_grows_while_another_process_holds_the_cpu(busy_machine):
    if not Path("/proc/thread-self/schedstat").exists():
        pytest.skip("the system does not count queued time")
    start = queued()
    x = 0
    for i in range(3_000_000):  # about a second of work, shared with three spinners
        x += i
    assert queued() > start


def wait(s, queued=0.0, cpu=0.0, others=0.0):
    return BatchEvent(None, None, s, 2, wait_queued_s=queued, wait_cpu_s=cpu,
                      wait_others_queued_s=others)  # fmt: skip


def test_a_wait_on_files_is_won_back_whole_and_computing_as_far_as_the_cores_go():
    assert winnable(wait(0.070, cpu=0.002), cores=2) == pytest.approx((0.070, 0.069))
    assert winnable(wait(0.040, cpu=0.040), cores=2) == pytest.approx((0.040, 0.020))
    assert winnable(wait(0.040, cpu=0.040), cores=8) == pytest.approx((0.040, 0.035))
    assert winnable(wait(0.040, cpu=0.040), cores=1) == pytest.approx((0.040, 0.0))


def test_a_busy_machine_is_taken_off_the_wait_and_a_partner_threads_spinning_too():
    # Queued 90 of 150 ms; 60 ms of CPU, a partner thread queued 60% of the wait: the
    # thread spun for it, so 24 ms of computing.
    assert winnable(wait(0.150, queued=0.090, cpu=0.060, others=0.090), cores=2) == \
        pytest.approx((0.024, 0.012))
    # Single-threaded work beside the same load: its CPU time is its own.
    assert winnable(wait(0.300, queued=0.150, cpu=0.145), cores=2)[0] == pytest.approx(0.150)


def test_the_other_threads_queued_time_is_read_by_thread():
    if not Path("/proc/self/task").exists():
        pytest.skip("the system does not count queued time")
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        seen = others_queued()
        assert str(t.native_id) in seen and all(v >= 0.0 for v in seen.values())
        assert str(threading.get_native_id()) not in seen
    finally:
        stop.set()
        t.join()
    assert str(t.native_id) not in others_queued()


# Slow: two reads a batch, and one more for the call that finds the loader spent.
@pytest.mark.parametrize("nap, most", [(0.0, 10), (0.002, 2 * 40 + 1)])
def test_the_other_threads_are_read_only_while_the_waits_are_long(monkeypatch, nap, most):
    """Two reads of every thread's schedstat cost about 60 us: a loader whose batches
    come in well under a millisecond is spared them after its first batches."""
    import time

    import torch
    from torch.utils.data import DataLoader, Dataset

    import trainwell.doctor
    from trainwell.doctor import patches

    reads = []
    monkeypatch.setattr(patches, "others_queued", lambda: reads.append(1) or {"1": 0.0})

    class Napping(Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(nap)
            return torch.ones(2)

    with trainwell.doctor.watch():
        batches = sum(1 for _ in DataLoader(Napping(), batch_size=1))
    assert batches == 40
    assert (0 < len(reads) <= most) if nap == 0 else len(reads) == most, len(reads)
