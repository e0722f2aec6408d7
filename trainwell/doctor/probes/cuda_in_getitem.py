"""The ``cuda-in-getitem`` probe."""

from __future__ import annotations

import ast
from typing import Any

from trainwell.doctor.codes import severity
from trainwell.doctor.events import BatchEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site, is_user_file, parse

CODE = "cuda-in-getitem"
_GPU_WORDS = ("cuda", "gpu", "device")


def _gpu_like(node: ast.AST | None, local: frozenset[str] = frozenset()) -> bool:
    """Whether an expression names an accelerator device, as written: ``"cuda"``,
    ``"cuda:0"``, ``torch.device("cuda")``, or a variable called ``device`` /
    ``self.device`` / ``DEVICE`` / ``gpu``. The intent is read, not the value: on a
    machine without a GPU, ``device = "cuda" if torch.cuda.is_available() else "cpu"``
    is the CPU, and the same code moves every sample to the GPU elsewhere. A local
    tensor's own ``x.device`` (``local``: the function's variables) is not a choice."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith(("cuda", "mps", "xpu"))
    if isinstance(node, ast.JoinedStr):
        head = node.values[0] if node.values else None
        return isinstance(head, ast.Constant) and str(head.value).startswith("cuda")
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
            node.func, "id", "")
        return name == "device" and bool(node.args) and _gpu_like(node.args[0], local)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in local:
            return False
        name = node.attr
    else:
        name = getattr(node, "id", None)
    return isinstance(name, str) and any(w in name.lower() for w in _GPU_WORDS)


def _locals(func: ast.AST) -> frozenset[str]:
    names = {a.arg for a in getattr(getattr(func, "args", None), "args", [])} - {"self"}
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return frozenset(names)


def gpu_calls(func: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of the calls in ``func`` that put a tensor on a GPU:
    ``.cuda()``, ``.to(<gpu>)``, ``device=<gpu>``.

    Example:
        >>> tree = ast.parse("def f(self, i):\\n    x = self.x[i].to(self.device)\\n"
        ...                  "    return x.cuda(), torch.zeros(2, device='cuda')")
        >>> gpu_calls(tree.body[0])
        [(2, '.to(self.device)'), (3, '.cuda()'), (3, "device='cuda'")]
    """
    found = []
    local = _locals(func)
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if attr == "cuda":
            found.append((node.lineno, ".cuda()"))
        elif attr == "to" and (any(_gpu_like(a, local) for a in node.args[:1])
                               or any(k.arg == "device" and _gpu_like(k.value, local)
                                      for k in node.keywords)):  # fmt: skip
            arg = node.args[0] if node.args else next(k.value for k in node.keywords
                                                      if k.arg == "device")  # fmt: skip
            found.append((node.lineno, f".to({ast.unparse(arg)})"))
        else:
            found += [(node.lineno, f"device={ast.unparse(k.value)}") for k in node.keywords
                      if k.arg == "device" and _gpu_like(k.value, local)]  # fmt: skip
    return sorted(set(found))


def _method_node(
    cls: type, name: str
) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The source of ``cls``'s method ``name`` (where it is defined, in the user's
    files): (file, its ``def``)."""
    func = next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), None)
    code = getattr(func, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    tree = parse(code.co_filename)
    for node in ast.walk(tree) if tree is not None else ():
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
                and code.co_firstlineno <= node.lineno <= code.co_firstlineno + len(
                    node.decorator_list)):  # fmt: skip
            return code.co_filename, node
    return None


def getitem_gpu_calls(cls: type) -> list[tuple[Site, str]]:
    """The GPU calls of ``cls.__getitem__`` and of the methods of its own it calls
    (``self._load(i)``)."""
    found = _method_node(cls, "__getitem__")
    if found is None:
        return []
    file, node = found
    nodes = [(file, node)]
    for call in ast.walk(node):
        f = getattr(call, "func", None) if isinstance(call, ast.Call) else None
        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                and f.value.id == "self" and f.attr != "__getitem__"):  # fmt: skip
            helper = _method_node(cls, f.attr)
            if helper is not None:
                nodes.append(helper)
    return [(Site(file, line), what) for file, n in nodes for line, what in gpu_calls(n)]


def _datasets(ds: Any, depth: int = 3) -> list[Any]:
    """The data set and those it wraps (``Subset``, ``ConcatDataset``)."""
    found = [ds]
    if depth > 0:
        inner = getattr(ds, "dataset", None)
        if inner is not None:
            found += _datasets(inner, depth - 1)
        for part in list(getattr(ds, "datasets", None) or [])[:8]:
            found += _datasets(part, depth - 1)
    return found


class CudaInGetitemProbe:
    """``cuda-in-getitem``: the ``__getitem__`` of a data set a DataLoader reads (or a
    method of its own that it calls) moves tensors to the GPU or makes them there.
    Read from the source, once per data set class, at its first batch: on a machine
    without a GPU the same line does nothing, and the intent is what matters."""

    def __init__(self) -> None:
        self.classes: set[type] = set()

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        if event.index != 1:
            return
        ds = event.loader._dataset
        for part in _datasets(ds):
            cls = type(part)
            if cls in self.classes:
                continue
            self.classes.add(cls)
            hits = getitem_gpu_calls(cls)
            if hits:
                self._report(doc, event, ds, cls, hits)

    def _report(self, doc: Reporter, event: BatchEvent, ds: Any, cls: type,
                hits: list[tuple[Site, str]]) -> None:  # fmt: skip
        site, what = hits[0]
        made = doc.loader_sites.get(id(ds))
        related = [{"file": made.file, "line": made.line, "what": "the DataLoader"}] if made else []
        workers = getattr(event.loader, "_num_workers", 0)
        doc.add(
            Finding(
                code=CODE,
                severity=severity(CODE),
                file=site.file,
                line=site.line,
                message=f"{cls.__name__}.__getitem__ puts each sample on the GPU ({what}): "
                "the loader's workers are CPU processes",
                why="in worker processes CUDA cannot start in a forked child (the workers "
                "die: 'Cannot re-initialize CUDA in forked subprocess'), and with "
                "num_workers=0 every sample is its own small host-to-device copy that "
                "blocks the loop; pin_memory cannot help",
                fix="keep __getitem__ on the CPU (return CPU tensors) and move the whole "
                "batch in the training loop: x, y = x.to(device, non_blocking=True), "
                "y.to(device, non_blocking=True); with DataLoader(..., num_workers=N, "
                "pin_memory=True)",
                related=related,
                evidence={"dataset": cls.__name__, "calls": [w for _, w in hits],
                          "num_workers": workers},  # fmt: skip
            )
        )
