# A character-level GRU generator trained chunk by chunk over one long text (after
# spro/practical-pytorch char-rnn-generation), its hidden state carried across chunks
# without detach(): the second chunk's backward reaches into the first's freed graph.
import string

import torch
import torch.nn as nn

all_characters = string.printable
n_characters = len(all_characters)
text = "the quick brown fox jumps over the lazy dog; " * 30
data = torch.tensor([all_characters.index(c) for c in text])


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, n_layers=1):
        super().__init__()
        self.hidden_size, self.n_layers = hidden_size, n_layers
        self.encoder = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, batch_first=True)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, inp, hidden):
        output, hidden = self.gru(self.encoder(inp), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, batch_size):
        return torch.zeros(self.n_layers, batch_size, self.hidden_size)


torch.manual_seed(0)
chunk_len = 25
decoder = CharRNN(n_characters, 32, n_characters)
decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=0.005)
criterion = nn.CrossEntropyLoss()
hidden = decoder.init_hidden(1)
for start in range(0, len(data) - chunk_len - 1, chunk_len):
    inp = data[start:start + chunk_len].unsqueeze(0)
    target = data[start + 1:start + chunk_len + 1].unsqueeze(0)
    decoder.zero_grad()
    output, hidden = decoder(inp, hidden)  # expect: graph-retained
    loss = criterion(output.view(-1, n_characters), target.view(-1))
    loss.backward()  # expect-related: graph-retained
    decoder_optimizer.step()
