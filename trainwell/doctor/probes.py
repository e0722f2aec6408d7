"""The memory probes: graphs kept alive across steps, retained graphs, eval with grad.

Each probe is a plain object with ``on_forward`` / ``on_backward`` / ``on_step`` /
``on_end`` methods (any subset), called by :class:`trainwell.doctor.frame.Doctor`.
Precision comes first: a probe reports only what it has seen persist over several
steps, so correct scripts stay silent.
"""

from __future__ import annotations

import ast
import functools
import time
import types
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from trainwell.doctor.findings import Finding
from trainwell.doctor.frame import BackwardEvent, ForwardEvent, Site, StepEvent, is_user_file
from trainwell.doctor.source import parse


def default_probes() -> list[Any]:
    """Every probe, memory first (part 1), then numerics, wiring, modes and learning."""
    from trainwell.doctor import learning, modes, numerics, wiring

    return [
        RetainGraphProbe(),
        EvalBuildsGraphProbe(),
        GraphRetainedProbe(),
        AllocatorProbe(),
        numerics.NonFiniteProbe(),
        numerics.AmpOverflowProbe(),
        wiring.GradWiringProbe(),
        wiring.ParamCoverageProbe(),
        wiring.SchedulerProbe(),
        modes.TrainModeInEvalProbe(),
        modes.EvalModeInTrainProbe(),
        modes.SamplerEpochProbe(),
        modes.LossInputsProbe(),
        modes.DataBottleneckProbe(),
        learning.LossNotDecreasingProbe(),
    ]


# ---- retain-graph ------------------------------------------------------------------------


class RetainGraphProbe:
    """``backward(retain_graph=True)`` as the last backward of step after step.

    Keeping the graph is needed when a second backward goes through it in the same step
    (a GAN, two losses); when no backward follows before the optimizer step, the graph
    is kept for nothing, every step.
    """

    STEPS = 3

    def __init__(self) -> None:
        self.site: Site | None = None  # of the step's last backward, if it retained
        self.streak = 0

    def on_backward(self, doc: Any, event: BackwardEvent) -> None:
        # The place is read now, while the user's frame is still at the backward call.
        self.site = event.site if event.retain_graph else None

    def on_step(self, doc: Any, event: StepEvent) -> None:
        site, self.site = self.site, None
        if site is None:
            self.streak = 0
            return
        self.streak += 1
        if self.streak >= self.STEPS:
            doc.add(
                Finding(
                    code="retain-graph",
                    severity="warning",
                    file=site.file,
                    line=site.line,
                    message="backward(retain_graph=True) every step, with no later backward "
                    "through that graph: each step's graph is kept alive for nothing",
                    why="the activations of the whole step stay in memory until the tensor "
                    "is freed, and longer if it is stored",
                    fix="drop retain_graph=True (keep it only on the first of two backward "
                    "calls that share a graph)",
                    evidence={"steps_observed": self.streak},
                )
            )


# ---- eval-builds-graph ---------------------------------------------------------------------


