"""Measure speed and memory of pyg_ioaware's layers against PyG's.

Two measurements, both ours against torch_geometric's layer with the same
weights:

1. training on a Planetoid dataset (Cora by default): accuracy, time per
   epoch and peak GPU memory of a 2-layer model of each layer;
2. one layer's forward and backward on a random graph of the size you ask
   for (``--nodes``, ``--avg-degree``, ``--channels``): median ms and peak
   memory above the inputs, which is where the per-edge tensors PyG builds
   show.

    python examples/speed_memory.py                      # every layer, on the GPU if any
    python examples/speed_memory.py --layers gatv2 --nodes 200000 --avg-degree 20
    python examples/speed_memory.py --dtype bf16         # under torch.autocast

Meant for a GPU with the native library (``pyg_ioaware.cuda_available()``).
On a CPU it still runs, small, and says that the numbers there are the
plain-torch fallback's (PyG's speed, no memory figures). For the full
protocol use ``python -m pyg_ioaware.bench``.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import torch
import torch_geometric.nn

import pyg_ioaware
import pyg_ioaware.nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from node_classification import (DATA_ROOT, LAYERS, environment, load_dataset,  # noqa: E402
                                 train)

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_layer(nn, layer: str, channels: int, heads: int):
    cls = getattr(nn, LAYERS[layer])
    if layer in ("gatv2", "transformer"):
        return cls(channels, channels // heads, heads=heads)
    return cls(channels, channels)


def random_graph(num_nodes: int, avg_degree: float, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    num_edges = int(num_nodes * avg_degree)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    edge_index = torch_geometric.utils.coalesce(edge_index, num_nodes=num_nodes)
    return edge_index.to(device)


def time_layer(nn, layer: str, x, edge_index, heads: int, dtype, iters: int,
               seed: int = 0) -> dict:
    """Median forward and backward ms and peak memory (MB above the inputs)
    of one layer; ``status`` is "OOM" where it ran out of GPU memory."""
    device = x.device
    torch.manual_seed(seed)
    conv = make_layer(nn, layer, x.size(1), heads).to(device)
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    fwd, bwd = [], []
    try:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) if cuda else 0
        for i in range(iters + 2):  # two warm-up iterations
            sync()
            t0 = time.perf_counter()
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                out = conv(x, edge_index)
            sync()
            t1 = time.perf_counter()
            out.backward(torch.ones_like(out))
            sync()
            t2 = time.perf_counter()
            if i >= 2:
                fwd.append((t1 - t0) * 1e3)
                bwd.append((t2 - t1) * 1e3)
            del out
            x.grad = None
        peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if cuda else None
    except torch.cuda.OutOfMemoryError:
        return {"status": "OOM"}
    return {"status": "ok", "fwd_ms": statistics.median(fwd), "bwd_ms": statistics.median(bwd),
            "peak_mb": peak}


def fmt_row(name: str, r: dict) -> str:
    if r["status"] != "ok":
        return f"  {name:16s} {r['status']}"
    mem = "n/a (CPU)" if r["peak_mb"] is None else f"{r['peak_mb']:.1f} MB"
    return f"  {name:16s} fwd {r['fwd_ms']:8.2f} ms  bwd {r['bwd_ms']:8.2f} ms  peak {mem}"


def main(argv=None) -> int:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="gcn,sage,gatv2,transformer",
                        help="comma list of " + ", ".join(LAYERS))
    parser.add_argument("--device", default=default_device,
                        help=f"torch device (default: {default_device})")
    parser.add_argument("--dataset", default="Cora", help="Planetoid dataset to train on "
                        "('none' to skip training)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="training epochs (default: 200 on a GPU, 20 on CPU)")
    parser.add_argument("--nodes", type=int, default=None,
                        help="nodes of the random graph (default: 100000 on a GPU, 5000 on "
                             "CPU; 0 to skip)")
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--channels", type=int, default=128,
                        help="feature width in and out of the layer")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                        help="fp32, or bf16/fp16 under torch.autocast")
    parser.add_argument("--iters", type=int, default=None,
                        help="timed iterations (default: 20 on a GPU, 3 on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=pathlib.Path, default=DATA_ROOT)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device")
    layers = [name.strip() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        parser.error(f"--layers: unknown {unknown}; choose from {sorted(LAYERS)}")
    gpu = device.type == "cuda"
    epochs = args.epochs if args.epochs is not None else (200 if gpu else 20)
    nodes = args.nodes if args.nodes is not None else (100_000 if gpu else 5_000)
    iters = args.iters or (20 if gpu else 3)

    environment(device)
    if not gpu:
        print("note: no GPU here, so both sides run plain torch on the CPU: these numbers "
              "are not the native kernels' (and no memory is measured). Run on a GPU with "
              "pyg_ioaware.cuda_available() True for the real comparison.")
    elif not pyg_ioaware.cuda_available():
        print("note: the native library is not loaded; ours runs its plain-torch fallback")

    if args.dataset.lower() != "none":
        dataset = load_dataset(args.dataset, args.root)
        if dataset is not None:
            data = dataset[0].to(device)
            print(f"\n1. Training on {args.dataset} ({data.num_nodes} nodes, "
                  f"{data.num_edges} edges), {epochs} epochs:")
            for layer in layers:
                lr = 0.005 if layer in ("gatv2", "transformer") else 0.01
                ours = train(pyg_ioaware.nn, layer, data, dataset.num_classes, epochs, device,
                             seed=args.seed, lr=lr)
                pyg = train(torch_geometric.nn, layer, data, dataset.num_classes, epochs,
                            device, seed=args.seed, lr=lr, init_state=ours["start_state"])
                for name, r in (("pyg_ioaware", ours), ("torch_geometric", pyg)):
                    mem = "" if r["peak_mb"] is None else f", peak {r['peak_mb']:.1f} MB"
                    print(f"  {LAYERS[layer]:16s} {name:16s} test acc {r['acc']['test']:.4f}, "
                          f"{r['mean_ms']:.2f} ms per epoch{mem}")
                print(f"  {LAYERS[layer]:16s} speedup per epoch "
                      f"{pyg['mean_ms'] / ours['mean_ms']:.2f}x")

    if nodes > 0:
        edge_index = random_graph(nodes, args.avg_degree, device, args.seed)
        print(f"\n2. One layer, forward and backward, on a random graph: {nodes} nodes, "
              f"{edge_index.size(1)} edges, {args.channels} channels, {args.dtype}, "
              f"median of {iters}:")
        gen = torch.Generator().manual_seed(args.seed)
        x = torch.randn(nodes, args.channels, generator=gen).to(device).requires_grad_()
        for layer in layers:
            print(f" {LAYERS[layer]}:")
            results = {}
            for name, nn in (("pyg_ioaware", pyg_ioaware.nn), ("torch_geometric",
                                                                 torch_geometric.nn)):
                results[name] = time_layer(nn, layer, x, edge_index, args.heads,
                                           DTYPES[args.dtype], iters, args.seed)
                print(fmt_row(name, results[name]))
            ours, pyg = results["pyg_ioaware"], results["torch_geometric"]
            if ours["status"] == pyg["status"] == "ok":
                line = (f"  speedup (PyG ms / ours): forward "
                        f"{pyg['fwd_ms'] / ours['fwd_ms']:.2f}x, "
                        f"backward {pyg['bwd_ms'] / ours['bwd_ms']:.2f}x")
                if ours["peak_mb"]:
                    line += f"; memory ratio {pyg['peak_mb'] / ours['peak_mb']:.2f}x"
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
