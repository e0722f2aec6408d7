"""``trainwell.load_model``: a trained model back in Python, from any run or checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torch import nn

from trainwell.errors import UserError


def load_model(
    source: str | Path, model: nn.Module | type | Callable[[], nn.Module] | None = None
) -> nn.Module:
    """The trained model of a run directory or checkpoint, on the CPU, in eval mode.

    Args:
        source: a run directory (its ``checkpoints/best.pt``, else ``last.pt``), a
            checkpoint file, or a sharded ``dist.strategy=fsdp`` checkpoint folder
            (consolidated in memory, as ``trainwell export`` does).
        model: where the weights go. ``None``: the model is rebuilt as the run recorded
            it (the config's ``model.name``, or the class and arguments ``fit(model=obj)``
            recorded). An ``nn.Module``: that object takes the weights (the way back for a
            model ``fit`` could not record, such as a class defined in ``__main__``). A
            class or a factory function: called with no arguments (bind them with
            ``functools.partial``), and the module it returns takes the weights.

    The checkpoint loads with ``torch.load(weights_only=True)``; weights saved from a
    compiled or DDP-wrapped model load into the plain module. Bad input is one
    :class:`~trainwell.errors.UserError` line: no checkpoint, weights that do not fit the
    model (missing and unexpected keys named), a run whose model cannot be rebuilt and no
    ``model`` given (the reason, and this call to make).

    Example:
        >>> import trainwell
        >>> net = trainwell.load_model("runs/my-run")  # doctest: +SKIP
        >>> net = trainwell.load_model("runs/my-run", model=MyNet(hidden=64))  # doctest: +SKIP
        >>> net.training  # doctest: +SKIP
        False
    """
    from trainwell.export.source import read_checkpoint, rebuild, resolve_checkpoint

    given = _module_of(model)
    path = resolve_checkpoint(source)
    return rebuild(path, read_checkpoint(path), given).model


def _module_of(model: object) -> nn.Module | None:
    if model is None or isinstance(model, nn.Module):
        return model
    if not callable(model):
        raise UserError(f"load_model: model= is a {type(model).__name__}; give an nn.Module, "
                        "a class or a factory function")  # fmt: skip
    built = model()
    if not isinstance(built, nn.Module):
        raise UserError(f"load_model: model={getattr(model, '__name__', model)!r} returned a "
                        f"{type(built).__name__}, not an nn.Module")  # fmt: skip
    return built