class EvalBuildsGraphProbe:
    """Forward passes that build a graph no backward ever uses: evaluation without
    ``torch.no_grad()`` / ``torch.inference_mode()``.

    Each grad-enabled forward of a model (a module with parameters: loss modules are
    not models) hangs a sentinel on its output's graph node. A backward through that node
    clears it; a node freed (or still alive at the end) with its sentinel in place was
    built for nothing. This holds whatever the model's mode (a backbone kept in eval
    mode for its BatchNorm statistics but trained through is fine) and says so even when
    nothing is kept.
    """

    MAX_PENDING = 64  # unreached outputs followed at once; enough to see the pattern
    ALWAYS = 16  # training forwards all followed at first
    SAMPLE = 8  # then one in this many

    def __init__(self) -> None:
        # key -> [weak refs to its sentinels, site, what]; one entry per forward
        self.pending: dict[int, list[Any]] = {}
        self.forwards = 0

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        if not event.grad_enabled or len(self.pending) >= self.MAX_PENDING:
            return
        self.forwards += 1
        # Training forwards are followed one in SAMPLE after the first few: a forward
        # that never reaches backward comes back batch after batch, so a sample sees it,
        # and the training step pays for a sentinel only now and then. Eval-mode forwards
        # (rare in training) are always followed.
        training = event.module.training
        if training and self.forwards > self.ALWAYS and self.forwards % self.SAMPLE:
            return
        # Every output with a graph: a model may return several (an RNN's output and
        # state) and the loss may use only one of them.
        nodes = {id(t.grad_fn): t.grad_fn for t in _tensors(event.output) if t.grad_fn}
        if not nodes:  # (the frame sends forwards of models only: modules with weights)
            return
        key = self.forwards  # a counter: ids of freed objects are reused
        mode = "train" if training else "eval"
        refs = []
        for node in nodes.values():
            sentinel = _Sentinel(self.pending, key)
            # The graph node holds the sentinel, the probe only a weak reference, whose
            # callback runs when the node (the graph) is freed.
            refs.append(weakref.ref(sentinel, lambda _, k=key: self._freed(doc, k)))
            node.register_prehook(sentinel)
        self.pending[key] = [refs, event.site, f"{type(event.module).__name__} in {mode} mode"]

    def on_end(self, doc: Any) -> None:
        if doc.crashed:
            return  # the crash stopped the last forward before its backward
        for key in list(self.pending):
            self._report(doc, self.pending.pop(key))  # alive, never reached: kept for nothing

    def _freed(self, doc: Any, key: int) -> None:
        entry = self.pending.get(key)
        if entry is None or doc.crashed:
            return  # a backward went through one of its outputs, or a crash stopped it
        if any(ref() is not None for ref in entry[0]):
            return  # another output's graph still lives and may yet be reached
        self._report(doc, self.pending.pop(key))

    def _report(self, doc: Any, entry: list[Any]) -> None:
        _, site, what = entry
        if site is None:
            return
        doc.add(
            Finding(
                code="eval-builds-graph",
                severity="warning",
                file=site.file,
                line=site.line,
                message=f"forward pass with grad enabled ({what}) whose output never reached "
                "a backward: an autograd graph built for nothing",
                why="every such call records a graph and keeps its activations while the "
                "output lives: slower, and memory for nothing",
                fix="run evaluation under `with torch.no_grad():` (or torch.inference_mode())",
                evidence={"module": what.split(" ")[0]},
            )
        )


class _Sentinel:
    """Hung on a graph node: a backward through the node clears its pending entry."""

    __slots__ = ("pending", "key", "__weakref__")

    def __init__(self, pending: dict[int, Any], key: int) -> None:
        self.pending = pending
        self.key = key

    def __call__(self, grad_outputs: Any) -> None:
        self.pending.pop(self.key, None)


def _walk(root: Any, limit: int) -> Iterator[Any]:
    """The nodes of the autograd graph under ``root``, each once, at most ``limit``."""
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and nxt not in seen and len(seen) < limit:
                seen.add(nxt)
                stack.append(nxt)


