"""The ``softmax-before-loss`` probe: probabilities given to a loss that applies the
softmax (or the sigmoid) itself, recognized by the operation that made them."""

from __future__ import annotations

import torch

from trainwell.doctor.events import LossEvent, Reporter
from trainwell.doctor.findings import Finding

_PASS_THROUGH = ("ToCopyBackward", "ViewBackward", "ReshapeAliasBackward", "SqueezeBackward",
                 "UnsqueezeBackward", "CloneBackward", "PermuteBackward", "TBackward",
                 "TransposeBackward", "AliasBackward", "UnsafeViewBackward",
                 "ClampBackward", "ClampMinBackward", "ClampMaxBackward",
                 # indexing and slicing pass the probabilities through, as views do
                 "IndexBackward", "SliceBackward", "SelectBackward", "MaskedSelectBackward",
                 "NarrowBackward", "ExpandBackward", "SplitBackward", "UnbindBackward")  # fmt: skip


def _producer(t: torch.Tensor) -> str:
    """The name of the operation that made ``t``, looking through copies and views."""
    node = t.grad_fn
    for _ in range(4):
        if node is None:
            return ""
        name = type(node).__name__
        if not name.startswith(_PASS_THROUGH):
            return name
        nxt = [n for n, _ in node.next_functions if n is not None]
        node = nxt[0] if nxt else None
    return ""


class SoftmaxBeforeLossProbe:
    """``softmax-before-loss``: ``cross_entropy`` / ``nll_loss`` given the output of a
    softmax, ``binary_cross_entropy_with_logits`` the output of a sigmoid, through
    copies, views, indexing and slicing. The first ``ALWAYS`` calls with a graph are
    looked at: an evaluation under ``no_grad`` first (nanoGPT's ``estimate_loss`` runs
    hundreds of losses before the first step) tells nothing, and does not count."""

    ALWAYS = 64

    def __init__(self) -> None:
        self.calls = 0

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        if not isinstance(event.input, torch.Tensor) or event.input.grad_fn is None:
            return  # no graph (no_grad, or not the model's output): the producer is unknown
        self.calls += 1
        if self.calls > self.ALWAYS:
            doc.unsubscribe(self, "on_loss")  # the wiring is the same every step
            return
        made_by = _producer(event.input)
        if event.name in ("cross_entropy", "nll_loss") and made_by.startswith("SoftmaxBackward"):
            what = "softmax probabilities"
            fix = ("pass the raw logits (drop the softmax; apply it only to report "
                   "probabilities)")  # fmt: skip
            if event.name == "nll_loss":
                fix = "use F.log_softmax instead of softmax before nll_loss"
        elif event.name == "binary_cross_entropy_with_logits" and made_by.startswith(
            "SigmoidBackward"
        ):
            what = "sigmoid probabilities"
            fix = "pass the raw logits (drop the sigmoid)"
        else:
            return
        site = event.site
        if site is None:
            return
        doc.add(
            Finding(
                code="softmax-before-loss",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{event.name} is given {what}, but it applies "
                f"{'the sigmoid' if 'binary' in event.name else 'log-softmax'} itself",
                why="squashing twice flattens the gradients: the loss can barely move and "
                "the model learns slowly or stalls",
                fix=fix,
                evidence={"producer": made_by},
            )
        )

