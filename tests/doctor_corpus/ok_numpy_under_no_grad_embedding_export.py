# The embedding export done right: under torch.no_grad() the weight's copy is taken
# with .detach() anyway (a parameter requires grad even there), then .numpy().
import torch
from torch import nn

torch.manual_seed(0)
vocab, dim = 40, 6
center = torch.randint(0, vocab, (1600,))
context = (center + torch.randint(-1, 2, (1600,))) % vocab
model = nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, vocab))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
for i in range(0, 1600, 80):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(center[i : i + 80]), context[i : i + 80])
    loss.backward()
    optimizer.step()
with torch.no_grad():
    scores = model(torch.arange(vocab)).softmax(-1).numpy()
vectors = model[0].weight.detach().numpy()
print("vectors", vectors.shape, "top context of 0:", scores[0].argmax())
