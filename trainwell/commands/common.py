"""What the verbs share: ``--config`` and ``KEY=VALUE`` overrides, ``--debug``, the
launcher flags, and running a handler so that bad input is one line and exit code 2.

A verb that reads a config declares it with two calls, so every such verb spells the
flags, their help and their defaults the same way (and gets ``--safe``, which
:func:`trainwell.trust.add_safe_flags` adds to every verb with ``--config``)::

    verb = sub.add_parser("mine", help="...")
    add_config(verb)            # --config FILE
    ...                         # the verb's own flags
    add_debug(verb)             # --debug after the verb too
    add_overrides(verb)         # KEY=VALUE ...
    verb.set_defaults(handler=_mine)

and reads it in its handler with ``cfg = load_config(args)``. Nothing here imports
torch: ``trainwell --help`` imports every verb's module.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="trainwell mine")
    >>> add_config(parser); add_debug(parser); add_overrides(parser)
    >>> args = parser.parse_args(["--config", "c.yaml", "optim.lr=0.1"])
    >>> args.config, args.overrides
    ('c.yaml', ['optim.lr=0.1'])
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainwell.errors import Diverged, UserError

if TYPE_CHECKING:
    from trainwell.config import Config
    from trainwell.engine.distributed.launch import LaunchOptions

# What ``register(sub)`` receives: the ``trainwell`` parser's sub-parsers.
Subparsers = argparse._SubParsersAction
# What a verb sets as ``handler=``: the parsed line in, the exit code out.
Handler = Callable[[argparse.Namespace], int]


def add_config(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE``, the YAML config a verb reads (see :func:`load_config`)."""
    parser.add_argument("--config", metavar="FILE", help="YAML config file")


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """Add the ``KEY=VALUE`` overrides of any config key; ``cli._parse`` also collects
    those given between flags."""
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")


def add_debug(parser: argparse.ArgumentParser) -> None:
    """Accept ``--debug`` after the verb too; SUPPRESS keeps a ``--debug`` given before it."""
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="")


def load_config(args: argparse.Namespace) -> Config:
    """The config of ``--config`` and the overrides, strictly validated: a bad key or value
    raises :class:`~trainwell.errors.UserError`, which :func:`run` makes one line, exit 2."""
    from trainwell import config as config_mod

    return config_mod.load_config(args.config, args.overrides)


def add_launcher(parser: argparse.ArgumentParser) -> None:
    """Add the flags of PyTorch's launcher (``--nproc`` ... ``--rdzv-id``), read back by
    :func:`launch_options`."""
    launcher = parser.add_argument_group(
        "several processes (PyTorch's torch.distributed.run launcher)"
    )
    launcher.add_argument("--nproc", type=int, metavar="N", help="processes on this machine")
    launcher.add_argument("--nnodes", type=int, default=1, metavar="M", help="machines")
    launcher.add_argument("--node-rank", type=int, default=0, metavar="R")
    launcher.add_argument("--master-addr", default="127.0.0.1", metavar="HOST")
    launcher.add_argument("--master-port", type=int, metavar="P")
    launcher.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="K",
        help="restart the group after a failure; it resumes from the newest checkpoint",
    )
    launcher.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="elastic rendezvous")
    launcher.add_argument("--rdzv-backend", metavar="NAME")
    launcher.add_argument("--rdzv-id", metavar="ID")


def wants_launcher(args: argparse.Namespace) -> bool:
    """Whether the line asks for several processes (``--nproc N`` or ``--nnodes M > 1``)."""
    return args.nproc is not None or args.nnodes > 1


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """The launcher flags of :func:`add_launcher` as checked launcher options."""
    from trainwell.engine.distributed.launch import LaunchOptions

    return LaunchOptions(
        # Unset is one process per node; 0 is refused by LaunchOptions (it is no count).
        nproc=1 if args.nproc is None else args.nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        max_restarts=args.max_restarts,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_backend=args.rdzv_backend,
        rdzv_id=args.rdzv_id,
    )


def run(handler: Handler, args: argparse.Namespace) -> int:
    """``handler(args)``'s exit code; bad input (:class:`UserError`) is one line and 2, a
    diverged run one line and 1, an interruption 128 + the signal. ``--debug`` re-raises."""
    try:
        return handler(args)
    except UserError as exc:
        if args.debug:
            raise
        from trainwell.engine.distributed.worker_guard import report_error

        if not report_error(str(exc)):  # a worker's goes to its launcher, printed once
            print(f"trainwell: error: {_printable(exc)}", file=sys.stderr)
        return 2
    except Diverged as exc:
        if args.debug:
            raise
        print(f"trainwell: failed: {_printable(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        # Interrupted carries the signal; a bare KeyboardInterrupt is Ctrl-C.
        signum = int(getattr(exc, "signum", signal.SIGINT))
        if not getattr(exc, "reported", False):
            name = signal.Signals(signum).name
            print(f"trainwell: interrupted by {name}", file=sys.stderr)
        return 128 + signum


def _printable(exc: BaseException) -> str:
    # A message may quote a folder or file name: its escape bytes must not reach the terminal.
    from trainwell.printable import printable

    return printable(exc, keep="\n\t")
