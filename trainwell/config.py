"""The run's config: one small dataclass per component, composed here, loaded from YAML.

Values come from, in order: the dataclass defaults, a YAML file, then dotted
``KEY=VALUE`` overrides (values parsed as YAML, then converted to the field's type).
OmegaConf structured configs do the merging and type conversion; this module turns their
errors into one line that names the key, the expected type and the value, and suggests
the closest valid keys for a typo.

Example:
    >>> cfg = load_config(overrides=["optim.lr=1e-3", "train.epochs=2"])
    >>> cfg.optim.lr, cfg.train.epochs
    (0.001, 2)
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from trainwell import config_bulk, config_env, safe_config, trust
from trainwell._options import check, option
from trainwell.data import DataConfig
from trainwell.doctor.config import DoctorConfig
from trainwell.engine.build.optim import OptimConfig, SchedConfig
from trainwell.engine.build.train_config import TrainConfig
from trainwell.engine.checkpointing.checkpoint import CheckpointConfig
from trainwell.engine.distributed.placement import DistConfig
from trainwell.engine.run_dir.directory import RunConfig
from trainwell.engine.state.early_stopping import EarlyStopConfig
from trainwell.errors import UserError
from trainwell.loggers.config import LogConfig
from trainwell.models import ModelConfig
from trainwell.yaml_load import MAX_DEPTH, read_yaml_file, yaml_problem


@dataclass
class Config:
    """Everything a run needs; each section is owned by the component it configures."""

    run: RunConfig = option(RunConfig(), "run")
    data: DataConfig = option(DataConfig(), "data")
    model: ModelConfig = option(ModelConfig(), "model")
    train: TrainConfig = option(TrainConfig(), "train")
    optim: OptimConfig = option(OptimConfig(), "optim")
    sched: SchedConfig = option(SchedConfig(), "sched")
    early_stop: EarlyStopConfig = option(EarlyStopConfig(), "early_stop")
    checkpoint: CheckpointConfig = option(CheckpointConfig(), "checkpoint")
    dist: DistConfig = option(DistConfig(), "dist")
    doctor: DoctorConfig = option(DoctorConfig(), "doctor")
    log: LogConfig = option(LogConfig(), "log")
    callbacks: list[Any] = option(
        [],
        "user callbacks: import paths 'package.module:Cls', or {name: 'package.module:Cls', "
        "kwargs: {...}}; each method on_fit_start, on_step_end, on_eval_end, on_checkpoint, "
        "on_fit_end it defines is called",
    )

    def __post_init__(self) -> None:
        # Cross-section rules that can be checked before any data is loaded; those that
        # need the data set's length are checked when the run starts.
        check(
            # A batch sampler makes the batches; data.batch_size is not split then.
            bool(self.data.batch_sampler)
            or self.data.batch_size % self.train.grad_accum_steps == 0,
            "data.batch_size",
            f"{self.data.batch_size} does not divide into train.grad_accum_steps="
            f"{self.train.grad_accum_steps} micro-batches",
        )
        if self.train.max_steps:
            check_warmup(self.sched.warmup_steps, self.train.max_steps)
        # runs/<timestamp>-<name> must fit one file name (255 bytes on every common system).
        check(
            self.run.dir is not None or len(self.run.name.encode()) <= MAX_NAME_BYTES,
            "run.name",
            f"{len(self.run.name)} characters; without run.dir it names the run folder, "
            f"which holds at most {MAX_NAME_BYTES} bytes of it: shorten it or set run.dir",
        )
        if self.run.safe:  # every import path resolved from now on is checked
            trust.activate(self.run.allow_imports)


MAX_NAME_BYTES = 200


def check_warmup(warmup_steps: int, total_steps: int) -> None:
    """Warmup must end before training does, or the peak lr is never reached."""
    check(
        warmup_steps < total_steps,
        "sched.warmup_steps",
        f"{warmup_steps} warmup steps is not shorter than the whole training "
        f"({total_steps} optimizer steps); lower sched.warmup_steps",
    )


def _sections() -> dict[str, type]:
    hints = typing.get_type_hints(Config)
    fields = dataclasses.fields(Config)
    return {f.name: hints[f.name] for f in fields if dataclasses.is_dataclass(hints[f.name])}


# Keys at the top level that are values, not sections.
_TOP_LEVEL = ("callbacks",)


def all_keys() -> list[str]:
    """Every dotted key, e.g. ``optim.lr``."""
    keys = [f"{s}.{f.name}" for s, cls in _sections().items() for f in dataclasses.fields(cls)]
    return keys + list(_TOP_LEVEL)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a config from a YAML file and ``KEY=VALUE`` overrides, strictly validated.

    Raises :class:`UserError` (one line) for an unreadable file, YAML that is not a
    mapping or uses Python tags, an unknown key (with the closest valid ones), a value of
    the wrong type, or a rule the values break.

    Example:
        >>> load_config(overrides=["optim.learning_rate=0.1"])
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: unknown config key 'optim.learning_rate'; did you mean optim.lr?
    """
    try:
        return _load(path, overrides or [])
    except RecursionError:  # a 2000-deep value a check above did not see first
        raise UserError(
            f"config: nested too deeply to read; configs nest at most {MAX_DEPTH} levels"
        ) from None


