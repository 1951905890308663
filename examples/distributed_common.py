"""What the distributed and full-graph examples share: the node-classification
data, the model, the loss of one mini-batch, sampled evaluation, per-rank
seed shards and samplers, and the process-group setup.

Kept importable (no work at import time) so tests/test_distributed.py runs
the very functions the examples run.
"""
from __future__ import annotations

import datetime
import os
import pathlib
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from pyg_ioaware.bench import graphs
from pyg_ioaware.loader import NeighborSampler, neighbor_loader

REPO = pathlib.Path(__file__).resolve().parents[1]
PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer"}
GRAPHS = sorted(graphs.SUITE) + sorted(PLANETOID)
LAYERS = ("sage", "gcn", "gatv2")
IMPLS = ("ours", "pyg")
# (features, classes) of the synthetic tasks, after the datasets the suite
# graphs are shaped like (ogbn-products: 100 features, 47 classes).
TASK_SHAPE = {"products-like": (100, 47)}
DEFAULT_TASK_SHAPE = (128, 40)
SPLIT = (0.10, 0.05, 0.05)  # train, validation, test shares of the nodes
LABEL_CHUNK = 1 << 22  # edges gathered at a time by planted_labels


# ---------------------------------------------------------------- the data
def planted_labels(x: Tensor, edge_index: Tensor, num_classes: int,
                   gen: torch.Generator) -> Tensor:
    """Labels a GNN can learn and an MLP only partly: the argmax of a random
    projection of ``x_i + mean of x_j over edges j -> i``."""
    num_nodes = x.size(0)
    src, dst = edge_index
    neighbour_sum = torch.zeros_like(x)
    for start in range(0, src.numel(), LABEL_CHUNK):  # no [E, F] tensor on big graphs
        chunk = slice(start, start + LABEL_CHUNK)
        neighbour_sum.index_add_(0, dst[chunk], x[src[chunk]])
    in_degree = torch.bincount(dst, minlength=num_nodes).clamp(min=1).unsqueeze(1)
    projection = torch.randn(x.size(1), num_classes, generator=gen, device=x.device)
    return ((x + neighbour_sum / in_degree) @ projection).argmax(dim=1)


def random_split(num_nodes: int, gen: torch.Generator, device) -> Data:
    """Disjoint train / val / test node ids (SPLIT shares), seeded."""
    order = torch.randperm(num_nodes, generator=gen, device=device)
    sizes = [max(1, int(share * num_nodes)) for share in SPLIT]
    bounds = torch.tensor(sizes).cumsum(0).tolist()
    return Data(train_nodes=order[:bounds[0]], val_nodes=order[bounds[0]:bounds[1]],
                test_nodes=order[bounds[1]:bounds[2]])


def suite_dataset(name: str, scale: float = 1.0, device="cpu", seed: int = 0) -> Data:
    """A suite graph (pyg_ioaware.bench.graphs) with Gaussian features,
    :func:`planted_labels` and a random split; deterministic per device type."""
    edge_index, num_nodes = graphs.generate(name, scale, device=device, seed=seed)
    num_features, num_classes = TASK_SHAPE.get(name, DEFAULT_TASK_SHAPE)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(num_nodes, num_features, generator=gen, device=device)
    y = planted_labels(x, edge_index, num_classes, gen)
    split = random_split(num_nodes, gen, device)
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes,
                num_classes=num_classes, **split.to_dict())


def planetoid_dataset(name: str) -> Data:
    """Cora or CiteSeer from data/Planetoid (bundled), with its public split
    as node ids."""
    from torch_geometric.datasets import Planetoid
    data = Planetoid(str(REPO / "data" / "Planetoid"), PLANETOID[name])[0]
    return Data(x=data.x, y=data.y, edge_index=data.edge_index, num_nodes=data.num_nodes,
                num_classes=int(data.y.max()) + 1,
                train_nodes=data.train_mask.nonzero().view(-1),
                val_nodes=data.val_mask.nonzero().view(-1),
                test_nodes=data.test_mask.nonzero().view(-1))


def load_dataset(name: str, scale: float = 1.0, device="cpu", seed: int = 0) -> Data:
    """A suite graph (generated on ``device``) or a bundled Planetoid dataset."""
    if name in PLANETOID:
        return planetoid_dataset(name).to(device)
    return suite_dataset(name, scale, device, seed)


TENSOR_KEYS = ("edge_index", "x", "y", "train_nodes", "val_nodes", "test_nodes")


def broadcast_dataset(data: Optional[Data], device) -> Data:
    """Rank 0's dataset on every rank (each on its own ``device``): one
    generator run and bit-identical graphs, features and labels everywhere."""
    meta = [None]
    if dist.get_rank() == 0:
        meta = [{"num_nodes": data.num_nodes, "num_classes": data.num_classes,
                 "tensors": {k: (tuple(data[k].shape), data[k].dtype) for k in TENSOR_KEYS}}]
    dist.broadcast_object_list(meta, src=0)
    meta = meta[0]
    out = Data(num_nodes=meta["num_nodes"], num_classes=meta["num_classes"])
    for key, (shape, dtype) in meta["tensors"].items():
        tensor = data[key].to(device).contiguous() if dist.get_rank() == 0 else \
            torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(tensor, src=0)
        out[key] = tensor
    return out


