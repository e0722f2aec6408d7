# The PyTorch seq2seq tutorial's shape: an encoder and a decoder called one token at a
# time, teacher forcing, one optimizer and one backward per sentence pair, pairs sorted by length (a
# short-to-long curriculum). Each step's graph is built and freed within the step.
import torch
from torch import nn

torch.manual_seed(0)
VOCAB, HID, SOS = 20, 16, 0


class EncoderRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, HID)
        self.gru = nn.GRU(HID, HID)

    def forward(self, token, hidden):
        return self.gru(self.embedding(token).view(1, 1, -1), hidden)


class DecoderRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, HID)
        self.gru = nn.GRU(HID, HID)
        self.out = nn.Linear(HID, VOCAB)

    def forward(self, token, hidden):
        output, hidden = self.gru(torch.relu(self.embedding(token).view(1, 1, -1)), hidden)
        return torch.log_softmax(self.out(output[0]), dim=1), hidden


encoder, decoder = EncoderRNN(), DecoderRNN()
optimizer = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.01)
criterion = nn.NLLLoss()
pairs = []
for length in range(2, 14):
    src = torch.randint(1, VOCAB, (length,))
    pairs.append((src, src.flip(0)))


def train(input_tensor, target_tensor):
    encoder_hidden = torch.zeros(1, 1, HID)
    optimizer.zero_grad()
    for ei in range(input_tensor.size(0)):
        _, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
    decoder_input = torch.tensor([SOS])
    decoder_hidden = encoder_hidden
    loss = 0
    for di in range(target_tensor.size(0)):
        decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden)
        loss += criterion(decoder_output, target_tensor[di].view(1))
        decoder_input = target_tensor[di].view(1)
    loss.backward()
    optimizer.step()
    return loss.item() / target_tensor.size(0)


for epoch in range(2):
    total = sum(train(src, tgt) for src, tgt in pairs)
    print(epoch, total / len(pairs))
