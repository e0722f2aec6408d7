"""The numerics probes: a loss, a batch or gradients turning NaN/Inf, and a GradScaler
that keeps skipping steps.

A NaN loss is located by replaying the step's forward on the same inputs with a
``TorchFunctionMode`` that checks every operation: the first one whose inputs are all
finite and whose output is not is the origin, and its line in the user's code is where
the fix goes. The normal case costs one finiteness check of the loss per step (on the
CPU: a scalar; on a GPU the flag stays on the device and is read every few steps, so the
loop never waits for it).
"""

from __future__ import annotations

import ast
import math
import random
import sys
import weakref
from collections import deque
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from trainwell.doctor.findings import Finding
from trainwell.doctor.frame import (
    BackwardEvent,
    BatchEvent,
    ForwardEvent,
    ScalerEvent,
    Site,
    StepEvent,
    user_frame,
)
from trainwell.doctor.probes import _walk
from trainwell.doctor.source import parse, qualified_names


def _float_tensors(
    value: Any, out: list[torch.Tensor] | None = None, depth: int = 0
) -> list[torch.Tensor]:
    """The floating-point tensors in ``value`` (nested tuples, lists and dicts)."""
    out = [] if out is None else out
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _float_tensors(v, out, depth)
    elif isinstance(value, dict):
        for v in value.values():
            _float_tensors(v, out, depth)
    elif depth < 2 and hasattr(value, "__dict__") and not isinstance(value, (type, nn.Module)):
        for v in vars(value).values():  # a batch object of the user's (a dataclass)
            _float_tensors(v, out, depth + 1)
    return out


def _finite(tensors: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.numel())


def _nonfinite_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_nonfinite_scalar(v) for v in value)
    if isinstance(value, dict):
        return any(_nonfinite_scalar(v) for v in value.values())
    return False


