"""Launch N training processes through PyTorch's own launcher (``torch.distributed.run``).

``trainwell train --nproc 2 ...`` is ``torchrun --nproc_per_node 2 -m trainwell train ...``
run in-process: the elastic agent starts and watches the workers, restarts the group
after a failure (``--max-restarts``) and forwards SIGTERM. trainwell adds only what a
training run needs from it: one run directory for every rank and every restart, and
``--resume auto`` on restarts so the group continues from its newest checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
from dataclasses import dataclass

from trainwell.engine.distributed.worker_guard import ERRORS_ENV, LAUNCHER_PID_ENV, reported_error
from trainwell.errors import UserError


@dataclass
class LaunchOptions:
    """Options of the launcher, as given on the command line."""

    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    max_restarts: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str | None = None
    rdzv_id: str | None = None

    def __post_init__(self) -> None:
        if self.nproc < 1 or self.nnodes < 1:
            raise UserError(f"--nproc and --nnodes must be >= 1; got {self.nproc}, {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise UserError(f"--node-rank must be in [0, {self.nnodes}); got {self.node_rank}")
        if self.max_restarts < 0:
            raise UserError(f"--max-restarts must be >= 0; got {self.max_restarts}")
        if self.nnodes > 1 and self.master_port is None and self.rdzv_endpoint is None:
            raise UserError("several nodes need --master-port (or --rdzv-endpoint) to meet at")


def torchrun_args(opts: LaunchOptions, worker_args: list[str]) -> list[str]:
    """The ``torchrun`` command line (without ``torchrun``) for these options.

    Example:
        >>> torchrun_args(LaunchOptions(nproc=2), ["train", "train.epochs=1"])[:4]
        ['--nproc-per-node', '2', '--max-restarts', '0']
    """
    args = ["--nproc-per-node", str(opts.nproc), "--max-restarts", str(opts.max_restarts)]
    if opts.rdzv_endpoint:
        args += ["--nnodes", str(opts.nnodes), "--rdzv-endpoint", opts.rdzv_endpoint,
                 "--rdzv-backend", opts.rdzv_backend or "c10d"]  # fmt: skip
        if opts.rdzv_id:
            args += ["--rdzv-id", opts.rdzv_id]
    elif opts.nnodes > 1 or opts.master_port is not None:
        args += ["--nnodes", str(opts.nnodes), "--node-rank", str(opts.node_rank),
                 "--master-addr", opts.master_addr,
                 "--master-port", str(opts.master_port)]  # fmt: skip
    else:
        # One machine: a free port is picked, so parallel jobs never collide.
        args += ["--standalone"]
    return [*args, "-m", "trainwell", *worker_args]


def launch(opts: LaunchOptions, worker_args: list[str]) -> int:
    """Run the workers to completion; returns the exit code for the command line."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    # torchrun keeps per-attempt log folders; without --log-dir it leaves a new
    # torchelastic_* folder in the system temp folder at every launch.
    logs = tempfile.TemporaryDirectory(prefix="trainwell-launch-")
    errors = os.path.join(logs.name, "errors")
    os.mkdir(errors)
    # Workers die with this process (worker_guard), also when it is SIGKILLed, and leave
    # their one-line errors for it to print once.
    previous = {name: os.environ.get(name) for name in (LAUNCHER_PID_ENV, ERRORS_ENV)}
    os.environ.update({LAUNCHER_PID_ENV: str(os.getpid()), ERRORS_ENV: errors})
    quiet = _QuietExit2()
    agent_log = logging.getLogger(_AGENT_LOGGER)
    agent_log.addFilter(quiet)
    try:
        torchrun_main(["--log-dir", logs.name, *torchrun_args(opts, worker_args)])
    except ChildFailedError as exc:
        # The first worker to fail is the cause (the launcher then stops the others); its
        # own clear error (exit code 2, bad input) stays exit code 2.
        _, first = exc.get_first_failure()
        message = reported_error(errors)
        if message:
            print(f"trainwell: error: {message}", file=sys.stderr)
        return 2 if first.exitcode == 2 else 1
    except SignalException as exc:
        return 128 + int(exc.sigval)
    except KeyboardInterrupt:
        return 128 + int(signal.SIGINT)
    finally:
        agent_log.removeFilter(quiet)
        logs.cleanup()
        for name, value in previous.items():
            _restore_env(name, value)
    return 0


# The elastic agent's logger of worker exits and the signals it sends them.
_AGENT_LOGGER = "torch.distributed.elastic.multiprocessing.api"


class _QuietExit2(logging.Filter):
    """Drops the agent's lines about a worker that exited 2 (bad input, whose one line the
    launcher prints) and about the others it then stops: noise around that line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "(exitcode: 2)" not in message and "closing signal" not in message


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
