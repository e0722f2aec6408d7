# Text examples grouped by label on disk, read through a sampler (RandomSampler with
# a generator, as for reproducible runs): the order is random though shuffle is unset.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

VOCAB = 300


class ReviewDataset(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.items = []
        for label in (0, 1, 2):
            for _ in range(120):
                ids = torch.randint(label * 100, label * 100 + 100, (12,), generator=g)
                self.items.append({"input_ids": ids, "label": torch.tensor(label)})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]


class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, 24)
        self.cls = nn.Linear(24, 3)

    def forward(self, input_ids):
        return self.cls(self.emb(input_ids))


data = ReviewDataset()
sampler = RandomSampler(data, generator=torch.Generator().manual_seed(1))
loader = DataLoader(data, batch_size=24, sampler=sampler)
torch.manual_seed(0)
model = BagOfWords()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for batch in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(batch["input_ids"]), batch["label"])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