# ---------------------------------------------------------------- the model
def conv_classes(impl: str):
    """(GCNConv, SAGEConv, GATv2Conv) of pyg_ioaware (``ours``) or of
    torch_geometric (``pyg``): same arguments, same state_dict."""
    if impl == "ours":
        from pyg_ioaware.nn import GATv2Conv, GCNConv, SAGEConv
    elif impl == "pyg":
        from torch_geometric.nn import GATv2Conv, GCNConv, SAGEConv
    else:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    return GCNConv, SAGEConv, GATv2Conv


class Net(torch.nn.Module):
    """``num_layers`` convolutions of one kind, ReLU and dropout between.

    Over a NeighborLoader mini-batch (``num_sampled_nodes`` /
    ``num_sampled_edges`` given) SAGEConv and GATv2Conv run bipartite: layer
    ``i`` of ``L`` updates only the nodes within ``L - 1 - i`` hops of the
    seeds, from the edges of the first ``L - i`` hops (the loaders put nodes
    and edges in hop order, seeds first), so the last layer computes the
    seed nodes alone. GCNConv, square-only as in PyG, runs over the whole
    sampled subgraph. Without the counts (a full graph) every layer is
    square.
    """

    def __init__(self, layer: str, impl: str, in_channels: int, hidden: int,
                 out_channels: int, num_layers: int = 2, heads: int = 2, dropout: float = 0.0):
        super().__init__()
        if layer not in LAYERS:
            raise ValueError(f"layer must be one of {LAYERS}, got {layer!r}")
        GCNConv, SAGEConv, GATv2Conv = conv_classes(impl)
        sizes = [in_channels] + [hidden] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList()
        for i, (c_in, c_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            if layer == "sage":
                conv = SAGEConv(c_in, c_out)
            elif layer == "gcn":
                conv = GCNConv(c_in, c_out)
            else:
                last = i == num_layers - 1
                conv = GATv2Conv(c_in, c_out if last else c_out // heads,
                                 heads=1 if last else heads)
            self.convs.append(conv)
        self.bipartite = layer != "gcn"
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Optional[Sequence[int]] = None,
                num_sampled_edges: Optional[Sequence[int]] = None) -> Tensor:
        num_layers = len(self.convs)
        trim = self.bipartite and num_sampled_nodes is not None
        for i, conv in enumerate(self.convs):
            if trim:
                hops = num_layers - i
                num_dst = sum(num_sampled_nodes[:hops])
                out = conv((x, x[:num_dst]), edge_index[:, :sum(num_sampled_edges[:hops])])
            else:
                out = conv(x, edge_index)
            x = out if i == num_layers - 1 else \
                F.dropout(out.relu(), p=self.dropout, training=self.training)
        return x


# ------------------------------------------------------------ mini-batches
@dataclass
class Batch:
    """The structure of one sampled mini-batch: global ids ``n_id`` (seeds
    first), local ``edge_index`` in hop order, per-hop counts. Features and
    labels are gathered on the training device from ``n_id``."""
    n_id: Tensor
    edge_index: Tensor
    batch_size: int
    num_sampled_nodes: List[int]
    num_sampled_edges: List[int]

    @classmethod
    def of(cls, sampled: Data) -> "Batch":
        return cls(sampled.n_id, sampled.edge_index, int(sampled.batch_size),
                   [int(n) for n in sampled.num_sampled_nodes],
                   [int(n) for n in sampled.num_sampled_edges])

    def pin_memory(self) -> "Batch":
        return Batch(self.n_id.pin_memory(), self.edge_index.pin_memory(), self.batch_size,
                     self.num_sampled_nodes, self.num_sampled_edges)

    def to(self, device, non_blocking: bool = False) -> "Batch":
        return Batch(self.n_id.to(device, non_blocking=non_blocking),
                     self.edge_index.to(device, non_blocking=non_blocking), self.batch_size,
                     self.num_sampled_nodes, self.num_sampled_edges)


