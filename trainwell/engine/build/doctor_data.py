"""The engine's side of ``nonfinite-input``: where the user's data comes from, for the
doctor, and a diverged run's message that names the data when the doctor found it bad.

A hand-written loop has the user's ``for`` over the loader on the stack when a NaN loss
is backwarded; the engine's loop is trainwell's own code, so the doctor would find no
user line to point at and say nothing. The engine therefore tells the doctor where the
data was written (:func:`point_at_data`): the user's ``Dataset`` class, else the factory
named by ``data.name`` (or ``fit(train_data=...)``'s class). The probes themselves are
the ones ``trainwell doctor`` runs, fed by the same DataLoader and backward events.

Example:
    >>> from torch.utils.data import TensorDataset
    >>> import torch
    >>> data_site(TensorDataset(torch.zeros(2)), "synthetic") is None  # trainwell's own
    True
"""

from __future__ import annotations

import sys
import types
from typing import Any

from torch.utils.data import DataLoader, Subset

from trainwell.doctor.sites import Site, is_user_file
from trainwell.errors import Diverged


def data_site(dataset: Any, data_name: str) -> Site | None:
    """The user's line that defines the training data: the ``__getitem__`` (else the
    class) of a Dataset of theirs, else the function ``data.name`` imports; ``None`` for
    trainwell's built-in data sets and library classes."""
    inner = dataset
    while isinstance(inner, (Subset, DataLoader)):  # the engine's split, a given loader
        inner = inner.dataset
    for fn in (getattr(type(inner), "__getitem__", None), getattr(type(inner), "__iter__", None)):
        site = _code_site(fn)
        if site is not None:
            return site
    module, _, attr = data_name.partition(":")
    if attr:
        # Already imported by the engine's data builder: look it up, import nothing new.
        owner = sys.modules.get(module)
        return _code_site(getattr(owner, attr.split(".")[0], None)) if owner else None
    return None


def _code_site(obj: Any) -> Site | None:
    if isinstance(obj, type):
        obj = getattr(obj, "__init__", None)
    code = getattr(obj, "__code__", None)
    if not isinstance(code, types.CodeType) or not is_user_file(code.co_filename):
        return None
    return Site(code.co_filename, code.co_firstlineno)


def point_at_data(doc: Any, data_name: str, dataset: Any) -> None:
    """Tell the engine's doctor (``None``: no doctor) where the training data is defined,
    for the findings about the data that have no user line on the stack."""
    if doc is not None:
        doc.data_site = data_site(dataset, data_name)


def name_the_data(exc: BaseException, doc: Any) -> None:
    """A diverged run whose doctor found NaN/Inf in the data: the message says so, and
    not "lower optim.lr" (no learning rate makes a NaN input finite)."""
    if doc is None or not isinstance(exc, Diverged):
        return
    found = next((f for f in doc.findings if f.code == "nonfinite-input"), None)
    if found is None:
        return
    head = str(exc).split(";", 1)[0]
    exc.args = (
        f"{head}: the data holds NaN/Inf, not the optimization ({found.message.split(';')[0]}"
        f", nonfinite-input at {found.file}:{found.line}); clean the data set (np.nan_to_num, "
        "drop or impute missing values); doctor.json has the finding",
    )
