"""``trainwell doctor SCRIPT ARGS``: run the user's own training script under the doctor.

Options go before the script, everything after it to the script (``argparse.REMAINDER``).
The run itself is :func:`trainwell.doctor.runner.run_script`, which returns the exit code.
"""

from __future__ import annotations

import argparse

from trainwell.commands.common import Subparsers, add_debug


def register(sub: Subparsers) -> None:
    """Add the ``doctor`` verb."""
    doctor = sub.add_parser(
        "doctor",
        help="run your own training script under the doctor and report its pitfalls",
        description="Runs SCRIPT as `python SCRIPT ARGS` would, watching its training "
        "through PyTorch's hooks; options go before the script, all after it to the script.",
    )
    doctor.add_argument("--max-steps", type=int, metavar="N", help="stop after N optimizer steps")
    doctor.add_argument("--json", metavar="PATH", help="also write the findings as JSON")
    doctor.add_argument(
        "--overfit",
        action="store_true",
        help="train on the script's first batch over and over and report whether the loss "
        "goes to near zero",
    )
    doctor.add_argument(
        "--memory",
        action="store_true",
        help="memory at every optimizer step (CUDA allocated/reserved/peak; RSS and live "
        "tensor bytes) as memory.csv and memory.png, with torch.cuda.memory_summary() at "
        "the peak and at an out-of-memory error",
    )
    doctor.add_argument(
        "--profile",
        action="store_true",
        help="torch.profiler over 5 optimizer steps after 3: the heaviest operators, "
        "profile/trace.json and profile/profile_ops.csv",
    )
    doctor.add_argument(
        "--out",
        metavar="DIR",
        help="folder for the files of --memory and --profile (default: the folder of "
        "--json, else ./trainwell-doctor)",
    )
    add_debug(doctor)
    doctor.add_argument("script", metavar="SCRIPT")
    doctor.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    doctor.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from trainwell.doctor.runner import run_script

    return run_script(
        args.script, args.script_args, args.max_steps, args.json, overfit=args.overfit,
        memory=args.memory, profile=args.profile, out_dir=args.out,
    )  # fmt: skip
