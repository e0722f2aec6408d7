"""The verbs that take a model out of training: ``new``, ``export`` and ``predict``.

``new`` starts a project, ``export`` writes ONNX / TorchScript / safetensors checked for
parity, ``predict`` runs a run or an exported file on an array or a data split.
"""

from __future__ import annotations

import argparse
import sys

from trainwell.commands.common import Subparsers, add_debug

TASKS = ("classification", "regression", "language-model")


def register(sub: Subparsers) -> None:
    """Add ``new``, ``export`` and ``predict`` to the ``trainwell`` parser."""
    _new(sub)
    _export(sub)
    _predict(sub)


def _new(sub: Subparsers) -> None:
    new = sub.add_parser(
        "new",
        help="start a project that trains and passes its own tests at once",
        description="Write a small project into DIR (created if missing; refused if not "
        "empty): configs/default.yaml, src/<name>/ (model, data), tests/, pinned "
        "requirements.txt, README.md, .gitignore. Then, inside it: trainwell train --config "
        "configs/default.yaml, and pytest.",
    )
    new.add_argument("dir", metavar="DIR")
    new.add_argument("--task", choices=TASKS, default="classification")
    add_debug(new)
    new.set_defaults(handler=_run_new)


def _export(sub: Subparsers) -> None:
    export = sub.add_parser(
        "export",
        help="export a run's model to ONNX, TorchScript or safetensors, checked for parity",
        description="Rebuild the model of a run directory (its best.pt, else last.pt) or a "
        "checkpoint from its config (or the class and arguments fit(model=...) recorded), "
        "export it, and compare the artifact with the PyTorch "
        "model on real batches of several sizes (exit code 1 when they disagree; nothing is "
        "written then). safetensors files are also read back bit for bit.",
    )
    export.add_argument("source", metavar="RUN_OR_CHECKPOINT")
    export.add_argument(
        "--format",
        choices=["onnx", "torchscript", "safetensors", "pt"],
        default="safetensors",
        help="pt: the checkpoint as one file (a sharded fsdp checkpoint consolidated)",
    )
    export.add_argument(
        "--out", "--output", dest="out", metavar="PATH",
        help="where to write (default: beside the checkpoint, named after it)",
    )  # fmt: skip
    export.add_argument("--opset", type=int, metavar="N", help="ONNX opset (default: torch's)")
    export.add_argument(
        "--script", action="store_true", help="TorchScript by torch.jit.script, not trace"
    )
    add_debug(export)
    export.set_defaults(handler=_run_export)


def _predict(sub: Subparsers) -> None:
    predict = sub.add_parser(
        "predict",
        help="predictions from a run, an ONNX file or a TorchScript file",
        description="Run a trained run (or checkpoint), an ONNX file (ONNX Runtime, no "
        "model code needed) or a TorchScript file on INPUT.npy or on a split of the run's "
        "data (default: --split test). With targets: accuracy and a confusion matrix.",
    )
    predict.add_argument("source", metavar="RUN_OR_ARTIFACT")
    predict.add_argument("input", nargs="?", metavar="INPUT.npy")
    predict.add_argument("--split", choices=["train", "val", "test"])
    predict.add_argument("--out", metavar="FILE", help="write every prediction as CSV")
    predict.add_argument(
        "--batch-size", type=int, default=256, metavar="N", help="samples per forward pass"
    )
    add_debug(predict)
    predict.set_defaults(handler=_run_predict)


def _run_new(args: argparse.Namespace) -> int:
    from trainwell.new import new_project

    project = new_project(args.dir, args.task)
    print(f"wrote a {args.task} project to {project.root}:")
    for path in project.files:
        print(f"  {path}")
    print(f"next: cd {project.root} && trainwell train --config configs/default.yaml && pytest")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    from trainwell.export import ParityError, export

    try:
        result = export(args.source, args.format, args.out, opset=args.opset, script=args.script)
    except ParityError as exc:
        print("\n".join(exc.lines()))
        print(f"trainwell: failed: {exc}; nothing was written", file=sys.stderr)
        return 1
    print("\n".join(result.lines()))
    detail = {"safetensors": "weights only; read back and identical",
              "pt": "read back and identical"}.get(args.format, "checked")  # fmt: skip
    print(f"wrote {result.path} ({detail})")
    return 0


def _run_predict(args: argparse.Namespace) -> int:
    from trainwell.predict import predict

    result = predict(
        args.source, args.input, split=args.split, out=args.out, batch_size=args.batch_size
    )
    print("\n".join(result.lines()))
    if args.out:
        print(f"wrote {args.out}")
    return 0
