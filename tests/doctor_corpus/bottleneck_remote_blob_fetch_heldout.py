# Written by a helper who had not seen the doctor's code (held-out, 2026-12-07): a 3 ms
# object-store GET per sample in the main process, read with while/next.
# Streams training examples from an object store ("S3"), one GET per sample.
# The store is faked in-process; each GET costs ~3 ms of network latency.
import json
import random
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class FakeBlobStore:
    def __init__(self, n, latency=0.003):
        self.latency = latency
        rnd = random.Random(0)
        self._data = {}
        for i in range(n):
            lbl = rnd.randrange(3)
            vec = [rnd.gauss(lbl, 1.0) for _ in range(32)]
            self._data[f"shard/{i:06d}.json"] = json.dumps({"x": vec, "y": lbl}).encode()

    def keys(self):
        return sorted(self._data)

    def get(self, key):
        time.sleep(self.latency)   # round trip to the bucket
        return self._data[key]


class BlobDataset(Dataset):
    def __init__(self, store):
        self.store = store
        self.keys = store.keys()

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):  # expect-related: data-bottleneck
        rec = json.loads(self.store.get(self.keys[i]))
        return torch.tensor(rec["x"]), rec["y"]


def main():
    torch.manual_seed(0)
    store = FakeBlobStore(1200)
    loader = DataLoader(  # expect: data-bottleneck
        BlobDataset(store), batch_size=24, shuffle=True, num_workers=0
    )
    net = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 3))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    n_batches = 0
    t0 = time.perf_counter()
    data_iter = iter(loader)
    while True:
        try:
            x, y = next(data_iter)
        except StopIteration:
            break
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n_batches += 1
        if n_batches % 10 == 0:
            print(f"batch {n_batches} loss {loss.item():.4f} ({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
