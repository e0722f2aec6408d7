"""A callback that logs the validation confusion matrix to TensorBoard at each evaluation.

    cd examples/callbacks
    trainwell train --config confusion_matrix.yaml
    tensorboard --logdir runs        # IMAGES tab: val/confusion_matrix, one per epoch

It runs the model over the run's own validation loader (``ctx.val_loader``) and draws on
the run's TensorBoard writer (``ctx.loggers["tensorboard"].writer``); without
``log.tensorboard=true`` it does nothing.
"""

from __future__ import annotations

import torch


class ConfusionMatrix:
    """Counts (true class, predicted class) pairs over the validation data; logs a figure."""

    def __init__(self, tag: str = "val/confusion_matrix") -> None:
        self.tag = tag

    def on_eval_end(self, ctx) -> None:
        tb = ctx.loggers.get("tensorboard")
        if tb is None or ctx.val_loader is None:
            return
        counts = self.count(ctx.model, ctx.val_loader)
        tb.writer.add_figure(self.tag, self.draw(counts, ctx.step), global_step=ctx.step)

    @staticmethod
    @torch.no_grad()
    def count(model: torch.nn.Module, loader) -> torch.Tensor:
        was_training = model.training
        model.eval()  # dropout off and batch-norm statistics frozen, as in evaluation
        device = next(model.parameters()).device
        pairs = []
        for x, y in loader:
            pred = model(x.to(device)).argmax(dim=1).cpu()
            pairs.append(torch.stack([y, pred], dim=1))
        model.train(was_training)
        pairs = torch.cat(pairs)
        n = int(pairs.max()) + 1
        return torch.bincount(pairs[:, 0] * n + pairs[:, 1], minlength=n * n).view(n, n)

    @staticmethod
    def draw(counts: torch.Tensor, step: int):
        import matplotlib

        matplotlib.use("Agg")  # no display: safe on servers and in CI
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4, 4))
        ax.imshow(counts.numpy(), cmap="Blues")
        n = counts.shape[0]
        ax.set(xlabel="predicted", ylabel="true", title=f"step {step}",
               xticks=range(n), yticks=range(n))
        for (i, j), c in zip(torch.cartesian_prod(*map(torch.arange, counts.shape)).tolist(),
                             counts.flatten().tolist()):
            if c:
                ax.text(j, i, c, ha="center", va="center", fontsize=7)
        return fig  # add_figure closes it