def _load(path: str | Path | None, overrides: list[str]) -> Config:
    layers = [OmegaConf.structured(Config)]
    file_data = _read_yaml(Path(path)) if path is not None else None
    bulk = config_bulk.take_bulk(file_data) if file_data else {}
    if file_data is not None:
        layers.append(OmegaConf.create(file_data))
    layers += [_override_layer(item) for item in overrides]
    before = trust.active()
    cfg = _build(layers)
    config_bulk.put_back(cfg, bulk)
    if cfg.run.safe:
        try:
            safe_config.refuse_widening(file_data, overrides)
        except UserError:
            trust.reset(before)  # the refused widening must not stay in force
            raise
        safe_config.check_config(to_dict(cfg))
    return cfg


def _override_layer(item: str) -> Any:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"override {_short(item)} is not KEY=VALUE (e.g. optim.lr=1e-3)")
    if key.count(".") >= MAX_DEPTH:
        raise UserError(
            f"override {_short(key)}: {key.count('.') + 1} levels deep; configs nest at "
            f"most {MAX_DEPTH} levels"
        )
    _check_key(key)
    try:
        return OmegaConf.from_dotlist([f"{key}={value}"])
    except yaml.YAMLError as exc:
        raise UserError(f"{key}: cannot parse {_short(value)} ({yaml_problem(exc)})") from None


