"""Fine-tuning on two processes (gloo, real torchrun): a backbone frozen as DDP starts and
unfrozen by a callback trains as it does on one process, and resumes across the unfreeze."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import REPO
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.checkpointing.sharded import consolidate

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not built in"
)

MODULE = textwrap.dedent("""
    import torch
    from torch import nn

    def model(num_classes, input_shape):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(input_shape[0], 16), nn.Tanh(), nn.Linear(16, num_classes))
        net[0].requires_grad_(False)  # the "pretrained" part
        return net

    class Unfreeze:
        def __init__(self):
            self.done = False
        def on_step_end(self, ctx):
            if ctx.epoch >= 1 and not self.done:
                ctx.model[0].requires_grad_(True)
                self.done = True
        def state_dict(self):
            return {"done": self.done}
        def load_state_dict(self, state):
            self.done = state["done"]
""")

ARGS = [
    "data.name=synthetic", "data.kwargs.num_samples=512", "data.kwargs.shape=[8]",
    "data.kwargs.num_classes=4", "data.batch_size=32", "model.name=ftmod:model",
    "train.precision=fp32", "train.epochs=3", "checkpoint.every_steps=5",
    "checkpoint.keep_last=100", "callbacks=[ftmod:Unfreeze]",
    "optim.groups=[{params: '0.*', lr_scale: 0.5, name: backbone}]",
]  # fmt: skip


def train(cwd: Path, run: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainwell", "train", *ARGS, f"run.dir={cwd / run}", *extra],
        cwd=cwd, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{cwd}", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def last(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoints" / "last.pt")["model"]


@pytest.mark.slow
def test_a_backbone_unfrozen_under_ddp_trains_as_on_one_process_and_resumes(cli, tmp_path):
    (tmp_path / "ftmod.py").write_text(MODULE)
    # The one-process run, which the others are compared with, in this process (on one
    # thread, as the launched ones); ftmod is forgotten afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code, _, err = cli("train", *ARGS, f"run.dir={tmp_path / 'one'}")
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop("ftmod", None)
    assert code == 0, err[-3000:]
    two = train(tmp_path, "two", "--nproc", "2")
    assert two.returncode == 0, two.stderr[-3000:]
    assert "frozen as DDP starts" in two.stdout
    start = load_checkpoint(tmp_path / "one" / "checkpoints" / "step-5.pt")["model"]["0.weight"]
    assert not torch.equal(last(tmp_path / "one")["0.weight"], start)  # it trained
    for name, tensor in last(tmp_path / "one").items():
        # Each process's own gradients would land far from this (half the data each).
        torch.testing.assert_close(last(tmp_path / "two")[name], tensor, rtol=1e-5, atol=1e-6)
    # Resumed on two processes after the unfreeze (step 20, epoch 1): the backbone is
    # unfrozen again from the checkpoint, and still all-reduced.
    ckpt = tmp_path / "two" / "checkpoints" / "step-20.pt"
    again = train(tmp_path, "again", "--nproc", "2", "--resume", str(ckpt))
    assert again.returncode == 0, again.stderr[-3000:]
    for name, tensor in last(tmp_path / "two").items():
        torch.testing.assert_close(last(tmp_path / "again")[name], tensor, rtol=1e-6, atol=1e-7)


SCRIPT = textwrap.dedent("""
    import sys
    import torch, trainwell
    from torch import nn
    from torch.utils.data import TensorDataset
    from trainwell.errors import UserError

    mode, run_dir = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=g)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    cfg = trainwell.load_config(overrides=["dist.strategy=fsdp", "train.epochs=2",
                                           "data.batch_size=32", "train.precision=fp32",
                                           f"run.dir={run_dir}"])
    if mode == "instance":
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    else:
        def opt(model):
            return torch.optim.AdamW(model.parameters(), lr=1e-2)
    try:
        result = trainwell.fit(cfg, model=net, train_data=data, optimizer=opt,
                               loss_fn=nn.CrossEntropyLoss())
    except UserError as exc:
        print("error:", exc)
        sys.exit(2)
    print("loss", result.metrics["train/loss"])
""")


@pytest.mark.slow
def test_fsdp_takes_an_optimizer_factory_and_refuses_an_instance_in_one_line(tmp_path):
    (tmp_path / "fsdp_fit.py").write_text(SCRIPT)

    def launch(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
             "fsdp_fit.py", mode, str(tmp_path / mode)],
            cwd=tmp_path, capture_output=True, text=True, timeout=240,
            env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        )  # fmt: skip

    factory = launch("factory")
    assert factory.returncode == 0, factory.stderr[-3000:]
    assert float(factory.stdout.split("loss")[-1].split()[0]) < 1.3  # at init: about ln 4
    trained = consolidate(tmp_path / "factory" / "checkpoints" / "last")["model"]
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).state_dict()
    assert trained.keys() == start.keys()
    assert all(not torch.equal(trained[k], start[k]) for k in start)  # every part trained
    instance = launch("instance")
    assert instance.returncode != 0
    assert "error: fit(optimizer=): dist.strategy=fsdp re-creates the parameters" in (
        instance.stdout
    )
