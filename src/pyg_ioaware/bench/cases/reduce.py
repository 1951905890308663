"""The reduction family's cases: min and max aggregation against PyG's
aggregation modules, SAGEConv(aggr="min") against PyG's, the min / max
kernels alone for the bandwidth table, and SAGEConv mean and max in the
mini-batch cases.

Layer cases (features require grad, a layer in the middle of a network):

- ``min64``, ``min512``, ``max64``, ``max512``: ours is
  ``pyg_ioaware.nn.MinAggregation`` / ``MaxAggregation`` called as
  ``aggr(x, edge_index)``; the baseline "pyg" is PyG's
  ``torch_geometric.nn.aggr.MinAggregation`` / ``MaxAggregation`` over the
  gathered messages, ``aggr(x[src], dst, dim_size=N)`` (what PyG's
  MessagePassing does with aggr="min"). Bar (docs/benchmark_protocol.md) on min512 in
  fp32 against "pyg": forward >= 5x, backward >= 40x faster, fwd+bwd peak
  memory >= 20x smaller; every one of the four at least 1.6x faster under
  bf16 autocast than our own fp32.
- ``min512-relu``, ``max512-relu``: min512 and max512 over ReLU features
  (``Case.features``), the input a hidden layer gives the aggregation: half
  the entries 0, so most outputs tie at 0 and their gradient is split
  among the tied sources (the backward's walks); no bar of their own.
- ``sage-min512``: our ``SAGEConv(512, 512, aggr="min")`` against PyG's
  (baseline "pyg-sage", weights copied through the state_dict): the whole
  layer (the aggregation, lin_l, lin_r); no bar of its own.

Kernels alone (bench.bandwidth), on the cached Graph, per aggregation case:
the forward as inference runs it (no arg), the forward as training runs it
(out and the arg codes, one byte each where every row holds at most 254
entries, else two), and the backward alone from one such forward's out
and arg (plus, on CUDA, the deterministic backward over the CSR^T). Each
row also carries the light/heavy split of the graph (:func:`hub_split`).
"""
from __future__ import annotations

from typing import Callable, Dict, List

import torch
from torch import nn

from ..bandwidth import Kernel
from ..timing import feature_dtype
from . import (BF16_OVER_FP32, Bar, Case, Impl, LayerBuilder, MinibatchCase, Unsupported,
               Workload, random_features, register)

FAMILY = "reduction"
REDUCES = ("min", "max")
WIDTHS = (64, 512)
# Useful bytes of the min / max kernels (see forward_bytes, backward_bytes).
BYTES_MODEL = ("min/max fwd: (nnz + num_out) * D * element size, + num_out * D * arg bytes "
               "with arg; bwd: num_out * D * (element size + arg bytes) + num_src * D * "
               "element size")


def forward_bytes(nnz: int, num_out: int, width: int, element_size: int,
                  arg_bytes: int) -> int:
    """Minimal bytes of the forward: every gathered neighbour row read once
    per edge, every output row written once (and, for training, the arg
    codes of ``arg_bytes`` bytes, 0 without them, written once per output
    element). Index traffic (rowptr, col) counts as the kernel's overhead."""
    return (nnz + num_out) * width * element_size + num_out * width * arg_bytes


def backward_bytes(num_src: int, num_out: int, width: int, element_size: int,
                   arg_bytes: int) -> int:
    """Minimal bytes of the backward: grad_out and arg read once per output
    element, grad_x written once per source element. Reading x or out (only
    rows with ties, zero or NaN results need them), the zero fill of grad_x,
    the winners' col entries and index traffic count as overhead."""
    return num_out * width * (element_size + arg_bytes) + num_src * width * element_size


def _aggregation_name(reduce: str) -> str:
    return "MinAggregation" if reduce == "min" else "MaxAggregation"


def _nn_class(name: str):
    """``pyg_ioaware.nn.<name>``, or Unsupported if that layer does not exist."""
    import pyg_ioaware.nn

    try:
        return getattr(pyg_ioaware.nn, name)
    except AttributeError:
        raise Unsupported(f"pyg_ioaware.nn.{name} is not available") from None


# --------------------------------------------------- light / heavy split

