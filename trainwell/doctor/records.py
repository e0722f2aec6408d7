"""What the doctor keeps of a training forward for the explanations that look back at it
(a NaN's origin replays it, a crash names a state carried into it)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwell.doctor.sites import Site, is_user_file, line_of, user_frame

_UNREAD = object()

class ForwardRecord:
    """A training forward of the current step, kept for the explanations that look back
    at it (a NaN's origin replays it, a crash names a state carried into it): the model,
    its inputs as given, the autocast state, the step it ran in and the calling line.

    The inputs are held until the next step's first forward: the step itself holds them
    about that long, and a replay needs them as they were.
    """

    __slots__ = ("steps", "module", "args", "kwargs", "autocast", "inputs", "code", "lasti",
                 "globals", "_site")  # fmt: skip

    def __init__(self, steps: int, module: nn.Module, args: tuple, kwargs: dict, frame: Any):
        self.steps = steps
        self.module, self.args, self.kwargs = module, args, kwargs
        # Read now: the state is the caller's, gone once the forward returns.
        self.autocast = _autocast_state() if _any_autocast() else None
        # (position, sequence number of its graph node) of the inputs with a graph, read
        # now: an in-place op on an input later would change its node.
        first = args[0] if len(args) == 1 else None
        if isinstance(first, torch.Tensor):  # model(x): the common case, inline
            fn = first.grad_fn
            self.inputs = [(0, fn._sequence_nr())] if fn is not None else _NO_INPUTS
        else:
            self.inputs = _graph_inputs(args)
        # The calling instruction; its line is looked up only when asked.
        self.code, self.lasti = frame.f_code, frame.f_lasti
        # The caller's module variables: a step function's, scanned for kept tensors when
        # the engine (not the user's frames) runs the step.
        self.globals = frame.f_globals
        # The user's line: the caller's when it is the user's (the common case), else
        # found now by walking out of the library (the frames go away).
        user = is_user_file(self.code.co_filename)
        self._site: Any = _UNREAD if user else Site.of(user_frame(start=frame))

    @property
    def file(self) -> str:
        return self.code.co_filename

    @property
    def line(self) -> int:
        return line_of(self.code, self.lasti)

    @property
    def site(self) -> Site | None:
        """The user's line that ran this forward (through library code, if any)."""
        return Site(self.file, self.line) if self._site is _UNREAD else self._site

    def autocast_for(self, device_type: str) -> tuple[str, Any] | None:
        """(device type, dtype) of the autocast the forward ran under on that device."""
        return next((a for a in self.autocast or () if a[0] == device_type), None)


_NO_INPUTS: list[tuple[int, int]] = []  # shared, never changed


def _graph_inputs(args: tuple) -> list[tuple[int, int]]:
    found = []
    for i, a in enumerate(args[:4]):
        if isinstance(a, torch.Tensor):
            if a.grad_fn is not None:
                found.append((i, a.grad_fn._sequence_nr()))
        elif isinstance(a, (tuple, list)) and a:
            # An LSTM's (h, c); a stacked model's list of per-layer (h, c) tuples.
            flat = [t for v in a[:4] for t in (v[:4] if isinstance(v, (tuple, list)) else (v,))]
            if all(isinstance(t, torch.Tensor) for t in flat):
                found += [(i, t.grad_fn._sequence_nr()) for t in flat if t.grad_fn is not None]
    return found


# One C call says whether any autocast is on; the per-device state is read only then.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
_AUTOCAST_DEVICES = ("cuda", "cpu", "xpu", "mps", "hpu")


def _autocast_state() -> tuple[tuple[str, Any], ...]:
    state = []
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                state.append((device, torch.get_autocast_dtype(device)))
        except (RuntimeError, TypeError):  # a device type this torch's autocast lacks
            continue
    return tuple(state)
