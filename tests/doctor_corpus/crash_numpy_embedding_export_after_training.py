# After training word vectors, the embedding matrix is exported to NumPy for a
# nearest-neighbour lookup: the weight is a parameter, which requires grad.
import torch
from torch import nn

torch.manual_seed(0)
vocab, dim = 50, 8
center = torch.randint(0, vocab, (2000,))
context = (center + torch.randint(-2, 3, (2000,))) % vocab
emb = nn.Embedding(vocab, dim)
out = nn.Linear(dim, vocab)
optimizer = torch.optim.SGD(list(emb.parameters()) + list(out.parameters()), lr=0.5)
for i in range(0, 2000, 100):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(out(emb(center[i : i + 100])), context[i : i + 100])
    loss.backward()
    optimizer.step()
print("final loss", loss.item())

vectors = emb.weight.numpy()  # expect: numpy-on-grad-tensor
norms = (vectors**2).sum(1) ** 0.5
print("nearest to 0:", ((vectors @ vectors[0]) / norms).argsort()[-5:])
