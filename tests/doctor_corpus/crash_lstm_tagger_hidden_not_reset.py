# The PyTorch tutorial's LSTM tagger with `model.hidden = model.init_hidden()` removed.
import torch
from torch import nn

torch.manual_seed(1)


class LSTMTagger(nn.Module):
    def __init__(self, embedding_dim=6, hidden_dim=6, vocab_size=9, tagset_size=3):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim)
        self.hidden2tag = nn.Linear(hidden_dim, tagset_size)
        self.hidden = self.init_hidden()

    def init_hidden(self):
        return (torch.zeros(1, 1, self.hidden_dim), torch.zeros(1, 1, self.hidden_dim))

    def forward(self, sentence):
        embeds = self.word_embeddings(sentence)
        lstm_out, self.hidden = self.lstm(embeds.view(len(sentence), 1, -1), self.hidden)  # expect: graph-retained
        tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
        return nn.functional.log_softmax(tag_space, dim=1)


training_data = [(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([0, 1, 2, 0, 1])),
                 (torch.tensor([5, 6, 7, 8]), torch.tensor([2, 1, 0, 2]))]
model = LSTMTagger()
loss_function = nn.NLLLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
demo = model(training_data[0][0]).detach()
for epoch in range(3):
    for sentence, tags in training_data:
        model.zero_grad()
        tag_scores = model(sentence)
        loss = loss_function(tag_scores, tags)
        loss.backward()
        optimizer.step()
