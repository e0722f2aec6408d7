import torch
from _common import batches, net


def train():
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    total = 0
    for step, (x, y) in enumerate(batches()):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)  # expect-related: graph-retained
        loss.backward()
        opt.step()
        total += loss  # expect: graph-retained
    print("mean loss", float(total) / (step + 1))


if __name__ == "__main__":
    train()