def _tensors(output: Any) -> list[torch.Tensor]:
    """The tensors of a forward's output: a tensor, or those in a tuple, list or dict."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [v for v in output if isinstance(v, torch.Tensor)]
    return []


# ---- graph-retained ------------------------------------------------------------------------


class GraphRetainedProbe:
    """Tensors with autograd history that outlive their step, found by who holds them.

    At each optimizer step the user's variables (the training loop's locals, the
    script's globals, attributes of its objects and modules, closures of forward hooks)
    are measured: how many graph-carrying tensors a container holds, or how large the
    graph behind one tensor is. A holder whose measure grows at every one of several
    consecutive steps keeps every step's graph alive.
    """

    STEPS = 3  # consecutive growths before reporting
    DEVICE_STEPS = 8  # device tensors without graphs: a slower leak, wait longer
    GRAPH_LIMIT = 50_000  # nodes counted at most per tensor
    DENSE_STEPS = 9  # scan every step up to here (enough observations for every rule)
    BUDGET = 0.01  # then scan only while scans have taken under 1% of the time

    def __init__(self) -> None:
        self.history: dict[str, deque[int]] = {}
        self.device_history: dict[str, deque[int]] = {}
        # Models seen training: scanned even when no user frame is on the stack (the
        # engine's own loop runs a user's model given by import path).
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.model_ids: set[int] = set()
        self.started = 0.0
        self.scan_time = 0.0
        self.roots: dict[str, Any] = {}  # the graph root each single-tensor holder had

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        # Every training forward comes here: test membership by id, which is cheap,
        # before making the weak reference.
        if event.grad_enabled and id(event.module) not in self.model_ids:
            self.watch_model(event.module)

    def watch_model(self, model: nn.Module) -> None:
        self.model_ids.add(id(model))
        self.models.add(model)

    def on_step(self, doc: Any, event: StepEvent) -> None:
        # The scan is the doctor's one costly check (~0.1 ms): every step at first (most
        # leaks show within a few steps), then as often as 1% of the run's time allows,
        # which still sees steady growth between two scans.
        now = time.perf_counter()
        self.started = self.started or now
        if event.step > self.DENSE_STEPS and self.scan_time > self.BUDGET * (now - self.started):
            return
        try:
            self._scan(doc, event)
        finally:
            self.scan_time += time.perf_counter() - now

    def _scan(self, doc: Any, event: StepEvent) -> None:
        frame = event.frame
        seen: set[str] = set()
        scanned: set[int] = set()  # objects whose attributes were looked at
        holders = _holders(frame, scanned) if frame is not None else []
        for model in list(self.models):
            model = getattr(model, "module", model)  # inside DDP
            if id(model) not in scanned:
                holders += _attributes(type(model).__name__, model, scanned)
        for path, holder in holders:
            size = _measure(holder.value, self.GRAPH_LIMIT)
            if size is None:
                continue
            seen.add(path)
            if isinstance(holder.value, torch.Tensor) and not self._reaches_back(path, holder):
                # A fresh graph this step (a loss, an output): its size may vary with the
                # batch, but it holds nothing from earlier steps.
                self.history.pop(path, None)
                continue
            if _grows(self.history, path, size, self.STEPS):
                self._report(doc, path, holder, size, frame)
            if not isinstance(holder.value, torch.Tensor):
                # Without graphs: only tensors kept on an accelerator count. Detached CPU
                # copies (predictions for an epoch metric, caches) are a normal pattern.
                on_device = _device_tensors(holder.value)
                if _grows(self.device_history, path, on_device, self.DEVICE_STEPS):
                    self._report_device(doc, holder, on_device, frame)
        for history in (self.history, self.device_history, self.roots):
            for path in list(history):
                if path not in seen:
                    del history[path]

    def _reaches_back(self, path: str, holder: _Holder) -> bool:
        """Does this tensor's graph contain the graph the same holder had at the last
        scan? That is what keeping history across steps means (``total += loss``, a
        state carried without detach); a new graph of the same size does not."""
        root = holder.value.grad_fn
        previous = self.roots.get(path)
        self.roots[path] = root  # the node only: its saved tensors were freed by backward
        if previous is None:
            return True  # nothing to compare yet
        if previous is root:
            return True  # the same graph is still held
        return any(node is previous for node in _walk(root, self.GRAPH_LIMIT))

    def _report_device(self, doc: Any, holder: _Holder, count: int, frame: Any) -> None:
        site = _store_site(holder, container=True)
        if site is None:
            return
        file, line, created = site
        doc.add(
            Finding(
                code="tensor-accumulation",
                severity="warning",
                file=file,
                line=line,
                message=f"{holder.describe()} keeps a device tensor from every step ({count} so "
                "far): device memory grows step over step",
                why="tensors without history still hold device memory until the container "
                "is cleared",
                fix="move what you keep to the CPU (.detach().cpu()) or keep a running "
                "metric (a float) instead",
                related=[{"file": file, "line": created, "what": "created here"}]
                if created
                else [],
                evidence={"device_tensors": count, "steps_observed": doc.steps},
            )
        )

    def _report(self, doc: Any, path: str, holder: _Holder, size: int, frame: Any) -> None:
        container = not isinstance(holder.value, torch.Tensor)
        site = _store_site(holder, container)
        if site is None and frame is None:
            return  # nowhere in the user's code to point at: say nothing rather than guess
        site = site or (frame.f_code.co_filename, frame.f_lineno, None)
        file, line, created = site
        kind = "list" if isinstance(holder.value, list) else type(holder.value).__name__
        if container:
            message = (
                f"{holder.describe()} keeps a tensor with its autograd graph from every step "
                f"({size} so far, in a {kind})"
            )
            fix = "store loss.item() (a float) or tensor.detach() instead of the tensor"
            evidence = {
                "tensors_with_graph": size,
                "bytes_held": _bytes_held(holder.value),  # the tensors; their graphs add more
                "steps_observed": doc.steps,
            }
        elif holder.carried:
            message = (
                f"{holder.describe()} is carried from step to step without detach(): its "
                f"graph reaches back to the first step ({size} nodes)"
            )
            fix = f"detach the carried state each step: {holder.name} = {holder.name}.detach()"
            evidence = {"graph_nodes": size, "steps_observed": doc.steps}
        else:
            message = (
                f"{holder.describe()} accumulates tensors with their autograd graphs: its "
                f"graph grows every step ({size} nodes)"
            )
            fix = "accumulate loss.item() (a float) or loss.detach() instead"
            evidence = {"graph_nodes": size, "steps_observed": doc.steps}
        related = [{"file": file, "line": created, "what": "the tensor is created here"}]
        doc.add(
            Finding(
                code="graph-retained",
                severity="error",
                file=file,
                line=line,
                message=message,
                why="each step's activations stay in memory: memory grows until out of memory",
                fix=fix,
                related=related if created else [],
                evidence=evidence,
            )
        )


class _Holder:
    """A user variable or attribute that holds tensors."""

    def __init__(self, name: str, value: Any, owner: str | None, cls: type | None) -> None:
        self.name = name  # the variable or attribute name
        self.value = value
        self.owner = owner  # the variable holding the object, for attributes
        self.cls = cls  # the object's class, for attributes
        self.carried = False
        self.key: Any = None  # held as name[key], not as name itself

    def describe(self) -> str:
        if self.key is not None and self.cls is not None:
            return f"`{self.owner}.{self.name}[{self.key!r}]` (in a {self.cls.__name__})"
        if self.key is not None:
            return f"`{self.name}[{self.key!r}]`"
        if self.cls is None:
            return f"`{self.name}`"
        return f"`{self.owner}.{self.name}` (attribute `{self.name}` of a {self.cls.__name__})"


def _holders(frame: types.FrameType, seen_objects: set[int]) -> list[tuple[str, _Holder]]:
    """The user's variables worth measuring, with a stable path for each."""
    found: list[tuple[str, _Holder]] = []
    scopes: dict[int, dict[str, Any]] = {}  # frames of one file share their globals
    f: types.FrameType | None = frame
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            scopes.setdefault(id(f.f_locals), f.f_locals)
            scopes.setdefault(id(f.f_globals), f.f_globals)
        f = f.f_back
    for scope in scopes.values():
        for name, value in list(scope.items()):
            if name.startswith("__") or isinstance(value, (types.ModuleType, type)):
                continue
            if _holds_tensors(value):
                found += _held(name, name, value, None, None)
            elif _is_user_object(value) and id(value) not in seen_objects:
                seen_objects.add(id(value))
                found += _attributes(name, value, seen_objects)
    return found