def hub_split(graph, quantile: float) -> Dict[str, object]:
    """How the min / max kernels split the rows of ``graph`` (rows =
    destinations) at hub quantile ``quantile``: rows of more than
    ``threshold`` = max(the quantile of the row degrees, MIN_HUB_DEGREE)
    entries go to the hub kernel (chunks of 256 entries over all SMs, fewer
    where the graph's entries would not fill the GPU with them; a graph of
    at most hubs.SMALL_STRUCTURE_ENTRIES entries reports quantile degree 0,
    the kernels then split every row above MIN_HUB_DEGREE); the rest
    (light rows) a warp each. ``used``: whether the kernels that run here split at all (CUDA
    with the native library; the plain-torch path does not)."""
    from pyg_ioaware.ops.dispatch import native_ready
    from pyg_ioaware.ops.hubs import MIN_HUB_DEGREE, hub_degree

    degree = graph.in_degree.long()
    num_rows, nnz = degree.numel(), graph.num_edges
    quantile_degree, max_hubs = hub_degree(graph.rowptr, nnz, quantile)
    if quantile_degree is None:
        threshold, hub_rows, hub_edges = None, 0, 0
    else:
        # No more than max_hubs rows can lie above the threshold (each exceeds
        # the k-th smallest degree and holds more than MIN_HUB_DEGREE
        # entries), so every one of them is split.
        threshold = max(int(quantile_degree), MIN_HUB_DEGREE)
        hubs = degree > threshold
        hub_rows, hub_edges = int(hubs.sum()), int(degree[hubs].sum())
        assert hub_rows <= max_hubs
    return {
        "quantile": quantile,
        "quantile_degree": None if quantile_degree is None else int(quantile_degree),
        "threshold": threshold,
        "max_degree": int(degree.max()) if num_rows else 0,
        "hub_rows": hub_rows, "hub_row_share": hub_rows / num_rows if num_rows else 0.0,
        "hub_edges": hub_edges, "hub_edge_share": hub_edges / nnz if nnz else 0.0,
        "used": native_ready(graph.device) and threshold is not None,
    }


# ------------------------------------------------ min / max aggregation

def _aggr_ours(reduce: str) -> Callable[[Workload], Impl]:
    def make(work: Workload) -> Impl:
        aggr = _nn_class(_aggregation_name(reduce))().to(work.device)
        edge_index = work.edge_index
        return Impl(aggr, lambda x: aggr(x, edge_index))

    return make


def _aggr_pyg(reduce: str) -> Callable[[Workload, Impl], Impl]:
    def make(work: Workload, ours: Impl) -> Impl:
        from torch_geometric.nn import aggr as pyg_aggr

        aggr = getattr(pyg_aggr, _aggregation_name(reduce))().to(work.device)
        src, dst = work.edge_index
        num_dst = work.size[1]
        return Impl(aggr, lambda x: aggr(x.index_select(0, src), dst, dim_size=num_dst))

    return make


def _minmax_kernels(reduce: str, channels: int,
                    features: str = "normal") -> Callable[[Workload], List[Kernel]]:
    """The min / max kernels alone on the cached Graph: the forward without
    and with arg, the backward from one forward's out and arg (and on CUDA
    the deterministic backward over the CSR^T, by position, and the bucketed
    one where its kernels take the features: ops.minmax.bucket_kernels_take).
    Features of the kind ``features`` (cases.FEATURES: standard normal, or
    their ReLU, a hidden layer's, whose ties at 0 walk)."""
    def make(work: Workload) -> List[Kernel]:
        from pyg_ioaware import Graph
        from pyg_ioaware.ops.minmax import (DEFAULT_HUB_QUANTILE, _minmax_backward_kernel,
                                            bucket_kernels_take, minmax_backward_trusted,
                                            minmax_trusted, narrowest_arg_bytes)

        dtype = feature_dtype(work.precision)
        graph = Graph.from_input(work.edge_index, num_nodes=work.num_nodes)
        rowptr, col = graph.rowptr, graph.col
        n_src, n_out, nnz = graph.num_src, graph.num_dst, graph.num_edges
        q = DEFAULT_HUB_QUANTILE
        x = random_features(features, n_src, channels, work.device, dtype)
        g = torch.randn(n_out, channels, device=work.device, dtype=dtype)
        # The codes training keeps once the graph's longest row is known.
        arg_bytes = narrowest_arg_bytes(int(graph.in_degree.max()) if nnz > 0 else 0)
        out, arg = minmax_trusted(rowptr, col, x, reduce, q, True, arg_bytes)
        size = x.element_size()
        split = hub_split(graph, q)
        fwd = forward_bytes(nnz, n_out, channels, size, 0)
        fwd_arg = forward_bytes(nnz, n_out, channels, size, arg_bytes)
        bwd = backward_bytes(n_src, n_out, channels, size, arg_bytes)
        kernels = [
            Kernel(f"{reduce} fwd",
                   lambda: minmax_trusted(rowptr, col, x, reduce, q, False, arg_bytes),
                   fwd, {"split": split}),
            Kernel(f"{reduce} fwd + arg",
                   lambda: minmax_trusted(rowptr, col, x, reduce, q, True, arg_bytes),
                   fwd_arg, {"split": split}),
            Kernel(f"{reduce} bwd", lambda: minmax_backward_trusted(
                rowptr, col, None, None, x, out, arg, g, reduce), bwd, {"split": split}),
        ]
        if work.device.type == "cuda":
            t = graph.transpose
            kernels.append(Kernel(f"{reduce} bwd deterministic (CSR^T)",
                                  lambda: _minmax_backward_kernel(rowptr, col, t.rowptr, t.col,
                                                                  x, out, arg, g, reduce, t.perm,
                                                                  "deterministic"),
                                  bwd, {"split": split}))
            if bucket_kernels_take(x):
                kernels.append(Kernel(f"{reduce} bwd buckets (CSR^T)",
                                      lambda: _minmax_backward_kernel(
                                          rowptr, col, t.rowptr, t.col, x, out, arg, g, reduce,
                                          t.perm),
                                      bwd, {"split": split}))
        return kernels

    return make


