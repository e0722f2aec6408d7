"""The ``data-parallel`` probe."""

from __future__ import annotations

from trainwell.doctor.codes import severity
from trainwell.doctor.events import CallEvent, Reporter
from trainwell.doctor.findings import Finding

CODE = "data-parallel"


class DataParallelProbe:
    """``data-parallel``: the user's code wraps a model in ``nn.DataParallel``. One
    process drives every GPU: the inputs are scattered and the weights copied to each
    device at every forward, the outputs gathered on the first, and the GIL serializes
    the Python; PyTorch itself recommends ``DistributedDataParallel`` even on one
    machine. Reported where the wrapper is made (it is a warning on CPU too: the script
    says what it does on a GPU machine)."""

    def on_call(self, doc: Reporter, event: CallEvent) -> None:
        if event.name != "DataParallel":
            return
        site = event.site
        if site is None:
            return
        wrapper = event.args[0]
        devices = list(getattr(wrapper, "device_ids", []) or [])
        doc.add(
            Finding(
                code=CODE,
                severity=severity(CODE),
                file=site.file,
                line=site.line,
                message="the model is wrapped in nn.DataParallel: one process drives every "
                "GPU, copying the weights to each one at every forward",
                why="DataParallel is single-process and GIL-bound: it scales poorly, keeps "
                "the outputs and the loss on the first GPU (its memory fills first), and "
                "PyTorch recommends DistributedDataParallel instead, even on one machine",
                fix="use DistributedDataParallel: one process per GPU (torchrun "
                "--nproc_per_node=N train.py), init_process_group, "
                "model = DDP(model.to(rank), device_ids=[rank]), a DistributedSampler for "
                "the training data; for one GPU, no wrapper at all",
                evidence={"device_ids": devices},
            )
        )
