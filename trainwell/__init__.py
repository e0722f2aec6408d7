"""trainwell: train PyTorch models the way seasoned engineers do.

Example:
    >>> import trainwell
    >>> cfg = trainwell.load_config(overrides=["train.epochs=1"])
    >>> result = trainwell.fit(cfg)  # doctest: +SKIP
    >>> result.run_dir, result.metrics["test/accuracy"]  # doctest: +SKIP
    >>> model = trainwell.load_model(result.run_dir)  # doctest: +SKIP

The names below load on first use (PEP 562): ``trainwell --help`` and a verb's ``--help``
start without importing torch, which is most of a cold start.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_LAZY = {
    "Config": "trainwell.config",
    "load_config": "trainwell.config",
    "FitResult": "trainwell.engine.fit",
    "fit": "trainwell.engine.fit",
    "UserError": "trainwell.errors",
    "load_model": "trainwell.export.load",
}

__all__ = [
    "Config",
    "FitResult",
    "UserError",
    "__version__",
    "doctor",
    "fit",
    "load_config",
    "load_model",
    "predict",
]

if TYPE_CHECKING:
    from trainwell import doctor
    from trainwell.config import Config, load_config
    from trainwell.engine.fit import FitResult, fit
    from trainwell.errors import UserError
    from trainwell.export.load import load_model
    from trainwell.predict import predict


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once: later lookups are plain attributes
        return value
    if name == "doctor":
        return importlib.import_module("trainwell.doctor")
    raise AttributeError(f"module 'trainwell' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``trainwell.predict`` is the function, as it was when this module imported it last
    of all, although importing the ``trainwell.predict`` subpackage sets that attribute to
    the subpackage: a property on the module's class wins over the attribute."""

    @property
    def predict(self) -> Any:
        return importlib.import_module("trainwell.predict").predict

    @predict.setter
    def predict(self, value: Any) -> None:
        pass  # the import system setting the subpackage; the function stays the name


sys.modules[__name__].__class__ = _Package