class _Origin(TorchFunctionMode):
    """Records the first operation that makes a non-finite value out of finite ones, the
    user's line that ran it and the module it ran in."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__()
        self.names = names
        self.modules: list[str] = []  # the module call stack, by qualified name
        self.found: dict[str, Any] | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        kwargs = kwargs or {}
        # The inputs are judged before the call: an in-place op overwrites them. An op
        # given an infinite number on purpose (masked_fill(mask, -inf), a causal mask
        # made with torch.full) is not where a NaN begins.
        clean = self.found is None and _finite(_float_tensors((args, kwargs)))
        clean = clean and not _nonfinite_scalar((args, kwargs))
        out = func(*args, **kwargs)
        if clean:
            produced = _float_tensors(out)
            if produced and not _finite(produced):
                site = Site.of(user_frame(start=sys._getframe(1)))
                self.found = {
                    "op": getattr(func, "__name__", str(func)),
                    "module": self.modules[-1] if self.modules else "",
                    "site": site,
                }
        return out


class NonFiniteProbe:
    """``nonfinite-loss``, ``nonfinite-input`` and ``nonfinite-grad``: the first step whose
    loss, batch or gradients hold NaN/Inf, traced to where it began. Only the first
    cause is reported: everything after it is its consequence."""

    GRAD_ALWAYS = 16  # gradients checked at each of the first steps
    DEVICE_EVERY = 16  # a GPU loss flag is read this often

    def __init__(self) -> None:
        self.done = False
        self.batch: BatchEvent | None = None
        # this step's grad-enabled forwards: (model, args, kwargs, site, autocast)
        self.forwards: list[tuple[nn.Module, tuple, dict, Any, Any]] = []
        self.forwards_step = 0  # the optimizer step those forwards belong to
        self.backward_site: Any = None  # event.pin() of the last backward
        self.losses: deque[float] = deque(maxlen=50)  # recent finite losses (CPU only)
        self.bad_loss_step = -1
        self.flag: torch.Tensor | None = None  # GPU: any non-finite loss since last read
        self.backwards = 0
        self.in_scaler = False
        self.devices: weakref.WeakKeyDictionary[nn.Module, Any] = weakref.WeakKeyDictionary()

    def on_batch(self, doc: Any, event: BatchEvent) -> None:
        self.batch = event

    def on_forward(self, doc: Any, event: ForwardEvent) -> None:
        if not event.grad_enabled or self.done:
            return
        device = self.devices.get(event.module, False)
        if device is False:  # looked up once per module: parameters() walks the tree
            device = self.devices[event.module] = _float_param_device(event.module)
        if device is None:
            return  # no floating-point weights: a loss module, not a model
        autocast = None
        try:
            if torch.is_autocast_enabled(device.type):
                autocast = (device.type, torch.get_autocast_dtype(device.type))
        except RuntimeError:  # a device type autocast does not know (meta)
            pass
        # A step may chain models (a backbone, then a head): the NaN may come from any.
        if self.forwards_step != doc.steps:
            self.forwards, self.forwards_step = [], doc.steps  # a new step
        elif len(self.forwards) >= 4:
            self.forwards.pop(0)
        self.forwards.append((event.module, event.args, event.kwargs, event.pin(), autocast))

    def on_backward(self, doc: Any, event: BackwardEvent) -> None:
        if self.done:
            return
        self.backwards += 1
        if self.backwards <= self.GRAD_ALWAYS + 1:
            self.backward_site = event.pin()  # for the gradient checks of the first steps
        loss = event.tensor
        if loss.device.type != "cpu":
            # No host sync per step: the flag accumulates on the device.
            bad = ~torch.isfinite(loss.detach()).all()
            self.flag = bad if self.flag is None else self.flag | bad
            if self.backwards % self.DEVICE_EVERY or not bool(self.flag):
                return
        elif loss.numel() == 1:
            value = event.value  # a scalar on the CPU: cheaper than torch.isfinite
            if value is not None and math.isfinite(value):
                self.losses.append(value)
                return
        elif bool(torch.isfinite(loss.detach()).all()):
            return
        self.bad_loss_step = doc.steps
        self.backward_site = event.pin()
        self._done(doc)
        self._explain_loss(doc, event, loss.detach())

    def on_scaler_step(self, doc: Any, event: ScalerEvent) -> None:
        # GradScaler checks and skips non-finite gradients itself: not a finding.
        self.in_scaler = True

    def on_pre_step(self, doc: Any, event: StepEvent) -> None:
        in_scaler, self.in_scaler = self.in_scaler, False
        if event.step > self.GRAD_ALWAYS:
            # Later, a non-finite gradient shows as NaN weights, then a NaN loss: the loss
            # check reports it then (as nonfinite-grad), so the steps stop paying here.
            doc.unsubscribe(self, "on_pre_step", "on_scaler_step")
            return
        if self.done or in_scaler or self.bad_loss_step == doc.steps:
            return
        grads = [p.grad for g in event.optimizer.param_groups for p in g["params"]
                 if p.grad is not None and not p.grad.is_sparse]  # fmt: skip
        if not grads or _finite_norms(grads):
            return
        self._done(doc)
        names = self._param_names()
        bad = [names.get(id(p), "?") for g in event.optimizer.param_groups for p in g["params"]
               if p.grad is not None and not _finite([p.grad])]  # fmt: skip
        self._report_grad(doc, bad, "the gradients are NaN/Inf while the loss is finite")

    def _done(self, doc: Any) -> None:
        """The first cause is found: what follows is its consequence."""
        self.done = True
        doc.unsubscribe(self, "on_batch", "on_forward", "on_backward", "on_scaler_step",
                        "on_pre_step")  # fmt: skip

    # ---- explaining a non-finite loss ---------------------------------------------------------

    def _explain_loss(self, doc: Any, event: BackwardEvent, loss: torch.Tensor) -> None:
        site = event.site
        if site is None:
            return
        # 1. The data was already bad.
        batch = self.batch
        if batch is not None and not _finite(_float_tensors(batch.batch)):
            where = batch.site or site
            what = f"batch {batch.index} of this pass over the DataLoader holds NaN/Inf"
            doc.add(_input_finding(where, what, {"batch_index": batch.index}))
            return
        trend = self._trend()
        evidence: dict[str, Any] = {"step": doc.steps + 1, "loss": str(loss.flatten()[0].item())}
        fwd_site = self.forwards[-1][3]() if self.forwards else None
        for model, args, kwargs, pinned, autocast in self.forwards:
            at = pinned()
            inputs = _float_tensors((args, kwargs))
            # Inputs made by an earlier model of this step are that model's business.
            if not _finite([t for t in inputs if t.grad_fn is None]):
                doc.add(_input_finding(at or site, "the model's input holds NaN/Inf", {}))
                return
            # 2. The weights were already bad: an earlier update was not finite.
            bad_params = [n for n, p in model.named_parameters() if not _finite([p.detach()])]
            if bad_params:
                self._report_grad(doc, bad_params, "the weights themselves are NaN/Inf: an "
                                  "earlier optimizer step applied non-finite values")  # fmt: skip
                return
            # 3. Replay the forward and find the first operation that went non-finite.
            origin, finite_output = _replay(doc, model, args, kwargs, autocast,
                                            qualified_names(model))  # fmt: skip
            if origin is not None and origin["site"] is not None:
                module = origin["module"] or type(model).__name__
                what = (f"`{origin['op']}` in {module} turned finite inputs into NaN/Inf "
                        "(the model's first non-finite value)")  # fmt: skip
                evidence.update(module=module, op=origin["op"], inputs_finite=True)
                doc.add(_loss_finding(origin["site"], site, what, evidence, trend, at))
                return
            if not finite_output:
                what = "the model's output is NaN/Inf (the operation could not be told)"
                doc.add(_loss_finding(at or site, site, what, evidence, trend, at))
                return
        # 4. The models' outputs are finite: the loss, or what it compares them with.
        line = _loss_assignment(site) or site
        if _nan_data_in_graph(event.tensor):
            what = "a tensor the loss uses besides the model's output (the targets?) holds NaN"
            doc.add(_input_finding(line, what, {}))
            return
        evidence.update(model_output_finite=True)
        what = "the model's output is finite; the loss computation turned it into NaN/Inf"
        doc.add(_loss_finding(line, site, what, evidence, trend, fwd_site))

    def _trend(self) -> str:
        losses = list(self.losses)
        if len(losses) >= 5 and losses[-1] > 10 * max(min(losses), 1e-8) and losses[-1] > 1:
            return (f"the loss rose from {min(losses):.3g} to {losses[-1]:.3g} over the last "
                    f"{len(losses)} steps before it: the training diverged")  # fmt: skip
        return ""

    def _param_names(self) -> dict[int, str]:
        return {id(p): n for f in self.forwards for n, p in f[0].named_parameters()}

    def _report_grad(self, doc: Any, params: list[str], what: str) -> None:
        site = self.backward_site() if self.backward_site is not None else None
        if site is None:
            return
        doc.add(
            Finding(
                code="nonfinite-grad",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{what} (first: {', '.join(params[:5]) or 'unknown'})",
                why="one non-finite gradient makes the weights NaN at the next step, and "
                "every loss after it",
                fix="find the operation with a singular gradient (sqrt, norm, log, acos, "
                "pow at 0: add an eps, e.g. torch.sqrt(x + 1e-8)); clip gradients "
                "(torch.nn.utils.clip_grad_norm_); torch.autograd.detect_anomaly() names "
                "the backward op",
                evidence={"parameters": params[:20], "step": doc.steps + 1},
            )
        )


def _loss_finding(
    site: Site, backward: Site, what: str, evidence: dict, trend: str, fwd: Site | None = None
) -> Finding:
    related = [{"file": backward.file, "line": backward.line, "what": "backward of the loss"}]
    if fwd is not None and (fwd.file, fwd.line) != (site.file, site.line):
        related.append({"file": fwd.file, "line": fwd.line, "what": "the model's call"})
    if trend:
        fix = ("lower the learning rate (or add warmup), clip gradients with "
               "torch.nn.utils.clip_grad_norm_, and normalize the inputs")  # fmt: skip
    else:
        fix = ("keep the operation in its finite range: add an eps (log(x + 1e-8), "
               "x / (y + 1e-8)), clamp, or use the stable fused form (F.log_softmax, "
               "F.cross_entropy on logits, BCEWithLogitsLoss)")  # fmt: skip
    return Finding(
        code="nonfinite-loss",
        severity="error",
        file=site.file,
        line=site.line,
        message=f"the loss became NaN/Inf at step {evidence.get('step', '?')}: {what}"
        + (f"; {trend}" if trend else ""),
        why="a NaN loss gives NaN gradients, and one optimizer step makes every weight NaN",
        fix=fix,
        related=related,
        evidence=evidence,
    )


def _input_finding(site: Site, what: str, evidence: dict) -> Finding:
    return Finding(
        code="nonfinite-input",
        severity="error",
        file=site.file,
        line=site.line,
        message=f"{what}; the loss turned NaN/Inf with it",
        why="a single NaN in a batch makes the loss, the gradients and then every weight NaN",
        fix="clean the data where it is loaded: impute or drop missing values "
        "(np.nan_to_num, fillna), check divisions in the preprocessing; "
        "assert torch.isfinite(x).all() in the Dataset",
        evidence=evidence,
    )


def _replay(
    doc: Any, model: nn.Module, args: tuple, kwargs: dict, autocast: Any, names: dict[int, str]
) -> tuple[dict[str, Any] | None, bool]:
    """Run the forward again on the same inputs and find the first non-finite operation;
    also whether the output came out finite.

    Nothing of the run changes: no graph is built, the RNG state and the buffers
    (BatchNorm statistics) are put back, and the doctor hears no events meanwhile.
    """
    # Batch norm in training mode would update its statistics in place, bumping their
    # version: the user's backward, about to run, would refuse them. Without tracking it
    # normalizes with the batch's statistics just the same and writes nothing.
    norms = [m for m in model.modules()
             if isinstance(m, nn.modules.batchnorm._NormBase) and m.training
             and m.track_running_stats]  # fmt: skip
    buffers = [(b, b._version, b.detach().clone()) for b in model.buffers()]
    rng = torch.get_rng_state()
    py_rng = random.getstate()  # a model may draw from Python's or NumPy's RNG (layerdrop)
    np_rng = _numpy_rng()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    mode = _Origin(names)

    def enter(module: nn.Module, inputs: Any) -> None:
        mode.modules.append(names.get(id(module), type(module).__name__))

    def leave(module: nn.Module, inputs: Any, output: Any) -> None:
        mode.modules.pop()  # a hook's return value would replace the output

    hooks = [
        nn.modules.module.register_module_forward_pre_hook(enter),
        nn.modules.module.register_module_forward_hook(leave),
    ]
    for m in norms:
        m.track_running_stats = False
    try:
        with doc.muted(), torch.no_grad():
            cast = torch.autocast(autocast[0], dtype=autocast[1]) if autocast else None
            with mode, cast if cast is not None else _nothing():
                output = model(*args, **kwargs)
        finite_output = _finite(_float_tensors(output))
    except Exception:
        return None, True  # a replay that fails explains nothing; never disturb the run
    finally:
        for h in hooks:
            h.remove()
        for m in norms:
            m.track_running_stats = True
        for b, version, saved in buffers:
            # Only what the replay changed (a custom module's own state): writing a buffer
            # bumps its version, and one the graph saved would fail the user's backward.
            if b._version != version:
                b.copy_(saved)
        torch.set_rng_state(rng)
        random.setstate(py_rng)
        if np_rng is not None:
            import numpy

            numpy.random.set_state(np_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    return mode.found, finite_output


def _numpy_rng() -> Any:
    numpy = sys.modules.get("numpy")
    return numpy.random.get_state() if numpy is not None else None


def _nan_data_in_graph(loss: torch.Tensor, limit: int = 2000) -> bool:
    """Whether the loss's graph saved a data tensor (no history, e.g. the targets)
    holding NaN."""
    if loss.grad_fn is None:
        return False
    for node in _walk(loss.grad_fn, limit):
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except RuntimeError:  # freed, or not a tensor
                continue
            if (isinstance(value, torch.Tensor) and value.grad_fn is None
                    and not value.requires_grad and value.is_floating_point()
                    and bool(torch.isnan(value).any())):  # fmt: skip
                return True
    return False


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _loss_assignment(backward: Site) -> Site | None:
    """The statement that computed the tensor ``backward`` was called on (``loss = ...``
    before ``loss.backward()`` in the same function)."""
    tree = parse(backward.file)
    if tree is None:
        return None
    name = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node, "lineno", 0) == backward.line:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "backward":
                target = func.value
                # scaler.scale(loss).backward() -> loss
                if isinstance(target, ast.Call) and target.args:
                    target = target.args[0]
                if isinstance(target, ast.Name):
                    name = target.id
    if name is None:
        return None
    assigns = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and node.lineno < backward.line
        and any(
            isinstance(t, ast.Name) and t.id == name
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    if not assigns:
        return None
    assign = max(assigns, key=lambda n: n.lineno)
    # loss = my_loss(out, y), with my_loss defined in this file: the line is in there.
    value = assign.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == value.func.id:
                return Site(backward.file, _risky_line(node))
    return Site(backward.file, assign.lineno)


_RISKY = {"log", "log2", "log10", "sqrt", "rsqrt", "pow", "exp", "div", "acos", "asin",
          "reciprocal", "log1p"}  # fmt: skip


def _guarded(call: ast.Call) -> bool:
    """A call whose argument is kept in range: log(p.clamp(min=1e-7)), sqrt(x + eps)."""
    for node in ast.walk(ast.Tuple(elts=list(call.args), ctx=ast.Load())):
        if isinstance(node, ast.Call) and getattr(
            node.func, "attr", getattr(node.func, "id", "")
        ) in ("clamp", "clamp_min", "clip", "maximum", "max", "abs", "softplus"):
            return True
        if isinstance(node, ast.Name) and "eps" in node.id.lower():
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (
            isinstance(node.right, ast.Constant) or isinstance(node.left, ast.Constant)
        ):
            return True
    return False


def _risky_line(fn: ast.FunctionDef) -> int:
    """The first line of ``fn`` with an operation that makes NaN/Inf at the edge of its
    domain (log, sqrt, a division, ...), else its last ``return``."""
    calls = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and getattr(n.func, "attr", getattr(n.func, "id", "")) in _RISKY
        and not _guarded(n)
    ]
    divisions = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.Pow))
    ]
    # exp/log/sqrt are where NaN usually starts; a division by a constant rarely is.
    if calls or divisions:
        return min(calls or divisions)
    returns = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Return)]
    return max(returns) if returns else fn.lineno


def _finite_norms(grads: list[torch.Tensor]) -> bool:
    """Whether every gradient is finite: the max-abs norm, which (unlike the 2-norm) does
    not overflow on large finite values and is NaN when any element is."""
    try:
        norms = torch._foreach_norm(grads, float("inf"))
    except (RuntimeError, TypeError):
        norms = [g.abs().max() for g in grads]
    return bool(torch.isfinite(torch.stack([n.float().cpu() for n in norms])).all())


def _float_param_device(module: nn.Module) -> torch.device | None:
    """The device of the module's first floating-point parameter, if it has one."""
    for p in module.parameters():
        if p.is_floating_point():
            return p.device
    return None


