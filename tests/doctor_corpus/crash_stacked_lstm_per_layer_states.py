# A stacked LSTM language model with one nn.LSTM per layer (a dropout between layers),
# whose state is a list of per-layer (h, c) tuples carried across BPTT chunks without
# being detached.
import torch
from torch import nn


class StackedLSTM(nn.Module):
    def __init__(self, ntoken=40, nhid=24, nlayers=2):
        super().__init__()
        self.embed = nn.Embedding(ntoken, nhid)
        self.layers = nn.ModuleList(nn.LSTM(nhid, nhid) for _ in range(nlayers))
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(nhid, ntoken)

    def forward(self, src, states):
        x, new_states = self.embed(src), []
        for lstm, state in zip(self.layers, states):
            x, state = lstm(self.drop(x), state)
            new_states.append(state)
        return self.head(x), new_states

    def init_states(self, bsz):
        return [(torch.zeros(1, bsz, 24), torch.zeros(1, bsz, 24)) for _ in self.layers]


torch.manual_seed(0)
model = StackedLSTM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
corpus = torch.randint(0, 40, (400, 8))
bptt = 20
states = model.init_states(8)
for i in range(0, corpus.size(0) - 1 - bptt, bptt):
    data, targets = corpus[i:i + bptt], corpus[i + 1:i + 1 + bptt]
    optimizer.zero_grad()
    output, states = model(data, states)  # expect: graph-retained
    loss = nn.functional.cross_entropy(output.view(-1, 40), targets.reshape(-1))
    loss.backward()  # expect-related: graph-retained
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
