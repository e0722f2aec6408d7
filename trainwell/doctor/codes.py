"""The catalog of the doctor's finding codes: each code once, with its default severity,
a one-line summary and its page, ``docs/doctor/<code>.md`` (what, why, the fix and a
minimal script that shows it).

The source of truth for the codes (DESIGN.md says so): a test checks that every code the
doctor can emit is here, that the doctor's code table (``docs/doctor/index.md``) and the
list of codes (``docs/doctor/codes.md``) name exactly these codes, and that each page's
script, run under ``trainwell doctor``, reports its code. A
probe may report a finding at another severity than the default (a one-off generation
without ``no_grad`` is ``info``, not ``warning``); the default is what the code usually
means.

Example:
    >>> CODES["data-parallel"].severity
    'warning'
    >>> CODES["data-parallel"].doc
    'docs/doctor/data-parallel.md'
    >>> CODES["graph-retained"].doc
    'docs/doctor/graph-retained.md'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    """One finding code: ``code`` (kebab-case, as in the JSON), its default
    ``severity`` (``error``, ``warning`` or ``info``), a one-line ``summary``, and
    ``doc``: its page, relative to the repository (``docs/doctor/<code>.md``)."""

    code: str
    severity: str
    summary: str

    @property
    def doc(self) -> str:
        return f"docs/doctor/{self.code}.md"


_ALL = (
    # memory
    Code("graph-retained", "error", "a tensor with autograd history outlives its step (a list, "
         "+=, self, a recurrent state never detached)"),
    Code("tensor-accumulation", "warning", "memory grows step over step through tensors kept "
         "without history"),
    Code("eval-builds-graph", "warning", "forward passes with grad enabled that never reach a "
         "backward (validation without no_grad)"),
    Code("retain-graph", "warning", "backward(retain_graph=True) every step keeps graphs alive"),
    Code("allocator-fragmentation", "warning", "reserved CUDA memory grows while allocated "
         "memory is flat"),
    Code("oom", "error", "out of memory, explained: what held the memory and what to change"),
    # numerics
    Code("nonfinite-loss", "error", "the loss is NaN/Inf; the first operation that made it is "
         "named"),
    Code("nonfinite-input", "error", "a batch from the data pipeline holds NaN/Inf"),
    Code("nonfinite-grad", "error", "gradients NaN/Inf outside mixed precision's own skipping"),
    Code("amp-overflow", "error", "the GradScaler keeps skipping steps or its scale collapses"),
    # wiring
    Code("missing-zero-grad", "error", "gradients pile up across optimizer steps: never "
         "cleared"),
    Code("step-before-backward", "error", "optimizer.step() runs without fresh gradients"),
    Code("loss-no-gradient", "error", "a backward on a loss with no graph, or every gradient "
         "exactly zero"),
    Code("unregistered-module", "error", "an nn.Module in a plain list/dict attribute, "
         "invisible to parameters() and .to()"),
    Code("param-not-in-optimizer", "error", "a trainable parameter that no optimizer updates"),
    Code("param-without-grad", "warning", "a parameter in the optimizer that never gets a "
         "gradient"),
    Code("scheduler-not-stepped", "warning", "an LR scheduler that never steps, or steps "
         "before the optimizer"),
    # modes and data
    Code("train-mode-in-eval", "error", "evaluation while dropout / batch norm are in "
         "training mode"),
    Code("eval-mode-in-train", "error", "training through modules left in eval mode"),
    Code("sampler-epoch-not-set", "error", "a shuffling DistributedSampler reused across "
         "epochs without set_epoch"),
    Code("label-out-of-range", "error", "class targets outside [0, num_classes)"),
    Code("softmax-before-loss", "error", "probabilities fed to a loss that expects logits"),
    Code("device-mismatch", "error", "tensors on different devices meet, explained with which "
         "ones"),
    Code("data-bottleneck", "warning", "most of each step is spent waiting for data"),
    # learning
    Code("loss-at-init", "warning", "the first loss is far from what a fresh classifier gives "
         "(about ln C)"),
    Code("loss-not-decreasing", "warning", "no progress from the start"),
    Code("loss-broadcast", "error", "output and target shapes that the loss broadcasts "
         "silently"),
    # at a crash
    Code("inplace-modified", "error", "autograd's 'modified by an inplace operation' "
         "explained: the op, the cause, the line"),
    # practices (issue 24)
    Code("data-parallel", "warning", "nn.DataParallel wraps the model: use "
         "DistributedDataParallel"),
    Code("anomaly-mode-on", "warning", "autograd's anomaly detection left on for the "
         "training run: every step is slow"),
    Code("save-whole-model", "warning", "torch.save pickles a whole module or optimizer: save "
         "its state_dict"),
    Code("clip-before-backward", "warning", "gradient clipping runs before this step's "
         "backward: it clips nothing, or last step's gradients"),
    Code("sorted-labels-no-shuffle", "warning", "a training set sorted by label is fed in "
         "order (no shuffle, no sampler)"),
    Code("cuda-in-getitem", "warning", "a Dataset's __getitem__ puts tensors on the GPU: "
         "breaks or slows the loader's workers"),
    # at a crash (issue 24)
    Code("dataloader-worker-died", "error", "a DataLoader worker died or raised: the missing "
         "__main__ guard, or the worker's own error"),
    Code("numpy-on-grad-tensor", "error", ".numpy() on a tensor that requires grad: "
         "detach it first"),
    Code("inplace-on-leaf", "error", "an in-place operation on a leaf tensor that requires "
         "grad (a weight update outside no_grad)"),
)

CODES: dict[str, Code] = {c.code: c for c in _ALL}
SEVERITY: dict[str, str] = {c.code: c.severity for c in _ALL}


def severity(code: str) -> str:
    """The default severity of ``code`` (a ``KeyError`` for a code not in the catalog:
    a probe must not report one).

    Example:
        >>> severity("save-whole-model")
        'warning'
    """
    return CODES[code].severity
