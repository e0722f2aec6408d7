# The word_language_model example: an LSTM language model trained with truncated BPTT,
# the (h, c) state repackaged (detached) before every chunk.
import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken=50, ninp=16, nhid=32):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, batch_first=False)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(1, bsz, self.nhid), weight.new_zeros(1, bsz, self.nhid))


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


torch.manual_seed(0)
ntokens, bsz, bptt = 50, 4, 8
corpus = torch.randint(0, ntokens, (400,))
train_data = corpus[: (len(corpus) // bsz) * bsz].view(bsz, -1).t().contiguous()
model = RNNModel(ntokens)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

for epoch in range(2):
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(bsz)
    for i in range(0, train_data.size(0) - 1, bptt):
        seq_len = min(bptt, len(train_data) - 1 - i)
        data, targets = train_data[i : i + seq_len], train_data[i + 1 : i + 1 + seq_len]
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, ntokens), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        total_loss += loss.item()
    print("epoch", epoch, "loss", total_loss)
