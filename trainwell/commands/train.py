"""``trainwell train``: train as the config says, in this process or under the launcher.

Without ``--nproc``/``--nnodes`` the handler calls :func:`trainwell.engine.fit.fit`; with
them it becomes the launcher: torchrun's elastic agent starts the workers, each of which
runs ``python -m trainwell train ...`` and arrives back here as a plain run. A failed
overfit check (``doctor.overfit_batch=true``) exits 1.
"""

from __future__ import annotations

import argparse
import gc
import os
from typing import TYPE_CHECKING

from trainwell.commands.common import (
    Subparsers,
    add_config,
    add_debug,
    add_launcher,
    add_overrides,
    launch_options,
    wants_launcher,
)
from trainwell.errors import UserError

if TYPE_CHECKING:
    from trainwell.config import Config


def register(sub: Subparsers) -> None:
    """Add the ``train`` verb."""
    train = sub.add_parser(
        "train",
        help="train a model (no arguments: a small CNN on scikit-learn's digits)",
        description="Train as the config says. KEY=VALUE overrides any config key, e.g. "
        "optim.lr=1e-3 train.epochs=5. `trainwell train --help-config` lists the keys.",
    )
    add_config(train)
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
    add_debug(train)
    add_launcher(train)
    add_overrides(train)
    train.set_defaults(handler=_train)


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
    if wants_launcher(args):
        return _launch(args, cfg)
    from trainwell.engine.fit import fit

    result = fit(cfg, resume=args.resume, dry_run=args.dry_run)
    # doctor.overfit_batch=true is a check: a failed one exits 1, so scripts can gate on it.
    # Workers under a launcher exit 0 (torchrun would report a crash); _launch says it.
    worker = int(os.environ.get("WORLD_SIZE", "1")) > 1
    failed = _overfit_failed(result.summary)
    if worker:
        # An FSDP model holds its process group: it goes now, not during the interpreter's
        # exit, where gloo's threads may abort the worker (see placement.teardown).
        del result
        gc.collect()
    return 1 if failed and not worker else 0


def _overfit_failed(summary: dict) -> bool:
    overfit = summary.get("overfit")
    return overfit is not None and not overfit["passed"]


def _launch(args: argparse.Namespace, cfg: Config) -> int:
    from trainwell.engine.distributed.launch import launch
    from trainwell.engine.run.launch_run_dir import claim_run_dir, settle_failed_launch
    from trainwell.engine.run_dir.directory import default_name, new_run_path

    opts = launch_options(args)
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
