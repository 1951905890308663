"""Mini-batch training on the bundled Cora with NeighborLoader and
pyg_ioaware.ops.aggregate.

The model is a 2-layer GraphSAGE with mean aggregation written on the
functional API:

    h_i' = W_l * mean_{j -> i} h_j + W_r * h_i

Layer 1 runs over the whole sampled subgraph; layer 2 only needs the seed
nodes, so it aggregates bipartitely: sources are all sampled nodes, the
destinations the first ``batch_size`` of them (NeighborLoader puts the seed
nodes first). Evaluation runs the same model on the full graph.

    python examples/neighbor_loader.py                  # PyG's NeighborLoader where it can sample
    python examples/neighbor_loader.py --sampler torch  # the package's plain-torch sampler
    python examples/neighbor_loader.py --impl both      # also the same model on PyG's scatter

torch_geometric's NeighborLoader samples through pyg-lib or torch-sparse.
Where neither is installed, the default ``--sampler auto`` uses
``pyg_ioaware.loader.NeighborSampler``, a plain-torch uniform sampler that
builds the same kind of mini-batch (seed nodes first, local edge_index).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid
from torch_geometric.loader import NeighborLoader
from torch_geometric.utils import scatter

import pyg_ioaware
from pyg_ioaware import ops
from pyg_ioaware.loader import neighbor_loader, pyg_sampler_available

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_ROOT = REPO / "data" / "Planetoid"
MIN_TEST_ACCURACY = 0.5  # a working model gets ~0.75-0.8 on Cora


class MeanSAGE(torch.nn.Module):
    """h_i' = lin_l(mean of h_j over edges j -> i) + lin_r(h_i)."""

    def __init__(self, in_channels: int, out_channels: int, impl: str = "ours"):
        super().__init__()
        self.lin_l = torch.nn.Linear(in_channels, out_channels)
        self.lin_r = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.impl = impl  # "ours": ops.aggregate; "pyg": gathered messages + scatter

    def forward(self, x, edge_index, num_dst=None):
        if num_dst is None:  # square: every node is a destination
            x_dst = x
        else:  # bipartite: the first num_dst nodes are the destinations
            x_dst = x[:num_dst]
            edge_index = edge_index[:, edge_index[1] < num_dst]
        if self.impl == "ours":
            agg = ops.aggregate((x, x_dst), edge_index, reduce="mean")
        else:
            agg = scatter(x[edge_index[0]], edge_index[1], dim=0, dim_size=x_dst.size(0),
                          reduce="mean")
        return self.lin_l(agg) + self.lin_r(x_dst)


class Net(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, dropout: float,
                 impl: str = "ours"):
        super().__init__()
        self.conv1 = MeanSAGE(in_channels, hidden, impl)
        self.conv2 = MeanSAGE(hidden, out_channels, impl)
        self.dropout = dropout

    def forward(self, x, edge_index, batch_size=None):
        """Logits of the first ``batch_size`` nodes (all nodes when None)."""
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index, num_dst=batch_size)


# ---------------------------------------------------------------------- main
def check_against_pyg(batch: Data, device: torch.device) -> float:
    """Largest difference between ops.aggregate's mean and PyG's scatter mean
    on one mini-batch (both bipartite, to the seed nodes)."""
    x, edge_index, n = batch.x.to(device), batch.edge_index.to(device), batch.batch_size
    edge_index = edge_index[:, edge_index[1] < n]
    ours = ops.aggregate((x, x[:n]), edge_index, reduce="mean")
    ref = scatter(x[edge_index[0]], edge_index[1], dim=0, dim_size=n, reduce="mean")
    return float((ours - ref).abs().max()) if n > 0 else 0.0


