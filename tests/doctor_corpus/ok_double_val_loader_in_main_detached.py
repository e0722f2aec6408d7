import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    x = torch.randn(400, 12)
    y = x[:, :3].sum(1, keepdim=True)
    train_loader = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[320:], y[320:]), batch_size=16)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = {"train": [], "val": []}
    for epoch in range(5):
        for xb, yb in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            history["train"].append(loss.item())
        with torch.inference_mode():
            for xb, yb in val_loader:
                pred = model(xb)
                history["val"].append(torch.nn.functional.mse_loss(pred, yb).detach())
        print(epoch, sum(v.item() for v in history["val"][-5:]) / 5)


if __name__ == "__main__":
    main()
