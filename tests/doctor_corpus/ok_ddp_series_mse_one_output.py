# The twin of nograd_loss_ce_one_output_ddp_series: the same one-output regression
# trained with a loss that has a gradient.
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


class Trainer:
    def __init__(self, model, train_data, optimizer):
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


torch.manual_seed(0)
dataset = MyTrainDataset(512)
model = torch.nn.Linear(20, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(dataset, batch_size=32, shuffle=True)
Trainer(model, loader, optimizer).train(2)
