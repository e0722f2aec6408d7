"""The ``nonfinite-input`` probe."""

from __future__ import annotations

from trainwell.doctor.events import BackwardEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.nonfinite_cause import first_cause


class NonFiniteInputProbe:
    """``nonfinite-input``: the first non-finite loss came from the data: the batch the
    DataLoader gave, the model's input, or a tensor the loss compares the output with
    (the targets). Checked when the loss goes NaN/Inf (reading every batch would cost
    every step); other causes are the other non-finite probes' to report."""

    def on_nonfinite_loss(self, doc: Reporter, event: BackwardEvent) -> None:
        doc.unsubscribe(self, "on_nonfinite_loss")  # the first one says it all
        cause = first_cause(doc, event)
        if cause is None or cause.code != "nonfinite-input":
            return
        doc.add(
            Finding(
                code="nonfinite-input",
                severity="error",
                file=cause.site.file,
                line=cause.site.line,
                message=f"{cause.what}; the loss turned NaN/Inf with it",
                why="a single NaN in a batch makes the loss, the gradients and then every "
                "weight NaN",
                fix="clean the data where it is loaded: impute or drop missing values "
                "(np.nan_to_num, fillna), check divisions in the preprocessing; "
                "assert torch.isfinite(x).all() in the Dataset",
                evidence=cause.evidence,
            )
        )
