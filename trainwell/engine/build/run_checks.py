"""Config errors found before a run writes anything, and before a launcher starts workers.

Some settings could only fail late: the MLflow store when its logger starts (after the
run folder was made, leaving a ``failed`` run that blocks the corrected rerun), a file
where ``tensorboard/`` goes, a global batch that does not split across ``--nproc``
processes (found by each worker, each printing it among the launcher's noise). They are
checked here from the config alone, in a second or less: by ``fit`` before the run
folder is opened, and by ``trainwell train --nproc N`` before any worker starts.
"""

from __future__ import annotations

from pathlib import Path

from trainwell.config import Config
from trainwell.engine.distributed.placement import Placement, broadcast_object
from trainwell.errors import UserError
from trainwell.loggers.tracking_uri import check_tracking_uri


def check_run_config(cfg: Config, world_size: int = 1, probe: bool = True) -> None:
    """Refuse, with one line, what the run would refuse only after it started.

    ``probe=False`` skips the network (a tracking server's reachability): the ranks that
    log nothing need not ask.

    Example:
        >>> from trainwell.config import load_config
        >>> check_run_config(load_config(overrides=["data.batch_size=30"]), world_size=4)
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: data.batch_size: 30 does not split into 4 processes x ...
    """
    log = cfg.log
    if log.mlflow and probe:
        check_tracking_uri(log.mlflow_uri)
    if log.tensorboard and cfg.run.dir:
        folder = Path(cfg.run.dir) / "tensorboard"
        if folder.exists() and not folder.is_dir():
            raise UserError(
                f"log.tensorboard: {folder} is a file, where the run's TensorBoard folder "
                "goes; move it away, or choose another run.dir"
            )
    accum = cfg.train.grad_accum_steps
    if world_size > 1 and not cfg.data.batch_sampler and cfg.data.batch_size % (world_size * accum):
        raise UserError(
            f"data.batch_size: {cfg.data.batch_size} does not split into {world_size} "
            f"processes x {accum} accumulation steps; make it a multiple of "
            f"{world_size * accum}"
        )


def check_on_every_rank(cfg: Config, place: Placement) -> None:
    """:func:`check_run_config` in a run's processes: rank 0 probes the network, and a
    refusal reaches every rank (none is left waiting in a collective)."""
    error = None
    try:
        check_run_config(cfg, place.world_size, probe=place.is_main)
    except UserError as exc:
        error = str(exc)
    error = broadcast_object(error, place)
    if error:
        raise UserError(error)
