"""Full-graph training of the products-like suite graph on one GPU.

    python examples/full_graph_products.py --layer sage --impl ours
    python examples/full_graph_products.py --layer sage --impl pyg      # PyG's layers, same model
    python examples/full_graph_products.py --device cpu --graph arxiv-like --scale 0.01

Every epoch runs the model over the whole graph (products-like: 2.4M nodes,
62M edges, 100 features, 47 classes, generated on the device; labels planted
as in examples/distributed_common.py) and takes the loss on the training
nodes. Prints the time per epoch and the peak memory
(torch.cuda.max_memory_allocated). PyG's layers materialise per-edge
messages and may run out of memory here: that is reported (exit status 3),
not raised.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import distributed_common as common  # noqa: E402

import pyg_ioaware  # noqa: E402

OUT_OF_MEMORY = 3  # exit status


def parse_args(argv=None) -> argparse.Namespace:
    has_cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--graph", choices=common.GRAPHS, default="products-like")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="suite graphs: node and edge counts times this")
    parser.add_argument("--layer", choices=common.LAYERS, default="sage")
    parser.add_argument("--impl", choices=common.IMPLS, default="ours",
                        help="ours: pyg_ioaware.nn; pyg: torch_geometric.nn")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if has_cuda else "cpu")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=2, help="gatv2: heads of the hidden layers")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=pathlib.Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not has_cuda:
        parser.error("--device cuda: torch sees no CUDA device")
    return args


def train_epoch(model, optimizer, data, bf16: bool) -> float:
    """One full-graph step: the loss on the training nodes."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(data.x.device.type, dtype=torch.bfloat16, enabled=bf16):
        out = model(data.x, data.edge_index)
    loss = F.cross_entropy(out[data.train_nodes].float(), data.y[data.train_nodes])
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def accuracy(model, data, bf16: bool) -> dict:
    model.eval()
    with torch.autocast(data.x.device.type, dtype=torch.bfloat16, enabled=bf16):
        pred = model(data.x, data.edge_index).argmax(1)
    return {f"{split}_acc": float((pred[data[f"{split}_nodes"]] ==
                                   data.y[data[f"{split}_nodes"]]).float().mean())
            for split in ("val", "test")}


def gib(num_bytes: float) -> float:
    return num_bytes / 2**30


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:  # "cuda" names the current device: made explicit for the memory counters
        device = torch.device("cuda", torch.cuda.current_device())
    start = time.perf_counter()
    data = common.load_dataset(args.graph, args.scale, device, args.seed)
    print(f"{args.graph}: {data.num_nodes:,} nodes, {data.edge_index.size(1):,} edges, "
          f"{data.x.size(1)} features, {data.num_classes} classes, "
          f"{data.train_nodes.numel():,} training nodes; generated in "
          f"{time.perf_counter() - start:.1f} s on {device}", flush=True)
    torch.manual_seed(args.seed)
    model = common.Net(args.layer, args.impl, data.x.size(1), args.hidden, data.num_classes,
                       num_layers=args.num_layers, heads=args.heads,
                       dropout=args.dropout).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    print(f"model: {args.num_layers} x {args.layer} ({args.impl}), hidden {args.hidden}, "
          f"{'bf16 autocast' if args.bf16 else 'fp32'}; {name}; native CUDA library in use: "
          f"{'yes' if pyg_ioaware.cuda_available() else 'no'}", flush=True)
    if cuda:
        torch.cuda.synchronize(device)
        resident = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)

    result = {"config": {k: (str(v) if isinstance(v, pathlib.Path) else v)
                         for k, v in vars(args).items()},
              "device": name, "torch": torch.__version__, "num_nodes": data.num_nodes,
              "num_edges": data.edge_index.size(1), "epochs": []}
    try:
        for epoch in range(1, args.epochs + 1):
            t0 = time.perf_counter()
            loss = train_epoch(model, optimizer, data, args.bf16)  # float() synchronises
            seconds = time.perf_counter() - t0
            result["epochs"].append({"epoch": epoch, "loss": loss, "seconds": seconds})
            print(f"epoch {epoch}/{args.epochs}  loss {loss:.4f}  {seconds:.3f} s"
                  + (f"  peak {gib(torch.cuda.max_memory_allocated(device)):.2f} GiB"
                     if cuda else ""), flush=True)
        result.update(accuracy(model, data, args.bf16))
    except torch.cuda.OutOfMemoryError:
        peak = gib(torch.cuda.max_memory_allocated(device)) if cuda else float("nan")
        total = gib(torch.cuda.get_device_properties(device).total_memory) if cuda else \
            float("nan")
        print(f"OUT OF MEMORY: {args.impl}'s {args.layer} on {args.graph} "
              f"({data.num_nodes:,} nodes, {data.edge_index.size(1):,} edges, hidden "
              f"{args.hidden}) needs more than the {total:.1f} GiB of {name} "
              f"(peak {peak:.2f} GiB allocated before the failure, in epoch "
              f"{len(result['epochs']) + 1})", flush=True)
        result.update(status="out_of_memory", peak_memory_gib=peak)
        write(args.json, result)
        return OUT_OF_MEMORY

    timed = result["epochs"][1:] or result["epochs"]  # epoch 1 builds the graph's caches
    result.update(status="ok", epoch_s=sum(e["seconds"] for e in timed) / len(timed))
    if cuda:
        result.update(peak_memory_gib=gib(torch.cuda.max_memory_allocated(device)),
                      resident_gib=gib(resident))
    print(f"summary: {result['epoch_s']:.3f} s per epoch (epochs {timed[0]['epoch']}-"
          f"{timed[-1]['epoch']})"
          + (f", peak memory {result['peak_memory_gib']:.2f} GiB "
             f"({result['resident_gib']:.2f} GiB of it graph, features and model)" if cuda else "")
          + f"; val acc {result['val_acc']:.3f}, test acc {result['test_acc']:.3f}", flush=True)
    write(args.json, result)
    return 0


def write(path, result) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
