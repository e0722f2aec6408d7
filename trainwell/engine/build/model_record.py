"""How to rebuild a model passed to ``fit(model=obj)``: its class's import path and its
constructor's arguments, as Lightning's ``save_hyperparameters`` keeps them.

The arguments are read back from the object, not captured when it was made: for each
parameter of ``type(obj).__init__``, the attribute of the same name (``self.hidden``,
else ``self._hidden``, else Lightning's ``self.hparams["hidden"]``); a parameter with no
such attribute takes its default. An argument that is a module is recorded the same way
(``Wrapper(backbone=nn.Linear(4, 8))``), ``nn.Sequential`` / ``nn.ModuleList`` /
``nn.ModuleDict`` by their children, and torch's layers by the attributes they keep
(``nn.Linear(in_features, out_features, bias)``), so a model a factory function built,
or an ``nn.Sequential`` written inline, is recorded too.

A record is only kept once it is proven: the model is rebuilt from it (on the meta device:
no memory, any size) and its state_dict must have the same keys, shapes and dtypes; on a
small model the rebuilt one, given the trained weights, must also compute the same
outputs on the run's first samples. A record that fails either test is never written;
the run says at its start why the model cannot be rebuilt, and ``trainwell.load_model(run,
model=...)`` is the way back.

Limits: state set after ``__init__`` that does not live in the state_dict (an attribute
changed by hand) is not seen by the shape test, and only by the output test when it
changes the outputs; arguments must be plain values (None, bools, numbers, strings,
lists, tuples, dicts of them) or recordable modules; ``*args`` are recorded only for
torch's containers (and ignored for torch's layers that take and drop them, nn.Tanh).

Example:
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> record = describe(net).record
    >>> record["target"], record["args"][0]["__module__"]["target"]
    ('torch.nn.modules.container:Sequential', 'torch.nn.modules.linear:Linear')
    >>> rebuild(record)[2]
    Linear(in_features=8, out_features=2, bias=True)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainwell.errors import UserError

# The key marking a recorded module among a record's arguments.
MODULE_KEY = "__module__"
# Above this many parameters the output test is skipped (it copies the weights once); the
# shape test on the meta device costs nothing at any size.
OUTPUT_TEST_MAX_PARAMS = 50_000_000
_PLAIN = (type(None), bool, int, float, str)
# The parameters of the record being made that were not found and took their default
# (named in the message when the record fails its tests).
_DEFAULTED: list[str] = []


class NotRecordable(Exception):
    """Why a model's constructor call cannot be recovered (one line)."""


@dataclass
class Described:
    """:func:`describe`'s answer: a proven ``record``, or the ``reason`` there is none."""

    cls_name: str
    record: dict[str, Any] | None = None
    reason: str | None = None


def describe(model: nn.Module, example: tuple[tuple, dict] | None = None) -> Described:
    """The record that rebuilds ``model``, proven by rebuilding it, or why there is none.

    ``example`` is ``(args, kwargs)`` of one forward call (the run's first samples), for
    the output test. The global RNGs are left as they were.
    """
    name = _class_path(type(model), dotted=True)
    _DEFAULTED.clear()
    try:
        with torch.random.fork_rng(devices=[]):
            record = _record(model, "the model")
            _check_same_weights(model, record)
            if example is not None:
                _check_same_outputs(model, record, example)
    except NotRecordable as exc:
        return Described(name, reason=str(exc))
    return Described(name, record=record)


def rebuild(record: dict[str, Any]) -> nn.Module:
    """The module a record describes, freshly initialised (load the weights after).

    Raises :class:`UserError` (one line) when its code no longer imports or refuses the
    recorded arguments.
    """
    target = record["target"]
    cls = _import(target)
    args = [_value(a) for a in record.get("args", [])]
    kwargs = {k: _value(v) for k, v in record.get("kwargs", {}).items()}
    try:
        model = cls(*args, **kwargs)
    except Exception as exc:  # the user's constructor: any error is theirs to read
        raise UserError(f"rebuilding {target} from its recorded arguments failed: "
                        f"{type(exc).__name__}: {_first_line(exc)}") from None  # fmt: skip
    if not isinstance(model, nn.Module):
        raise UserError(f"{target} built a {type(model).__name__}, not an nn.Module")
    return model


def _record(module: nn.Module, where: str) -> dict[str, Any]:
    cls = type(module)
    _check_importable(cls, where)
    if isinstance(module, nn.Sequential) and cls is nn.Sequential:
        children = [{MODULE_KEY: _record(m, f"{where}[{i}]")} for i, m in enumerate(module)]
        return {"target": _class_path(cls), "args": children}
    if isinstance(module, nn.ModuleList) and cls is nn.ModuleList:
        members = [_record(m, f"{where}[{i}]") for i, m in enumerate(module)]
        return {"target": _class_path(cls), "args": [[{MODULE_KEY: c} for c in members]]}
    if isinstance(module, nn.ModuleDict) and cls is nn.ModuleDict:
        named = {k: {MODULE_KEY: _record(m, f"{where}[{k!r}]")} for k, m in module.items()}
        return {"target": _class_path(cls), "args": [named]}
    return {"target": _class_path(cls), "kwargs": _init_arguments(module, where)}


