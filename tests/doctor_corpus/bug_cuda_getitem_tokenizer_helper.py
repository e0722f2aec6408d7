# A text dataset whose encoding helper (called from __getitem__) builds the id tensor
# directly on self.device, handed in by the training script.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORDS = "the a movie film was great awful boring brilliant plot acting".split()
VOCAB = {w: i + 1 for i, w in enumerate(WORDS)}


class ReviewDataset(Dataset):
    def __init__(self, device, n=320, length=8):
        self.device = device
        g = torch.Generator().manual_seed(0)
        picks = torch.randint(0, len(WORDS), (n, length), generator=g)
        self.texts = [" ".join(WORDS[j] for j in row) for row in picks.tolist()]
        self.labels = [int("great" in t or "brilliant" in t) for t in self.texts]

    def __len__(self):
        return len(self.texts)

    def _encode(self, text):
        ids = [VOCAB[w] for w in text.split()]
        return torch.tensor(ids, dtype=torch.long, device=self.device)  # expect: cuda-in-getitem

    def __getitem__(self, i):
        return self._encode(self.texts[i]), torch.tensor(self.labels[i], dtype=torch.float)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_data = ReviewDataset(device)
loader = DataLoader(train_data, batch_size=32, shuffle=True)
torch.manual_seed(0)
model = nn.Sequential(nn.EmbeddingBag(len(WORDS) + 1, 16), nn.Linear(16, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.BCEWithLogitsLoss()
for epoch in range(3):
    for ids, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(ids).squeeze(1), labels.to(device))
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