def _short(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut to ``limit`` characters: an error line stays one readable line."""
    shown = repr(text)
    return (
        shown if len(shown) <= limit else f"{shown[: limit - 5]}...{shown[-1]} ({len(text)} chars)"
    )


def _build(layers: list[Any]) -> Config:
    try:
        merged = OmegaConf.merge(*layers)
        forms = config_env.env_forms(merged)
        cfg = typing.cast(Config, OmegaConf.to_object(merged))
        cfg._env_forms = forms  # type: ignore[attr-defined]  # what to_yaml writes instead
        return cfg
    except ConfigKeyError as exc:
        raise UserError(_unknown_key_message(str(exc.full_key))) from None
    except ValidationError as exc:
        raise UserError(_type_message(exc)) from None
    except OmegaConfBaseException as exc:
        raise UserError(f"config: {str(exc).splitlines()[0]}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml_file(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(
            f"config file {path} must hold a mapping of sections (run:, data:, ...); "
            f"it holds a {type(data).__name__}"
        )
    _check_mapping(data, prefix="")
    return data


def _check_mapping(data: dict[str, Any], prefix: str) -> None:
    # Catch unknown keys with our message before OmegaConf raises its own.
    sections = _sections()
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if not prefix and key in _TOP_LEVEL:
            if value is not None and not isinstance(value, list):
                raise UserError(f"{key} must be a list; got {type(value).__name__} {value!r}")
            continue
        if not prefix:
            if key not in sections:
                raise UserError(_unknown_key_message(str(key)))
            if not isinstance(value, dict):
                if value is None:
                    continue
                raise UserError(
                    f"config section {key!r} must be a mapping; got {type(value).__name__} "
                    f"{value!r}"
                )
            _check_mapping(value, prefix=f"{key}.")
        else:
            _check_key(dotted)


def _check_key(dotted: str) -> None:
    if dotted in _TOP_LEVEL:
        return
    section, _, rest = dotted.partition(".")
    sections = _sections()
    if section not in sections:
        raise UserError(_unknown_key_message(dotted))
    field_name = rest.split(".")[0]
    fields = {f.name: f for f in dataclasses.fields(sections[section])}
    if not rest:
        raise UserError(f"config key {dotted!r} names a section; set one of its keys")
    if field_name not in fields:
        raise UserError(_unknown_key_message(dotted))
    # Only dict-typed fields (kwargs) take keys below them.
    if "." in rest and not _is_dict_field(sections[section], field_name):
        raise UserError(_unknown_key_message(dotted))


def _is_dict_field(cls: type, name: str) -> bool:
    hint = typing.get_type_hints(cls)[name]
    return typing.get_origin(hint) is dict


# Names people reach for from other tools.
_ALIASES = {
    "learning_rate": "lr",
    "wd": "weight_decay",
    "bs": "batch_size",
    "batch": "batch_size",
    "warmup": "warmup_steps",
    "accumulate_grad_batches": "grad_accum_steps",
    "grad_accum": "grad_accum_steps",
    "gradient_clip_val": "grad_clip",
    "max_epochs": "epochs",
    "workers": "num_workers",
}


def _unknown_key_message(key: str) -> str:
    sections = _sections()
    section, _, rest = key.partition(".")
    name = rest.split(".")[0]
    close: list[str] = []
    if section in sections and name:
        fields = [f.name for f in dataclasses.fields(sections[section])]
        if _ALIASES.get(name) in fields:
            close.append(f"{section}.{_ALIASES[name]}")
        close += [f"{section}.{m}" for m in difflib.get_close_matches(name, fields, n=2)]
    if name:
        # The right name in the wrong section (optim.epochs -> train.epochs).
        wanted = {name, _ALIASES.get(name, name)}
        close += [k for k in all_keys() if k.split(".", 1)[-1] in wanted]
    if not close and rest:
        close = difflib.get_close_matches(key, all_keys(), n=2, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(section, list(sections), n=1, cutoff=0.5)
    close = list(dict.fromkeys(c for c in close if c != key))[:3]
    hint = (
        f"; did you mean {' or '.join(close)}?" if close else "; see trainwell train --help-config"
    )
    return f"unknown config key {key!r}{hint}"


def _type_message(exc: ValidationError) -> str:
    key = str(getattr(exc, "full_key", "") or "config")
    section, _, name = key.partition(".")
    expected = "a valid value"
    cls = _sections().get(section)
    if cls is not None and name in {f.name for f in dataclasses.fields(cls)}:
        expected = _type_name(typing.get_type_hints(cls)[name])
    first = str(exc).splitlines()[0]
    value = first.split("'")[1] if first.count("'") >= 2 else first
    return f"{key}: expected {expected}, got {value!r}"


def _type_name(hint: Any) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args) + " or null"
    origin = typing.get_origin(hint)
    if origin is list:
        return f"a list of {_type_name(args[0])}"
    if origin is dict:
        return "a mapping"
    return {int: "an int", float: "a number", bool: "true or false", str: "a string"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def to_yaml(cfg: Config) -> str:
    """The config as YAML that :func:`load_config` reads back to an equal config.

    Values that came from the environment (``${oc.env:VAR}``) are written in that form,
    never resolved: they may be secrets (see :mod:`trainwell.config_env`).
    """
    from omegaconf._utils import get_omega_conf_dumper

    # OmegaConf.to_yaml's own dump, without building OmegaConf nodes (seconds per MB).
    return yaml.dump(
        to_dict(cfg),
        default_flow_style=False,
        allow_unicode=True,
        sort_keys=False,
        Dumper=get_omega_conf_dumper(),
    )


def to_dict(cfg: Config) -> dict[str, Any]:
    """The config as plain containers (for checkpoints, JSON and MLflow's params), with
    values from the environment in their ``${oc.env:VAR}`` form."""
    plain = typing.cast(dict, _plain(cfg))
    return config_env.written(plain, getattr(cfg, "_env_forms", {}))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return copy.deepcopy(value)


def reference_markdown() -> str:
    """The config reference as Markdown, generated from the dataclasses (so it cannot drift)."""
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for section, cls in _sections().items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            )
            shown = (
                "null"
                if default is None
                else yaml.safe_dump(default, default_flow_style=True).strip()
            )
            shown = shown.removesuffix("\n...").removesuffix("...").strip()
            lines.append(
                f"| `{section}.{f.name}` | {_type_name(hints[f.name])} | `{shown}` | "
                f"{f.metadata.get('help', '')} |"
            )
    for f in dataclasses.fields(Config):
        if f.name in _TOP_LEVEL:
            lines.append(f"| `{f.name}` | a list | `[]` | {f.metadata.get('help', '')} |")
    return "\n".join(lines) + "\n"
