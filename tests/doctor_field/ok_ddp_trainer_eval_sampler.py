# Field corpus: a DDP trainer in the shape of the PyTorch DDP tutorial series
# (multigpu_torchrun.py's Trainer with _run_batch / _run_epoch and snapshots), extended as
# users do with a validation loader that also has a DistributedSampler. set_epoch is called
# on the training sampler only: the validation order does not matter. One process, gloo.
# source: https://github.com/pytorch/examples/blob/main/distributed/ddp-tutorial-series/multigpu_torchrun.py
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.data = [(x, x[:1] * 2.0 - x[1:2]) for x in torch.rand(size, 20, generator=g)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29617")
    dist.init_process_group(backend="gloo", rank=0, world_size=1)


class Trainer:
    def __init__(self, model, train_data, val_data, optimizer, save_every, snapshot_path):
        self.model = DDP(model)
        self.train_data = train_data
        self.val_data = val_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        self.model.train()
        total = 0.0
        for source, targets in self.train_data:
            total += self._run_batch(source, targets)
        return total / len(self.train_data)

    def _validate(self):
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for source, targets in self.val_data:
                total += F.mse_loss(self.model(source), targets).item()
        return total / len(self.val_data)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            train_loss = self._run_epoch(epoch)
            val_loss = self._validate()
            print(f"Epoch {epoch} | train {train_loss:.4f} | val {val_loss:.4f}")
            if dist.get_rank() == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def prepare_dataloader(dataset, batch_size, shuffle):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=False, shuffle=False,
                      sampler=DistributedSampler(dataset, shuffle=shuffle))


def main(total_epochs=4, save_every=2, batch_size=32):
    ddp_setup()
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-1)
    train_data = prepare_dataloader(MyTrainDataset(512, 0), batch_size, shuffle=True)
    val_data = prepare_dataloader(MyTrainDataset(128, 1), batch_size, shuffle=True)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(model, train_data, val_data, optimizer, save_every,
                          os.path.join(tmp, "snapshot.pt"))
        trainer.train(total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
