"""trainwell: train PyTorch models the way seasoned engineers do.

Example:
    >>> import trainwell
    >>> cfg = trainwell.load_config(overrides=["train.epochs=1"])
    >>> result = trainwell.fit(cfg)  # doctest: +SKIP
    >>> result.run_dir, result.metrics["test/accuracy"]  # doctest: +SKIP
    >>> model = trainwell.load_model(result.run_dir)  # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"

from trainwell import doctor  # noqa: E402
from trainwell.config import Config, load_config  # noqa: E402
from trainwell.engine.fit import FitResult, fit  # noqa: E402
from trainwell.errors import UserError  # noqa: E402
from trainwell.export.load import load_model  # noqa: E402

# Last: the function shadows the subpackage's name on this module, as the issue's
# ``trainwell.predict(...)`` wants; ``from trainwell.predict import ...`` still works.
from trainwell.predict import predict  # noqa: E402

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
