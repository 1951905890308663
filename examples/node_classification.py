"""Node classification with any pyg_ioaware layer on a torch_geometric dataset.

Trains a 2-layer model of GCNConv, SAGEConv, GATv2Conv or TransformerConv
on a Planetoid dataset (Cora and CiteSeer ship in data/Planetoid; PubMed is
used where its raw files are on disk, and skipped with a message where not:
nothing is downloaded). Prints the accuracy and the time per epoch; on a
GPU it trains the same model with torch_geometric's layer too, from the
same initial weights (the layers share their state_dict keys), and prints
both.

    python examples/node_classification.py --layer gcn
    python examples/node_classification.py --layer gatv2 --dataset CiteSeer
    python examples/node_classification.py --layer transformer --impl both --device cuda

The models are the usual ones for these datasets: hidden size 16 (GCN), 64
(SAGE), 8 heads of 8 channels (GATv2, Transformer), dropout, Adam with
weight decay 5e-4, full-batch training on the public split.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
import torch_geometric
import torch_geometric.nn
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

import pyg_ioaware
import pyg_ioaware.nn

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_ROOT = REPO / "data" / "Planetoid"
DATASETS = ("Cora", "CiteSeer", "PubMed")
LAYERS = {"gcn": "GCNConv", "sage": "SAGEConv", "gatv2": "GATv2Conv",
          "transformer": "TransformerConv"}
# Below this a layer is broken, not unlucky (healthy runs reach ~0.8 / ~0.7 / ~0.78).
MIN_ACCURACY = {"Cora": 0.5, "CiteSeer": 0.4, "PubMed": 0.5}
MIN_EPOCHS_FOR_CHECK = 20


class Net(torch.nn.Module):
    """Two layers of ``layer`` ("gcn", "sage", "gatv2" or "transformer"),
    taken from ``nn`` (pyg_ioaware.nn or torch_geometric.nn)."""

    def __init__(self, nn, layer: str, in_channels: int, out_channels: int,
                 hidden: int | None = None, heads: int = 8):
        super().__init__()
        cls = getattr(nn, LAYERS[layer])
        if layer == "gcn":
            hidden = hidden or 16
            self.conv1, self.conv2 = cls(in_channels, hidden), cls(hidden, out_channels)
            self.dropout = 0.5
        elif layer == "sage":
            hidden = hidden or 64
            self.conv1, self.conv2 = cls(in_channels, hidden), cls(hidden, out_channels)
            self.dropout = 0.5
        else:  # attention: heads concatenated, one head in the output layer
            hidden = hidden or 8
            self.conv1 = cls(in_channels, hidden, heads=heads, dropout=0.6)
            self.conv2 = cls(hidden * heads, out_channels, heads=1, concat=False, dropout=0.6)
            self.dropout = 0.6
        self.act = F.elu if layer in ("gatv2", "transformer") else F.relu

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.act(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load_dataset(name: str, root: pathlib.Path = DATA_ROOT):
    """The Planetoid dataset ``name`` from ``root``/<name>/raw, or None (with
    a message) where its raw files are not on disk: nothing is downloaded."""
    raw = pathlib.Path(root) / name / "raw"
    if not raw.is_dir() or not any(raw.iterdir()):
        print(f"skipped {name}: its Planetoid raw files (ind.{name.lower()}.*) are not in "
              f"{raw}; this example does not download (Cora and CiteSeer ship with the "
              f"repository in data/Planetoid)")
        return None
    return Planetoid(str(root), name, transform=T.NormalizeFeatures())


def train(nn, layer: str, data, num_classes: int, epochs: int, device: torch.device,
          seed: int = 0, lr: float = 0.01, weight_decay: float = 5e-4, hidden=None,
          heads: int = 8, init_state=None) -> dict:
    """Trains one model full-batch; returns accuracies, epoch times (ms),
    peak GPU memory (MB, None on CPU) and the initial weights."""
    torch.manual_seed(seed)
    model = Net(nn, layer, data.num_features, num_classes, hidden, heads).to(device)
    if init_state is not None:
        model.load_state_dict(init_state)  # same keys in both libraries
    start_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    times, loss = train_full_batch(model, data, epochs, device, lr, weight_decay)
    peak = ((torch.cuda.max_memory_allocated(device) - base) / 2**20
            if device.type == "cuda" else None)
    acc = accuracies(model, data)
    steady = times[1:] or times  # the first epoch builds the cached graph
    return {"acc": acc, "loss": loss, "first_ms": times[0],
            "mean_ms": sum(steady) / len(steady), "peak_mb": peak,
            "start_state": start_state}


def train_full_batch(model, data, epochs: int, device: torch.device, lr: float = 0.01,
                     weight_decay: float = 5e-4) -> Tuple[List[float], float]:
    """``epochs`` full-batch Adam steps on the cross-entropy of the training
    nodes: (ms of every epoch, the last loss)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    times = []
    for _ in range(epochs):
        sync(device)
        t0 = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, float(loss.detach())


