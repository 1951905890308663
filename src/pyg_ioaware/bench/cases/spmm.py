"""The SpMM family's cases: GCNConv against PyG's layer and torch.sparse,
and GCNConv (with its defaults and without self loops) in the mini-batch
cases.

Also the family's bytes model for the aggregation kernels alone and its
bars (docs/benchmark_protocol.md): GCNConv's fp32 layer time is dominated by the X W
product, so besides a geomean bar against PyG at D=512 it must be no slower
than Linear + torch.sparse.mm on any graph in any precision.
"""
from __future__ import annotations

import warnings
from typing import Callable, List

import torch
from torch import Tensor, nn

from ..bandwidth import Kernel
from ..timing import feature_dtype
from . import (BF16_OVER_FP32, Bar, Case, Impl, LayerBuilder, MinibatchCase, Unsupported,
               Workload, register)

# Useful bytes of an aggregation kernel (see minimal_bytes), for the report.
BYTES_MODEL = "(nnz + num_out) * width * element size"


def minimal_bytes(nnz: int, num_out: int, width: int, element_size: int) -> int:
    """Bytes of the minimal model: every gathered neighbour row is read once
    per edge and every output row written once; index and edge-value traffic
    counts as the kernel's overhead, not as useful bytes."""
    return (nnz + num_out) * width * element_size


# ---------------------------------------------------------------- GCNConv