def _init_arguments(module: nn.Module, where: str) -> dict[str, Any]:
    """Each ``__init__`` parameter's value, read back from the object's attributes."""
    cls = type(module)
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        raise NotRecordable(f"{where}: the signature of {cls.__qualname__}.__init__ cannot be "
                            "read") from None  # fmt: skip
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            continue  # extra keywords: nothing names them; the tests below catch a loss
        if p.kind is p.VAR_POSITIONAL and cls.__module__.startswith("torch."):
            continue  # torch's nn.Tanh(*args, **kwargs) and friends: arguments unused
        if p.kind is p.VAR_POSITIONAL:
            raise NotRecordable(f"{where}: {cls.__qualname__}.__init__ takes *{p.name}, whose "
                                "values cannot be read back from the object")  # fmt: skip
        found, value = _attribute(module, p.name)
        if not found:
            if p.default is p.empty:
                raise NotRecordable(
                    f"{where}: {cls.__qualname__}.__init__ takes {p.name!r}, which the object "
                    f"does not keep (store it: self.{p.name} = {p.name})"
                )
            value = p.default
            _DEFAULTED.append(f"{cls.__qualname__}.{p.name}")
        elif isinstance(p.default, bool) and (value is None or isinstance(value, torch.Tensor)):
            # torch's layers keep bias=True as the bias Parameter itself (None when False).
            value = value is not None
        kwargs[p.name] = _plain(value, f"{where}: argument {p.name!r}")
    return kwargs


def _attribute(module: nn.Module, name: str) -> tuple[bool, Any]:
    for attr in (name, f"_{name}"):
        try:
            value = getattr(module, attr)
        except AttributeError:
            continue
        if inspect.ismethod(value) or inspect.isfunction(value) or inspect.isbuiltin(value):
            continue  # nn.Module.modules and friends share names with arguments
        return True, value
    hparams = getattr(module, "hparams", None)
    if isinstance(hparams, dict) and name in hparams:
        return True, hparams[name]
    return False, None


def _plain(value: Any, where: str) -> Any:
    """``value`` as a record keeps it (loadable with ``weights_only=True``)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, nn.Module):
        return {MODULE_KEY: _record(value, where)}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, where) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        if MODULE_KEY in value:
            raise NotRecordable(f"{where}: a dict with the key {MODULE_KEY!r}")
        return {k: _plain(v, where) for k, v in value.items()}
    if isinstance(value, torch.Size):
        return tuple(value)
    raise NotRecordable(f"{where} is a {type(value).__name__}, which a record cannot hold "
                        "(plain values and modules only)")  # fmt: skip


def _value(value: Any) -> Any:
    """A record's argument as the constructor takes it: recorded modules rebuilt."""
    if isinstance(value, dict) and MODULE_KEY in value:
        return rebuild(value[MODULE_KEY])
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_value(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _check_importable(cls: type, where: str) -> None:
    module, qual = cls.__module__, cls.__qualname__
    if module == "__main__":
        raise NotRecordable(f"class {qual} is defined in __main__ (the script being run), "
                            "which cannot be imported again; move it into a module")  # fmt: skip
    if "<locals>" in qual:
        raise NotRecordable(
            f"class {qual.replace('.<locals>', '')} is defined inside a "
            "function, so it cannot be imported; define it at module level"
        )
    try:
        found = _import(_class_path(cls))
    except UserError:
        found = None
    if found is not cls:
        raise NotRecordable(f"{where}: class {module}.{qual} cannot be imported again by that "
                            "name")  # fmt: skip


def _check_same_weights(model: nn.Module, record: dict[str, Any]) -> None:
    try:
        with torch.device("meta"):
            rebuilt = rebuild(record)
    except UserError as exc:
        raise NotRecordable(str(exc)) from None
    mine = {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()
            if isinstance(v, torch.Tensor)}  # fmt: skip
    theirs = {k: (tuple(v.shape), v.dtype) for k, v in rebuilt.state_dict().items()
              if isinstance(v, torch.Tensor)}  # fmt: skip
    if mine == theirs:
        return
    missing = sorted(set(mine) - set(theirs))
    extra = sorted(set(theirs) - set(mine))
    differ = sorted(k for k in set(mine) & set(theirs) if mine[k] != theirs[k])
    detail = (f"{missing[:2]} missing" if missing else f"{extra[:2]} unexpected" if extra
              else f"{differ[0]} is {theirs[differ[0]]} instead of {mine[differ[0]]}")  # fmt: skip
    raise NotRecordable(f"rebuilding {record['target']} from the arguments read back from the "
                        f"object gives other weights ({detail}){_defaulted()}")  # fmt: skip


def _check_same_outputs(model: nn.Module, record: dict[str, Any], example: tuple) -> None:
    if sum(p.numel() for p in model.parameters()) > OUTPUT_TEST_MAX_PARAMS:
        return
    from trainwell.engine.loading.batch import to_device

    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    args, kwargs = to_device(example, device)
    rebuilt = rebuild(record).to(device)
    rebuilt.load_state_dict(model.state_dict())
    modes = {m: m.training for m in model.modules()}
    try:
        with torch.no_grad():
            want = model.eval()(*args, **kwargs)
            got = rebuilt.eval()(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a forward that needs more than the batch: no test
        return
    finally:
        for module, training in modes.items():
            module.training = training
    if not _same(want, got):
        raise NotRecordable(f"{record['target']} rebuilt from the arguments read back from the "
                            "object computes other outputs with the same weights (state "
                            f"set outside __init__?){_defaulted()}")  # fmt: skip


def _defaulted() -> str:
    if not _DEFAULTED:
        return ""
    names = ", ".join(_DEFAULTED[:4])
    return (
        f"; not kept as attributes, so taken at their defaults: {names} (store them: "
        "self.NAME = NAME)"
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(
            torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5, equal_nan=True)
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b)


def _class_path(cls: type, dotted: bool = False) -> str:
    return f"{cls.__module__}{'.' if dotted else ':'}{cls.__qualname__}"


def _import(path: str) -> Any:
    from trainwell.imports import resolve

    return resolve(path, "the model record")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
