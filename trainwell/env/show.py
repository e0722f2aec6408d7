"""The readable report of ``trainwell env`` and the text of ``env.json``."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainwell.env.advice import advise
from trainwell.env.probe import check_line

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render(info: dict[str, Any], console: Console | None = None) -> None:
    """Print a readable report of ``info``: a table of facts, then the advice.

    Example:
        >>> import io
        >>> from rich.console import Console
        >>> from trainwell.env import collect, render
        >>> out = io.StringIO()
        >>> render(collect(), Console(file=out, width=120))
        >>> "torch" in out.getvalue()
        True
    """
    # Wrapped to the terminal only; in logs and pipes every line stays whole.
    console = console or Console(soft_wrap=not sys.stdout.isatty())
    table = Table(title="trainwell env", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in _facts(info):
        # Text, not markup: versions and paths may contain "[" that rich would eat.
        table.add_row(label, Text(value))
    console.print(table)

    advice = info.get("advice")
    if advice is None:
        advice = advise(info)
    if not advice:
        console.print(Text("no problems found", style="green"))
        return
    for item in advice:
        severity = item.get("severity", "info")
        line = Text()
        line.append(f"{severity}: ", style=_SEVERITY_STYLE.get(severity, ""))
        line.append(item.get("message", ""))
        console.print(line)
        if item.get("fix"):
            console.print(Text(f"  fix: {item['fix']}", style="dim"))


def to_json(info: dict[str, Any]) -> str:
    """Serialize ``info`` as the text of ``env.json``: indented, keys in order.

    Example:
        >>> from trainwell.env import to_json
        >>> to_json({"trainwell": "0.1.0"})
        '{\\n  "trainwell": "0.1.0"\\n}\\n'
    """
    return json.dumps(info, indent=2, sort_keys=False) + "\n"


def _facts(info: dict[str, Any]) -> list[tuple[str, str]]:
    py = info.get("python") or {}
    t = info.get("torch") or {}
    facts = [
        ("python", f"{py.get('version', '?')} ({py.get('executable', '?')})"),
        ("platform", str(py.get("platform", "?"))),
        ("torch", str(t.get("version", "?")) + (" (debug build)" if t.get("debug") else "")),
        ("torch build", _build_line(t)),
        ("cpu", _cpu_line(info.get("cpu") or {})),
    ]
    devices = info.get("devices") or []
    if not devices:
        facts.append(("devices", "none (CPU only)"))
    facts += [_device_fact(d) for d in devices]
    facts += [(f"check {c.get('device', '?')}", check_line(c)) for c in info.get("checks") or []]
    facts.append(("nvidia driver", _driver_line(info.get("driver"))))
    environ = {k: v for k, v in (info.get("environment") or {}).items() if v is not None}
    if environ:
        facts.append(("environment", " ".join(f"{k}={v}" for k, v in environ.items())))
    packages = info.get("packages") or {}
    if packages:
        facts.append(("packages", ", ".join(f"{k} {v or 'missing'}" for k, v in packages.items())))
    facts.append(("trainwell", str(info.get("trainwell", "unknown"))))
    return facts


def _build_line(t: dict[str, Any]) -> str:
    if t.get("hip"):
        build = f"ROCm {t['hip']}"
    elif t.get("cuda"):
        build = f"CUDA {t['cuda']}" + (f", cuDNN {t['cudnn']}" if t.get("cudnn") else "")
    else:
        build = "CPU only"
    if "cuda_available" in t and (t.get("cuda") or t.get("hip")):
        build += ", GPU available" if t["cuda_available"] else ", GPU not available"
    return build


def _cpu_line(cpu: dict[str, Any]) -> str:
    cores = str(cpu.get("logical_cores", "?"))
    if cpu.get("usable_cores") is not None and cpu.get("usable_cores") != cpu.get("logical_cores"):
        cores = f"{cpu['usable_cores']} usable of {cores}"
    line = f"{cores} cores, {cpu.get('capability') or 'unknown'} kernels"
    line += ", fast bf16" if cpu.get("bf16_fast") else ", no fast bf16"
    if cpu.get("torch_threads") is not None:
        line += f", torch uses {cpu['torch_threads']} threads"
    return line


def _device_fact(d: dict[str, Any]) -> tuple[str, str]:
    label = f"{d.get('type', 'cuda')}:{d.get('index', '?')}"
    if d.get("error"):
        return label, f"error: {d['error']}"
    parts = [str(d.get("name", "?"))]
    if d.get("capability"):
        parts.append(f"capability {d['capability']}")
    if d.get("total_memory_bytes"):
        parts.append(f"{d['total_memory_bytes'] / 2**30:.1f} GiB")
    if d.get("bf16") is not None:
        parts.append("bf16" if d["bf16"] else "no bf16")
    return label, ", ".join(parts)


def _driver_line(driver: dict[str, Any] | None) -> str:
    if driver is None:
        return "nvidia-smi not found"
    text = f"{driver.get('driver_version') or '?'} (CUDA {driver.get('cuda_version') or '?'})"
    if driver.get("error"):
        text += f", error: {driver['error']}"
    return text
