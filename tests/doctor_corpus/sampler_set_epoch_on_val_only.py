# The PyTorch DDP tutorial's Trainer (ddp-tutorial-series multigpu.py), at world size 1
# with no process group, whose set_epoch moved to the wrong loader: the validation
# sampler gets set_epoch(epoch) each epoch, the training one never does, so training
# sees one fixed order every epoch.
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_data, val_data, optimizer, gpu_id, save_every):
        self.gpu_id = gpu_id
        self.model = model
        self.train_data = train_data
        self.val_data = val_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        self.val_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:  # expect: sampler-epoch-not-set
            self._run_batch(source, targets)

    def _validate(self, epoch):
        self.model.eval()
        with torch.no_grad():
            total = sum(F.mse_loss(self.model(x), y, reduction="sum").item()
                        for x, y in self.val_data)
        self.model.train()
        print(f"Epoch {epoch} | val loss {total / len(self.val_data.dataset):.4f}")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            self._validate(epoch)


def load_train_objs():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(640, 20, generator=g)
    y = x.sum(1, keepdim=True) + 0.1 * torch.rand(640, 1, generator=g)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:]), model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int, rank: int, world_size: int):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=False, shuffle=False,
                      sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank))


def main(rank, world_size, total_epochs, batch_size):
    train_set, val_set, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(train_set, batch_size, rank, world_size)  # expect-related: sampler-epoch-not-set
    val_data = prepare_dataloader(val_set, batch_size, rank, world_size)
    Trainer(model, train_data, val_data, optimizer, rank, save_every=1).train(total_epochs)


if __name__ == "__main__":
    main(rank=0, world_size=1, total_epochs=3, batch_size=32)