def _attributes(owner: str, obj: Any, seen: set[int]) -> list[tuple[str, _Holder]]:
    found = []
    objects = [(owner, obj)]
    if isinstance(obj, nn.Module):
        objects = [(f"{owner}.{n}" if n else owner, m) for n, m in obj.named_modules()]
    for path, o in objects:
        seen.add(id(o))
        attrs = vars(o)
        skip = set()
        if isinstance(o, nn.Module):
            skip = set(o._parameters) | set(o._buffers)
            for hook in list(o._forward_hooks.values()):
                for cell_name, cell in zip(
                    hook.__code__.co_freevars if hasattr(hook, "__code__") else (),
                    getattr(hook, "__closure__", None) or (),
                ):
                    value = cell.cell_contents
                    if _holds_tensors(value):
                        holder = _Holder(cell_name, value, None, None)
                        found.append((f"{path}<hook>.{cell_name}", holder))
        for name, value in attrs.items():
            if name.startswith("_") or name in skip:
                continue
            if _holds_tensors(value):
                found += _held(f"{path}.{name}", name, value, path, type(o))
    return found


def _held(
    path: str, name: str, value: Any, owner: str | None, cls: type | None
) -> list[tuple[str, _Holder]]:
    """A holder for ``value``, and for the containers one level inside a dict of them
    (``history["loss"].append(loss)``, ``self.history["loss"]...``)."""
    found = [(path, _Holder(name, value, owner, cls))]
    if isinstance(value, dict):
        for key, inner in list(value.items())[:100]:
            if isinstance(inner, (list, deque, dict)):
                holder = _Holder(name, inner, owner, cls)
                holder.key = key
                found.append((f"{path}[{key!r}]", holder))
    return found


