"""The ``nonfinite-loss`` probe."""

from __future__ import annotations

import weakref
from typing import Any

from trainwell.doctor.events import BackwardEvent, CreatedEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.learning_rate import lr_related
from trainwell.doctor.nonfinite_cause import Cause, first_cause


class NonFiniteLossProbe:
    """``nonfinite-loss``: the first loss that is NaN/Inf, traced to where it began: the
    step's forward is replayed on the same inputs (nothing of the run disturbed) and the
    first operation that turned finite values into NaN/Inf is named; a loss that rose
    step over step before it is called a divergence.

    The first cause alone is reported, by the probe it belongs to (bad data:
    ``nonfinite-input``; weights made NaN by an earlier update: ``nonfinite-grad``):
    everything after it is its consequence. A divergence relates where the learning
    rate is set (the optimizer's construction, and the value's own line).
    """

    def __init__(self) -> None:
        self.optimizers: list[tuple[Any, Any]] = []  # (weak ref, where it was built)

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        self.optimizers.append((weakref.ref(event.obj), event.site))

    def on_nonfinite_loss(self, doc: Reporter, event: BackwardEvent) -> None:
        doc.unsubscribe(self, "on_nonfinite_loss", "on_optimizer_created")  # the first says it
        cause = first_cause(doc, event)
        if cause is None or cause.code != "nonfinite-loss":
            return
        trend = _trend(list(doc.recent_losses))
        finding = _finding(cause, trend)
        if trend:
            optimizers = [(ref(), site) for ref, site in self.optimizers]
            models = [r.module for r in doc.step_forwards]
            related, lr = lr_related([(o, s) for o, s in optimizers if o is not None], models)
            finding.related += related
            if lr:
                finding.fix = finding.fix.replace("lower the learning rate",
                                                  f"lower the learning rate ({lr})", 1)
        doc.add(finding)


def _trend(losses: list[float]) -> str:
    """A divergence, said in words, when the (three or more) losses before the NaN rose
    tenfold.

    Example:
        >>> _trend([0.5, 0.7, 2.0, 9.0, 40.0])[:35]
        'the loss rose from 0.5 to 40 over t'
    """
    if len(losses) >= 3 and losses[-1] > 10 * max(min(losses), 1e-8) and losses[-1] > 1:
        return (f"the loss rose from {min(losses):.3g} to {losses[-1]:.3g} over the last "
                f"{len(losses)} steps before it: the training diverged")  # fmt: skip
    return ""


def _finding(cause: Cause, trend: str) -> Finding:
    site, backward, fwd = cause.site, cause.backward, cause.forward
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
        message=f"the loss became NaN/Inf at step {cause.evidence.get('step', '?')}: "
        f"{cause.what}" + (f"; {trend}" if trend else ""),
        why="a NaN loss gives NaN gradients, and one optimizer step makes every weight NaN",
        fix=fix,
        related=related,
        evidence=cause.evidence,
    )
