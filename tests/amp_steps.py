"""A step function for the AMP tests: every fourth call's loss is scaled up so far that its
fp16 gradients overflow, which the GradScaler answers by skipping that optimizer step."""

from __future__ import annotations

import itertools

import torch.nn.functional as F

_calls = itertools.count()


def overflow_at_step(model, batch):
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    # The logged loss stays finite (no divergence); its gradients do not fit in fp16.
    return loss * 1e6 if next(_calls) % 4 == 2 else loss