def _holds_tensors(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, list, tuple, dict, deque)) and not isinstance(
        value, nn.Parameter
    )


def _is_user_object(value: Any) -> bool:
    if isinstance(value, nn.Module):
        return True
    if not hasattr(value, "__dict__") or isinstance(value, (types.FunctionType, types.MethodType)):
        return False
    return _is_user_class(type(value))


@functools.lru_cache(maxsize=1024)
def _is_user_class(cls: type) -> bool:
    """Instances of classes defined in the user's files hold the user's state."""
    import sys

    mod = sys.modules.get(getattr(cls, "__module__", "") or "")
    return mod is not None and is_user_file(getattr(mod, "__file__", "") or "<>")


def _grows(history: dict[str, deque[int]], path: str, size: int, steps: int) -> bool:
    """Record ``size``; True when it grew at each of the last ``steps`` observations."""
    hist = history.setdefault(path, deque(maxlen=steps + 1))
    hist.append(size)
    return len(hist) == hist.maxlen and all(b > a for a, b in zip(hist, list(hist)[1:]))


def _device_tensors(value: Any) -> int:
    items = value.values() if isinstance(value, dict) else value
    try:
        return sum(
            1
            for v in items
            if isinstance(v, torch.Tensor) and v.grad_fn is None and v.device.type != "cpu"
        )
    except TypeError:
        return 0


def _bytes_held(value: Any) -> int:
    items = value.values() if isinstance(value, dict) else value
    return sum(v.element_size() * v.numel() for v in items if isinstance(v, torch.Tensor))


