"""What ``fit(model=obj)`` keeps with the run about the model: the proven record of
:mod:`trainwell.engine.model_record` (or why there is none) and, when the data was passed
in too, the model's inputs for the first two samples, so that ``trainwell export`` can
trace and check the model and ``predict`` knows its inputs.

Every checkpoint holds it under ``"model_record"`` (loadable with ``weights_only=True``)::

    {"class": "pkg.mod.Net", "record": {"target": "pkg.mod:Net", "kwargs": {...}} | None,
     "reason": None | "why not", "data_given": bool,
     "example_inputs": ((tensor, ...), {}) | None, "example_labels": tensor | None}
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwell.engine.model_record import describe

# The checkpoint key of what fit() learned about a model passed in (see record_given).
CHECKPOINT_KEY = "model_record"


class _Captured(Exception):
    """Raised by the forward pre-hook once the step has called the model."""


def capture_inputs(model: nn.Module, step: Any, batch: Any) -> tuple[tuple, dict] | None:
    """``(args, kwargs)`` the step passes to ``model`` for ``batch`` (detached, on the
    CPU), found by stopping the step at the model's forward; ``None`` if it never calls it."""
    seen: list[tuple[tuple, dict]] = []

    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        seen.append((args, kwargs))
        raise _Captured

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            step(model, batch)
    except _Captured:
        pass
    except Exception:  # noqa: BLE001 - the dry step reports the step's own errors
        return None
    finally:
        handle.remove()
    if not seen:
        return None
    from trainwell.engine.batch import to_device

    args, kwargs = seen[0]
    detached = to_device((args, kwargs), torch.device("cpu"))
    return tuple(detached[0]), dict(detached[1])


def record_given(
    model: nn.Module, eval_step: Any, train_data: Any, collate: Any, data_given: bool
) -> dict[str, Any]:
    """What a checkpoint keeps about a model passed to ``fit(model=obj)``: the class, the
    proven record or the reason there is none, and (data passed in too, so the config's
    data is not the run's) the model's inputs for the first two samples, which export
    traces and checks with and predict reads the input spec from."""
    from trainwell.engine.loaders import first_samples

    example, labels = None, None
    try:
        batch = first_samples(train_data, 2, collate)
        example = capture_inputs(model, eval_step, batch)
        labels = _labels(batch)
    except Exception:  # noqa: BLE001 - the dry step already reported a data set that fails
        example = None
    found = describe(model, example)
    return {
        "class": found.cls_name,
        "record": found.record,
        "reason": found.reason,
        "data_given": data_given,
        "example_inputs": example if data_given else None,
        "example_labels": labels if data_given else None,
    }


def _labels(batch: Any) -> torch.Tensor | None:
    """The targets of a batch, as export reads them (a pair's second, a dict's labels)."""
    found: Any = None
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        found = batch[1]
    elif isinstance(batch, dict):
        keys = ("labels", "label", "targets", "target", "y")
        found = next((batch[k] for k in keys if k in batch), None)
    return found.detach().cpu() if isinstance(found, torch.Tensor) else None


def record_of(parts: Any, given: Any) -> dict[str, Any] | None:
    """:func:`record_given` for ``fit``'s parts and what it was given (``None`` when the
    model came from the config, which rebuilds it). Called before any wrapping."""
    if given.model is None:
        return None
    return record_given(parts.model, parts.steps.eval, parts.splits.train,
                        parts.loaders.collate, given.train_data is not None)  # fmt: skip


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
