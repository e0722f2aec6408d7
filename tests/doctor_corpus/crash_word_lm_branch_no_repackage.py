# The word language model with repackage_hidden removed; the Transformer branch of the
# `if` never runs and must not be blamed.
import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken=40, nhid=24):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, src, hidden):
        output, hidden = self.rnn(self.encoder(src), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        return (torch.zeros(1, bsz, 24), torch.zeros(1, bsz, 24))


torch.manual_seed(0)
model_type = "LSTM"
model = RNNModel()
criterion = nn.CrossEntropyLoss()
corpus = torch.randint(0, 40, (300, 4))
hidden = model.init_hidden(4)
for batch, i in enumerate(range(0, 100, 10)):
    data, targets = corpus[i : i + 10], corpus[i + 1 : i + 11].reshape(-1)
    model.zero_grad()
    if model_type == "Transformer":
        output = model(data)
        output = output.view(-1, 40)
    else:
        output, hidden = model(data, hidden)  # expect: graph-retained
    loss = criterion(output.view(-1, 40), targets)
    loss.backward()  # expect-related: graph-retained
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
