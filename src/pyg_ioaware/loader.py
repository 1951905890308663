"""Neighbor sampling for mini-batch training, with or without pyg-lib.

:func:`neighbor_loader` returns torch_geometric's ``NeighborLoader`` where it
can sample here (it needs pyg-lib or torch-sparse) and otherwise
:class:`NeighborSampler`, a uniform sampler in plain torch that builds the
same kind of mini-batch: a ``Data`` whose first ``batch_size`` nodes are the
seed nodes, then every hop's new nodes, with the sampled edges
(source -> the node it was sampled for) in local ids, ``n_id`` (global ids)
and ``num_sampled_nodes`` / ``num_sampled_edges`` per hop.

The fallback is for machines without those libraries (CPU CI, a fresh GPU
host). On the CPU it is slower than pyg-lib's sampler on large graphs; with
``device="cuda"`` it keeps its CSR on the GPU and samples there (node
attributes are gathered wherever they live).
"""
from __future__ import annotations

import copy
from typing import Iterator, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["NeighborSampler", "neighbor_loader", "pyg_sampler_available"]


def pyg_sampler_available() -> bool:
    """True when torch_geometric's NeighborLoader can sample here (pyg-lib
    or torch-sparse is installed and loads)."""
    import torch_geometric.typing as pyg_typing
    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def neighbor_loader(data: Data, num_neighbors: Sequence[int], batch_size: int,
                    input_nodes: Optional[Tensor] = None, shuffle: bool = True,
                    sampler: str = "auto", generator: Optional[torch.Generator] = None,
                    device: Optional[torch.device] = None):
    """A mini-batch loader over ``data``: PyG's ``NeighborLoader`` or
    :class:`NeighborSampler`.

    Args:
        data: a homogeneous graph with ``edge_index`` and node attributes.
        num_neighbors: neighbors sampled per node, one entry per hop
            (-1: all of them).
        batch_size: seed nodes per mini-batch.
        input_nodes: the seed nodes (a bool mask or node ids; all nodes
            when None).
        shuffle: visit the seed nodes in a random order every epoch.
        sampler: ``"auto"`` (PyG's where it can sample, else ours),
            ``"pyg"`` or ``"torch"``.
        generator: random numbers of :class:`NeighborSampler` (PyG's loader
            uses the global generator); a generator of ``device``.
        device: where :class:`NeighborSampler` samples (default: the CPU);
            PyG's loader samples on the CPU only.
    """
    if sampler not in ("auto", "pyg", "torch"):
        raise ValueError(f"sampler must be 'auto', 'pyg' or 'torch', got {sampler!r}")
    on_cpu = device is None or torch.device(device).type == "cpu"
    if sampler == "pyg" and not on_cpu:
        raise ValueError(f"torch_geometric's NeighborLoader samples on the CPU, not on {device}; "
                         f"use sampler='torch' to sample there")
    use_pyg = sampler == "pyg" or (sampler == "auto" and on_cpu and pyg_sampler_available())
    if use_pyg:
        if not pyg_sampler_available():
            raise ImportError("torch_geometric's NeighborLoader needs pyg-lib or torch-sparse; "
                              "install one (a build matching your torch) or use sampler='torch'")
        from torch_geometric.loader import NeighborLoader
        return NeighborLoader(data, num_neighbors=list(num_neighbors), batch_size=batch_size,
                              input_nodes=input_nodes, shuffle=shuffle)
    return NeighborSampler(data, num_neighbors, batch_size, input_nodes, shuffle, generator,
                           device)


