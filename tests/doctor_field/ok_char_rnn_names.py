# Field corpus: the shape of the "classifying names with a character-level RNN" tutorial
# (an RNN cell written by hand with i2h / h2o, initHidden per name, a loop over letters,
# rnn.zero_grad() and the hand-written update p.data.add_(p.grad.data, alpha=-lr)).
# source: https://pytorch.org/tutorials/intermediate/char_rnn_classification_tutorial.html
import random
import string

import torch
import torch.nn as nn

all_letters = string.ascii_letters + " .,;'"
n_letters = len(all_letters)
random.seed(0)
torch.manual_seed(0)
all_categories = ["short", "long", "vowel"]


def random_name():
    k = random.randrange(3)
    if k == 0:
        return k, "".join(random.choice("bcdfg") for _ in range(3))
    if k == 1:
        return k, "".join(random.choice("hjklm") for _ in range(9))
    return k, "".join(random.choice("aeiou") for _ in range(5))


def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(input_size + hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, input, hidden):
        combined = torch.cat((input, hidden), 1)
        hidden = self.i2h(combined)
        output = self.softmax(self.h2o(combined))
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, self.hidden_size)


rnn = RNN(n_letters, 32, len(all_categories))
criterion = nn.NLLLoss()
learning_rate = 0.005


def train(category_tensor, line_tensor):
    hidden = rnn.initHidden()
    rnn.zero_grad()
    for i in range(line_tensor.size()[0]):
        output, hidden = rnn(line_tensor[i], hidden)
    loss = criterion(output, category_tensor)
    loss.backward()
    for p in rnn.parameters():
        p.data.add_(p.grad.data, alpha=-learning_rate)
    return output, loss.item()


current_loss = 0
all_losses = []
for iter in range(1, 201):
    k, line = random_name()
    output, loss = train(torch.tensor([k], dtype=torch.long), lineToTensor(line))
    current_loss += loss
    if iter % 50 == 0:
        all_losses.append(current_loss / 50)
        current_loss = 0
print(all_losses)