for _reduce in REDUCES:
    for _d in WIDTHS:
        register(Case(
            key=f"{_reduce}{_d}", name=f"{_reduce} aggregation D={_d}", family=FAMILY,
            config={"D": _d}, in_channels=_d, make_ours=_aggr_ours(_reduce),
            baselines={"pyg": _aggr_pyg(_reduce)},
            bar=Bar(fwd=5.0, bwd=40.0, mem=20.0) if (_reduce, _d) == ("min", 512) else None,
            bf16_over_fp32=BF16_OVER_FP32,
            make_kernels=_minmax_kernels(_reduce, _d), bytes_model=BYTES_MODEL))
for _reduce in REDUCES:
    register(Case(
        key=f"{_reduce}512-relu", name=f"{_reduce} aggregation D=512, ReLU features",
        family=FAMILY, config={"D": 512}, in_channels=512, make_ours=_aggr_ours(_reduce),
        baselines={"pyg": _aggr_pyg(_reduce)}, features="relu",
        make_kernels=_minmax_kernels(_reduce, 512, "relu"), bytes_model=BYTES_MODEL))
del _reduce, _d


# ------------------------------------------------- SAGEConv(aggr="min")

def _sage_ours(channels: int, reduce: str) -> Callable[[Workload], Impl]:
    def make(work: Workload) -> Impl:
        conv = _nn_class("SAGEConv")(channels, channels, aggr=reduce).to(work.device)
        edge_index = work.edge_index
        return Impl(conv, lambda x: conv(x, edge_index))

    return make


def _sage_pyg(channels: int, reduce: str) -> Callable[[Workload, Impl], Impl]:
    def make(work: Workload, ours: Impl) -> Impl:
        from torch_geometric.nn import SAGEConv

        if ours is None:
            raise Unsupported("our SAGEConv did not build: no weights to copy")
        conv = SAGEConv(channels, channels, aggr=reduce).to(work.device)
        conv.load_state_dict(ours.module.state_dict())
        edge_index = work.edge_index
        return Impl(conv, lambda x: conv(x, edge_index))

    return make


register(Case(
    key="sage-min512", name="SAGEConv min D=512", family=FAMILY, config={"D": 512},
    in_channels=512, make_ours=_sage_ours(512, "min"),
    baselines={"pyg-sage": _sage_pyg(512, "min")}))


# ------------------------------------------------------- mini-batch cases

def _sage_layer(pyg: bool, reduce: str) -> LayerBuilder:
    """Builder of our SAGEConv or PyG's with ``aggr=reduce`` (the same
    parameters: lin_l.weight, lin_l.bias, lin_r.weight)."""
    def make(in_channels: int, out_channels: int) -> nn.Module:
        if pyg:
            from torch_geometric.nn import SAGEConv
        else:
            SAGEConv = _nn_class("SAGEConv")
        return SAGEConv(in_channels, out_channels, aggr=reduce)

    return make


for _reduce in ("mean", "max"):
    register(MinibatchCase(key=f"sage-{_reduce}", name=f"SAGEConv {_reduce}", family=FAMILY,
                           make_ours=_sage_layer(False, _reduce),
                           make_pyg=_sage_layer(True, _reduce)))
del _reduce
