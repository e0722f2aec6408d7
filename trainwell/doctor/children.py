"""Training that runs in child processes (``torch.multiprocessing`` / ``multiprocessing``:
``mp.Process``, ``mp.spawn``, Hogwild, the DDP tutorial's spawn launcher), watched.

The runner calls :class:`ChildWatch` around the script. Every child that
``multiprocessing`` starts then runs its own doctor, and sends its findings back as a
JSON file in a folder the parent made (files, not a pipe: they work for every start
method and survive a parent that is busy or interrupted):

- **fork**: the child inherits the parent's doctor, patches and all. ``multiprocessing``
  runs its after-fork hooks in the child before the target; the hook takes the parent's
  doctor off and puts a fresh one on, so the child reports its own steps only.
- **spawn** (``mp.spawn``, ``get_context("spawn")``): the child is a new interpreter.
  ``multiprocessing.spawn.get_command_line`` is wrapped so that its ``python -c`` program
  imports this module first; :func:`spawn_main` registers the same after-fork hook, and
  ``multiprocessing``'s own ``spawn_main`` runs the child as usual.
- **forkserver**: this module is added to the server's preload list; its children are
  forks of the server, and the hook is registered there.

DataLoader workers (also ``multiprocessing`` children) are left alone: they load data.
A child stops at ``--max-steps`` of its own steps and exits 0. A child that ended
without reporting (killed, ``os._exit``) is counted, and the report says so.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import sys
from multiprocessing import spawn as mp_spawn
from multiprocessing import util as mp_util
from pathlib import Path
from typing import Any

from trainwell.doctor.crash import explain
from trainwell.doctor.events import StopTraining
from trainwell.doctor.findings import Finding
from trainwell.doctor.frame import Doctor

ENV_DIR = "TRAINWELL_DOCTOR_CHILDREN"  # the folder children report into
ENV_MAX_STEPS = "TRAINWELL_DOCTOR_CHILD_MAX_STEPS"
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds trainwell/
# Children that load or map data, not train: DataLoader, Pool and ProcessPoolExecutor
# workers (a doctor there would only cost their start-up).
_WORKERS = ("torch.utils.data._utils.worker._worker_loop", "multiprocessing.pool.worker",
            "concurrent.futures.process._process_worker")  # fmt: skip


class _State:
    """This process's doctor (the parent's, or a child's own), for the after-fork hook."""

    doc: Any = None
    token: Any = None  # the after-fork registry holds its hook while this lives


def _hook_token() -> Any:
    # register_after_fork keeps a weak reference to an object: the hook runs while it lives.
    class Token:
        pass

    return Token()


