"""Build your own layer from pyg_ioaware's functional ops.

Two building blocks, written on ``pyg_ioaware.ops`` so that no per-edge
tensor is ever built:

- ``MultiAggrConv``: h_i' = W [x_i || mean_j x_j || max_j x_j], the
  concatenation of a node's features with the mean and the feature-wise
  max of its in-neighbours', through ``ops.aggregate`` (one SpMM for the
  mean, the reduction kernel for the max);
- ``APPNPPropagation``: K steps of personalized-PageRank propagation
  z <- (1 - alpha) D^-1/2 (A + I) D^-1/2 z + alpha h, through the GCN
  adjacency ``ops.gcn_adjacency`` built once per graph and reused by every
  step (``adjacency.propagate(z)``).

The model (MultiAggrConv, ReLU, dropout, Linear, APPNP propagation) trains
on the bundled Cora or CiteSeer; the same model written with
torch_geometric (gathered messages and ``torch_geometric.utils.scatter``,
``torch_geometric.nn.APPNP``) is the reference: ``--impl both`` (the
default on a GPU) trains both from the same weights, checks that their
outputs agree and prints both times.

    python examples/custom_layer.py
    python examples/custom_layer.py --dataset CiteSeer --impl both
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch
import torch.nn.functional as F
import torch_geometric.nn
from torch_geometric.utils import scatter

from pyg_ioaware import ops

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from node_classification import (DATA_ROOT, MIN_ACCURACY, accuracies,  # noqa: E402
                                 environment, load_dataset, train_full_batch)

MIN_EPOCHS_FOR_CHECK = 20


class MultiAggrConv(torch.nn.Module):
    """h_i' = W [x_i || mean_{j -> i} x_j || max_{j -> i} x_j] (0 where i has
    no incoming edge), on pyg_ioaware.ops.aggregate."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.lin = torch.nn.Linear(3 * in_channels, out_channels)

    def aggregate(self, x, edge_index):
        return (ops.aggregate(x, edge_index, reduce="mean"),
                ops.aggregate(x, edge_index, reduce="max"))

    def forward(self, x, edge_index):
        mean, amax = self.aggregate(x, edge_index)
        return self.lin(torch.cat([x, mean, amax], dim=-1))


class PyGMultiAggrConv(MultiAggrConv):
    """The same layer the usual PyG way: gather x_j per edge, then scatter."""

    def aggregate(self, x, edge_index):
        src, dst = edge_index
        x_j = x[src]  # [E, C]: the per-edge tensor the fused ops never build
        return (scatter(x_j, dst, dim=0, dim_size=x.size(0), reduce="mean"),
                scatter(x_j, dst, dim=0, dim_size=x.size(0), reduce="max"))


class APPNPPropagation(torch.nn.Module):
    """z_0 = h; z_{k+1} = (1 - alpha) A_hat z_k + alpha h, K times, with
    A_hat = D^-1/2 (A + I) D^-1/2 from ops.gcn_adjacency."""

    def __init__(self, K: int = 10, alpha: float = 0.1):
        super().__init__()
        self.K, self.alpha = K, alpha

    def forward(self, h, edge_index):
        adjacency = ops.gcn_adjacency(edge_index, h.size(0))  # cached with the graph
        z = h
        for _ in range(self.K):
            z = (1 - self.alpha) * adjacency.propagate(z) + self.alpha * h
        return z


class Net(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, impl: str = "ours"):
        super().__init__()
        conv = MultiAggrConv if impl == "ours" else PyGMultiAggrConv
        self.conv = conv(in_channels, hidden)
        self.lin = torch.nn.Linear(hidden, out_channels)
        self.prop = (APPNPPropagation(K=10, alpha=0.1) if impl == "ours"
                     else torch_geometric.nn.APPNP(K=10, alpha=0.1))

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv(x, edge_index).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.prop(self.lin(x), edge_index)


def run(impl: str, data, num_classes: int, args, device, init_state=None) -> dict:
    torch.manual_seed(args.seed)
    model = Net(data.num_features, args.hidden, num_classes, impl).to(device)
    if init_state is not None:
        model.load_state_dict(init_state)
    start_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.eval()
    with torch.no_grad():
        first_out = model(data.x, data.edge_index)
    times, _ = train_full_batch(model, data, args.epochs, device)
    test = accuracies(model, data)["test"]
    steady = times[1:] or times
    return {"test": test, "mean_ms": sum(steady) / len(steady), "start_state": start_state,
            "first_out": first_out}


def main(argv=None) -> int:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=["Cora", "CiteSeer", "PubMed"], default="Cora")
    parser.add_argument("--impl", choices=["ours", "pyg", "both"], default=None,
                        help="the model on pyg_ioaware.ops, on torch_geometric, or both "
                             "(default: ours on CPU, both on a GPU)")
    parser.add_argument("--device", default=default_device,
                        help=f"torch device (default: {default_device})")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=pathlib.Path, default=DATA_ROOT)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device")
    impl = args.impl or ("both" if device.type == "cuda" else "ours")
    environment(device)
    dataset = load_dataset(args.dataset, args.root)
    if dataset is None:
        return 0
    data = dataset[0].to(device)
    print(f"{args.dataset}: {data.num_nodes} nodes, {data.num_edges} edges; "
          f"MultiAggrConv + APPNP propagation, {args.epochs} epochs")

    results, init_state = {}, None
    for name in ("ours", "pyg"):
        if impl not in (name, "both"):
            continue
        results[name] = run(name, data, dataset.num_classes, args, device, init_state)
        init_state = results[name]["start_state"]
        label = "pyg_ioaware.ops" if name == "ours" else "torch_geometric"
        print(f"[{label}] test acc {results[name]['test']:.4f}  time per epoch "
              f"{results[name]['mean_ms']:.2f} ms")
    if impl == "both":
        ours, pyg = results["ours"], results["pyg"]
        diff = float((ours["first_out"] - pyg["first_out"]).abs().max())
        print(f"[compare] same weights, max |output difference| {diff:.2e}; time per epoch "
              f"{ours['mean_ms']:.2f} vs {pyg['mean_ms']:.2f} ms (speedup "
              f"{pyg['mean_ms'] / ours['mean_ms']:.2f}x)")
        if diff > 1e-3:
            print("FAIL: the two implementations disagree", file=sys.stderr)
            return 1
    if args.epochs >= MIN_EPOCHS_FOR_CHECK:
        floor = MIN_ACCURACY[args.dataset]
        if any(r["test"] < floor for r in results.values()):
            print(f"FAIL: test accuracy below {floor}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
