"""Functional API of the SpMM family, for users who want no module.

Every function validates its inputs (clear ValueError / TypeError before any
kernel runs), resolves the cached Graph and runs ``pyg_ioaware::spmm``
through its autograd Function.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor

from ..graph import Graph
from .norm import edge_values, weights_in_csr_order
from .spmm import SpmmFunction, spmm_forward

SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
PairTensor = Tuple[Tensor, Optional[Tensor]]


def check_features(x: Any, graph: Graph, who: str, num_rows: Optional[int] = None) -> None:
    """x must be a 2-D floating tensor on the graph's device with one row per
    source node (or ``num_rows``)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{who}: expected node features as a tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{who}: node features must be one of {SUPPORTED_DTYPES}, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{who}: node features must be 2-D [num_nodes, channels], "
                         f"got shape {list(x.shape)}")
    expected = graph.num_src if num_rows is None else num_rows
    if x.size(0) != expected:
        raise ValueError(f"{who}: node features have {x.size(0)} rows, the graph has "
                         f"{expected} source nodes")
    if x.device != graph.device:
        raise ValueError(f"{who}: node features are on {x.device}, the graph on {graph.device}")


def graph_edge_weight(graph: Graph, edge_weight: Optional[Tensor], who: str) -> Optional[Tensor]:
    """The edge weights to use, one per input edge: ``edge_weight``, else the
    sparse input's values, else None (all ones); checked against the graph."""
    if edge_weight is None:
        edge_weight = graph.edge_values
    check_edge_weight(edge_weight, graph.num_edges, graph.device, who)
    return edge_weight


def check_edge_weight(edge_weight: Optional[Tensor], num_edges: int, device: torch.device,
                      who: str) -> None:
    if edge_weight is None:
        return
    if not isinstance(edge_weight, Tensor) or not edge_weight.is_floating_point():
        raise TypeError(f"{who}: edge_weight must be a floating-point tensor")
    if edge_weight.dim() != 1 or edge_weight.size(0) != num_edges:
        raise ValueError(f"{who}: edge_weight must have shape [{num_edges}] (one per edge), "
                         f"got {list(edge_weight.shape)}")
    if edge_weight.device != device:
        raise ValueError(f"{who}: edge_weight is on {edge_weight.device}, the graph on {device}")


def propagate(graph: Graph, values: Tensor, values_t: Tensor, x: Tensor) -> Tensor:
    """out[d] = sum over edges (s -> d) of values_e * x[s]; values in CSR
    order, values_t the same in CSR^T order. Inputs already checked. Where
    nothing needs a gradient (inference) the autograd Function is skipped."""
    if torch.is_grad_enabled() and (x.requires_grad or values.requires_grad):
        return SpmmFunction.apply(graph.rowptr, graph.col, values, graph.rowptr_t, graph.col_t,
                                  values_t, x, False)
    return spmm_forward(graph.rowptr, graph.col, values, x, graph.num_dst, False)


def spmm(graph: Union[Graph, Any], x: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
    """Y[d] = sum_{(s -> d)} w_e X[s], with w = edge_weight (one per input
    edge, default: the sparse input's values, else ones)."""
    return aggregate(x, graph, reduce="sum", edge_weight=edge_weight)


def aggregate(x: Union[Tensor, PairTensor], adj: Any, reduce: str = "sum",
              edge_weight: Optional[Tensor] = None) -> Tensor:
    """Sum or mean of (weighted) source features over each node's incoming
    edges:

        sum:  out[d] = sum_{(s -> d)} w_e x[s]
        mean: out[d] = (1 / indeg(d)) sum_{(s -> d)} w_e x[s]   (0 where indeg(d) = 0)

    ``x`` is a tensor (square graph) or ``(x_src, x_dst)`` (bipartite; only
    x_dst's row count is used). ``adj`` is anything :meth:`Graph.from_input`
    takes.
    """
    who = f"aggregate(reduce={reduce!r})"
    if reduce not in ("sum", "mean"):
        raise ValueError(f"{who}: reduce must be 'sum' or 'mean'")
    if isinstance(x, (tuple, list)):
        x_src, x_dst = x
        num_nodes = None if x_dst is None else (x_src.size(0), x_dst.size(0))
    else:
        x_src, num_nodes = x, (x.size(0) if isinstance(x, Tensor) else None)
    if not isinstance(x_src, Tensor):
        raise TypeError(f"{who}: expected node features as a tensor, got {type(x_src).__name__}")
    graph = Graph.from_input(adj, num_nodes)
    check_features(x_src, graph, who)
    weight_csr = weights_in_csr_order(graph, graph_edge_weight(graph, edge_weight, who))
    values, values_t = edge_values(graph, weight_csr, reduce, x_src.dtype)
    return propagate(graph, values, values_t, x_src)