class ChildWatch:
    """Around a watched script in the parent: children report into a temporary folder.

    Example:
        >>> with ChildWatch(Doctor(probes=[])) as watch:
        ...     pass
        >>> watch.results, watch.unreported
        ([], [])
    """

    WAIT_S = 10.0  # for children still writing their report (after a Ctrl-C to all)

    def __init__(self, doc: Any, max_steps: int | None = None) -> None:
        self.doc, self.max_steps = doc, max_steps
        self.results: list[dict[str, Any]] = []  # one per child that reported
        self.unreported: list[dict[str, Any]] = []  # children that started, never reported
        self._dir: Path | None = None
        self._env: dict[str, str | None] = {}
        self._restore: list[Any] = []

    def __enter__(self) -> ChildWatch:
        import tempfile

        self._dir = Path(tempfile.mkdtemp(prefix="trainwell-doctor-children-"))
        self._env = {k: os.environ.get(k) for k in (ENV_DIR, ENV_MAX_STEPS)}
        os.environ[ENV_DIR] = str(self._dir)
        if self.max_steps is not None:
            os.environ[ENV_MAX_STEPS] = str(self.max_steps)
        else:
            os.environ.pop(ENV_MAX_STEPS, None)
        self._restore = _install_hooks(self.doc)
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._restore):
            undo()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self._dir is not None:
            _wait_for_children(self.WAIT_S)
            self.results, self.unreported = _collect(self._dir)

    def merge_into(self, doc: Any) -> None:
        """Add the children's findings to ``doc``, each saying which processes saw it."""
        merged: dict[tuple[str, str, int], Finding] = {f.key: f for f in doc.findings}
        own = set(merged)  # found in this process too
        for result in self.results:
            for data in result["findings"]:
                finding = Finding(**data)
                known = merged.get(finding.key)
                if known is None:
                    known = merged[finding.key] = finding
                    finding.evidence = {**finding.evidence, "processes": []}
                    doc.add(finding)
                if known.key in own and "processes" not in known.evidence:
                    known.evidence["processes"] = ["the main process"]
                known.evidence.setdefault("processes", []).append(result["label"])
            doc.errors.extend(f"{result['label']}: {e}" for e in result["errors"])
        for finding in merged.values():
            names = finding.evidence.get("processes")
            if names:
                finding.message += f" [in {', '.join(names)}]"

    @property
    def steps(self) -> int:
        return sum(r["steps"] for r in self.results)

    def summary(self) -> str | None:
        """One line on the children, or None when there were none."""
        if not self.results and not self.unreported:
            return None
        parts = []
        trained = [r for r in self.results if r["steps"] or r["findings"]]
        if trained:
            each = ", ".join(f"{r['label']}: {r['steps']}" for r in trained)
            parts.append(f"{self.steps} optimizer steps in {len(trained)} child "
                         f"process(es), watched ({each})")  # fmt: skip
        if len(trained) < len(self.results):
            parts.append(f"{len(self.results) - len(trained)} more ran no optimizer step")
        if self.unreported:
            names = ", ".join(u["label"] for u in self.unreported)
            parts.append(
                f"{len(self.unreported)} child process(es) that were not watched: they "
                f"ended without reporting, killed or by os._exit ({names})"
            )
        return "children: " + "; ".join(parts)

    def to_json(self) -> list[dict[str, Any]]:
        rows = [{k: r[k] for k in ("pid", "label", "steps", "stopped", "crashed")}
                for r in self.results]  # fmt: skip
        return rows + [{**u, "steps": None, "watched": False} for u in self.unreported]


def _install_hooks(doc: Any) -> list[Any]:
    """Set this process up so that its children run a doctor; the undo steps."""
    _State.doc = doc
    _register_hook()
    original = mp_spawn.get_command_line
    mp_spawn.get_command_line = _command_line(original)
    undo = [lambda: setattr(mp_spawn, "get_command_line", original)]
    undo.append(_forkserver_preload())

    def forget() -> None:
        _State.token = None  # the registry's weak reference to it dies with it
        _State.doc = None

    return [forget, *undo]


def _command_line(original: Any) -> Any:
    def get_command_line(**kwds: Any) -> list[str]:
        cmd = original(**kwds)
        if getattr(sys, "frozen", False) or "-c" not in cmd:
            return cmd
        at = cmd.index("-c") + 1
        prog = cmd[at]
        if prog.startswith("from multiprocessing.spawn import spawn_main; "):
            boot = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
                    "from trainwell.doctor.children import spawn_main; ")  # fmt: skip
            cmd[at] = boot + prog.split("; ", 1)[1]
        return cmd

    return get_command_line


def _forkserver_preload() -> Any:
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    modules = getattr(server, "_preload_modules", None)
    if not isinstance(modules, list) or __name__ in modules:
        return lambda: None
    modules.append(__name__)

    def undo() -> None:
        if __name__ in modules:
            modules.remove(__name__)

    return undo


def spawn_main(*args: Any, **kwargs: Any) -> None:
    """A spawned child's entry (the ``python -c`` program calls it): the after-fork hook
    first, then ``multiprocessing``'s own ``spawn_main``."""
    if sys.path and sys.path[0] == _ROOT:
        del sys.path[0]  # put there only to import this module; the parent's path follows
    # A spawned process skips the after-fork hooks (SpawnProcess._after_fork does
    # nothing: "process is spawned"); in this fresh interpreter it runs this one.
    from multiprocessing import context

    hook = staticmethod(lambda: _after_fork(None))
    # typeshed does not declare SpawnProcess._after_fork (CPython's multiprocessing has it)
    context.SpawnProcess._after_fork = hook  # type: ignore[attr-defined]
    mp_spawn.spawn_main(*args, **kwargs)