def gcn_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype) -> Tensor:
    """D^-1/2 (A + I) D^-1/2 as a torch.sparse CSR matrix (rows = destinations),
    normalized by PyG's own ``gcn_norm``."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    (src, dst), weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=True)
    order = (dst * num_nodes + src).argsort()
    crow = torch.zeros(num_nodes + 1, dtype=torch.long, device=edge_index.device)
    crow[1:] = torch.bincount(dst, minlength=num_nodes).cumsum(0)
    return torch.sparse_csr_tensor(crow, src[order], weight[order].to(dtype),
                                   (num_nodes, num_nodes))


class SparseGCN(nn.Module):
    """GCNConv as ``torch.sparse.mm(A, x @ W^T) + b`` with A built beforehand."""

    def __init__(self, adj: Tensor, weight: Tensor, bias: Tensor):
        super().__init__()
        self.adj = adj
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = nn.Parameter(bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        return torch.sparse.mm(self.adj, x @ self.weight.t()) + self.bias


def _check_sparse_mm(dtype: torch.dtype, device: torch.device) -> None:
    """Raise Unsupported if torch.sparse CSR matmul (and its backward) cannot
    run in ``dtype`` on ``device``."""
    index = torch.arange(3, device=device)
    adj = torch.sparse_csr_tensor(index, index[:2], torch.ones(2, dtype=dtype, device=device),
                                  (2, 2))
    dense = torch.ones(2, 2, dtype=dtype, device=device, requires_grad=True)
    try:
        torch.sparse.mm(adj, dense).sum().backward()
    except torch.cuda.OutOfMemoryError:
        raise
    except (RuntimeError, NotImplementedError) as error:
        raise Unsupported(f"torch.sparse CSR mm in {dtype} on {device.type}: "
                          f"{str(error).splitlines()[0]}") from None


def _gcn_ours(channels: int) -> Callable[[Workload], Impl]:
    def make(work: Workload) -> Impl:
        from pyg_ioaware.nn import GCNConv

        conv = GCNConv(channels, channels).to(work.device)
        edge_index = work.edge_index
        return Impl(conv, lambda x: conv(x, edge_index))

    return make


def _gcn_pyg(channels: int) -> Callable[[Workload, Impl], Impl]:
    def make(work: Workload, ours: Impl) -> Impl:
        from torch_geometric.nn import GCNConv

        conv = GCNConv(channels, channels).to(work.device)
        conv.load_state_dict(ours.module.state_dict())
        edge_index = work.edge_index
        return Impl(conv, lambda x: conv(x, edge_index))

    return make


def _gcn_torch_sparse(work: Workload, ours: Impl) -> Impl:
    dtype = feature_dtype(work.precision)
    with warnings.catch_warnings():  # torch's "sparse CSR is in beta" notes
        warnings.filterwarnings("ignore", message="Sparse", category=UserWarning)
        _check_sparse_mm(dtype, work.device)
        adj = gcn_adjacency(work.edge_index, work.num_nodes, dtype)
    state = ours.module.state_dict()
    module = SparseGCN(adj, state["lin.weight"], state["bias"])
    return Impl(module, module)


def _gcn_kernels(channels: int) -> Callable[[Workload], List[Kernel]]:
    """The GCN aggregation alone: forward (A X), backward over the cached
    CSR^T (A^T G as a plain SpMM) and over A itself (transposed SpMM), by
    each CUDA backend of ours (the kernels of our own, cuSPARSE's CSR_ALG2)
    and by torch.sparse.mm on the same CSR matrices."""
    def make(work: Workload) -> List[Kernel]:
        from pyg_ioaware import Graph, ops
        from pyg_ioaware.ops.spmm_backends import run_with_backend

        dtype = feature_dtype(work.precision)
        graph = Graph.from_input(work.edge_index, num_nodes=work.num_nodes)
        graph = graph.with_remaining_self_loops()
        n, nnz = graph.num_dst, graph.num_edges
        edge_values = ops.normalized_values(graph, None, "gcn", dtype)
        values, values_t = edge_values.values, edge_values.values_t
        t = graph.transpose
        x = torch.randn(n, channels, device=work.device, dtype=dtype)
        g = torch.randn(n, channels, device=work.device, dtype=dtype)
        model = minimal_bytes(nnz, n, channels, x.element_size())
        kernels = []
        backends = ("pygio-csr", "cusparse-alg2") if work.device.type == "cuda" else ("torch",)
        for name in backends:
            kernels += [
                Kernel(f"{name} A X", lambda name=name: run_with_backend(
                    name, graph.rowptr, graph.col, values, x, n, False), model),
                Kernel(f"{name} A^T G (CSR^T)", lambda name=name: run_with_backend(
                    name, t.rowptr, t.col, values_t, g, n, False), model),
                Kernel(f"{name} A^T G (transposed)", lambda name=name: run_with_backend(
                    name, graph.rowptr, graph.col, values, g, n, True), model),
            ]
        with warnings.catch_warnings():  # torch's "sparse CSR is in beta" notes
            warnings.filterwarnings("ignore", message="Sparse", category=UserWarning)
            adj = torch.sparse_csr_tensor(graph.rowptr.long(), graph.col.long(), values, (n, n))
            adj_t = torch.sparse_csr_tensor(t.rowptr.long(), t.col.long(), values_t, (n, n))
        kernels += [Kernel("torch.sparse A X", lambda: torch.sparse.mm(adj, x), model),
                    Kernel("torch.sparse A^T G", lambda: torch.sparse.mm(adj_t, g), model)]
        return kernels

    return make


for _d in (64, 512):
    register(Case(
        key=f"gcn-d{_d}", name=f"GCNConv D={_d}", family="spmm", config={"D": _d},
        in_channels=_d, make_ours=_gcn_ours(_d),
        baselines={"pyg": _gcn_pyg(_d), "torch.sparse": _gcn_torch_sparse},
        bar=Bar(fwd=3.5, bwd=3.5, mem=8.0) if _d == 512 else None,
        no_slower_than=("torch.sparse",), bf16_over_fp32=BF16_OVER_FP32,
        make_kernels=_gcn_kernels(_d), bytes_model=BYTES_MODEL))
del _d


# ------------------------------------------------------- mini-batch cases

def _gcn_layer(pyg: bool, **options) -> LayerBuilder:
    """Builder of our GCNConv or PyG's, with constructor ``options``."""
    def make(in_channels: int, out_channels: int) -> nn.Module:
        if pyg:
            from torch_geometric.nn import GCNConv
        else:
            from pyg_ioaware.nn import GCNConv
        return GCNConv(in_channels, out_channels, **options)

    return make


register(MinibatchCase(key="gcn", name="GCNConv", family="spmm",
                       make_ours=_gcn_layer(False), make_pyg=_gcn_layer(True)))
register(MinibatchCase(key="gcn-no-loops", name="GCNConv add_self_loops=False", family="spmm",
                       make_ours=_gcn_layer(False, add_self_loops=False),
                       make_pyg=_gcn_layer(True, add_self_loops=False)))