def batch_loss(model: torch.nn.Module, batch: Batch, x: Tensor, y: Tensor,
               bf16: bool = False) -> Tensor:
    """Mean cross-entropy over the seed nodes of ``batch`` (the first
    ``batch_size``), the model run over the whole sampled subgraph;
    ``x`` and ``y`` hold every node, on the model's device."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        out = model(x[batch.n_id], batch.edge_index, batch.num_sampled_nodes,
                    batch.num_sampled_edges)[:batch.batch_size]
    return F.cross_entropy(out.float(), y[batch.n_id[:batch.batch_size]])


def shard_seeds(train_nodes: Tensor, rank: int, world_size: int, seed: int = 0) -> Tensor:
    """Rank ``rank``'s share of the training nodes: a seeded permutation cut
    into ``world_size`` disjoint, equal shards (the remainder is dropped, so
    every rank runs the same number of steps and DDP never waits on a rank
    that has finished)."""
    gen = torch.Generator().manual_seed(seed)
    order = train_nodes.cpu()[torch.randperm(train_nodes.numel(), generator=gen)]
    per_rank = train_nodes.numel() // world_size
    return order[rank * per_rank:(rank + 1) * per_rank]


def structure_only(data: Data) -> Data:
    """The graph without node attributes: what the sampler needs (features
    are gathered on the device instead of by the sampler on the CPU)."""
    return Data(edge_index=data.edge_index.cpu(), num_nodes=data.num_nodes)


def make_sampler(data: Data, seeds: Tensor, fanout: Sequence[int], batch_size: int,
                 sampler: str = "auto", sample_device=None, shuffle: bool = True,
                 seed: int = 0) -> "BatchesOf":
    """A loader over ``seeds`` yielding :class:`Batch` objects.

    ``sampler``: as :func:`pyg_ioaware.loader.neighbor_loader` (``auto``:
    torch_geometric's NeighborLoader where pyg-lib or torch-sparse is
    installed and sampling runs on the CPU, else pyg_ioaware's
    NeighborSampler). ``sample_device``: where NeighborSampler samples (a
    CUDA device keeps its CSR there; None: the CPU).
    """
    device = torch.device("cpu" if sample_device is None else sample_device)
    gen = torch.Generator(device=device).manual_seed(seed)
    return BatchesOf(neighbor_loader(structure_only(data), fanout, batch_size,
                                     input_nodes=seeds, shuffle=shuffle, sampler=sampler,
                                     generator=gen, device=device))


def sampler_name(loader: "BatchesOf") -> str:
    """Which sampler a :func:`make_sampler` loader runs, and where."""
    if isinstance(loader.loader, NeighborSampler):
        return f"pyg_ioaware.loader.NeighborSampler on {loader.loader.device}"
    return "torch_geometric NeighborLoader (on the CPU)"


class BatchesOf:
    """A loader's mini-batches as :class:`Batch` objects."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        return (Batch.of(sampled) for sampled in self.loader)


class Prefetcher:
    """Samples up to ``depth`` batches ahead in a background thread (torch's
    CPU ops release the GIL, so sampling overlaps the training step).

    The thread makes ``device`` its current CUDA device before pinning
    memory, so it creates no context on another rank's GPU.
    ``busy_seconds`` is the thread's sampling time in the last epoch.
    """

    def __init__(self, loader: Iterable[Batch], depth: int, device: torch.device):
        self.loader, self.depth, self.device = loader, depth, device
        self.busy_seconds = 0.0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        batches: "queue.Queue" = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        self.busy_seconds = 0.0

        def produce():
            try:
                if self.device.type == "cuda":
                    torch.cuda.set_device(self.device)
                start = time.perf_counter()
                for batch in self.loader:
                    if self.device.type == "cuda":
                        batch = batch.pin_memory()
                    self.busy_seconds += time.perf_counter() - start
                    while not stop.is_set():
                        try:
                            batches.put(batch, timeout=0.1)
                            break
                        except queue.Full:
                            pass
                    if stop.is_set():
                        return
                    start = time.perf_counter()
                batches.put(None)
            except BaseException as error:  # re-raised in the consumer
                batches.put(error)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            while True:
                item = batches.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()


# --------------------------------------------------------------- evaluation
@torch.no_grad()
def predict_correct(model: torch.nn.Module, loader: Iterable[Batch], x: Tensor, y: Tensor,
                    bf16: bool = False) -> Tensor:
    """Whether the model classifies each seed node of ``loader`` right, in
    the loader's order (build it with ``shuffle=False`` and a fixed seed:
    the same batches for every implementation)."""
    model.eval()
    correct = []
    for batch in loader:
        batch = batch.to(x.device)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(x[batch.n_id], batch.edge_index, batch.num_sampled_nodes,
                        batch.num_sampled_edges)[:batch.batch_size]
        correct.append(out.argmax(1) == y[batch.n_id[:batch.batch_size]])
    model.train()
    return torch.cat(correct).cpu() if correct else torch.zeros(0, dtype=torch.bool)


# ------------------------------------------------------------ process group
def free_port() -> int:
    """A TCP port free on this host now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(rank: int, world_size: int, device: torch.device,
                       timeout_s: float = 600.0) -> None:
    """NCCL on GPUs, gloo on the CPU, rendezvous through MASTER_ADDR /
    MASTER_PORT (torchrun sets them; spawn callers set them first). A CUDA
    rank makes ``device`` its current device first."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank,
                            world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=device if device.type == "cuda" else None)
