# The classic forum thread: an LSTM language model whose (h, c) state is carried across
# batches without detach, crashing at the second backward: the report should name `hidden`.
import torch
from torch import nn

torch.manual_seed(0)
ntokens, bsz, bptt = 30, 4, 5
data = torch.randint(0, ntokens, (bsz, 200))
embed = nn.Embedding(ntokens, 16)
lstm = nn.LSTM(16, 32, batch_first=True)
decoder = nn.Linear(32, ntokens)
params = [*embed.parameters(), *lstm.parameters(), *decoder.parameters()]
opt = torch.optim.SGD(params, lr=0.5)
hidden = None
for i in range(0, 100, bptt):
    inp, target = data[:, i : i + bptt], data[:, i + 1 : i + 1 + bptt]
    output, hidden = lstm(embed(inp), hidden)  # expect: graph-retained
    loss = nn.functional.cross_entropy(decoder(output).reshape(-1, ntokens), target.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
