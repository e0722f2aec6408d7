"""``trainwell bench-data`` as a function: build the source, sweep, time the model, report.

Example:
    >>> import io, trainwell
    >>> from trainwell.engine.loop.progress import make_console
    >>> cfg = trainwell.load_config(overrides=["data.name=synthetic", "model.name=mlp"])
    >>> result = bench_data(cfg, seconds=1.0, console=make_console(io.StringIO()), cores=1)
    >>> sorted(result.to_json())
    ['recommended', 'table']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from torch.utils.data import DataLoader

from trainwell.benchdata.model_rate import ModelRate, Verdict, model_rate, verdict
from trainwell.benchdata.render import render
from trainwell.benchdata.settings import Setting
from trainwell.benchdata.sources import (
    EngineSource,
    RebuiltSource,
    load_factory,
    source_for,
)
from trainwell.benchdata.sweep import SweepResult, check_seconds, sweep

# With --model, this share of --seconds times the model; the rest the loader.
MODEL_SHARE = 0.2
# Micro-batches per optimizer step times this are kept for the model's rate.
KEPT_STEPS = 4


@dataclass
class BenchResult:
    """What :func:`bench_data` measured.

    Attributes:
        sweep: the loader's table and recommendation.
        model: the model's rate (with ``model=True``), else ``None``.
        verdict: data-bound or model-bound, and by how much (with ``model=True``).
        source: what was measured, in words.
    """

    sweep: SweepResult
    model: ModelRate | None = None
    verdict: Verdict | None = None
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` contract: ``table`` and ``recommended``; with the model,
        ``model_batches_per_s``, ``bottleneck`` (``data`` or ``model``) and
        ``bottleneck_factor`` too."""
        out = self.sweep.to_json()
        if self.model is not None and self.verdict is not None:
            out["model_batches_per_s"] = round(self.model.batches_per_s, 4)
            out["bottleneck"] = self.verdict.bottleneck
            out["bottleneck_factor"] = round(self.verdict.factor, 3)
        return out


def bench_data(
    config: Any = None,
    *,
    loader: str | None = None,
    seconds: float = 20.0,
    model: bool = False,
    console: Console | None = None,
    cores: int | None = None,
) -> BenchResult:
    """Sweep the data pipeline's loader settings; with ``model``, judge the bottleneck.

    Args:
        config: a :class:`~trainwell.config.Config`, a YAML path or ``None`` (defaults):
            its training loader is measured, unless ``loader`` is given; its model with
            ``model=True``.
        loader: ``pkg.module:fn``, a factory returning a DataLoader (swept) or an
            iterable of batches (measured as given).
        seconds: the total time budget, the model's share included.
        model: also measure how fast the config's model trains on the batches.
        console: where the report goes (default: standard output).
        cores: the most workers tried (default: the cores this process may use).

    Raises:
        UserError: a bad budget, an unknown or failing ``loader``, a bad config.
    """
    from trainwell.config import Config, load_config
    from trainwell.engine.loop.progress import make_console

    check_seconds(seconds)
    console = console or make_console()
    cfg = config if isinstance(config, Config) else load_config(config)
    source, parts, device = _source(cfg, loader, model)
    share = MODEL_SHARE if model else 0.0
    console.print(f"[bold]trainwell bench-data[/]: {source.describe()}; about "
                  f"{seconds * (1 - share):.3g}s for the loader", highlight=False)  # fmt: skip
    keep = KEPT_STEPS * cfg.train.grad_accum_steps if model else 0
    with console.status("measuring") as status:

        def progress(setting: Setting) -> None:
            status.update(f"measuring {setting.describe()}")

        swept = sweep(source, seconds * (1 - share), cores=cores, keep_count=keep,
                      on_setting=progress)  # fmt: skip
        rate = judged = None
        if model:
            status.update("measuring the model")
            rate = model_rate(cfg, parts, device, swept.kept, seconds * share)
            judged = verdict(swept.recommended.batches_per_s, rate.batches_per_s)
    render(swept, console, rate, judged)
    return BenchResult(swept, rate, judged, source.describe())


def _source(cfg: Any, loader: str | None, model: bool) -> tuple[Any, Any, Any]:
    """The batches' source, and the run's parts and device when the config is needed.

    The model is built only with ``model``: measuring the loader alone must not depend
    on a model that fits the data (a text or tabular data set with the default CNN).
    """
    from trainwell.engine.distributed.placement import Placement, resolve_device

    if loader is not None:
        made, factory = load_factory(loader)
        source = source_for(made, factory, f"--loader {loader}")
        if not model:  # the loader alone: no config, no device
            return source, None, None
    place = Placement(device=resolve_device(cfg.run.device))
    parts = None
    if model:
        from trainwell.engine.build.parts import build_parts

        parts = build_parts(cfg, place)
    if loader is None:
        train, settings = (parts.splits.train, parts.loaders) if parts else _data(cfg)
        if isinstance(train, DataLoader):  # data.name returned a loader of its own
            source = RebuiltSource(train, f"the DataLoader of data.name={cfg.data.name}")
        else:
            source = EngineSource(train, settings, place)
    return source, parts, place.device


def _data(cfg: Any) -> tuple[Any, Any]:
    """The training split and the loaders' settings, as ``fit`` builds them, no model."""
    from trainwell.data import build_data
    from trainwell.engine.loading.loaders import loader_settings
    from trainwell.engine.loading.seeding import seed_everything

    seed_everything(cfg.run.seed)
    # The labels are the model's and the loss's business, not the loader's speed.
    splits = build_data(cfg.data, check_targets=False)
    return splits.train, loader_settings(cfg.data, cfg.train.grad_accum_steps, cfg.run.seed,
                                         splits)  # fmt: skip


def write_json(result: BenchResult, path: str | Path) -> Path:
    """Write ``result.to_json()`` to ``path`` (atomically); return the path."""
    import json
    import os

    from trainwell.errors import UserError

    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"--json: cannot write {target}: {exc.strerror}") from None
    return target
