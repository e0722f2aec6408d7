"""Crashes explained in one finding each, from PyTorch's own words: a DataLoader worker
that died or raised (``dataloader-worker-died``), ``.numpy()`` on a tensor that requires
grad (``numpy-on-grad-tensor``), an in-place operation on a leaf that requires grad
(``inplace-on-leaf``).

:func:`explain_common` is called by :func:`trainwell.doctor.crash.explain` first.
"""

from __future__ import annotations

import ast
import re
import types
from typing import Any

from trainwell.doctor.codes import severity
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site, is_user_file, parse

NUMPY_MARKER = "Can't call numpy() on Tensor that requires grad"
LEAF_MARKER = "leaf Variable that requires grad is being used in an in-place operation"
WORKER_DIED = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
WORKER_RAISED = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")
BOOTSTRAP = "before the current process has finished its bootstrapping phase"
CUDA_FORK = "Cannot re-initialize CUDA in forked subprocess"
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def explain_common(doc: Any, exc: BaseException, frame: types.FrameType) -> bool:
    """Add the finding that explains ``exc`` when it is one of this module's crashes;
    whether it was (``frame``: the innermost frame of the user's code)."""
    text = str(exc)
    # A worker's error first: its text holds the worker's own exception, whatever it is.
    if WORKER_DIED.search(text) or WORKER_RAISED.search(text) or BOOTSTRAP in text:
        doc.add(_worker(doc, exc, frame, text))
    elif NUMPY_MARKER in text:
        doc.add(_numpy(frame))
    elif LEAF_MARKER in text:
        doc.add(_leaf(frame, text))
    else:
        return False
    return True


def _statement(frame: types.FrameType) -> ast.stmt | None:
    """The innermost statement of the user's file that spans the frame's line."""
    tree = parse(frame.f_code.co_filename)
    line = frame.f_lineno
    best_stmt: ast.stmt | None = None
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.stmt) or not node.lineno <= line <= (node.end_lineno or line):
            continue
        if best_stmt is None or node.lineno >= best_stmt.lineno:
            best_stmt = node
    return best_stmt


def _numpy(frame: types.FrameType) -> Finding:
    stmt = _statement(frame)
    tensors = [ast.unparse(n.func.value) for n in ast.walk(stmt) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute) and n.func.attr == "numpy"] if stmt else []
    name = tensors[0] if tensors else None
    what = f"`{name}` requires grad" if name else "a tensor that requires grad"
    return Finding(
        code="numpy-on-grad-tensor",
        severity=severity("numpy-on-grad-tensor"),
        file=frame.f_code.co_filename,
        line=frame.f_lineno,
        message=f".numpy() (or np.array / a plot of a tensor) here: {what}, part of an "
        "autograd graph, and NumPy cannot follow the graph",
        why="a model's output, a loss or a parameter is tracked by autograd; its NumPy copy "
        "would silently drop the gradient, so PyTorch refuses",
        fix=(f"{name}.detach().cpu().numpy()" if name else
             "tensor.detach().cpu().numpy()") + " (or compute it under torch.no_grad(); for "
        "one number, .item())",
        evidence={"tensor": name},
    )


def _leaf(frame: types.FrameType, text: str) -> Finding:
    stmt = _statement(frame)
    target = _inplace_target(stmt) if stmt is not None else None
    what = f"`{target}`" if target else "a tensor"
    return Finding(
        code="inplace-on-leaf",
        severity=severity("inplace-on-leaf"),
        file=frame.f_code.co_filename,
        line=frame.f_lineno,
        message=f"an in-place operation changes {what}, a leaf tensor that requires grad "
        "(a weight), while autograd records",
        why="autograd would have to differentiate through the change of a tensor it is "
        "computing the gradient of; PyTorch refuses. A hand-written weight update or an "
        "initialization done outside torch.no_grad() is the usual case",
        fix=_leaf_fix(stmt, target or "w"),
        evidence={"tensor": target, "exception": " ".join(text.split())[:200]},
    )


def _leaf_fix(stmt: ast.AST | None, name: str) -> str:
    if isinstance(stmt, (ast.AugAssign, ast.Assign)):
        return (f"do the update under `with torch.no_grad():` (manual SGD: `with "
                f"torch.no_grad(): {name} -= lr * {name}.grad`, then {name}.grad.zero_()), or "
                "let an optimizer do it (torch.optim.SGD([...]).step())")
    return (f"initialize {name} before it requires grad (torch.empty(...).uniform_(a, b)"
            ".requires_grad_()), or under `with torch.no_grad():`, or with torch.nn.init "
            "(it uses no_grad); for a change that should be differentiated, write it out of "
            "place")