class NeighborSampler:
    """Uniform neighbor sampling without replacement in plain torch.

    Every hop ``k`` takes, for each frontier node ``v``, ``min(num_neighbors[k],
    deg_in(v))`` of its incoming edges ``u -> v`` uniformly at random; the
    sources not yet in the mini-batch form the next frontier. Iterating
    yields one ``Data`` per ``batch_size`` seed nodes (see the module
    docstring for its layout). The CSR lives on ``device`` (default: the
    CPU), where all sampling runs; ``generator`` must be one of ``device``.
    """

    def __init__(self, data: Data, num_neighbors: Sequence[int], batch_size: int,
                 input_nodes: Optional[Tensor] = None, shuffle: bool = True,
                 generator: Optional[torch.Generator] = None,
                 device: Optional[torch.device] = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if any(k < -1 for k in num_neighbors):
            raise ValueError(f"num_neighbors must be >= -1 per hop, got {list(num_neighbors)}")
        self.device = torch.device("cpu") if device is None else torch.device(device)
        if generator is not None and generator.device.type != self.device.type:
            raise ValueError(f"NeighborSampler: the generator is on {generator.device}, "
                             f"sampling runs on {self.device}")
        edge_index = data.edge_index.to(self.device)
        num_nodes = data.num_nodes
        # CSR by destination: the sources of every node's incoming edges.
        by_destination = torch.argsort(edge_index[1], stable=True)
        self.sources = edge_index[0, by_destination]
        counts = torch.bincount(edge_index[1], minlength=num_nodes)
        self.rowptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        self.data, self.num_nodes = data, num_nodes
        self.num_neighbors, self.batch_size = list(num_neighbors), batch_size
        self.shuffle, self.generator = shuffle, generator
        self.input_nodes = self._seed_ids(input_nodes)

    def with_input_nodes(self, input_nodes: Optional[Tensor],
                         shuffle: Optional[bool] = None) -> "NeighborSampler":
        """A sampler sharing this one's CSR over other seed nodes (no new
        sort), e.g. the validation nodes."""
        other = copy.copy(self)
        other.input_nodes = self._seed_ids(input_nodes)
        if shuffle is not None:
            other.shuffle = shuffle
        return other

    def _seed_ids(self, input_nodes: Optional[Tensor]) -> Tensor:
        if input_nodes is None:
            return torch.arange(self.num_nodes, device=self.device)
        input_nodes = input_nodes.to(self.device)
        if input_nodes.dtype == torch.bool:
            return input_nodes.nonzero().view(-1)
        return input_nodes.long()

    def __len__(self) -> int:
        return (self.input_nodes.numel() + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[Data]:
        count = self.input_nodes.numel()
        order = torch.randperm(count, generator=self.generator, device=self.device) \
            if self.shuffle else torch.arange(count, device=self.device)
        for start in range(0, count, self.batch_size):
            yield self.sample(self.input_nodes[order[start:start + self.batch_size]])

    def sample(self, seeds: Tensor) -> Data:
        """The mini-batch of the (distinct) node ids ``seeds``."""
        seeds = seeds.to(self.device)
        local = torch.full((self.num_nodes,), -1, dtype=torch.long, device=self.device)
        local[seeds] = torch.arange(seeds.numel(), device=self.device)
        n_id, frontier, sources, destinations = [seeds], seeds, [], []
        num_sampled_edges, num_known = [], seeds.numel()
        for k in self.num_neighbors:
            edge, owner = self._sample_hop(frontier, k)
            source = self.sources[edge]
            new = self._new_nodes(source, local)
            local[new] = torch.arange(new.numel(), device=self.device) + num_known
            num_known += new.numel()
            sources.append(local[source])
            destinations.append(local[frontier[owner]])
            num_sampled_edges.append(edge.numel())
            n_id.append(new)
            frontier = new
        n_id_all = torch.cat(n_id)
        batch = Data(edge_index=torch.stack([torch.cat(sources), torch.cat(destinations)]),
                     n_id=n_id_all, batch_size=seeds.numel(),
                     num_sampled_nodes=[t.numel() for t in n_id],
                     num_sampled_edges=num_sampled_edges)
        n_id_on = {n_id_all.device: n_id_all}  # copied once per device holding attributes
        for key, value in self.data.items():
            if key != "edge_index" and isinstance(value, Tensor) and \
                    self.data.is_node_attr(key):
                if value.device not in n_id_on:
                    n_id_on[value.device] = n_id_all.to(value.device)
                batch[key] = value[n_id_on[value.device]]
        return batch

    def _new_nodes(self, source: Tensor, local: Tensor) -> Tensor:
        """The distinct nodes of ``source`` not yet in the batch (``local``
        -1), ascending: a mark per node and one nonzero (one host read; a
        boolean mask and torch.unique take two and a sort)."""
        mark = torch.zeros(self.num_nodes, dtype=torch.bool, device=self.device)
        mark[source] = local[source] < 0
        return mark.nonzero().view(-1)

    def _sample_hop(self, frontier: Tensor, k: int):
        """(CSR positions of the sampled edges, index into ``frontier`` of the
        node each was sampled for): up to ``k`` incoming edges per node. The
        sizes of the candidate and the kept edges are read back together
        (one host read), so no step below waits for a size of its own."""
        start = self.rowptr[frontier]
        degree = self.rowptr[frontier + 1] - start
        kept_degree = degree if k < 0 else degree.clamp(max=k)
        total, kept = torch.stack([degree.sum(), kept_degree.sum()]).tolist()
        nodes = torch.arange(frontier.numel(), device=self.device)
        before = degree.cumsum(0) - degree  # a node's first candidate edge
        owner = torch.repeat_interleave(nodes, degree, output_size=total)
        offset = torch.arange(total, device=self.device) - \
            torch.repeat_interleave(before, degree, output_size=total)
        if k < 0:
            return start[owner] + offset, owner
        # A random order within each node's edges; keep the first k, which
        # after the sort are each node's first kept_degree positions.
        keys = owner.double() + torch.rand(total, dtype=torch.double,
                                           generator=self.generator, device=self.device)
        order = torch.argsort(keys)
        kept_owner = torch.repeat_interleave(nodes, kept_degree, output_size=kept)
        kept_before = kept_degree.cumsum(0) - kept_degree
        position = before[kept_owner] + torch.arange(kept, device=self.device) - \
            kept_before[kept_owner]
        return start[kept_owner] + offset[order[position]], kept_owner
