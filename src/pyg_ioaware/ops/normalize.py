"""Edge values of the SpMM family: a_e per CSR entry, in CSR order (and in
CSR^T order for backward).

For a graph with edge weights w (ones when none are given):

* ``"sum"``:  a_e = w_e
* ``"mean"``: a_e = w_e / indeg(dst_e)             (PyG's scatter mean of w_e x_src)
* ``"gcn"``:  a_e = deg^-1/2(src_e) w_e deg^-1/2(dst_e),  deg(v) = sum of w over
  edges into v, deg^-1/2 = 0 where deg = 0 (PyG's ``gcn_norm``; self loops
  come from Graph.with_remaining_self_loops, whose dropped input loops weigh 0).

Values are computed in float32 (float64 for float64) and returned in the
requested dtype. Without weights they are cached on the Graph per (mode,
dtype) (computed eagerly under torch.compile); with weights they are
recomputed on every call, so gradients flow to the weights.
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .. import _native
from ..graph import DROPPED_LOOP, NEW_LOOP, Graph, mark_static
from .dispatch import accumulator_dtype, native_ready

MODES = ("sum", "mean", "gcn")


class EdgeValues:
    """a_e in CSR order, and (on first use, then kept) in CSR^T order. Holds
    its graph weakly: a Graph keeps its cached values, and a reference
    cycle would keep a mini-batch's Graph (and its GPU memory) alive until
    the cyclic garbage collector runs."""

    def __init__(self, graph: Graph, values: Tensor, static: bool):
        self._graph = weakref.ref(graph)
        self.values = mark_static(values) if static else values
        self._static = static
        self._values_t: Optional[Tensor] = None
        # Per (feature width, whether the backward may scatter over A): whether
        # the tuner gives every SpMM over these values the kernels of our own
        # (ops.spmm.native_spmm_call).
        self.own_kernels: Dict[Tuple[int, bool], bool] = {}

    @property
    def values_t(self) -> Tensor:
        if self._values_t is None:
            values_t = self.values[self._graph().transpose.perm]
            self._values_t = mark_static(values_t) if self._static else values_t
        return self._values_t

    @property
    def cached(self) -> bool:
        """Whether the graph keeps these values (computed without weights)."""
        return self._static

    def tensors(self) -> List[Tensor]:
        return [t for t in (self.values, self._values_t) if t is not None]


def weights_in_csr_order(graph: Graph, edge_weight: Optional[Tensor],
                         fill_value: float = 1.0) -> Optional[Tensor]:
    """``edge_weight`` (one per input edge of the graph this one derives
    from) in ``graph``'s CSR order. On a self-loop graph, added loops
    without an input loop get ``fill_value`` and dropped input loops 0."""
    if edge_weight is None:
        return None
    origin = graph.state.edge_origin
    if origin is None:
        return edge_weight if graph.edge_perm is None else edge_weight[graph.edge_perm]
    if edge_weight.numel() == 0:  # no edges, loops only: a source to gather from,
        edge_weight = edge_weight.sum().reshape(1)  # still part of autograd
    picked = edge_weight[origin.clamp(min=0)]
    fill = torch.where(origin == NEW_LOOP, fill_value, 0.0).to(picked.dtype)
    return torch.where(origin >= 0, picked, fill)


def normalized_values(graph: Graph, weight_csr: Optional[Tensor], mode: str,
                      dtype: torch.dtype) -> EdgeValues:
    """The edge values a_e of ``graph``'s propagation, in CSR order, cached
    on the graph.

    Args:
        graph (Graph): the structure (for ``"gcn"``, the graph with self
            loops, ``graph.with_remaining_self_loops()``).
        weight_csr (Tensor or None): edge weights w_e in CSR order
            (:func:`weights_in_csr_order`), or None (ones).
        mode (str): ``"sum"`` (a_e = w_e), ``"mean"`` (a_e = w_e / indeg(d))
            or ``"gcn"`` (a_e = deg(s)^-1/2 w_e deg(d)^-1/2 with weighted
            in-degrees, GCN's symmetric normalization).
        dtype (torch.dtype): dtype of the returned values (computed in
            float32).

    Returns:
        EdgeValues: ``.values`` [E] in CSR order (and, on first use, the
        same in CSR^T order).
    """
    if mode not in MODES:
        raise ValueError(f"unknown normalization {mode!r}: expected one of {MODES}")
    if weight_csr is not None:
        return EdgeValues(graph, _compute(graph, weight_csr, mode, dtype), static=False)
    key = (mode, dtype)
    cached = graph.state.values.get(key)
    if cached is None:
        compute = _compute_cached_eagerly if torch.compiler.is_compiling() else _compute_cached
        cached = graph.state.values[key] = compute(graph, mode, dtype)
    return cached


def _compute_cached(graph: Graph, mode: str, dtype: torch.dtype) -> EdgeValues:
    """Values without weights, kept on the graph: for ``"gcn"`` in float32
    those its build wrote (``GraphState.gcn_values``) where it did (the
    same values, bitwise), else computed."""
    built = None
    if mode == "gcn":
        built, graph.state.gcn_values = graph.state.gcn_values, None
    if built is None or dtype != torch.float32:
        built = _compute(graph, None, mode, dtype)
    return EdgeValues(graph, built, static=True)


# Traced code computes the cached values eagerly (one graph break); eager
# calls skip that wrapper, whose cost would show on every new graph.
_compute_cached_eagerly = torch.compiler.disable(_compute_cached)


def _compute(graph: Graph, weight_csr: Optional[Tensor], mode: str,
             dtype: torch.dtype) -> Tensor:
    acc = accumulator_dtype(dtype)
    if native_ready(graph.device) and (weight_csr is None or not weight_csr.requires_grad):
        if mode == "gcn" and not graph.is_bipartite:
            return _gcn_native(graph, weight_csr, dtype, acc)
        if mode == "mean":
            return _mean_native(graph, weight_csr, dtype, acc)
    if weight_csr is not None:
        weight = weight_csr.to(acc)
    elif graph.state.edge_origin is not None:  # a self-loop graph: dropped loops weigh 0
        weight = (graph.state.edge_origin != DROPPED_LOOP).to(acc)
    else:
        weight = torch.ones(graph.num_edges, dtype=acc, device=graph.device)
    if mode == "mean":
        weight = weight / graph.in_degree.to(acc).clamp(min=1)[graph.row]
    elif mode == "gcn":
        if graph.is_bipartite:
            raise ValueError("GCN normalization needs a square graph, got "
                             f"num_src={graph.num_src}, num_dst={graph.num_dst}")
        deg = torch.zeros(graph.num_dst, dtype=acc, device=graph.device)
        deg.index_add_(0, graph.row, weight)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt.masked_fill_(deg_inv_sqrt == float("inf"), 0.0)
        weight = deg_inv_sqrt[graph.col] * weight * deg_inv_sqrt[graph.row]
    return weight.to(dtype)


def _gcn_native(graph: Graph, weight_csr: Optional[Tensor], dtype: torch.dtype,
                acc: torch.dtype) -> Tensor:
    """"gcn" values in two native launches (degrees, then values; one where
    every entry weighs 1: no weights and no dropped self loop): the same
    formula as _compute, in place of about a dozen torch launches."""
    weight = None if weight_csr is None else weight_csr.to(acc).contiguous()
    return _native.gcn_norm(graph.rowptr, graph.col, graph.row, weight,
                            _weighing_origin(graph), dtype)


def _mean_native(graph: Graph, weight_csr: Optional[Tensor], dtype: torch.dtype,
                 acc: torch.dtype) -> Tensor:
    """"mean" values in one native launch: the same formula as _compute, in
    place of about six torch launches."""
    weight = None if weight_csr is None else weight_csr.to(acc).contiguous()
    return _native.mean_norm(graph.rowptr, graph.col, graph.row, weight,
                             _weighing_origin(graph), graph.num_src, dtype)


def _weighing_origin(graph: Graph) -> Optional[Tensor]:
    """The self-loop graph's edge_origin where it weighs entries (its
    DROPPED_LOOP entries weigh 0), None where it holds none (the input had
    no self loop): the kernels then weigh every entry 1."""
    return graph.state.edge_origin if graph.state.dropped_loops else None
