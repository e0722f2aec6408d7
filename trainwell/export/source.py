"""What a checkpoint's own config builds again, without training: the data, the step
functions and the model with the checkpoint's weights.

The model comes from ``model.name`` (a built-in or an import path) and, like the engine
builds it, takes ``num_classes`` and ``input_shape`` from the data; for a user task the
step function says how a batch reaches the model (see :mod:`trainwell.export.batches`).
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainwell.config import Config
from trainwell.data import DataSplits, build_collate, build_data
from trainwell.engine.build.parts import Given, build_steps
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.checkpointing.sharded import consolidate, is_folder
from trainwell.engine.loading.batch import collate_for
from trainwell.engine.step.step_fn import Steps, ignore_index_of
from trainwell.errors import UserError
from trainwell.models import build_model

CPU = torch.device("cpu")


@dataclass
class RunParts:
    """The data side of a run: its config, steps, splits and collate function."""

    cfg: Config
    steps: Steps
    # None for a run whose data was passed to fit(): the config's data is not the run's.
    splits: DataSplits | None
    collate: Callable[[list], Any] | None


@dataclass
class Loaded:
    """A checkpoint with its model rebuilt: eval mode, on the CPU, weights loaded.

    ``examples`` are the model's inputs for a run's first samples, recorded when its data
    was passed to ``fit()`` (the config's data is not the run's then): ``(args, kwargs)``.
    """

    path: Path
    state: dict[str, Any]
    parts: RunParts
    model: nn.Module
    examples: tuple[tuple, dict] | None = None

    @property
    def step(self) -> int | None:
        step = self.state.get("step")
        if isinstance(step, torch.Tensor) and step.numel() == 1:
            return int(step.item())
        return step if isinstance(step, int) else None


def resolve_checkpoint(source: str | Path) -> Path:
    """The checkpoint behind ``source``: the file (or sharded folder) itself, or a run's
    best/last.

    Example:
        >>> resolve_checkpoint("no/such/run")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: no/such/run does not exist (give a run directory or ...)
    """
    source = Path(source)
    if source.is_dir() and not is_folder(source):
        for name in ("best.pt", "best", "last.pt", "last"):
            path = source / "checkpoints" / name
            if path.is_file() or is_folder(path):
                return path
        raise UserError(f"{source} holds no checkpoints/best.pt or checkpoints/last.pt "
                        "(nor sharded best/ or last/)")  # fmt: skip
    if not source.exists():
        raise UserError(f"{source} does not exist (give a run directory or a checkpoint)")
    return source


def config_from(raw: Any, where: str) -> Config:
    """The :class:`Config` of a checkpoint's (or an artifact's) ``config`` dict.

    Raises :class:`UserError` naming ``where`` when there is none or it does not load.
    """
    from omegaconf import OmegaConf

    if not isinstance(raw, dict) or not isinstance(raw.get("model"), dict):
        raise UserError(
            f"{where} holds no trainwell run config, so its model cannot be rebuilt (only "
            "--format safetensors exports weights alone)"
        )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(raw))
        cfg = typing.cast(Config, OmegaConf.to_object(merged))
    except Exception as exc:  # OmegaConf's many error types, and the configs' own checks
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{where}: its run config does not load ({first})") from None
    # Export and predict read the data in this process: workers would only cost start-up.
    cfg.data.num_workers = 0
    return cfg


def build_run_parts(cfg: Config) -> RunParts:
    """Steps, data splits and collate as training builds them (no model, no seeding).

    Example:
        >>> from trainwell.config import load_config
        >>> parts = build_run_parts(load_config(overrides=["data.name=synthetic"]))
        >>> parts.splits.num_classes, parts.steps.default
        (10, True)
    """
    with _user_code(cfg):
        steps = build_steps(cfg, Given(), CPU)
        splits = build_data(cfg.data, steps.default, ignore_index_of(steps.loss_fn))
        collate = build_collate(cfg.data.collate)
    return RunParts(cfg, steps, splits, collate or collate_for(splits.sample))


def load_model(source: str | Path) -> Loaded:
    """Rebuild the model of a run directory or checkpoint from its config, with its weights.

    The checkpoint loads with ``weights_only=True``. One-line :class:`UserError` for a
    missing, corrupt or foreign checkpoint, model code that no longer imports, and weights
    that do not fit the model the config builds.

    Example:
        >>> loaded = load_model("runs/my-run")  # doctest: +SKIP
        >>> loaded.model.training  # doctest: +SKIP
        False
    """
    path = resolve_checkpoint(source)
    return rebuild(path, read_checkpoint(path))


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's state: a ``.pt`` file, or a sharded folder (``dist.strategy=fsdp``)
    consolidated in memory, its model a full state_dict."""
    return consolidate(path) if path.is_dir() else load_checkpoint(path)


