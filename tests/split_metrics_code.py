"""User code for the train.metrics tests: metric objects, steps, callbacks and data, written
the way a user would, importable as ``tests.split_metrics_code:...`` from a config."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

# ---- data: 4 classes, a learnable teacher; split sizes that do not divide evenly ---------


def splits(n_train: int = 256, n_val: int = 101, n_test: int = 37, classes: int = 4):
    """``(train, val, test)``: inputs of 8 features, labels from a fixed linear teacher."""
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(8, classes, generator=g)

    def part(n: int) -> TensorDataset:
        x = torch.randn(n, 8, generator=g)
        return TensorDataset(x, (x @ teacher).argmax(1))

    return part(n_train), part(n_val), part(n_test)


def binary_splits(n_train: int = 192, n_val: int = 77):
    """Two classes, for the AUROC-like metric."""
    train, val, _ = splits(n_train, n_val, 1, classes=2)
    return train, val


# ---- metric objects -------------------------------------------------------------------


class MacroF1:
    """Macro-F1 over the split from a confusion matrix: a plain class, no merge (the
    engine gathers preds/target on several processes)."""

    def __init__(self, num_classes: int = 4) -> None:
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> None:
        self.confusion = torch.zeros(self.num_classes, self.num_classes, dtype=torch.long)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        labels = preds.argmax(1) if preds.dim() == 2 else preds
        index = target.cpu() * self.num_classes + labels.cpu()
        self.confusion += torch.bincount(index, minlength=self.num_classes**2).view(
            self.num_classes, self.num_classes
        )

    def compute(self) -> float:
        c = self.confusion.double()
        tp = c.diag()
        precision = tp / c.sum(0).clamp(min=1)
        recall = tp / c.sum(1).clamp(min=1)
        f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)
        return float(f1.mean())


class MergingMacroF1(MacroF1):
    """The same with ``merge``: several processes merge their confusion matrices."""

    def merge(self, other: MergingMacroF1) -> None:
        self.confusion += other.confusion


class Count:
    """How many samples went through ``update``, as a mapping (val/NAME/samples)."""

    higher_is_better = True

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.n = 0

    def update(self, preds, target) -> None:
        self.n += len(target)

    def compute(self) -> dict[str, float]:
        return {"samples": self.n, "updates_seen": float(self.n > 0)}


class SampleCount:
    """A count as a number: the metric's value is the number of samples seen."""

    def __init__(self) -> None:
        self.n = 0

    def reset(self) -> None:
        self.n = 0

    def update(self, preds, target) -> None:
        self.n += int(target.shape[0])

    def compute(self) -> int:
        return self.n


