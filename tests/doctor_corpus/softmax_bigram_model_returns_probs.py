# A bigram character model (after karpathy/ng-video-lecture bigram.py) whose forward
# returns probabilities: the softmax is inside the model, the loss in the loop, and a
# no_grad evaluation of 100 batches runs before the first step.
import torch
import torch.nn as nn
from torch.nn import functional as F

# hyperparameters
batch_size = 16
block_size = 8
max_iters = 60
eval_interval = 30
learning_rate = 1e-2
eval_iters = 40
device = "cuda" if torch.cuda.is_available() else "cpu"
# ------------

torch.manual_seed(1337)
text = ("First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. "
        "First Citizen: You are all resolved rather to die than to famish? ") * 20
chars = sorted(list(set(text)))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}


def encode(s):
    return [stoi[c] for c in s]


def decode(ids):
    return "".join([itos[i] for i in ids])


data = torch.tensor(encode(text), dtype=torch.long)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


def get_batch(split):
    data = train_data if split == "train" else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + block_size + 1] for i in ix])
    return x.to(device), y.to(device)


class BigramLanguageModel(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.token_embedding_table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx):
        logits = self.token_embedding_table(idx)  # (B,T,C)
        return F.softmax(logits, dim=-1)  # next-token probabilities


def loss_of(probs, targets):
    B, T, C = probs.shape
    return F.cross_entropy(probs.view(B * T, C), targets.view(B * T))  # expect: softmax-before-loss


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = {}
    for split in ["train", "val"]:
        out[split] = sum(loss_of(model(X), Y).item()
                         for X, Y in (get_batch(split) for _ in range(50))) / 50
    model.train()
    return out


model = BigramLanguageModel(vocab_size).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
for iter in range(max_iters):
    if iter % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    xb, yb = get_batch("train")
    loss = loss_of(model(xb), yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