def accuracies(model, data) -> Dict[str, float]:
    """Accuracy of ``model`` in eval mode on the train, val and test nodes."""
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    return {split: float((pred[mask] == data.y[mask]).float().mean())
            for split, mask in (("train", data.train_mask), ("val", data.val_mask),
                                ("test", data.test_mask))}


def report(name: str, result: dict) -> None:
    acc = result["acc"]
    memory = "" if result["peak_mb"] is None else f", peak memory {result['peak_mb']:.1f} MB"
    print(f"[{name}] train acc {acc['train']:.4f}  val acc {acc['val']:.4f}  "
          f"test acc {acc['test']:.4f}")
    print(f"[{name}] time per epoch {result['mean_ms']:.2f} ms (first epoch "
          f"{result['first_ms']:.2f} ms, not in the mean){memory}")


def environment(device: torch.device) -> None:
    print(f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
          f"pyg_ioaware {pyg_ioaware.__version__}; device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    native = pyg_ioaware.cuda_available() and device.type == "cuda"
    print(f"native CUDA kernels in use: {'yes' if native else 'no'} "
          f"(library: {pyg_ioaware.native_library_path() or 'not built'})")


def main(argv=None) -> int:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layer", choices=sorted(LAYERS), default="gcn")
    parser.add_argument("--dataset", choices=DATASETS, default="Cora")
    parser.add_argument("--impl", choices=["ours", "pyg", "both"], default=None,
                        help="pyg_ioaware's layer, torch_geometric's, or both from the same "
                             "initial weights (default: ours on CPU, both on a GPU)")
    parser.add_argument("--device", default=default_device,
                        help=f"torch device (default: {default_device})")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=None,
                        help="hidden channels (per head for attention; default: 16 GCN, "
                             "64 SAGE, 8 attention)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (gatv2, "
                        "transformer)")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: 0.005 attention, else 0.01)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=pathlib.Path, default=DATA_ROOT,
                        help=f"Planetoid root holding <Name>/raw (default: {DATA_ROOT})")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device")
    impl = args.impl or ("both" if device.type == "cuda" else "ours")
    lr = args.lr or (0.005 if args.layer in ("gatv2", "transformer") else 0.01)

    environment(device)
    dataset = load_dataset(args.dataset, args.root)
    if dataset is None:
        return 0
    data = dataset[0].to(device)
    print(f"{args.dataset}: {data.num_nodes} nodes, {data.num_edges} edges, "
          f"{dataset.num_features} features, {dataset.num_classes} classes; "
          f"{LAYERS[args.layer]}, {args.epochs} epochs")

    results, init_state = {}, None
    common = dict(epochs=args.epochs, device=device, seed=args.seed, lr=lr,
                  hidden=args.hidden, heads=args.heads)
    if impl in ("ours", "both"):
        results["pyg_ioaware"] = train(pyg_ioaware.nn, args.layer, data,
                                       dataset.num_classes, **common)
        report("pyg_ioaware", results["pyg_ioaware"])
        init_state = results["pyg_ioaware"]["start_state"]
    if impl in ("pyg", "both"):
        results["torch_geometric"] = train(torch_geometric.nn, args.layer, data,
                                           dataset.num_classes, init_state=init_state,
                                           **common)
        report("torch_geometric", results["torch_geometric"])
    if impl == "both":
        ours, pyg = results["pyg_ioaware"], results["torch_geometric"]
        print(f"[compare] time per epoch: pyg_ioaware {ours['mean_ms']:.2f} ms, "
              f"torch_geometric {pyg['mean_ms']:.2f} ms (speedup "
              f"{pyg['mean_ms'] / ours['mean_ms']:.2f}x); test acc "
              f"{ours['acc']['test']:.4f} vs {pyg['acc']['test']:.4f}")

    if args.epochs < MIN_EPOCHS_FOR_CHECK:
        print(f"accuracy check skipped: fewer than {MIN_EPOCHS_FOR_CHECK} epochs")
        return 0
    floor = MIN_ACCURACY[args.dataset]
    failed = [name for name, r in results.items() if r["acc"]["test"] < floor]
    for name in failed:
        print(f"FAIL: {name} test accuracy {results[name]['acc']['test']:.4f} < {floor}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
