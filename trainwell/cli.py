"""The ``trainwell`` command line: a thin layer over the library.

Errors from bad input print one line and exit with code 2; ``--debug`` shows the
traceback. Interrupted training exits with 128 + the signal number; a failed overfit check
(``doctor.overfit_batch=true``) with 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from trainwell.errors import Diverged, UserError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainwell",
        description="Train PyTorch models the way seasoned engineers do.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="train a model (no arguments: a small CNN on scikit-learn's digits)",
        description="Train as the config says. KEY=VALUE overrides any config key, e.g. "
        "optim.lr=1e-3 train.epochs=5. `trainwell train --help-config` lists the keys.",
    )
    train.add_argument("--config", metavar="FILE", help="YAML config file")
    train.add_argument(
        "--resume",
        metavar="auto|PATH",
        help="continue a run: auto takes the newest usable checkpoint of run.dir",
    )
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="one forward/backward and one eval batch, then stop; writes nothing",
    )
    train.add_argument(
        "--print-config", action="store_true", help="print the resolved config as YAML and exit"
    )
    train.add_argument(
        "--help-config",
        action="store_true",
        help="print the reference of every config key and exit",
    )
    # Accepted after the verb too; SUPPRESS keeps a --debug given before it.
    train.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="")
    launcher = train.add_argument_group(
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
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE")

    lr_find = sub.add_parser(
        "lr-find",
        help="learning-rate range test: suggests optim.lr for a config",
        description="Build the run as `trainwell train` would (same --config and KEY=VALUE "
        "overrides), train a few steps while the lr rises exponentially, and suggest the lr "
        "where the loss falls fastest. Writes lr_find.csv and lr_find.png; no checkpoint, "
        "and run.dir is never touched.",
    )
    lr_find.add_argument("--config", metavar="FILE", help="YAML config file")
    lr_find.add_argument(
        "--start-lr", type=float, default=1e-7, metavar="LR", help="first lr (default 1e-7)"
    )
    lr_find.add_argument(
        "--end-lr", type=float, default=10.0, metavar="LR", help="last lr (default 10)"
    )
    lr_find.add_argument(
        "--steps",
        type=int,
        default=100,
        metavar="N",
        help="optimizer steps from --start-lr to --end-lr (default 100); fewer if it diverges",
    )
    lr_find.add_argument(
        "--out",
        "--output",  # its first name; --out is every verb's name for where output goes
        dest="output",
        metavar="DIR",
        help="folder for lr_find.csv and lr_find.png (default: a new one under runs/)",
    )
    lr_find.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="")
    lr_find.add_argument("overrides", nargs="*", metavar="KEY=VALUE")

    doctor = sub.add_parser(
        "doctor",
        help="run your own training script under the doctor and report its pitfalls",
        description="Runs SCRIPT as `python SCRIPT ARGS` would, watching its training "
        "through PyTorch's hooks; options go before the script, all after it to the script.",
    )
    doctor.add_argument("--max-steps", type=int, metavar="N", help="stop after N optimizer steps")
    doctor.add_argument("--json", metavar="PATH", help="also write the findings as JSON")
    doctor.add_argument(
        "--overfit",
        action="store_true",
        help="train on the script's first batch over and over and report whether the loss "
        "goes to near zero",
    )
    doctor.add_argument(
        "--memory",
        action="store_true",
        help="memory at every optimizer step (CUDA allocated/reserved/peak; RSS and live "
        "tensor bytes) as memory.csv and memory.png, with torch.cuda.memory_summary() at "
        "the peak and at an out-of-memory error",
    )
    doctor.add_argument(
        "--profile",
        action="store_true",
        help="torch.profiler over 5 optimizer steps after 3: the heaviest operators, "
        "profile/trace.json and profile/profile_ops.csv",
    )
    doctor.add_argument(
        "--out",
        metavar="DIR",
        help="folder for the files of --memory and --profile (default: the folder of "
        "--json, else ./trainwell-doctor)",
    )
    doctor.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="")
    doctor.add_argument("script", metavar="SCRIPT")
    doctor.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")

    env = sub.add_parser("env", help="what this machine offers PyTorch, and what is wrong")
    env.add_argument("--json", action="store_true", help="print JSON instead of a report")
    env.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="")

    from trainwell.commands import register_all

    register_all(sub)
    from trainwell.trust import add_safe_flags

    add_safe_flags(sub)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the line; ``KEY=VALUE`` overrides may stand anywhere, flags included between.

    argparse takes one run of positionals, so overrides after a flag come back unknown:
    they join the others here, and anything else unknown is refused as usual.
    """
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if overrides and hasattr(args, "overrides"):
        args.overrides = [*args.overrides, *overrides]
        extra = [a for a in extra if a not in overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainwell`` console script; returns the exit code."""
    args = _parse(argv)
    try:
        return _dispatch(args)
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


def _dispatch(args: argparse.Namespace) -> int:
    """Run the verb: a handler set by a module of :mod:`trainwell.commands`, or one here."""
    from trainwell.trust import apply_args

    apply_args(args)  # --safe: before any config is read
    if getattr(args, "handler", None) is not None:
        return args.handler(args)
    if args.command == "doctor":
        from trainwell.doctor.runner import run_script

        return run_script(
            args.script, args.script_args, args.max_steps, args.json, overfit=args.overfit,
            memory=args.memory, profile=args.profile, out_dir=args.out,
        )  # fmt: skip
    verbs = {"train": _train, "env": _env, "lr-find": _lr_find}
    if args.command in verbs:
        return verbs[args.command](args)
    _parser().print_help()
    return 2


def _train(args: argparse.Namespace) -> int:
    from trainwell import config as config_mod
    from trainwell.engine.distributed.worker_guard import die_with_launcher

    die_with_launcher()  # a worker of `--nproc N`: never outlive the launcher

    if args.help_config:
        print(config_mod.reference_markdown(), end="")
        return 0
    cfg = config_mod.load_config(args.config, args.overrides)
    if args.print_config:
        print(config_mod.to_yaml(cfg), end="")
        return 0
    if args.nproc is not None or args.nnodes > 1:
        return _launch(args, cfg)
    from trainwell.engine.fit import fit

    result = fit(cfg, resume=args.resume, dry_run=args.dry_run)
    # doctor.overfit_batch=true is a check: a failed one exits 1, so scripts can gate on it.
    # Workers under a launcher exit 0 (torchrun would report a crash); _launch says it.
    worker = int(os.environ.get("WORLD_SIZE", "1")) > 1
    return 1 if _overfit_failed(result.summary) and not worker else 0


def _overfit_failed(summary: dict) -> bool:
    overfit = summary.get("overfit")
    return overfit is not None and not overfit["passed"]


def _lr_find(args: argparse.Namespace) -> int:
    from trainwell import config as config_mod
    from trainwell.engine.tools.lr_find import lr_find
    from trainwell.outputs import check_output_dir

    if args.output:  # before the steps: never into a run's own files, nor over the config
        check_output_dir(args.output, "--output", ("lr_find.csv", "lr_find.png"), verb="lr-find",
                         inputs=[(args.config, "the config being read")])  # fmt: skip
    cfg = config_mod.load_config(args.config, args.overrides)
    lr_find(cfg, start_lr=args.start_lr, end_lr=args.end_lr, steps=args.steps, output=args.output)
    return 0


def _launch(args: argparse.Namespace, cfg) -> int:
    from trainwell.engine.distributed.launch import LaunchOptions, launch
    from trainwell.engine.run.launch_run_dir import claim_run_dir, settle_failed_launch
    from trainwell.engine.run_dir.directory import default_name, new_run_path

    opts = LaunchOptions(
        nproc=args.nproc or 1,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        max_restarts=args.max_restarts,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_backend=args.rdzv_backend,
        rdzv_id=args.rdzv_id,
    )
    worker = ["train", *(["--config", args.config] if args.config else []), *args.overrides]
    if args.dry_run:
        worker.append("--dry-run")
    from trainwell.engine.build.run_checks import check_run_config
    from trainwell.loggers import check_extras

    # Refused here once, before any worker starts (each would print it, among torchrun's lines).
    check_extras(cfg.log)
    check_run_config(cfg, opts.nproc * opts.nnodes)
    resume = args.resume
    if not args.dry_run:
        if opts.nnodes > 1 and opts.max_restarts and not cfg.run.dir:
            # Every node must find the same checkpoints after a restart.
            raise UserError("restarts on several nodes need run.dir, on storage all nodes share")
        # One run directory for every rank and restart, chosen before any starts.
        run_dir = new_run_path(cfg.run, default_name(cfg.data.name, cfg.model.name))
        made = resume is None and opts.node_rank == 0 and not run_dir.exists()
        if opts.node_rank == 0:
            # Refused here, once, before any worker starts: a live run, a completed one.
            claim_run_dir(run_dir, fresh=resume is None)
        if resume is None and opts.max_restarts:
            resume = "auto"  # a restarted group continues from its newest checkpoint
        worker.append(f"run.dir={run_dir}")
    if resume is not None:
        worker += ["--resume", str(resume)]
    code = launch(opts, worker)
    if code != 0 and not args.dry_run and opts.node_rank == 0:
        # A worker killed outright writes nothing: the summary would say "running" forever.
        settle_failed_launch(run_dir, made, f"a worker process failed (launcher exit code {code})")
    if code == 0 and cfg.doctor.overfit_batch and not args.dry_run and opts.node_rank == 0:
        import json

        summary = json.loads((run_dir / "summary.json").read_text())
        return 1 if _overfit_failed(summary) else 0
    return code


def _env(args: argparse.Namespace) -> int:
    from trainwell import env

    info = env.collect(check=True)
    if args.json:
        sys.stdout.write(env.to_json(info))
    else:
        env.render(info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