def _inplace_target(stmt: ast.AST) -> str | None:
    """``w`` of ``w -= lr * g``, ``w[0] = 1``, ``w.add_(g)`` / ``w.data.mul_()`` excluded."""
    if isinstance(stmt, ast.AugAssign):
        return ast.unparse(stmt.target)
    if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript):
        return ast.unparse(stmt.targets[0].value)
    for node in ast.walk(stmt):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and func.attr[0] != "_":
            return ast.unparse(func.value)
    return None


def _loader_iterator(exc: BaseException) -> Any:
    """The DataLoader iterator whose ``next()`` raised, from the traceback's frames."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, _BaseDataLoaderIter):
            return owner
        tb = tb.tb_next
    return None


def _worker(doc: Any, exc: BaseException, frame: types.FrameType, text: str) -> Finding:
    it = _loader_iterator(exc)
    made = doc.loader_sites.get(id(it._dataset)) if it is not None else None
    loop = Site(frame.f_code.co_filename, frame.f_lineno)
    site = made or loop
    related = [] if site == loop else [{"file": loop.file, "line": loop.line,
                                        "what": "the loop that reads it"}]  # fmt: skip
    raised = WORKER_RAISED.search(text)
    origin = _worker_origin(text) if raised else None
    if origin is not None:
        related.append({"file": origin.file, "line": origin.line, "what": "the worker's error"})
    message, fix = _worker_cause(it, frame, text, raised, origin)
    return Finding(
        code="dataloader-worker-died",
        severity=severity("dataloader-worker-died"),
        file=site.file,
        line=site.line,
        message=message,
        why="a worker process loads batches with your Dataset's code; when it dies the main "
        "process sees only that it is gone, and the real error is in the worker's output",
        fix=fix,
        related=related,
        evidence={"exception": " ".join(text.split())[:300],
                  "start_method": _start_method(it)},  # fmt: skip
    )


def _worker_cause(it: Any, frame: types.FrameType, text: str, raised: Any,
                  origin: Site | None) -> tuple[str, str]:  # fmt: skip
    rerun = "rerun with num_workers=0 to get the error and its traceback in the main process"
    if CUDA_FORK in text:
        return ("a DataLoader worker raised: CUDA was used inside the worker (the Dataset's "
                "__getitem__ or collate_fn puts tensors on the GPU)",
                "keep the Dataset on the CPU and move each batch in the loop "
                "(x.to(device, non_blocking=True)); or multiprocessing_context='spawn'")
    if raised is not None:
        at = f" at {origin.file}:{origin.line}" if origin else ""
        return (f"a DataLoader worker raised {raised.group(1)}{at} while loading a batch",
                f"fix the data code{at} (the 'Original Traceback' above); {rerun}")
    method = _start_method(it)
    if BOOTSTRAP in text or (method in ("spawn", "forkserver") and _unguarded(frame)):
        return ("DataLoader workers are started with 'spawn' and the script has no "
                "`if __name__ == \"__main__\":` guard: each worker re-runs the whole script, "
                "tries to start workers of its own, and dies",
                "put the training code under `if __name__ == \"__main__\":` (e.g. def main(): "
                "...; if __name__ == \"__main__\": main()); the default on Windows and macOS "
                "is spawn; or num_workers=0")
    return ("a DataLoader worker process died without a Python error (killed: out of memory, "
            "a crash in a C extension, or too little shared memory, /dev/shm in a container)",
            f"{rerun}; if it then runs, lower num_workers or the batch size, or give the "
            "container more shared memory (docker --shm-size)")


def _start_method(it: Any) -> str | None:
    workers = getattr(it, "_workers", None) or []
    name = type(workers[0]).__name__ if workers else ""
    for method in ("forkserver", "spawn", "fork"):
        if name.lower().startswith(method):
            return method
    return None


def _unguarded(frame: types.FrameType) -> bool:
    """Whether the script's top level runs the training outside an
    ``if __name__ == "__main__":`` block (the outermost user frame is module code)."""
    outer: types.FrameType | None = frame
    top = None
    while outer is not None:
        if is_user_file(outer.f_code.co_filename) and outer.f_code.co_name == "<module>":
            top = outer
        outer = outer.f_back
    if top is None:
        return False
    tree = parse(top.f_code.co_filename)
    line = top.f_lineno
    for node in tree.body if tree is not None else ():
        guard = isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
        if guard and node.lineno <= line <= (node.end_lineno or line):
            return False
    return True


def _worker_origin(text: str) -> Site | None:
    """The last line of the user's code in the worker's 'Original Traceback'."""
    found = [Site(f, int(n)) for f, n in _FILE_LINE.findall(text) if is_user_file(f)]
    return found[-1] if found else None
