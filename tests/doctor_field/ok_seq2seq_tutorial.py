# Field corpus: the shape of the "NLP from scratch: translation with a sequence to sequence
# network" tutorial (EncoderRNN / DecoderRNN with GRUs, teacher forcing, NLLLoss, one
# optimizer per network, both zeroed every batch, evaluate() under no_grad).
# source: https://pytorch.org/tutorials/intermediate/seq2seq_translation_tutorial.html
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, TensorDataset

SOS_token, EOS_token, MAX_LENGTH, V = 0, 1, 6, 12
random.seed(0)
torch.manual_seed(0)


def pairs(n):
    src = torch.randint(2, V, (n, MAX_LENGTH))
    src[:, -1] = EOS_token
    tgt = src.clone()
    tgt[:, :-1] = torch.flip(src[:, :-1], dims=[1])  # learn to reverse
    return TensorDataset(src, tgt)


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        return self.gru(embedded)


class DecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.full((batch_size, 1), SOS_token, dtype=torch.long)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        for i in range(MAX_LENGTH):
            output, decoder_hidden = self.forward_step(decoder_input, decoder_hidden)
            decoder_outputs.append(output)
            if target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # teacher forcing
            else:
                _, topi = output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        return F.log_softmax(decoder_outputs, dim=-1), decoder_hidden

    def forward_step(self, input, hidden):
        output = F.relu(self.embedding(input))
        output, hidden = self.gru(output, hidden)
        return self.out(output), hidden


def train_epoch(dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion):
    total_loss = 0
    for input_tensor, target_tensor in dataloader:
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        total_loss += loss.item()
    return total_loss / len(dataloader)


def evaluate(encoder, decoder, input_tensor):
    with torch.no_grad():
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _ = decoder(encoder_outputs, encoder_hidden)
        return decoder_outputs.argmax(-1)


hidden_size = 32
encoder = EncoderRNN(V, hidden_size)
decoder = DecoderRNN(hidden_size, V)
train_dataloader = DataLoader(pairs(320), batch_size=32, shuffle=True)
encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.01)
criterion = nn.NLLLoss()
for epoch in range(1, 6):
    loss = train_epoch(train_dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer,
                       criterion)
    print(f"epoch {epoch} loss {loss:.4f}")
encoder.eval()
decoder.eval()
print(evaluate(encoder, decoder, pairs(4).tensors[0]))