def _after_fork(_: Any) -> None:
    """In a new child, before its target runs: its own doctor, unless it loads data."""
    folder = os.environ.get(ENV_DIR)
    proc = multiprocessing.current_process()
    target = getattr(proc, "_target", None)
    name = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    if not folder or name in _WORKERS:
        return
    if _State.doc is not None:
        _State.doc.uninstall()  # the parent's, inherited by fork: its steps are not ours
    steps = os.environ.get(ENV_MAX_STEPS)
    doc = Doctor(max_steps=int(steps) if steps else None)
    label = _label(proc)
    _write(Path(folder) / f"{os.getpid()}.started", {"pid": os.getpid(), "label": label})
    doc.install()
    _State.doc = doc
    _wrap_spawn_target(proc, doc)
    # This one process's run, watched: an instance attribute over the class's method.
    proc.run = _watched_run(proc.run, doc, Path(folder), label)  # type: ignore[method-assign]
    # Its own children (a launcher that spawns trainers) are watched too: the spawn
    # wrapper is inherited by fork; a spawned child puts it on here.
    if mp_spawn.get_command_line.__module__ != __name__:
        mp_spawn.get_command_line = _command_line(mp_spawn.get_command_line)


def _label(proc: Any) -> str:
    target = getattr(proc, "_target", None)
    if _is_torch_wrap(target):
        return f"process {proc._args[1]} of mp.spawn (pid {os.getpid()})"
    return f"{proc.name} (pid {os.getpid()})"


def _is_torch_wrap(target: Any) -> bool:
    return getattr(target, "__qualname__", "") == "_wrap" and "torch.multiprocessing" in getattr(
        target, "__module__", ""
    )


def _wrap_spawn_target(proc: Any, doc: Any) -> None:
    """``mp.spawn`` runs ``_wrap(fn, i, args, error_file)``, which turns an exception into
    a pickled traceback for the parent: the child explains it first."""
    if not _is_torch_wrap(getattr(proc, "_target", None)):
        return
    fn, i, args, error_file = proc._args

    def explained(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except Exception as exc:
            explain(doc, exc)
            raise

    proc._args = (explained, i, args, error_file)


def _watched_run(run: Any, doc: Any, folder: Path, label: str) -> Any:
    def watched_run() -> None:
        stopped = False
        try:
            run()
        except StopTraining:
            stopped = True  # --max-steps: the child ends as if its target returned
        except Exception as exc:
            explain(doc, exc)
            raise
        finally:
            doc.uninstall()
            doc.end()
            _report(doc, folder, label, stopped)

    return watched_run


def _report(doc: Any, folder: Path, label: str, stopped: bool) -> None:
    data = {
        "pid": os.getpid(),
        "label": label,
        "steps": doc.steps,
        "stopped": stopped,
        "crashed": doc.crashed,
        "errors": list(doc.errors),
        "findings": [{**f.to_dict(), "why": f.why} for f in doc.findings],
    }
    _write(folder / f"{os.getpid()}.json", data)


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(OSError):  # the parent went away: nobody to report to
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def _wait_for_children(seconds: float) -> None:
    """Join the children still running, for a while: Python joins them at exit anyway
    (non-daemonic ones), and one stopped by the same Ctrl-C is writing its report now."""
    import time

    deadline = time.monotonic() + seconds
    for child in multiprocessing.active_children():
        if not child.daemon:  # DataLoader workers are daemons: not training
            child.join(max(0.0, deadline - time.monotonic()))


def _collect(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    results, unreported = [], []
    for started in sorted(folder.glob("*.started")):
        done = started.with_suffix(".json")
        try:
            if done.exists():
                results.append(json.loads(done.read_text()))
            else:
                unreported.append(json.loads(started.read_text()))
        except (OSError, ValueError):
            continue
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    return results, unreported


def _register_hook() -> None:
    if _State.token is None:
        _State.token = token = _hook_token()
        mp_util.register_after_fork(token, _after_fork)


if os.environ.get(ENV_DIR):
    # Imported in a child interpreter (a spawned child's program, a forkserver's
    # preload): the children it starts or forks run a doctor.
    _register_hook()
