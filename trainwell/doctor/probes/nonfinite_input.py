"""The ``nonfinite-input`` probe."""

from __future__ import annotations

from trainwell.doctor.events import BackwardEvent, BatchEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.nonfinite import all_finite, float_tensors
from trainwell.doctor.nonfinite_cause import first_cause


class NonFiniteInputProbe:
    """``nonfinite-input``: the first non-finite loss came from the data: the batch the
    DataLoader gave, the model's input, or a tensor the loss compares the output with
    (the targets). Checked when the loss goes NaN/Inf (reading every batch would cost
    every step); other causes are the other non-finite probes' to report.

    The line is where the NaN is made when it can be found (the dataset's transform, the
    line that computed a precomputed tensor), else the loop over the loader. After a
    bad first batch, the next ``FOLLOW`` batches are looked at too (the run is broken
    anyway), so that the report says whether every batch holds NaN or only some.
    """

    FOLLOW = 64  # batches looked at after the finding

    def __init__(self) -> None:
        self.finding: Finding | None = None
        self.seen = self.bad = 0

    def on_nonfinite_loss(self, doc: Reporter, event: BackwardEvent) -> None:
        doc.unsubscribe(self, "on_nonfinite_loss")  # the first one says it all
        cause = first_cause(doc, event)
        if cause is None or cause.code != "nonfinite-input":
            return
        fetched = cause.fetched
        related = [{"file": fetched.file, "line": fetched.line, "what": "the batch is fetched"
                    " here"}] if fetched is not None and fetched != cause.site else []  # fmt: skip
        self.finding = Finding(
            code="nonfinite-input",
            severity="error",
            file=cause.site.file,
            line=cause.site.line,
            message=f"{cause.what}; the loss turned NaN/Inf with it",
            why="a single NaN in a batch makes the loss, the gradients and then every "
            "weight NaN",
            fix="clean the data where it is loaded: impute or drop missing values "
            "(np.nan_to_num, fillna), keep divisions off zero (a per-pixel std is 0 "
            "where every image has the same value: std + 1e-8, or std.clamp(min=1e-8)); "
            "assert torch.isfinite(x).all() in the Dataset",
            related=related,
            evidence=cause.evidence,
        )
        doc.add(self.finding)
        # The first bad batch of the run: are they all bad? (Only then is it worth a look.)
        if cause.evidence.get("batch_index") == 1 and doc.steps == 0:
            self.seen = self.bad = 1
            doc.subscribe(self, "on_batch")

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        if not self.seen:  # the first batch of the run, before any finding: not yet
            doc.unsubscribe(self, "on_batch")
            return
        self.seen += 1
        self.bad += not all_finite(float_tensors(event.batch))
        if self.seen > self.FOLLOW or self.bad < self.seen:
            doc.unsubscribe(self, "on_batch")

    def on_end(self, doc: Reporter) -> None:
        f = self.finding
        if f is None or self.seen < 2:
            return
        if self.bad == self.seen:
            f.message = f.message.replace(
                "batch 1 of this pass over the DataLoader holds",
                f"every batch so far ({self.seen} of {self.seen} watched) holds", 1)
        f.evidence["batches_watched"], f.evidence["batches_nonfinite"] = self.seen, self.bad
