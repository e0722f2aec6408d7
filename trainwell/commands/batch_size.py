"""``trainwell batch-size``: the batch size for this device (the largest that fits on CUDA,
the fastest on the CPU), written back into the config file with ``--apply``.

The search is :func:`trainwell.engine.tools.batch_search.find_batch_size`; this module is the
verb and ``--apply``'s edit of the YAML file, which changes the one value and keeps the
rest of the file (comments, order, style) as it was.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

from trainwell.commands.common import Subparsers, add_config, add_debug, add_overrides, load_config
from trainwell.errors import UserError


def register(sub: Subparsers) -> None:
    """Add the ``batch-size`` verb."""
    verb = sub.add_parser(
        "batch-size",
        help="the batch size for this device: largest that fits (CUDA), fastest (CPU)",
        description="Build the run as `trainwell train` would (same --config and KEY=VALUE "
        "overrides) and train a few steps at each batch size tried. On CUDA: double until a "
        "step runs out of memory, then a binary search; the largest that fits. On the CPU: "
        "double while samples/s rises; the smallest size within 3%% of the fastest. Nothing "
        "is kept; --apply writes data.batch_size into the --config file.",
    )
    add_config(verb)
    verb.add_argument("--apply", action="store_true",
                      help="write the size found into --config FILE (data.batch_size)")  # fmt: skip
    verb.add_argument("--max", type=int, default=4096, metavar="N",
                      help="largest batch size to try (default 4096)")  # fmt: skip
    verb.add_argument("--steps", type=int, default=3, metavar="K",
                      help="timed optimizer steps per size at least, after one warm-up "
                      "(default 3; more until half a second is timed)")  # fmt: skip
    add_debug(verb)
    add_overrides(verb)
    verb.set_defaults(handler=_batch_size)


def _batch_size(args: argparse.Namespace) -> int:
    from trainwell.engine.loop.progress import make_console
    from trainwell.engine.tools.batch_search import find_batch_size, lr_note

    if args.apply and not args.config:
        raise UserError("batch-size: --apply writes into the config file; give --config FILE")
    if args.apply and not Path(args.config).is_file():
        raise UserError(f"batch-size: --apply: {args.config} is not a file")
    cfg = load_config(args)
    console = make_console()
    say = lambda line: console.print(line, highlight=False, markup=False)  # noqa: E731
    say(f"trainwell batch-size: {cfg.data.name} / {cfg.model.name}, configured batch "
        f"{cfg.data.batch_size}")  # fmt: skip
    result = find_batch_size(cfg, max_batch=args.max, steps=args.steps, say=say)
    say(f"batch size: {result.best} ({result.reason})")
    say(lr_note(result, cfg.optim.lr))
    if args.apply:
        apply_batch_size(Path(args.config), result.best)
        say(f"wrote data.batch_size: {result.best} into {args.config}")
    return 0


def apply_batch_size(path: Path, batch_size: int) -> None:
    """Set ``data.batch_size`` in the YAML file at ``path`` to ``batch_size``, changing that
    one value (or adding it) and nothing else; the file is replaced atomically, and only
    once the edited text is checked to load with the new value.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "c.yaml"
        >>> _ = p.write_text("# mine\\ndata:\\n  name: digits  # the default\\n  batch_size: 32\\n")
        >>> apply_batch_size(p, 128)
        >>> print(p.read_text(), end="")
        # mine
        data:
          name: digits  # the default
          batch_size: 128
    """
    from trainwell.yaml_load import load_yaml

    text = path.read_text(encoding="utf-8")
    edited = _edit(text, batch_size)
    # Read back as load_config reads it (strictly: a key given twice is refused).
    loaded = load_yaml(edited, str(path)) or {}
    data = loaded.get("data") if isinstance(loaded, dict) else None
    if not isinstance(data, dict) or data.get("batch_size") != batch_size:
        raise UserError(f"batch-size: --apply cannot edit {path} safely (its data section "
                        f"is not a plain mapping); set data.batch_size={batch_size} yourself")
    folder = path.resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(edited)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_BLOCK = re.compile(r"^data:[ \t]*(#.*)?$", re.M)
_FLOW = re.compile(r"^(data:[ \t]*\{)(.*)(\}[ \t]*(#.*)?)$", re.M)


def _edit(text: str, batch_size: int) -> str:
    """The text with ``data.batch_size`` set: in a block ``data:`` section, in a flow
    ``data: {...}`` mapping, or added as a new section."""
    flow = _FLOW.search(text)
    if flow:
        body = _edit_flow(flow.group(2), batch_size)
        return text[: flow.start()] + flow.group(1) + body + flow.group(3) + text[flow.end() :]
    block = _BLOCK.search(text)
    if block is None and re.search(r"^data\s*:", text, re.M):
        # A data section neither block nor flow (an alias, a tag): not ours to rewrite.
        raise UserError(f"batch-size: --apply cannot edit the data section safely (an alias "
                        f"or a tag); set data.batch_size={batch_size} yourself")  # fmt: skip
    if block is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{sep}data:\n  batch_size: {batch_size}\n"
    lines = text[block.end() :].split("\n")
    return text[: block.end()] + "\n".join(_edit_block(lines, batch_size))


def _edit_flow(body: str, batch_size: int) -> str:
    if re.search(r"(^|,)\s*batch_size\s*:", body):
        return re.sub(r"((?:^|,)\s*batch_size\s*:\s*)[^,}]*", rf"\g<1>{batch_size}", body)
    return f"{body.rstrip()}, batch_size: {batch_size}" if body.strip() else (
        f"batch_size: {batch_size}")  # fmt: skip


def _edit_block(lines: list[str], batch_size: int) -> list[str]:
    """``lines[0]`` ends the ``data:`` line; the section is the indented lines after it."""
    indent = None
    for i, line in enumerate(lines[1:], start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            break  # the next top-level key: the section ended
        indent = indent or line[: len(line) - len(line.lstrip())]
        key = re.match(r"(\s*)batch_size\s*:\s*([^#\s]*)", line)
        if key and key.group(1) == indent:  # the section's own key, not a nested one
            lines[i] = line[: key.start(2)] + str(batch_size) + line[key.end(2) :]
            return lines
    lines.insert(1, f"{indent or '  '}batch_size: {batch_size}")
    return lines