# ---- amp-overflow -------------------------------------------------------------------------


class AmpOverflowProbe:
    """``amp-overflow``: a GradScaler skipping a large share of its steps after the scale
    has settled, or a scale collapsing toward zero (gradients overflow fp16 even
    unscaled). Skips while the scale settles at the start are how GradScaler works."""

    SETTLE = 20  # the first updates find the scale: skips there are normal
    WINDOW = 20  # updates judged at least
    SHARE = 0.25  # of the steps after SETTLE skipped
    FLOOR = 1.0  # a scale below this: fp16 overflows even without scaling
    RESOLVE = 16  # GPU: scales read in batches, one host sync per this many steps

    def __init__(self) -> None:
        self.sites: dict[int, Site | None] = {}
        self.pending: list[tuple[Any, torch.Tensor, torch.Tensor]] = []
        self.records: dict[int, ScalerRecord] = {}
        self.reported: set[int] = set()

    def on_scaler_step(self, doc: Any, event: ScalerEvent) -> None:
        if id(event.scaler) not in self.sites:
            self.sites[id(event.scaler)] = event.site

    def on_scaler_update(self, doc: Any, event: ScalerEvent) -> None:
        scaler = event.scaler
        if id(scaler) in self.reported:
            return
        self.pending.append((scaler, event.scale_before, scaler._scale.detach().clone()))
        if event.scale_before.device.type == "cpu" or len(self.pending) >= self.RESOLVE:
            self._resolve(doc)

    def on_end(self, doc: Any) -> None:
        self._resolve(doc)

    def _resolve(self, doc: Any) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return
        scales = [t.reshape(-1)[0].float() for _, before, after in pending for t in (before, after)]
        try:
            values = torch.stack(scales).cpu().tolist()  # one transfer for the batch
        except RuntimeError:  # scalers on different devices
            values = [float(v) for v in scales]
        for i, (scaler, _, _) in enumerate(pending):
            record = self.records.setdefault(id(scaler), ScalerRecord())
            record.add(values[2 * i], values[2 * i + 1])
            if id(scaler) not in self.reported and record.overflowing():
                self.reported.add(id(scaler))
                self._report(doc, scaler, record)

    def _report(self, doc: Any, scaler: Any, record: ScalerRecord) -> None:
        site = self.sites.get(id(scaler))
        if site is None:
            return
        doc.add(
            Finding(
                code="amp-overflow",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"GradScaler skipped {record.skipped} of {record.updates} optimizer "
                f"steps (inf/NaN gradients) and its scale is down to {record.scale:.3g}",
                why="a skipped step does not train: the model learns only on the steps that "
                "fit in fp16, and a collapsing scale means gradients overflow even unscaled",
                fix="lower the learning rate; clip gradients after scaler.unscale_(optimizer); "
                "train in bf16 (same range as fp32, no scaler needed) where the hardware has "
                "it; keep the overflowing layer (softmax, norms, the loss) in fp32 with "
                "torch.autocast(..., enabled=False)",
                evidence={
                    "skipped": record.skipped,
                    "updates": record.updates,
                    "scale": record.scale,
                    "min_scale": record.min_scale,
                },
            )
        )


