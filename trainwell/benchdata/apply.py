"""``--apply FILE``: the recommended setting written into a YAML config.

The file is created, or updated with its other keys kept (comments are not: the YAML is
written anew). The new text is checked with :func:`trainwell.load_config` before it
replaces the old file, atomically, so a refused config leaves the file as it was.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.yaml"
    >>> _ = path.write_text("optim:\\n  lr: 0.01\\n")
    >>> apply_setting(path, Setting(2, persistent_workers=True), pin_measured=False)
    >>> print(path.read_text(), end="")
    optim:
      lr: 0.01
    data:
      num_workers: 2
      persistent_workers: true
      prefetch_factor: null
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from trainwell.benchdata.settings import Setting
from trainwell.errors import UserError


def apply_setting(path: str | os.PathLike[str], setting: Setting, pin_measured: bool) -> None:
    """Write ``setting`` as ``data.*`` keys of the YAML config at ``path``.

    ``data.pin_memory`` is written only when it was measured (``pin_measured``: with
    CUDA); without CUDA it changes nothing and the file's own value stays.
    """
    if setting.num_workers is None:
        raise UserError("--apply: the loader is not a DataLoader, so there is no setting to write")
    target = Path(path)
    config = _read(target)
    section = config.setdefault("data", {})
    if not isinstance(section, dict):
        raise UserError(f"--apply: {target}: 'data' is a {type(section).__name__}, not a mapping")
    section["num_workers"] = setting.num_workers
    if pin_measured:
        section["pin_memory"] = setting.pin_memory
    section["persistent_workers"] = setting.persistent_workers
    section["prefetch_factor"] = setting.prefetch_factor
    _write_checked(target, yaml.safe_dump(config, sort_keys=False))


def check_target(path: str | os.PathLike[str]) -> None:
    """Refuse, before any measuring, a file ``--apply`` could not update (not YAML, not a
    mapping, a folder, a missing folder)."""
    target = Path(path)
    config = _read(target)
    if not isinstance(config.get("data", {}), dict):
        raise UserError(f"--apply: {target}: 'data' is not a mapping")
    if not target.parent.is_dir():
        raise UserError(f"--apply: the folder {target.parent} does not exist")


def _read(target: Path) -> dict[str, Any]:
    if not target.exists():
        return {}
    if target.is_dir():
        raise UserError(f"--apply: {target} is a folder, not a YAML file")
    try:
        config = yaml.safe_load(target.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--apply: cannot read {target}: {exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(
            f"--apply: {target} is not valid YAML ({str(exc).splitlines()[0]})"
        ) from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise UserError(f"--apply: {target} holds a {type(config).__name__}, not a mapping")
    return config


def _write_checked(target: Path, text: str) -> None:
    from trainwell.config import load_config

    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text)
        load_config(tmp)
        os.replace(tmp, target)
    except UserError as exc:
        raise UserError(f"--apply: {target} would not load: {exc}") from None
    except OSError as exc:
        raise UserError(f"--apply: cannot write {target}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
