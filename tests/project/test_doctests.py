"""The examples in the engine's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import trainwell.engine

# every module of the engine's subpackages too ("loop.trainer", "checkpointing.resume", ...)
MODULES = sorted(m.name.removeprefix("trainwell.engine.")
                 for m in pkgutil.walk_packages(trainwell.engine.__path__, "trainwell.engine."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"trainwell.engine.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
