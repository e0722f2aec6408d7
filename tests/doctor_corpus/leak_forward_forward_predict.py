# (review script) expected: eval-builds-graph (faithful upstream: predict() runs without no_grad)
# pytorch/examples mnist_forward_forward/main.py (Hinton's Forward-Forward): each layer has its own
# Adam optimizer and trains locally on goodness of positive/negative data; inputs detached between layers
import torch
import torch.nn as nn
from torch.optim import Adam


def overlay_y_on_x(x, y):
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers += [Layer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)  # expect: eval-builds-graph
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            print("training layer: ", i)
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0
        self.num_epochs = 60

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            if i % 20 == 0:
                print(i, loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


device = torch.device("cpu")
if __name__ == "__main__":
    torch.manual_seed(1234)
    g = torch.Generator().manual_seed(0)
    protos = torch.rand(10, 196, generator=g)
    y = torch.randint(0, 10, (1000,), generator=g)
    x = (protos[y] + 0.2 * torch.randn(1000, 196, generator=g))
    yte = torch.randint(0, 10, (200,), generator=g)
    x_te = (protos[yte] + 0.2 * torch.randn(200, 196, generator=g))
    net = Net([196, 100, 100])
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.randperm(x.size(0))
    x_neg = overlay_y_on_x(x, y[rnd])
    net.train(x_pos, x_neg)
    print("train error:", 1.0 - net.predict(x).eq(y).float().mean().item())
    print("test error:", 1.0 - net.predict(x_te).eq(yte).float().mean().item())