def _has_graph(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.grad_fn is not None


def _measure(value: Any, limit: int) -> int | None:
    """Tensors with graphs in a container, or graph nodes behind one tensor.

    A container's items may themselves be small tuples or dicts (``outputs.append(
    {"loss": loss, "logits": logits})``): an item counts when it holds a graph.
    """
    if isinstance(value, torch.Tensor):
        return _graph_size(value.grad_fn, limit) if value.grad_fn is not None else None
    items = value.values() if isinstance(value, dict) else value
    try:
        return sum(1 for v in items if _has_graph(v) or _nested_graph(v))
    except TypeError:
        return None


def _nested_graph(item: Any) -> bool:
    if isinstance(item, (tuple, list)) and len(item) <= 16:
        return any(_has_graph(v) for v in item)
    if isinstance(item, dict) and len(item) <= 16:
        return any(_has_graph(v) for v in item.values())
    return False


def _graph_size(root: Any, limit: int) -> int:
    return sum(1 for _ in _walk(root, limit))


# ---- where the fix goes --------------------------------------------------------------------


def _user_files(holder: _Holder) -> list[str]:
    import sys

    files = []
    if holder.cls is not None:
        mod = sys.modules.get(holder.cls.__module__)
        if mod is not None and getattr(mod, "__file__", None):
            files.append(mod.__file__)
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None):
        files.append(main.__file__)
    return [f for f in files if f and is_user_file(f)]


def _store_site(holder: _Holder, container: bool) -> tuple[str, int, int | None] | None:
    """The statement that stores into the holder, and where the stored tensor is made."""
    for file in _user_files(holder):
        tree = parse(file)
        if tree is None:
            continue
        for node in ast.walk(tree):
            hit = _stores(node, holder, container)
            if hit is not None:
                stmt_line, value = hit
                return file, stmt_line, _creation_line(tree, value, stmt_line)
    return None


def _target_matches(node: ast.AST, holder: _Holder) -> bool:
    if holder.key is not None:
        inner = node.value if isinstance(node, ast.Subscript) else None
        named = (isinstance(inner, ast.Name) and inner.id == holder.name) or (
            holder.cls is not None
            and isinstance(inner, ast.Attribute)
            and inner.attr == holder.name
        )
        return (
            named
            and isinstance(node.slice, ast.Constant)  # type: ignore[union-attr]
            and node.slice.value == holder.key  # type: ignore[union-attr]
        )
    if holder.cls is None:
        return isinstance(node, ast.Name) and node.id == holder.name
    return isinstance(node, ast.Attribute) and node.attr == holder.name


def _stores(node: ast.AST, holder: _Holder, container: bool) -> tuple[int, ast.AST | None] | None:
    if container:
        # x.append(v), x.extend(v), x.insert(i, v), x += [v], x[k] = v
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend", "insert", "appendleft")
            and _target_matches(node.func.value, holder)
        ):
            return node.lineno, node.args[-1] if node.args else None
        if isinstance(node, ast.AugAssign) and _target_matches(node.target, holder):
            return node.lineno, node.value
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and _target_matches(t.value, holder) for t in node.targets
        ):
            return node.lineno, node.value
        return None
    if isinstance(node, ast.AugAssign) and _target_matches(node.target, holder):
        return node.lineno, node.value
    if isinstance(node, ast.Assign):
        targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        refers = any(_target_matches(n, holder) for n in ast.walk(node.value))
        if refers and any(_target_matches(t, holder) for t in targets):
            # h = f(x, h) carries state; total = total + loss accumulates.
            holder.carried = isinstance(node.value, ast.Call) or isinstance(
                node.targets[0], ast.Tuple
            )
            return node.lineno, node.value
    return None


def _creation_line(tree: ast.Module, value: ast.AST | None, before: int) -> int | None:
    """Where the stored variable was assigned last before ``before`` (e.g. ``loss = ...``)."""
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} if value else set()
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno < before:
            for t in node.targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Name) and e.id in names and node.lineno > (best or 0):
                        best = node.lineno
    return best


# ---- allocator-fragmentation ----------------------------------------------------------------


