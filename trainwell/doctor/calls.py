"""Wrappers around the torch calls that say how a script trains rather than what a step
does: ``nn.DataParallel(...)``, ``torch.save``, anomaly mode switched on or off (sent as
``on_call``), and gradient clipping (``on_clip``, the only one of them made every step).

Each wrapper is one Python call around the original and sends a :class:`CallEvent`;
:func:`call_patches` lists them for :func:`trainwell.doctor.patches.replacements`. While
no probe listens to its event a wrapper is off torch.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import CallEvent


def _data_parallel(doctor: Any) -> Any:
    init = nn.DataParallel.__init__

    @functools.wraps(init)
    def data_parallel_created(wrapper, *args, **kwargs):
        init(wrapper, *args, **kwargs)
        if doctor._handlers["on_call"]:
            doctor._dispatch("on_call", CallEvent("DataParallel", (wrapper,), {},
                                                  sys._getframe(1)))  # fmt: skip

    return data_parallel_created


def _save(doctor: Any) -> Any:
    save = torch.save

    @functools.wraps(save)
    def torch_save(*args, **kwargs):
        if doctor._handlers["on_call"]:
            doctor._dispatch("on_call", CallEvent("save", args, kwargs, sys._getframe(1)))
        return save(*args, **kwargs)

    return torch_save


def _anomaly(doctor: Any) -> Any:
    # torch.autograd.set_detect_anomaly and detect_anomaly both switch the mode through
    # this one function (on entering and on leaving): one wrapper sees every form.
    set_enabled = torch.set_anomaly_enabled

    @functools.wraps(set_enabled)
    def set_anomaly_enabled(*args, **kwargs):
        result = set_enabled(*args, **kwargs)
        if doctor._handlers["on_call"]:
            event = CallEvent("set_anomaly_enabled", args, kwargs, sys._getframe(1))
            doctor._dispatch("on_call", event)
        return result

    return set_anomaly_enabled


def _clip(doctor: Any, name: str, original: Any) -> Any:
    @functools.wraps(original)
    def clip(parameters, *args, **kwargs):
        if doctor._handlers["on_clip"]:
            # A generator of parameters can be read once: read it here, give the list on.
            if isinstance(parameters, torch.Tensor):
                tensors = [parameters]
            else:
                parameters = tensors = list(parameters)
            doctor._dispatch("on_clip", CallEvent(name, (tensors,), kwargs, sys._getframe(1)))
        return original(parameters, *args, **kwargs)

    return clip


def call_patches(doctor: Any) -> Iterator[tuple[Any, str, Any, tuple[str, ...]]]:
    """(owner, attribute, wrapper, events) for each call wrapped here."""
    from torch.nn.utils import clip_grad

    yield nn.DataParallel, "__init__", _data_parallel(doctor), ("on_call",)
    yield torch, "save", _save(doctor), ("on_call",)
    yield torch, "set_anomaly_enabled", _anomaly(doctor), ("on_call",)
    # ``torch.nn.utils.clip_grad_norm_`` and ``torch.nn.utils.clip_grad.clip_grad_norm_``
    # are two names of one function; a script may import either.
    for owner in (torch.nn.utils, clip_grad):
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            yield owner, name, _clip(doctor, name, owner.__dict__[name]), ("on_clip",)
