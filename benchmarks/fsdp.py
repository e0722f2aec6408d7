"""Memory per rank and checkpoint write time: DDP against FSDP2, on 2 processes.

What is measured
----------------
A stack of ``--blocks`` linear blocks (``Linear(width, width)`` + GELU; about 50M
parameters with the defaults), trained with AdamW for a few steps on random data, once
wrapped in DDP and once sharded with ``fully_shard`` per block and on the root, the way
``dist.strategy=ddp`` and ``fsdp`` do it (``trainwell/engine/distributed/fsdp.py``). Each strategy
runs
in its own 2-process ``torchrun`` launch (gloo on CPU; NCCL on GPUs when there are 2).

- **bytes per rank** of the training state that stays between steps, counted from the
  tensors each rank holds (a CPU allocator keeps no count): parameters, gradients and
  AdamW's two moments; for FSDP the local shards. On CUDA the allocator's peak
  (``max_memory_allocated``) is shown as well, which also holds activations and FSDP's
  transient all-gathered blocks.
- **peak RSS** of each worker process (for information: it includes torch itself).
- **checkpoint write**: the median of 3 writes of model + optimizer state: *gathered*
  (every rank sends its state to rank 0, which writes one ``torch.save`` file, what a
  ``.pt`` checkpoint of a sharded model costs) against *sharded* (``torch.distributed.
  checkpoint.save``: every rank writes its own shards in parallel, what
  ``dist.strategy=fsdp`` does), into a temporary folder.

The arithmetic it checks: with AdamW in fp32 a model of N parameters needs 16N bytes per
rank under DDP (4 weights + 4 gradients + 8 moments) and 16N/W under FSDP on W ranks,
plus the largest block gathered while it runs.

How to run
----------
::

    python benchmarks/fsdp.py            # ~50M parameters, about a minute on 2 CPU cores
    python benchmarks/fsdp.py --quick    # a smoke run of a small model

The last lines read ``ratio fsdp / ddp (training state bytes per rank): 0.50`` and
``ratio sharded / gathered (checkpoint write time): ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a small model, one step")
    parser.add_argument("--worker", choices=["ddp", "fsdp"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.width, args.blocks, args.steps = 256, 4, 1
    if args.worker:
        worker(args)
        return
    results = {strategy: launch(strategy, args) for strategy in ("ddp", "fsdp")}
    report(results, args)


def launch(strategy: str, args: argparse.Namespace) -> dict:
    """One 2-process torchrun of this script as a worker; rank 0's JSON figures."""
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-fsdp-") as tmp:
        out = Path(tmp) / "result.json"
        # torchrun's per-launch logs go in our folder, not a torchelastic_* one left in /tmp.
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--log-dir", str(Path(tmp) / "logs"), "--nproc-per-node", "2",
                   __file__, "--worker", strategy, "--out", str(out),
                   "--width", str(args.width), "--blocks", str(args.blocks),
                   "--steps", str(args.steps)]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the {strategy} workers failed:\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def build(args: argparse.Namespace, device):  # -> nn.Sequential
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(args.width, args.width), nn.GELU())
              for _ in range(args.blocks)]  # fmt: skip
    return nn.Sequential(*blocks).to(device)


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from _tiny_lm import device_name  # beside this file: the benchmarks' one device line
    from torch import nn

    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= 2
    rank = int(os.environ["RANK"])
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    model = build(args, device)
    if args.worker == "ddp":
        net = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model:
            fully_shard(block, mesh=mesh)
        net = fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.randn(16, args.width, device=device)
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated, as in training
        net(x).square().mean().backward()
        optimizer.step()
    figures = {"state_mb": state_bytes(model, optimizer) / MB,
               "params": sum(p.numel() for p in build(args, "meta").parameters()),
               "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "device": device_name(device)}  # fmt: skip
    if cuda:
        figures["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / MB
    figures.update(write_times(model, optimizer, args.worker, rank))
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, figures)
    if rank == 0:
        Path(args.out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def local(t):  # -> torch.Tensor
    """This rank's own part of a (possibly sharded) tensor."""
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(model, optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state this rank holds."""
    total = 0
    for p in model.parameters():
        total += local(p).numel() * p.element_size()
        if p.grad is not None:
            total += local(p.grad).numel() * p.grad.element_size()
    for state in optimizer.state.values():
        total += sum(local(v).numel() * v.element_size() for v in state.values()
                     if hasattr(v, "numel") and v.dim() > 0)  # fmt: skip
    return total


def write_times(model, optimizer, strategy: str, rank: int) -> dict[str, float]:
    """Median seconds of 3 writes, gathered to rank 0 and (FSDP) sharded by DCP."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    from trainwell.engine.checkpointing.checkpoint import save_atomic

    times: dict[str, list[float]] = {"gathered_s": [], "sharded_s": []}
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-ckpt-") as tmp:
        box = [tmp]
        dist.broadcast_object_list(box, src=0)  # one folder for every rank (one machine)
        for i in range(3):
            dist.barrier()
            began = time.perf_counter()
            full = get_state_dict(model, optimizer, options=StateDictOptions(
                full_state_dict=True, cpu_offload=True))  # fmt: skip
            if rank == 0:
                save_atomic({"model": full[0], "optimizer": full[1]}, Path(box[0]) / f"g{i}.pt")
            dist.barrier()
            times["gathered_s"].append(time.perf_counter() - began)
            if strategy == "fsdp":
                began = time.perf_counter()
                msd, osd = get_state_dict(model, optimizer)
                dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=Path(box[0]) / f"s{i}")
                dist.barrier()
                times["sharded_s"].append(time.perf_counter() - began)
            del full
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
        dist.barrier()
    return {k: statistics.median(v) for k, v in times.items() if v}


def report(results: dict, args: argparse.Namespace) -> None:
    ddp, fsdp = results["ddp"], results["fsdp"]
    params = ddp[0]["params"]
    model = f"{args.blocks} blocks of Linear({args.width}, {args.width})"
    print(f"device: {ddp[0]['device']}; 2 processes; model: {model}, "
          f"{params / 1e6:.1f}M parameters, AdamW fp32")  # fmt: skip
    print(f"arithmetic: ddp 16N = {16 * params / MB:.0f} MB per rank, "
          f"fsdp 16N/2 = {8 * params / MB:.0f} MB per rank")  # fmt: skip
    print(f"{'strategy':<9}{'rank':>5}{'state MB':>11}{'peak RSS MB':>13}{'cuda peak MB':>14}")
    for name, ranks in results.items():
        for rank, fig in enumerate(ranks):
            cuda = f"{fig['cuda_peak_mb']:.0f}" if "cuda_peak_mb" in fig else "-"
            print(f"{name:<9}{rank:>5}{fig['state_mb']:>11.1f}{fig['rss_mb']:>13.0f}{cuda:>14}")
    print(f"checkpoint write (median of 3): gathered to rank 0 {fsdp[0]['gathered_s']:.2f}s, "
          f"sharded (DCP, each rank its shards) {fsdp[0]['sharded_s']:.2f}s")  # fmt: skip
    per_rank = max(f["state_mb"] for f in fsdp) / max(f["state_mb"] for f in ddp)
    print(f"ratio fsdp / ddp (training state bytes per rank): {per_rank:.2f}")
    ratio = fsdp[0]["sharded_s"] / fsdp[0]["gathered_s"]
    print(f"ratio sharded / gathered (checkpoint write time): {ratio:.2f}")


if __name__ == "__main__":
    main()
