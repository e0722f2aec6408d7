"""The ``sampler-epoch-not-set`` probe."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from typing import Any

from trainwell.doctor.events import (
    BatchEvent,
    Reporter,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site, is_user_file, parse, user_frame


@dataclass
class _Pass:
    """One pass over a loader whose DistributedSampler shuffles, from its first batch."""

    key: tuple  # the sampler: dataset, seed, rank, replicas
    epoch: int  # the sampler's epoch when the pass started
    half: int  # batches read when the pass counts as an epoch
    steps: int  # optimizer steps when it started
    backward: Any  # the dispatcher's last backward when it started
    site: Site | None  # the loop's line
    repeat: bool  # a pass that trained already ran with this epoch
    names: tuple[str | None, str | None] = (None, None)  # the loader's, the sampler's
    trained: bool = False


class SamplerEpochNotSetProbe:
    """``sampler-epoch-not-set``: a shuffling ``DistributedSampler`` starting another pass
    with the epoch number of a pass already done: it yields that pass's order again.

    Only passes that train count: a backward or an optimizer step while the pass is
    read. An evaluation loader's order does not matter, so its sampler never needs
    ``set_epoch``, shuffling or not. A pass counts once half of it has been read
    (``next(iter(loader))`` to peek at a batch is not an epoch). Samplers are told apart
    by their dataset, seed and rank, so a sampler made anew each epoch (always at epoch
    0) is seen too. The finding names the loader (its variable, where it was built) and
    the sampler to call ``set_epoch`` on.
    """

    def __init__(self) -> None:
        self.done: dict[tuple, int] = {}  # sampler key -> epoch of the last pass that trained
        self.reading: dict[int, _Pass] = {}  # id(iterator) -> the pass it reads

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        current = self.reading.get(id(event.loader)) if self.reading else None
        if current is not None and event.index == 1:
            # A new pass under this id: the old one ended, or its iterator died (a peek
            # with next(iter(loader))) and a new iterator took its id. Either way this
            # batch is the new pass's, not the old one's.
            del self.reading[id(event.loader)]
            if current.trained:
                self.done[current.key] = current.epoch
        elif current is not None:
            self._progress(doc, event, current)
        if event.index == 1:
            self._start(doc, event)

    def _progress(self, doc: Reporter, event: BatchEvent, p: _Pass) -> None:
        if not p.trained:
            # A backward (or a step) since the pass began: its batches train.
            backward = getattr(doc, "last_backward", None)
            p.trained = doc.steps != p.steps or backward is not p.backward
            if p.trained and p.repeat:
                self._report(doc, event, p)
        if event.index >= p.half:
            del self.reading[id(event.loader)]
            if p.trained:
                self.done[p.key] = p.epoch

    def _start(self, doc: Reporter, event: BatchEvent) -> None:
        from torch.utils.data.distributed import DistributedSampler

        batches = getattr(event.loader, "_index_sampler", None)
        try:
            count = len(batches)  # type: ignore[arg-type]  # None raises TypeError too
        except TypeError:  # an IterableDataset's sampler has no length
            return
        sampler = getattr(batches, "sampler", batches)
        if not isinstance(sampler, DistributedSampler) or not sampler.shuffle:
            return
        key = (id(sampler.dataset), sampler.seed, sampler.rank, sampler.num_replicas)
        repeat = self.done.get(key) == sampler.epoch
        p = _Pass(key, sampler.epoch, max(2, count // 2), doc.steps,
                  getattr(doc, "last_backward", None), event.site, repeat)  # fmt: skip
        if repeat:  # the names are looked up now, while the user's frames are on the stack
            p.names = _names(batches, sampler)
        self.reading[id(event.loader)] = p

    def _report(self, doc: Reporter, event: BatchEvent, p: _Pass) -> None:
        if p.site is None:
            return
        loader, sampler = p.names
        built = doc.loader_sites.get(p.key[0])
        # The name it was built as (``train_loader = DataLoader(...)``) says more than a
        # helper's parameter (``for x, y in loader``).
        loader = _assigned_name(built) or loader
        what = f"`{loader}`" if loader else "(made in the `for`)" if built == p.site else ""
        if built is not None and built.file == p.site.file and built != p.site:
            what += f" (built at line {built.line})"
        related = []
        if built is not None and (built.file, built.line) != (p.site.file, p.site.line):
            related.append({"file": built.file, "line": built.line, "what": "the DataLoader"})
        call = f"{sampler or 'sampler'}.set_epoch(epoch)"
        doc.add(
            Finding(
                code="sampler-epoch-not-set",
                severity="error",
                file=p.site.file,
                line=p.site.line,
                message=f"the training DataLoader {what} starts another epoch with its shuffling "
                f"DistributedSampler's epoch still {p.epoch}: every epoch sees the same order",
                why="DistributedSampler seeds its shuffle with seed + epoch; without "
                "set_epoch the 'shuffle' is one fixed permutation",
                fix=f"call {call} at the start of each epoch, before iterating "
                f"{loader or 'the training DataLoader'} (an evaluation loader needs none)",
                related=related,
                evidence={"epoch": p.epoch, "loader": loader, "sampler": sampler},
            )
        )


def _names(batches: Any, sampler: Any) -> tuple[str | None, str | None]:
    """The names the user's code holds the loader by (the DataLoader whose batches
    these are) and its sampler by, from the user's frames out (a few)."""
    from torch.utils.data import DataLoader

    loader_name = sampler_name = None
    frame, depth = user_frame(start=sys._getframe(1)), 4
    while frame is not None and depth > 0 and not (loader_name and sampler_name):
        if is_user_file(frame.f_code.co_filename):
            depth -= 1
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in list(scope.items()):
                    if name.startswith("_"):
                        continue
                    if loader_name is None and isinstance(value, DataLoader) and (
                        value._index_sampler is batches
                    ):
                        loader_name = name
                    elif sampler_name is None and value is sampler:
                        sampler_name = name
        frame = frame.f_back
    if sampler_name is None and loader_name is not None:
        sampler_name = f"{loader_name}.sampler"
    return loader_name, sampler_name


def _assigned_name(site: Site | None) -> str | None:
    """``train_loader`` of ``train_loader = DataLoader(...)`` at ``site``, if it is one."""
    if site is None:
        return None
    tree = parse(site.file)
    for node in ast.walk(tree) if tree is not None else ():
        if (isinstance(node, ast.Assign) and node.lineno <= site.line <= (node.end_lineno or 0)
                and len(node.targets) == 1
                and isinstance(node.targets[0], (ast.Name, ast.Attribute))):  # fmt: skip
            return ast.unparse(node.targets[0])
    return None