def rebuild(path: Path, state: dict[str, Any], model: nn.Module | None = None) -> Loaded:
    """:func:`load_model` for a checkpoint already loaded (``state``) from ``path``; a
    ``model`` given takes the weights instead of one rebuilt."""
    cfg = config_from(state.get("config"), f"checkpoint {path}")
    given = given_model(state)
    if given is not None and given.get("data_given"):
        with _user_code(cfg):
            parts = RunParts(cfg, build_steps(cfg, Given(), CPU), None, None)
    else:
        parts = build_run_parts(cfg)
    name, passed = cfg.model.name, model is not None
    if model is None and given is not None:
        model, name = model_from_record(given, path), given["class"]
    elif model is None:
        assert parts.splits is not None, "a config-built model trained on the config's data"
        with _user_code(cfg):
            model = build_model(cfg.model, parts.splits.num_classes,
                                parts.splits.input_shape or ())  # fmt: skip
    elif given is not None:
        name = given["class"]
    _load_weights(model, state["model"], path, name, passed)
    examples = given.get("example_inputs") if given is not None else None
    return Loaded(path, state, parts, model.to(CPU).eval(), examples)


def given_model(state: dict[str, Any]) -> dict[str, Any] | None:
    """What ``fit(model=obj)`` recorded about the model, if it was passed in."""
    from trainwell.engine.build.given_model import CHECKPOINT_KEY

    found = state.get(CHECKPOINT_KEY)
    return found if isinstance(found, dict) and "class" in found else None


def model_from_record(given: dict[str, Any], path: Path) -> nn.Module:
    """The model a ``fit(model=obj)`` run recorded, or one line saying why there is none
    and the Python way to load it."""
    from trainwell.engine.build.given_model import load_hint
    from trainwell.engine.build.model_record import rebuild

    run = _run_of(path)
    if given.get("record") is None:
        raise UserError(
            f"{run}: the model was passed to fit() and cannot be rebuilt from the run: "
            f"{given.get('reason')}. Load it in Python: {load_hint(given, run)}"
        )
    try:
        return rebuild(given["record"])
    except UserError as exc:
        raise UserError(f"{run}: the run's model code no longer rebuilds ({exc}); load it "
                        f"in Python: {load_hint(given, run)}") from None  # fmt: skip


def _run_of(path: Path) -> str:
    """The run directory of a checkpoint (the checkpoint itself when not in one)."""
    return str(path.parent.parent if path.parent.name == "checkpoints" else path)


@contextlib.contextmanager
def _user_code(cfg: Config) -> Iterator[None]:
    """Turns a run's own code failing at import time (deleted, moved, broken) into one line."""
    try:
        yield
    except (ImportError, SyntaxError) as exc:
        raise UserError(
            f"the run's code no longer imports (model.name={cfg.model.name!r}, "
            f"data.name={cfg.data.name!r}): {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    except UserError as exc:
        # resolve() says which key and module; say that it is the run's code that moved.
        moved = "cannot import module" in str(exc) or "has no attribute" in str(exc)
        what = "the run's code no longer imports" if moved else "cannot rebuild the run"
        raise UserError(f"{what}: {exc}") from None


def _load_weights(
    model: nn.Module, weights: Any, path: Path, name: str, passed: bool = False
) -> None:
    if not isinstance(weights, dict):
        raise UserError(
            f"checkpoint {path}: 'model' is a {type(weights).__name__}, not a state_dict"
        )
    weights = _unwrapped(weights)
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, AttributeError) as exc:
        detail = _mismatch(model.state_dict(), weights) or _first_line(exc)
        if passed:
            raise UserError(f"checkpoint {path}: its weights do not fit the model given "
                            f"({type(model).__name__}: {detail}); build it with the "
                            "arguments it was trained with") from None  # fmt: skip
        raise UserError(
            f"checkpoint {path}: its weights do not fit the model {name!r} builds ({detail}); "
            "the model code changed since training, the file is from another model, or the "
            "run trained a model passed to fit(model=...) before trainwell recorded it: load "
            f"it in Python with trainwell.load_model({_run_of(path)!r}, model=...)"
        ) from None


def _mismatch(mine: dict[str, Any], weights: dict[str, Any]) -> str:
    missing = sorted(set(mine) - set(weights))
    extra = sorted(set(weights) - set(mine))
    if missing or extra:
        return f"{len(missing)} missing (e.g. {missing[:2]}), {len(extra)} unexpected"
    for key, value in mine.items():
        theirs = weights[key]
        if isinstance(value, torch.Tensor) and isinstance(theirs, torch.Tensor) \
                and value.shape != theirs.shape:
            return (f"{key} is {tuple(theirs.shape)} in the checkpoint, {tuple(value.shape)} "
                    "in the model")  # fmt: skip
    return ""


def _unwrapped(weights: dict[str, Any]) -> dict[str, Any]:
    # A state_dict saved from a compiled or DDP-wrapped model carries the wrapper's prefix.
    for prefix in ("_orig_mod.", "module."):
        if weights and all(isinstance(k, str) and k.startswith(prefix) for k in weights):
            weights = {k[len(prefix) :]: v for k, v in weights.items()}
    return weights


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
