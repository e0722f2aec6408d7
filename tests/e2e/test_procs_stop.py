"""A stop signal is honoured while a user hook or a tracking server hangs (issue 25, item 4).

Real processes and real SIGTERM / SIGINT: the first signal asks for the graceful stop;
a logger call or callback still running ``TRAINWELL_STOP_GRACE_S`` after it is aborted,
and the run ends ``interrupted`` with exit 128 + signal, not when the hook returns.
"""

from __future__ import annotations

import http.server
import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.procs_helpers import PY, TINY, env_for, wait_for

GRACE = 2.0
# Generous on a loaded machine; the hooks below hang for an hour.
PROMPT_S = GRACE + 30


def _run_until_hung(tmp_path: Path, extra: list[str], signum=signal.SIGTERM, flag="hung.flag"):
    shutil.copy(REPO / "tests" / "procs_hooks.py", tmp_path / "procs_hooks.py")
    proc = subprocess.Popen(
        [PY, "-m", "trainwell", "train", *TINY, "train.epochs=50", "checkpoint.every_steps=2",
         f"run.dir={tmp_path / 'run'}", *extra],
        cwd=tmp_path, env=env_for(tmp_path, TRAINWELL_STOP_GRACE_S=str(GRACE)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wait_for(lambda: (tmp_path / flag).exists() or proc.poll() is not None, 120)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=PROMPT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the run ignored the signal for {PROMPT_S}s: {err[-1500:]}")
    return proc.returncode, time.monotonic() - sent, out, err


def _summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        ["log.loggers=[procs_hooks:SleepingFlush]"],
        ["log.loggers=[procs_hooks:SilentServerLogger]"],
        ["callbacks=[procs_hooks:SpinningCallback]"],
    ],
    ids=["flush-sleeps", "log_metrics-blocked-in-recv", "callback-spins"],
)
def test_sigterm_ends_a_run_stuck_in_a_hook(tmp_path, extra):
    code, took, _, err = _run_until_hung(tmp_path, extra)
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert _summary(tmp_path)["status"] == "interrupted"
    assert "did not return" in err and "aborted" in err, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert took >= GRACE - 0.5  # the hook had its grace first


@pytest.mark.slow
def test_sigint_too(tmp_path):
    code, _, _, err = _run_until_hung(tmp_path, ["callbacks=[procs_hooks:SpinningCallback]"],
                                      signum=signal.SIGINT)  # fmt: skip
    assert code == 128 + signal.SIGINT, err[-2000:]
    assert _summary(tmp_path)["status"] == "interrupted"


@pytest.mark.slow
def test_a_close_that_hangs_after_the_stop_does_not_hold_the_exit(tmp_path):
    code, _, _, err = _run_until_hung(tmp_path, ["log.loggers=[procs_hooks:SleepingClose]"])
    assert code == 128 + signal.SIGTERM, err[-2000:]
    # The stop itself was graceful: last.pt of the step it stopped at, then the summary.
    assert _summary(tmp_path)["status"] == "interrupted"
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()


@pytest.mark.slow
def test_a_hook_that_returns_within_the_grace_is_waited_for(tmp_path):
    code, _, _, err = _run_until_hung(tmp_path, ["callbacks=[procs_hooks:SlowButFineCallback]"])
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert (tmp_path / "finished.flag").exists()  # not cut short
    assert "did not return" not in err
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()


class _Silent(http.server.BaseHTTPRequestHandler):
    """A tracking server that answers its health check, then nothing ever again."""

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/health"):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")
            return
        time.sleep(3600)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_sigterm_during_a_tracking_server_stall(tmp_path):
    pytest.importorskip("mlflow")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, took, _, err = _run_until_hung(
            tmp_path, ["log.mlflow=true", f"log.mlflow_uri={uri}"], flag="run/summary.json"
        )
    finally:
        server.shutdown()
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert _summary(tmp_path)["status"] == "interrupted"
    assert took < PROMPT_S


@pytest.mark.slow
def test_nproc_2_sigterm_to_the_launcher_while_rank_0_hangs_in_flush(tmp_path):
    pytest.importorskip("torch.distributed")
    code, _, out, err = _run_until_hung(
        tmp_path, ["--nproc", "2", "log.loggers=[procs_hooks:SleepingFlush]"]
    )
    assert code == 128 + signal.SIGTERM, (out + err)[-3000:]
    assert _summary(tmp_path)["status"] == "interrupted"
    # Rank 1, whose collective broke when rank 0 gave up, adds no traceback.
    assert "Traceback" not in err and "Connection closed by peer" not in err, err[-3000:]