class RankAUROC:
    """Binary AUROC by ranks (Mann-Whitney U) over every score of the split: needs all of
    them at once, so no sample average can give it."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.scores: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        score = preds[:, 1] - preds[:, 0] if preds.dim() == 2 else preds
        self.scores.append(score.double().cpu())
        self.labels.append(target.cpu())

    def compute(self) -> float:
        scores, labels = torch.cat(self.scores), torch.cat(self.labels)
        order = scores.argsort()
        ranks = torch.empty_like(scores)
        ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
        pos = labels == 1
        n_pos, n_neg = int(pos.sum()), int((~pos).sum())
        u = ranks[pos].sum() - n_pos * (n_pos + 1) / 2
        return float(u / max(n_pos * n_neg, 1))


class ScriptedScore:
    """A score that follows a script, one value per evaluation pass (counted by reset, so
    a pass the dry step or a replay added would shift it)."""

    def __init__(self, values=(0.1, 0.5, 0.4, 0.3, 0.2, 0.1), higher_is_better=True) -> None:
        self.values = list(values)
        self.higher_is_better = higher_is_better
        self.passes = -1
        self.n = 0

    def reset(self) -> None:
        self.passes += 1
        self.n = 0

    def update(self, preds, target) -> None:
        self.n += len(target)

    def compute(self) -> float:
        return self.values[min(self.passes, len(self.values) - 1)]


class Broken:
    """compute() returns a vector: refused with one line."""

    def reset(self) -> None:
        pass

    def update(self, preds, target) -> None:
        pass

    def compute(self) -> torch.Tensor:
        return torch.zeros(3)


class NoCompute:
    def update(self, preds, target) -> None:
        pass

    def reset(self) -> None:
        pass


try:  # a torchmetrics.Metric, where torchmetrics is installed
    from torchmetrics import Metric

    class TorchCount(Metric):
        """Counts samples; its state is summed over processes by torchmetrics itself."""

        higher_is_better = True

        def __init__(self) -> None:
            super().__init__()
            self.add_state("n", default=torch.tensor(0), dist_reduce_fx="sum")

        def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
            self.n += target.numel()

        def compute(self) -> torch.Tensor:
            return self.n

except ImportError:  # pragma: no cover - torchmetrics is in the dev extra
    TorchCount = None  # type: ignore[assignment,misc]


# ---- a model and steps --------------------------------------------------------------


def mlp(num_classes: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, num_classes))


def prob_step(model: nn.Module, batch):
    """A user step returning probabilities and labels for the metric objects."""
    x, y = batch
    logits = model(x)
    return {"loss": F.cross_entropy(logits, y), "preds": logits.softmax(1), "target": y}


def dict_step(model: nn.Module, batch):
    """A user step on dict batches whose metric inputs are named by the step."""
    logits = model(batch["x"])
    return {"loss": F.cross_entropy(logits, batch["y"]), "preds": logits.detach(),
            "target": batch["y"]}  # fmt: skip


def loss_only_step(model: nn.Module, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


# ---- a metric the user's own step updates (the dry step must not count in it) ----------

STEP_COUNTER = SampleCount()


def counting_eval_step(model: nn.Module, batch):
    """Counts the samples it sees in a module-level metric, as users do by hand."""
    x, y = batch
    logits = model(x)
    STEP_COUNTER.update(logits, y)
    return {"loss": F.cross_entropy(logits, y), "preds": logits, "target": y}


# ---- callbacks ----------------------------------------------------------------------


class LogScore:
    """Logs val/custom at each evaluation's end: a score that rises, then falls."""

    logs = ("val/custom",)

    def __init__(self, values=(0.2, 0.9, 0.5, 0.4, 0.3, 0.1)) -> None:
        self.values = list(values)
        self.evals = 0

    def on_eval_end(self, ctx) -> None:
        ctx.log("val/custom", self.values[min(self.evals, len(self.values) - 1)])
        self.evals += 1


class LogScoreUndeclared(LogScore):
    """The same, without declaring what it logs (its name is checked after an eval)."""

    logs = None


class LogFromMetric:
    """Logs a value derived from another metric, as a tensor, at every eval end."""

    logs = ("val/one_minus_loss",)

    def on_eval_end(self, ctx) -> None:
        ctx.log("val/one_minus_loss", torch.tensor(1.0) - ctx.metrics["val/loss"])


class LogsEveryStep:
    """ctx.log during training: train/step_parity at every step."""

    logs = ("train/step_parity",)

    def on_step_end(self, ctx) -> None:
        ctx.log("train/step_parity", ctx.step % 2)


# ---- several processes: the user's own evaluation loaders, a rank-dependent callback -----


def loader_splits():
    """The training set as a Dataset; validation as a user DataLoader whose
    DistributedSampler pads the last shard (101 samples on 2 ranks: 102), and the test
    split as a DataLoader that is not sharded at all."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    train, val, test = splits()
    on = dist.is_available() and dist.is_initialized()
    world, rank = (dist.get_world_size(), dist.get_rank()) if on else (1, 0)
    sampler = DistributedSampler(val, num_replicas=world, rank=rank, shuffle=True, seed=1)
    return {"train": train, "val": DataLoader(val, batch_size=16, sampler=sampler),
            "test": DataLoader(test, batch_size=8)}  # fmt: skip


class RankScore:
    """Logs a score that differs between ranks: rank 0's is the one that counts."""

    logs = ("val/rank_score",)

    def __init__(self) -> None:
        self.evals = 0

    def on_eval_end(self, ctx) -> None:
        import os

        rank = int(os.environ.get("RANK", "0"))
        values = [0.2, 0.9, 0.5, 0.4, 0.3] if rank == 0 else [0.1, 0.2, 0.3, 0.4, 0.5]
        ctx.log("val/rank_score", values[min(self.evals, len(values) - 1)])
        self.evals += 1
