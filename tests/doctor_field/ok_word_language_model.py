# Field corpus: the shape of pytorch/examples word_language_model/main.py (RNNModel with an
# LSTM, batchify / get_batch over a token stream, repackage_hidden, model.zero_grad(),
# clip_grad_norm_, the hand-written SGD update p.data.add_(p.grad, alpha=-lr), evaluate()
# under no_grad, lr annealed by 4 when validation does not improve).
# source: https://github.com/pytorch/examples/blob/main/word_language_model/main.py
import math

import torch
import torch.nn as nn

torch.manual_seed(1111)
ntokens, bptt, clip = 50, 12, 0.25


def fake_corpus(n, seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, ntokens, (n // 4,), generator=g)
    return base.repeat_interleave(4)  # a learnable structure: every token repeats 4 times


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


train_data = batchify(fake_corpus(2400, 0), 10)
val_data = batchify(fake_corpus(400, 1), 5)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)


model = RNNModel(ntokens, 32, 32, 2)
criterion = nn.NLLLoss()


def evaluate(data_source):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(5)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train(lr):
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(10)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
    return total_loss / (batch + 1)


lr = 20.0
best_val_loss = None
for epoch in range(1, 3):
    train_loss = train(lr)
    val_loss = evaluate(val_data)
    print(f"| epoch {epoch} | train {train_loss:.2f} | valid loss {val_loss:.2f} | ppl {math.exp(val_loss):.2f}")
    if not best_val_loss or val_loss < best_val_loss:
        best_val_loss = val_loss
    else:
        lr /= 4.0
