"""Edge values of the SpMM family, in CSR and CSR^T order.

For a graph with edge weights w (ones when none are given):

* ``"sum"``:  a_e = w_e
* ``"mean"``: a_e = w_e / indeg(dst_e)             (PyG's scatter mean of w_e x_src)
* ``"gcn"``:  a_e = deg^-1/2(src_e) w_e deg^-1/2(dst_e),  deg(v) = sum of w over
  edges into v, deg^-1/2 = 0 where deg = 0 (PyG's ``gcn_norm``; self loops are
  handled by the caller through Graph.with_remaining_self_loops).

Values are computed in float32 (float64 for float64) and returned in the
requested dtype. Without weights they are cached on the Graph per (mode,
dtype) (computed eagerly under torch.compile); with weights they are
recomputed on every call, so gradients flow to the weights.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..graph import Graph, mark_static

MODES = ("sum", "mean", "gcn")


def weights_in_csr_order(graph: Graph, edge_weight: Optional[Tensor],
                         fill_value: float = 1.0) -> Optional[Tensor]:
    """``edge_weight`` (one per input edge of the graph this one derives
    from) permuted to ``graph``'s CSR order. On a self-loop graph, loops
    without an input edge get ``fill_value``."""
    if edge_weight is None:
        return None
    origin = graph.cache.get("edge_origin")
    if origin is None:
        return edge_weight[graph.edge_perm.long()]
    picked = edge_weight[origin.clamp(min=0)]
    return torch.where(origin >= 0, picked, picked.new_full((), fill_value))


def edge_values(graph: Graph, weight_csr: Optional[Tensor], mode: str,
                dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """(values in CSR order, the same values in CSR^T order) for ``mode``;
    ``weight_csr`` are edge weights in CSR order or None (ones)."""
    if mode not in MODES:
        raise ValueError(f"unknown normalization {mode!r}: expected one of {MODES}")
    if weight_csr is None:
        key = ("edge_values", mode, dtype)
        if key not in graph.cache:
            graph.cache[key] = _compute_cached(graph, mode, dtype)
        return graph.cache[key]
    return _compute(graph, weight_csr, mode, dtype)


@torch.compiler.disable
def _compute_cached(graph: Graph, mode: str, dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    values, values_t = _compute(graph, None, mode, dtype)
    return mark_static(values), mark_static(values_t)


def _compute(graph: Graph, weight_csr: Optional[Tensor], mode: str,
             dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    if weight_csr is None:
        weight = torch.ones(graph.num_edges, dtype=acc, device=graph.device)
    else:
        weight = weight_csr.to(acc)
    if mode == "mean":
        deg = graph.in_degree.to(acc)
        weight = weight / deg.clamp(min=1)[graph.row.long()]
    elif mode == "gcn":
        if graph.is_bipartite:
            raise ValueError("GCN normalization needs a square graph, got "
                             f"num_src={graph.num_src}, num_dst={graph.num_dst}")
        row = graph.row.long()
        deg = torch.zeros(graph.num_dst, dtype=acc, device=graph.device).index_add_(0, row, weight)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0.0)
        weight = deg_inv_sqrt[graph.col.long()] * weight * deg_inv_sqrt[row]
    values = weight.to(dtype)
    return values, values[graph.t_to_csr.long()]
