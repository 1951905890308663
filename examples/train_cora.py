"""Train a 2-layer GCN on the bundled Cora (or CiteSeer) with pyg_ioaware.

The classic setup of Kipf & Welling (2017): hidden size 16, ReLU, dropout
0.5, Adam with learning rate 0.01 and weight decay 5e-4, 200 epochs,
row-normalized features, the public Planetoid split.

The only change against a torch_geometric script is the import of GCNConv.
The raw Planetoid files ship in data/Planetoid/<Name>/raw, so nothing is
downloaded; torch_geometric writes its processed copy next to them.

    python examples/train_cora.py                 # CPU: ours; GPU: ours and PyG
    python examples/train_cora.py --impl both --dataset CiteSeer

Exits non-zero when the test accuracy is far below what this model reaches
(about 0.8 on Cora, 0.7 on CiteSeer), so a broken layer cannot pass unseen.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

import pyg_ioaware
import pyg_ioaware.nn

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_ROOT = REPO / "data" / "Planetoid"

# Below this the layer is broken, not unlucky (a healthy run is ~0.8 / ~0.7).
# Checked only after enough epochs to get there (20 epochs give ~0.7 on Cora).
MIN_ACCURACY = {"Cora": 0.5, "CiteSeer": 0.4}
MIN_EPOCHS_FOR_CHECK = 10


class GCN(torch.nn.Module):
    def __init__(self, conv_cls, in_channels: int, hidden: int, out_channels: int,
                 dropout: float = 0.5):
        super().__init__()
        self.conv1 = conv_cls(in_channels, hidden)
        self.conv2 = conv_cls(hidden, out_channels)
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(conv_cls, data, num_classes: int, args, device: torch.device,
        init_state=None) -> dict:
    """Trains one model; returns its final accuracies and epoch times."""
    torch.manual_seed(args.seed)
    model = GCN(conv_cls, data.num_features, args.hidden, num_classes).to(device)
    if init_state is not None:
        # Same starting weights for both implementations (same state_dict keys).
        model.load_state_dict(init_state)
    start_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    torch.manual_seed(args.seed)  # same dropout masks for both implementations

    times = []
    for _ in range(args.epochs):
        sync(device)
        t0 = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        sync(device)
        times.append(time.perf_counter() - t0)

    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    acc = {split: float((pred[mask] == data.y[mask]).float().mean())
           for split, mask in (("train", data.train_mask), ("val", data.val_mask),
                               ("test", data.test_mask))}
    # The first epoch builds the cached graph structure (and on a GPU warms
    # up cuBLAS/cuSPARSE); it is reported apart from the steady-state mean.
    steady = times[1:] or times
    return {"acc": acc, "loss": float(loss.detach()), "first_ms": times[0] * 1e3,
            "mean_ms": sum(steady) / len(steady) * 1e3, "start_state": start_state}


def report(name: str, result: dict) -> None:
    acc = result["acc"]
    print(f"[{name}] final loss {result['loss']:.4f}  train acc {acc['train']:.4f}  "
          f"val acc {acc['val']:.4f}  test acc {acc['test']:.4f}")
    print(f"[{name}] mean time per epoch {result['mean_ms']:.2f} ms "
          f"(first epoch {result['first_ms']:.2f} ms, not in the mean)")


def main(argv=None) -> int:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=["Cora", "CiteSeer"], default="Cora")
    parser.add_argument("--device", default=default_device,
                        help=f"torch device (default: {default_device})")
    parser.add_argument("--impl", choices=["ours", "pyg", "both"], default=None,
                        help="which GCNConv to train: pyg_ioaware's, torch_geometric's, or "
                             "both with the same seed (default: ours on CPU, both on a GPU)")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=pathlib.Path, default=DATA_ROOT,
                        help=f"Planetoid root holding <Name>/raw (default: {DATA_ROOT})")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device")
    impl = args.impl or ("both" if device.type == "cuda" else "ours")

    raw = args.root / args.dataset / "raw"
    if not raw.is_dir():
        print(f"error: {raw} not found; it should hold the Planetoid raw files "
              f"(ind.{args.dataset.lower()}.*), see data/README.md", file=sys.stderr)
        return 2

    print(f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
          f"pyg_ioaware {getattr(pyg_ioaware, '__version__', '?')}")
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})"
                                 if device.type == "cuda" else ""))
    native = pyg_ioaware.cuda_available()
    library = pyg_ioaware.native_library_path() or "not built"
    used = native and device.type == "cuda"
    print(f"native CUDA library in use: {'yes' if used else 'no'} "
          f"(pyg_ioaware.cuda_available() = {native}; library: {library})")
    if device.type == "cuda" and not native:
        print("note: on this GPU pyg_ioaware runs its plain-torch fallback, not its kernels")

    dataset = Planetoid(str(args.root), args.dataset, transform=T.NormalizeFeatures())
    data = dataset[0].to(device)
    print(f"{args.dataset}: {data.num_nodes} nodes, {data.num_edges} edges, "
          f"{dataset.num_features} features, {dataset.num_classes} classes; "
          f"{args.epochs} epochs")

    results = {}
    init_state = None
    if impl in ("ours", "both"):
        results["ours"] = run(pyg_ioaware.nn.GCNConv, data, dataset.num_classes, args, device)
        report("pyg_ioaware", results["ours"])
        init_state = results["ours"]["start_state"]
    if impl in ("pyg", "both"):
        results["pyg"] = run(torch_geometric.nn.GCNConv, data, dataset.num_classes, args,
                             device, init_state=init_state)
        report("torch_geometric", results["pyg"])
    if impl == "both":
        ours, pyg = results["ours"], results["pyg"]
        print(f"[compare] time per epoch: pyg_ioaware {ours['mean_ms']:.2f} ms, "
              f"torch_geometric {pyg['mean_ms']:.2f} ms "
              f"(pyg_ioaware speedup {pyg['mean_ms'] / ours['mean_ms']:.2f}x); test acc "
              f"{ours['acc']['test']:.4f} vs {pyg['acc']['test']:.4f}")

    floor = MIN_ACCURACY[args.dataset]
    if args.epochs < MIN_EPOCHS_FOR_CHECK:
        print(f"accuracy check skipped: fewer than {MIN_EPOCHS_FOR_CHECK} epochs")
        return 0
    failed = False
    for name, result in results.items():
        if result["acc"]["test"] < floor:
            print(f"FAIL: {name} test accuracy {result['acc']['test']:.4f} < {floor} "
                  f"on {args.dataset}: the layer is likely broken", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