def fragmentation(samples: list[tuple[int, int]]) -> bool:
    """True when reserved memory keeps growing while allocated memory stays flat.

    ``samples`` are (allocated, reserved) byte counts taken every few steps. A caching
    allocator that reserves more and more for the same live bytes is fragmenting.

    Example:
        >>> fragmentation([(100, 200 + 10 * i) for i in range(10)])
        True
        >>> fragmentation([(100 + 10 * i, 200 + 10 * i) for i in range(10)])
        False
    """
    if len(samples) < 8:
        return False
    allocated = [a for a, _ in samples]
    reserved = [r for _, r in samples]
    flat = max(allocated) <= 1.05 * max(min(allocated), 1)
    rises = sum(b > a for a, b in zip(reserved, reserved[1:]))
    grows = reserved[-1] >= 1.25 * max(reserved[0], 1) and rises >= len(reserved) // 2
    return flat and grows


def climbing(samples: list[tuple[int, int]]) -> bool:
    """True when allocated memory rises at most samples and by a fifth overall: a leak.

    Example:
        >>> climbing([(100 + 30 * i, 400) for i in range(10)])
        True
        >>> climbing([(100, 400)] * 10)
        False
    """
    if len(samples) < 8:
        return False
    allocated = [a for a, _ in samples]
    rises = sum(b > a for a, b in zip(allocated, allocated[1:]))
    return rises >= 0.8 * (len(allocated) - 1) and allocated[-1] >= 1.2 * max(allocated[0], 1)


def _cuda_memory() -> tuple[int, int] | None:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


class AllocatorProbe:
    """CUDA memory sampled every few steps, as the seeds' MemoryMonitor does: allocated
    climbing is a leak, reserved climbing while allocated stays flat is fragmentation.

    A leak is reported here only when no holder was named already (the holder scan is
    the precise signal, and the one that works on the CPU too). Without CUDA there is
    nothing to sample and the probe stays silent.
    """

    EVERY = 10
    WINDOW = 12

    def __init__(self, sample: Any = _cuda_memory) -> None:
        self.sample = sample
        self.samples: deque[tuple[int, int]] = deque(maxlen=self.WINDOW)

    def on_step(self, doc: Any, event: StepEvent) -> None:
        if event.step % self.EVERY or event.frame is None:
            return
        value = self.sample()
        if value is None:
            doc.unsubscribe(self, "on_step")  # no CUDA: nothing to sample, ever
            return
        self.samples.append(value)
        named = any(f.code in ("graph-retained", "tensor-accumulation") for f in doc.findings)
        if climbing(list(self.samples)) and not named:
            first, last = self.samples[0][0], self.samples[-1][0]
            doc.add(
                Finding(
                    code="tensor-accumulation",
                    severity="warning",
                    file=event.frame.f_code.co_filename,
                    line=event.frame.f_lineno,
                    message=f"allocated device memory grows step over step ({first:,} -> "
                    f"{last:,} bytes over {len(self.samples) * self.EVERY} steps); the "
                    "doctor could not name what holds it",
                    why="something keeps device tensors from every step: memory runs out",
                    fix="look for tensors kept across steps (lists, dicts, attributes, "
                    "caches); keep .item() floats or .detach().cpu() copies instead",
                    evidence={"samples": [list(s) for s in self.samples]},
                )
            )
        elif fragmentation(list(self.samples)):
            allocated, reserved = self.samples[-1]
            doc.add(
                Finding(
                    code="allocator-fragmentation",
                    severity="warning",
                    file=event.frame.f_code.co_filename,
                    line=event.frame.f_lineno,
                    message=f"reserved memory grows ({self.samples[0][1]:,} -> {reserved:,} "
                    f"bytes) while allocated memory stays flat (~{allocated:,} bytes)",
                    why="the caching allocator cannot reuse its fragmented blocks and keeps "
                    "reserving more: an out-of-memory can come with free memory left",
                    fix="set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; keep tensor "
                    "shapes steady (pad variable-length batches to a few sizes)",
                    evidence={"samples": [list(s) for s in self.samples]},
                )
            )
