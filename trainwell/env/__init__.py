"""What this machine offers PyTorch, and what is wrong with it.

This module backs ``trainwell env`` and the ``env.json`` file of every run directory.
:func:`collect` gathers plain facts (Python, the torch build, CPU, devices, the NVIDIA
driver, package versions) into a JSON-serializable dict; :func:`advise` turns such a
dict into advice, and is a pure function so that any machine can be described by a
fabricated dict in tests; :func:`render` and :func:`to_json` present the result.

Nothing here initialises CUDA on a machine without it: device properties are read only
after ``torch.cuda.is_available()`` says yes, and that call itself creates no context.

Example:
    >>> from trainwell import env
    >>> info = env.collect()
    >>> sorted(info)[:3]
    ['advice', 'cpu', 'devices']
    >>> print(env.to_json(info))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from trainwell.env.advice import advise
from trainwell.env.facts import (
    ENV_VARS,
    cpu_has_fast_bf16,
    cpu_info,
    devices,
    distribution_version,
    driver_info,
    package_versions,
    torch_info,
    usable_cores,
)
from trainwell.env.show import render, to_json

__all__ = ["advise", "collect", "cpu_has_fast_bf16", "render", "to_json", "usable_cores"]


def collect(check: bool = False) -> dict[str, Any]:
    """Describe this machine as PyTorch sees it, with advice on what is wrong.

    The result is JSON-serializable and holds the keys ``python``, ``torch``, ``cpu``,
    ``devices``, ``driver`` (None without ``nvidia-smi``), ``environment``,
    ``packages``, ``trainwell`` and ``advice`` (from :func:`advise`). It never raises
    because of a broken driver or a missing package; such problems are recorded. With
    ``check``, ``checks`` holds a tensor operation and a matmul timing run on the CPU and
    on each device (:func:`trainwell.env.probe.check_all`): a device that fails is advice.

    Example:
        >>> from trainwell.env import collect
        >>> info = collect()
        >>> info["torch"]["version"]  # doctest: +SKIP
        '2.6.0+cu126'
        >>> [d["name"] for d in info["devices"]]  # doctest: +SKIP
        ['NVIDIA A100-SXM4-80GB']
    """
    info: dict[str, Any] = {
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
            "platform": platform.platform(),
        },
        "torch": torch_info(),
        "cpu": cpu_info(),
        "devices": devices(),
        "driver": driver_info(),
        "environment": {name: os.environ.get(name) for name in ENV_VARS},
        "packages": package_versions(),
        "trainwell": distribution_version(("trainwell",)) or "unknown",
    }
    if check:
        from trainwell.env.probe import check_all

        info["checks"] = check_all(info["devices"])
    info["advice"] = advise(info)
    return info