class ScalerRecord:
    """What the verdict needs of a GradScaler's updates, summed as they come: the
    history itself would grow with the run, and judging it anew each step would cost
    more with every step."""

    def __init__(self) -> None:
        self.updates = 0
        self.skipped = 0  # updates that backed the scale off (inf/NaN gradients)
        self.settled = 0  # updates after the first SETTLE
        self.settled_skipped = 0
        self.scale = math.nan  # after the last update
        self.min_scale = math.inf

    def add(self, before: float, after: float) -> None:
        skipped = after < before
        self.updates += 1
        self.skipped += skipped
        if self.updates > AmpOverflowProbe.SETTLE:
            self.settled += 1
            self.settled_skipped += skipped
        self.scale = after
        self.min_scale = min(self.min_scale, after)

    def overflowing(self) -> bool:
        """The scale below the floor (or NaN), or a share of the settled updates
        skipped, over at least WINDOW of them."""
        rules = AmpOverflowProbe
        if not self.updates:
            return False
        if self.scale < rules.FLOOR or math.isnan(self.scale):
            return True
        if self.settled < rules.WINDOW:
            return False
        return self.settled_skipped / self.settled >= rules.SHARE


def overflowing(history: list[tuple[float, float]]) -> bool:
    """Whether a GradScaler's (scale before, scale after) updates show a problem.

    Example:
        >>> overflowing([(65536.0, 32768.0)] * 3 + [(32768.0, 32768.0)] * 60)
        False
        >>> overflowing([(2.0 ** -k, 2.0 ** -(k + 1)) for k in range(30)])
        True
    """
    record = ScalerRecord()
    for before, after in history:
        record.add(before, after)
    return record.overflowing()
