"""Built-in models and the model config.

``model.name`` is a built-in name (``simple_cnn``, ``mlp``) or an import path
``package.module:attr`` to any callable returning an ``nn.Module``; ``model.kwargs`` are
passed to it. ``num_classes`` and ``input_shape`` come from the data when the callable
accepts them and ``model.kwargs`` does not set them.

Example:
    >>> import torch
    >>> net = build_model(ModelConfig(name="mlp"), num_classes=10, input_shape=(1, 8, 8))
    >>> net(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from trainwell._options import check, check_int, check_number, option
from trainwell.errors import UserError
from trainwell.imports import call_with, is_import_path, resolve


def simple_cnn(
    num_classes: int = 10,
    input_shape: Sequence[int] = (1, 28, 28),
    channels: Sequence[int] = (32, 64),
    hidden: int = 128,
    dropout: float = 0.25,
) -> nn.Module:
    """Two conv blocks (conv, batch norm, ReLU, 2x2 max-pool) then two linear layers.

    The classic Fashion-MNIST recipe; on the 8x8 digits it reaches about 99% accuracy.

    Example:
        >>> simple_cnn(10, (1, 8, 8))[0]
        Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
    """
    if len(input_shape) != 3:
        raise UserError(f"simple_cnn needs images shaped (C, H, W); the data gives {input_shape}")
    check(
        isinstance(channels, Sequence) and not isinstance(channels, str) and len(channels) == 2,
        "model.kwargs.channels",
        f"simple_cnn takes two conv widths, e.g. [32, 64]; got {channels!r}",
    )
    _check_widths(channels, "model.kwargs.channels")
    _check_widths([hidden], "model.kwargs.hidden")
    _check_head(num_classes, dropout)
    c_in, h, w = input_shape
    c1, c2 = channels
    # Two 2x2 pools with floor division, as nn.MaxPool2d does.
    flat = c2 * (h // 4) * (w // 4)
    if flat == 0:
        raise UserError(f"simple_cnn needs images of at least 4x4; the data gives {h}x{w}")
    return nn.Sequential(
        nn.Conv2d(c_in, c1, 3, padding=1),
        nn.BatchNorm2d(c1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1),
        nn.BatchNorm2d(c2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, num_classes),
    )


def mlp(
    num_classes: int = 10,
    input_shape: Sequence[int] = (784,),
    hidden: Sequence[int] = (256, 128),
    dropout: float = 0.1,
) -> nn.Module:
    """A multilayer perceptron over the flattened input.

    Example:
        >>> mlp(10, (1, 8, 8), hidden=(32,))[1]
        Linear(in_features=64, out_features=32, bias=True)
    """
    check(
        isinstance(hidden, Sequence) and not isinstance(hidden, str),
        "model.kwargs.hidden",
        f"mlp takes a list of layer widths, e.g. [256, 128]; got {hidden!r}",
    )
    _check_widths(hidden, "model.kwargs.hidden")
    _check_head(num_classes, dropout)
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


# A layer wider than this is a typo for a built-in model (a 2**20-wide linear layer over
# as many inputs is 4 TiB of weights); zero or negative widths fail inside torch.
MAX_WIDTH = 2**20


def _check_widths(widths: Sequence[Any], key: str) -> None:
    for width in widths:
        check_int(width, key, high=MAX_WIDTH)


def _check_head(num_classes: Any, dropout: Any) -> None:
    # num_classes comes from model.kwargs or, when not set there, from the data.
    check_int(num_classes, "num_classes (model.kwargs or the data's)", high=MAX_WIDTH)
    check_number(dropout, "model.kwargs.dropout", 0, 1, high_open=True)


BUILTIN_MODELS = {"simple_cnn": simple_cnn, "mlp": mlp}


@dataclass
class ModelConfig:
    """Which model to train."""

    name: str = option(
        "simple_cnn",
        "built-in model (simple_cnn, mlp) or import path 'package.module:attr' of a callable "
        "returning an nn.Module",
    )
    kwargs: dict[str, Any] = option({}, "keyword arguments for the model's callable")
    channels_last: bool = option(
        False, "keep conv weights and 4-D inputs in channels_last memory format (faster "
        "convolutions under AMP on tensor cores)"
    )
    activation_checkpointing: Any = option(
        False,
        "recompute activations in backward to save memory: true (the children of the "
        "largest ModuleList/Sequential) or a list of module names",
    )

    def __post_init__(self) -> None:
        ac = self.activation_checkpointing
        check(
            isinstance(ac, bool) or (isinstance(ac, list) and all(isinstance(n, str) for n in ac)),
            "model.activation_checkpointing",
            f"expected true, false or a list of module names, got {ac!r}",
        )
        check(
            self.name in BUILTIN_MODELS or is_import_path(self.name),
            "model.name",
            f"unknown model {self.name!r}; built-in: {', '.join(BUILTIN_MODELS)}, "
            "or an import path 'package.module:attr'",
        )


def build_model(cfg: ModelConfig, num_classes: int | None, input_shape: Sequence[int]) -> nn.Module:
    """Build the configured model, giving it ``num_classes`` / ``input_shape`` if it takes them."""
    factory = BUILTIN_MODELS.get(cfg.name) or resolve(cfg.name, "model.name")
    injectable: dict[str, Any] = {"input_shape": tuple(input_shape)}
    if num_classes is not None:
        injectable["num_classes"] = num_classes
    model = call_with(factory, dict(cfg.kwargs), injectable, "model.kwargs")
    if not isinstance(model, nn.Module):
        raise UserError(
            f"model.name: {cfg.name!r} returned {type(model).__name__}, not an nn.Module"
        )
    return model