def main(argv=None) -> int:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sampler", choices=["auto", "pyg", "torch"], default="auto",
                        help="pyg: torch_geometric's NeighborLoader (needs pyg-lib or "
                             "torch-sparse); torch: pyg_ioaware.loader.NeighborSampler; "
                             "auto: pyg where it can sample, else torch")
    parser.add_argument("--impl", choices=["ours", "pyg", "both"], default=None,
                        help="aggregate with pyg_ioaware.ops.aggregate, with torch_geometric's "
                             "scatter over gathered messages, or both from the same seed "
                             "(default: ours on CPU, both on a GPU)")
    parser.add_argument("--device", default=default_device,
                        help=f"torch device (default: {default_device})")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--fanout", type=int, nargs=2, default=[10, 10],
                        help="neighbors sampled per node in hop 1 and hop 2 (-1: all)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device")
    torch.manual_seed(args.seed)
    print(f"device: {device}; native CUDA library in use: "
          f"{'yes' if pyg_ioaware.cuda_available() else 'no'}")

    dataset = Planetoid(str(DATA_ROOT), "Cora")
    data = dataset[0]  # sampled on the CPU; every mini-batch is moved to the device
    if args.sampler == "pyg" and not pyg_sampler_available():
        parser.error("--sampler pyg: torch_geometric's NeighborLoader needs pyg-lib or "
                     "torch-sparse (a build matching your torch); use --sampler torch")
    loader = neighbor_loader(data, args.fanout, args.batch_size, input_nodes=data.train_mask,
                             sampler=args.sampler)
    sampler = "torch_geometric NeighborLoader" if isinstance(loader, NeighborLoader) else \
        "pyg_ioaware.loader.NeighborSampler (plain torch" + \
        ("" if args.sampler == "torch" else "; pyg-lib and torch-sparse are not installed") + ")"
    print(f"Cora: {data.num_nodes} nodes, {data.num_edges} edges; sampler {sampler}, "
          f"fanout {args.fanout}, batch size {args.batch_size}, "
          f"{int(data.train_mask.sum())} training nodes")

    first = next(iter(loader))
    diff = check_against_pyg(first, device)
    print(f"ops.aggregate(mean) vs torch_geometric scatter mean on one mini-batch "
          f"({first.num_nodes} nodes, {first.edge_index.size(1)} edges): max |diff| {diff:.2e}")
    if diff > 1e-4:
        print("FAIL: ops.aggregate disagrees with torch_geometric", file=sys.stderr)
        return 1

    impl = args.impl or ("both" if device.type == "cuda" else "ours")
    results = {}
    for name in ("ours", "pyg"):
        if impl in (name, "both"):
            results[name] = train(name, dataset, data, loader, args, device)
    if impl == "both":
        ours, pyg = results["ours"], results["pyg"]
        print(f"[compare] time per epoch: pyg_ioaware {ours['epoch_ms']:.1f} ms, "
              f"torch_geometric {pyg['epoch_ms']:.1f} ms (speedup "
              f"{pyg['epoch_ms'] / ours['epoch_ms']:.2f}x); test acc {ours['test']:.4f} vs "
              f"{pyg['test']:.4f}")
    failed = [n for n, r in results.items() if args.epochs >= 10 and r["test"] < MIN_TEST_ACCURACY]
    for name in failed:
        print(f"FAIL: {name} test accuracy {results[name]['test']:.4f} < {MIN_TEST_ACCURACY}",
              file=sys.stderr)
    return 1 if failed else 0


def train(impl: str, dataset, data, loader, args, device) -> dict:
    """Trains the model with ``impl``'s aggregation ("ours": ops.aggregate,
    "pyg": gathered messages and torch_geometric's scatter), from the same
    seed; returns the mean time per epoch (ms) and the full-graph accuracies."""
    label = "pyg_ioaware" if impl == "ours" else "torch_geometric"
    torch.manual_seed(args.seed)
    model = Net(dataset.num_features, args.hidden, dataset.num_classes, dropout=0.5,
                impl=impl).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    times = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        t0, total_loss, steps = time.perf_counter(), 0.0, 0
        for batch in loader:
            batch = batch.to(device)
            n = batch.batch_size
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index, batch_size=n)
            loss = F.cross_entropy(out, batch.y[:n])
            loss.backward()
            optimizer.step()
            total_loss, steps = total_loss + float(loss.detach()), steps + 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
        if epoch == 1 or epoch % 5 == 0 or epoch == args.epochs:
            print(f"[{label}] epoch {epoch:3d}  loss {total_loss / max(steps, 1):.4f}  "
                  f"{times[-1]:.1f} ms")

    model.eval()
    full = data.clone().to(device)  # Data.to moves in place; the loader samples from data
    with torch.no_grad():
        pred = model(full.x, full.edge_index).argmax(dim=-1)
    acc = {name: float((pred[mask] == full.y[mask]).float().mean())
           for name, mask in (("val", full.val_mask), ("test", full.test_mask))}
    steady = times[1:] or times
    epoch_ms = sum(steady) / len(steady)
    print(f"[{label}] full-graph evaluation: val acc {acc['val']:.4f}  test acc "
          f"{acc['test']:.4f}; time per epoch {epoch_ms:.1f} ms (sampling included)")
    return {"test": acc["test"], "epoch_ms": epoch_ms}

if __name__ == "__main__":
    sys.exit(main())
