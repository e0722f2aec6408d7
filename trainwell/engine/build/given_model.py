"""What ``fit(model=obj)`` keeps with the run about the model: the proven record of
:mod:`trainwell.engine.build.model_record` (or why there is none) and, when the data was passed
in too, the model's inputs for the first two samples, so that ``trainwell export`` can
trace and check the model and ``predict`` knows its inputs.

Every checkpoint holds it under ``"model_record"`` (loadable with ``weights_only=True``)::

    {"class": "pkg.mod.Net", "record": {"target": "pkg.mod:Net", "kwargs": {...}} | None,
     "reason": None | "why not", "data_given": bool,
     "example_inputs": ((tensor, ...), {}) | None, "example_labels": tensor | None}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from trainwell.engine.build.model_record import describe

# The checkpoint key of what fit() learned about a model passed in (see record_given).
CHECKPOINT_KEY = "model_record"


@contextlib.contextmanager
def first_call(model: nn.Module) -> Iterator[list[tuple[tuple, dict]]]:
    """Inside: the ``(args, kwargs)`` of ``model``'s first forward call are appended to
    the list yielded (detached copies, on the CPU). The dry step runs inside, so no step
    of the user's runs once more for it (a stateful metric would count it)."""
    seen: list[tuple[tuple, dict]] = []

    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not seen:
            seen.append(
                (tuple(_copied(a) for a in args), {k: _copied(v) for k, v in kwargs.items()})
            )

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        # The dry step may run under inference_mode: a clone outside it is a normal tensor.
        with torch.inference_mode(False):
            return value.detach().cpu().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value) if type(value) in (list, tuple) else value
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def labels_of(batch: Any) -> torch.Tensor | None:
    """The targets of a batch, as export reads them (a pair's second, a dict's labels)."""
    found: Any = None
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        found = batch[1]
    elif isinstance(batch, dict):
        keys = ("labels", "label", "targets", "target", "y")
        found = next((batch[k] for k in keys if k in batch), None)
    return found.detach().cpu() if isinstance(found, torch.Tensor) else None


def record_given(
    model: nn.Module, example: tuple[tuple, dict] | None, labels: Any, data_given: bool
) -> dict[str, Any]:
    """What a checkpoint keeps about a model passed to ``fit(model=obj)``: the class, the
    proven record or the reason there is none, and (data passed in too, so the config's
    data is not the run's) the model's inputs for the dry step's two samples, which
    export traces and checks with and predict reads the input spec from."""
    found = describe(model, example)
    return {
        "class": found.cls_name,
        "record": found.record,
        "reason": found.reason,
        "data_given": data_given,
        "example_inputs": example if data_given else None,
        "example_labels": labels if data_given else None,
    }


def record_of(parts: Any, given: Any) -> dict[str, Any] | None:
    """:func:`record_given` for ``fit``'s parts and what it was given (``None`` when the
    model came from the config, which rebuilds it). Called before any wrapping."""
    if given.model is None:
        return None
    task = parts.task
    return record_given(parts.model, task.example, task.example_labels,
                        given.train_data is not None)  # fmt: skip


def attach(record: dict[str, Any] | None, extra: dict[str, Any], console: Any) -> None:
    """Put ``record`` into every checkpoint (``extra``), and say at the run's start, on
    ``console`` (``None``: a dry run, silent), when export/predict cannot use it."""
    if record is None:
        return
    extra[CHECKPOINT_KEY] = record
    line = start_line(record)
    if line is not None and console is not None:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def start_line(entry: dict[str, Any]) -> str | None:
    """The run's one line at its start when ``trainwell export``/``predict`` will not be
    able to rebuild the model (``None`` when they will)."""
    if entry.get("record") is not None:
        return None
    return (f"note: the model passed to fit() cannot be rebuilt by `trainwell export` / "
            f"`trainwell predict`: {entry['reason']}. Load it in Python: "
            f"{load_hint(entry)}")  # fmt: skip


def load_hint(entry: dict[str, Any], run: str = "RUN") -> str:
    """``trainwell.load_model("RUN", model=Cls(...))``: the Python way back."""
    short = str(entry.get("class", "MyModel")).rpartition(".")[2] or "MyModel"
    return f"trainwell.load_model({run!r}, model={short}(...))"
