"""Node classification across devices: one process per GPU, DDP over NCCL
(gloo on the CPU), each rank sampling its own seed nodes.

    torchrun --nproc-per-node 2 examples/distributed_sage.py --graph products-like
    python examples/distributed_sage.py --world-size 2 --graph products-like
    python examples/distributed_sage.py --device cpu --world-size 2 --graph arxiv-like --scale 0.1

Every rank owns one device (``cuda:LOCAL_RANK``: its graph caches, plans,
workspaces and streams live there), a full copy of the graph, features and
labels (generated once by rank 0 and broadcast), a disjoint shard of the
training nodes and its own sampler over that shard. The global batch is the
per-rank batch times the world size, so 1 and N devices run the same
optimisation; DDP averages the gradients. Rank 0 prints loss, time per epoch
and seed nodes per second (summed over ranks) every epoch and evaluates on
sampled neighbourhoods of up to --eval-nodes validation and test nodes.

Sampling: torch_geometric's NeighborLoader where pyg-lib or torch-sparse is
installed (on the CPU, in a background thread that runs --prefetch batches
ahead), else pyg_ioaware.loader.NeighborSampler, which on a GPU runs on the
rank's device (--sample-on device) so it does not starve the GPU.
``--impl pyg`` runs the same script with torch_geometric's layers.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import distributed_common as common  # noqa: E402

import pyg_ioaware  # noqa: E402
from pyg_ioaware.loader import pyg_sampler_available  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    has_cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--graph", choices=common.GRAPHS,
                        default="products-like" if has_cuda else "arxiv-like",
                        help="a suite graph (synthetic: Gaussian features, labels planted "
                             "from features averaged over in-neighbours) or a bundled "
                             "Planetoid dataset")
    parser.add_argument("--scale", type=float, default=1.0 if has_cuda else 0.1,
                        help="suite graphs: node and edge counts times this")
    parser.add_argument("--layer", choices=common.LAYERS, default="sage")
    parser.add_argument("--impl", choices=common.IMPLS, default="ours",
                        help="ours: pyg_ioaware.nn; pyg: torch_geometric.nn")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if has_cuda else "cpu")
    parser.add_argument("--world-size", type=int, default=1,
                        help="processes to spawn (ignored under torchrun, which sets it)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop every epoch after this many steps (0: whole epochs)")
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="global batch: seed nodes per step over all ranks")
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10],
                        help="neighbours sampled per hop; one layer per hop")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=2, help="gatv2: heads of the hidden layers")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--sampler", choices=["auto", "pyg", "torch"], default="auto",
                        help="pyg: torch_geometric's NeighborLoader (needs pyg-lib or "
                             "torch-sparse); torch: pyg_ioaware.loader.NeighborSampler; "
                             "auto: pyg where it can sample, else torch")
    parser.add_argument("--sample-on", choices=["device", "cpu"], default="device",
                        help="where pyg_ioaware's NeighborSampler runs on a GPU rank")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="CPU sampling: batches sampled ahead in a background thread "
                             "(0: sample in the training loop). Default: 4 with --device "
                             "cuda, 0 with --device cpu, where the thread competes with "
                             "training for the cores and is slower")
    parser.add_argument("--eval-nodes", type=int, default=10_000,
                        help="validation and test nodes evaluated (each) on rank 0; 0: none")
    parser.add_argument("--cpu-threads", type=int, default=0,
                        help="torch CPU threads per rank (0: the host's cores / local ranks)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=pathlib.Path, help="rank 0 writes the results here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not has_cuda:
        parser.error("--device cuda: torch sees no CUDA device")
    if args.prefetch is None:
        args.prefetch = 4 if args.device == "cuda" else 0
    return args


def resolve_sampler(args, device: torch.device):
    """(sampler for neighbor_loader, device to sample on or None)."""
    sampler = args.sampler
    if sampler == "auto":
        sampler = "pyg" if pyg_sampler_available() else "torch"
    on_device = device.type == "cuda" and sampler == "torch" and args.sample_on == "device"
    return sampler, device if on_device else None


def make_loader(data, seeds, batch_size, args, device, shuffle=True, seed=0):
    """A Batch loader over ``seeds``; CPU sampling is prefetched."""
    sampler, sample_device = resolve_sampler(args, device)
    loader = common.make_sampler(data, seeds, args.fanout, batch_size, sampler, sample_device,
                                 shuffle=shuffle, seed=seed)
    name = common.sampler_name(loader)
    if sample_device is None and args.prefetch > 0:
        loader = common.Prefetcher(loader, args.prefetch, device)
        name += f", {args.prefetch} batches prefetched in a thread"
    return loader, name


def train_epoch(model, optimizer, loader, data, args, device):
    """One pass over the rank's loader: [seconds, seeds, loss sum, steps,
    seconds waiting for batches, sampler thread busy seconds]."""
    loss_sum = torch.zeros((), device=device)
    steps = seeds = 0
    wait = 0.0
    start = time.perf_counter()
    batches = iter(loader)
    try:
        while not args.max_steps or steps < args.max_steps:
            if device.type == "cuda":
                # Splits the step's time between sampling and compute; our
                # layers synchronise once per new graph anyway.
                torch.cuda.synchronize(device)
            fetch = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            batch = batch.to(device, non_blocking=True)
            wait += time.perf_counter() - fetch
            loss = common.batch_loss(model, batch, data.x, data.y, args.bf16)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            steps, seeds = steps + 1, seeds + batch.batch_size
    finally:
        if hasattr(batches, "close"):
            batches.close()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    busy = getattr(loader, "busy_seconds", wait)
    return [time.perf_counter() - start, seeds, float(loss_sum), steps, wait, busy]


def worker(local_rank: int, args, world_size: int, rank: int, local_world_size: int) -> None:
    """One rank: set up its device and process group, train, report."""
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    torch.set_num_threads(args.cpu_threads or max(1, (os.cpu_count() or 1) // local_world_size))
    common.init_process_group(rank, world_size, device)
    try:
        run(args, rank, world_size, device)
    finally:
        dist.destroy_process_group()


def run(args, rank: int, world_size: int, device: torch.device) -> None:
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    if args.batch_size % world_size:
        raise ValueError(f"--batch-size {args.batch_size} is not a multiple of the "
                         f"world size {world_size}")
    start = time.perf_counter()
    data = common.load_dataset(args.graph, args.scale, device, args.seed) if rank == 0 else None
    data = common.broadcast_dataset(data, device)
    seeds = common.shard_seeds(data.train_nodes, rank, world_size, args.seed)
    per_rank_batch = args.batch_size // world_size
    loader, sampler = make_loader(data, seeds, per_rank_batch, args, device,
                                  seed=args.seed + 1 + rank)
    torch.manual_seed(args.seed + 1 + rank)  # PyG's loader shuffles with the global generator
    say(f"{args.graph}: {data.num_nodes:,} nodes, {data.edge_index.size(1):,} edges, "
        f"{data.x.size(1)} features, {data.num_classes} classes; "
        f"{data.train_nodes.numel():,} training nodes in {world_size} shards of {seeds.numel():,}; "
        f"ready in {time.perf_counter() - start:.1f} s")
    say(f"{world_size} rank(s) on {args.device} ({device_name(device)}), "
        f"backend {dist.get_backend()}; native CUDA library in use: "
        f"{'yes' if pyg_ioaware.cuda_available() else 'no'}")
    say(f"sampler: {sampler}; fanout {args.fanout}; batch {args.batch_size} = "
        f"{per_rank_batch} per rank x {world_size}; {len(loader)} steps per epoch")

    torch.manual_seed(args.seed)  # the same initial model on every rank (DDP broadcasts it too)
    model = common.Net(args.layer, args.impl, data.x.size(1), args.hidden, data.num_classes,
                       num_layers=len(args.fanout), heads=args.heads,
                       dropout=args.dropout).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    say(f"model: {len(args.fanout)} x {args.layer} ({args.impl}), hidden {args.hidden}"
        f"{', bf16 autocast' if args.bf16 else ', fp32'}")

    eval_loader = None
    if rank == 0 and args.eval_nodes > 0:
        k = args.eval_nodes
        eval_nodes = torch.cat([data.val_nodes[:k], data.test_nodes[:k]])
        eval_loader, _ = make_loader(data, eval_nodes, args.batch_size, args, device,
                                     shuffle=False, seed=args.seed)
        num_val = data.val_nodes[:k].numel()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    epochs = []
    for epoch in range(1, args.epochs + 1):
        seconds, seed_count, loss_sum, steps, wait, busy = \
            train_epoch(ddp, optimizer, loader, data, args, device)
        totals = torch.tensor([seed_count, loss_sum, steps, wait / seconds, busy / seconds],
                              dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        longest = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        seconds = float(longest)
        seed_count, loss_sum, steps, wait_share, busy_share = totals.tolist()
        record = {"epoch": epoch, "seconds": seconds, "seeds": int(seed_count),
                  "seeds_per_s": seed_count / seconds, "loss": loss_sum / max(steps, 1),
                  "steps_per_rank": int(steps) // world_size,
                  "batch_wait_share": wait_share / world_size,
                  "sampler_busy_share": busy_share / world_size}
        if eval_loader is not None:
            correct = common.predict_correct(model, eval_loader, data.x, data.y, args.bf16)
            record["val_acc"] = float(correct[:num_val].float().mean())
            record["test_acc"] = float(correct[num_val:].float().mean())
        dist.barrier()
        epochs.append(record)
        say(f"epoch {epoch}/{args.epochs}  loss {record['loss']:.4f}  {seconds:.2f} s  "
            f"{record['seeds_per_s']:,.0f} seeds/s  "
            f"waiting for batches {100 * record['batch_wait_share']:.0f}% "
            f"(sampler busy {100 * record['sampler_busy_share']:.0f}%)"
            + (f"  val {record['val_acc']:.3f} test {record['test_acc']:.3f}"
               if "val_acc" in record else ""))

    peak = torch.tensor([torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0],
                        dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    timed = epochs[1:] or epochs  # the first epoch warms up caches and kernels
    summary = {
        "seeds_per_s": sum(e["seeds"] for e in timed) / sum(e["seconds"] for e in timed),
        "epoch_s": sum(e["seconds"] for e in timed) / len(timed),
        "peak_memory_gib": float(peak) / 2**30,
        **{k: epochs[-1][k] for k in ("val_acc", "test_acc") if k in epochs[-1]},
    }
    say(f"summary (epochs {timed[0]['epoch']}-{timed[-1]['epoch']}): "
        f"{summary['seeds_per_s']:,.0f} seeds/s, {summary['epoch_s']:.2f} s per epoch, "
        f"peak memory {summary['peak_memory_gib']:.2f} GiB per rank")
    if rank == 0 and args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        config = {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in vars(args).items()}
        args.json.write_text(json.dumps(
            {"config": {**config, "world_size": world_size}, "device": device_name(device),
             "sampler": sampler, "torch": torch.__version__, "epochs": epochs,
             "summary": summary}, indent=1))


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def main(argv=None) -> int:
    args = parse_args(argv)
    if "LOCAL_RANK" in os.environ:  # torchrun
        worker(int(os.environ["LOCAL_RANK"]), args, int(os.environ["WORLD_SIZE"]),
               int(os.environ["RANK"]), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        return 0
    world_size = args.world_size
    if args.device == "cuda" and torch.cuda.device_count() < world_size:
        raise SystemExit(f"--world-size {world_size}: only {torch.cuda.device_count()} GPU(s)")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(common.free_port()))
    if world_size == 1:
        worker(0, args, 1, 0, 1)
    else:
        mp.spawn(spawned, args=(args, world_size), nprocs=world_size)
    return 0


def spawned(local_rank: int, args, world_size: int) -> None:
    worker(local_rank, args, world_size, local_rank, world_size)


if __name__ == "__main__":
    sys.exit(main())
