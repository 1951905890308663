"""Neighbourhood aggregation modules for users who build their own layers:
``aggr(x, adj)`` aggregates source features over each node's incoming
edges with one fused kernel (:func:`pyg_ioaware.ops.aggregate`).

Unlike :mod:`torch_geometric.nn.aggr` (which reduces per-edge messages
already gathered, ``aggr(x_j, index)``), these take the node features and
the adjacency, so no per-edge tensor is ever built.
"""
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..ops.aggregate import aggregate
from ..ops.hubs import DEFAULT_HUB_QUANTILE

__all__ = ["SumAggregation", "MeanAggregation", "MinAggregation", "MaxAggregation"]

PairTensor = Tuple[Tensor, Optional[Tensor]]


class _NeighborAggregation(torch.nn.Module):
    """out[d] = reduce over the edges (s -> d) of x_src[s] (0 where d has
    none); ``x`` is a tensor [N, C] or [N, H, C] (a square graph) or a pair
    ``(x_src, x_dst)`` (x_dst, which may be None, only gives the
    destination count), ``adj`` anything :meth:`pyg_ioaware.Graph.from_input`
    takes (edge_index, EdgeIndex, torch.sparse, SparseTensor, Graph),
    ``size`` (num_src, num_dst) as in PyG's ``propagate``."""

    reduce: str = ""

    def __init__(self, hub_quantile: float = DEFAULT_HUB_QUANTILE):
        super().__init__()
        if not isinstance(hub_quantile, (int, float)) or not 0.0 <= hub_quantile <= 1.0:
            raise ValueError(f"'{self.__class__.__name__}' expects hub_quantile in [0, 1], "
                             f"got {hub_quantile!r}")
        self.hub_quantile = float(hub_quantile)

    def forward(self, x: Union[Tensor, PairTensor], adj: Any,
                size: Optional[Sequence[int]] = None) -> Tensor:
        return aggregate(x, adj, self.reduce, size=size, hub_quantile=self.hub_quantile)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"


class _WeightedAggregation(_NeighborAggregation):
    """Sum and mean also take edge weights."""

    def forward(self, x: Union[Tensor, PairTensor], adj: Any,
                size: Optional[Sequence[int]] = None,
                edge_weight: Optional[Tensor] = None) -> Tensor:
        return aggregate(x, adj, self.reduce, edge_weight, size=size,
                         hub_quantile=self.hub_quantile)


class SumAggregation(_WeightedAggregation):
    r"""Sum over the incoming edges (one SpMM):

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in \mathcal{N}(i)} w_{j,i} \, \mathbf{x}_j

    with :math:`w_{j,i}` = ``edge_weight`` (one per input edge), else a
    sparse adjacency's values, else 1.

    Called as ``aggr(x, adj, size=None)``: ``x`` node features [N, C] or
    [N, H, C], or a bipartite pair ``(x_src, x_dst)``; ``adj`` edge_index
    [2, E] (int32 or int64), EdgeIndex, torch.sparse, SparseTensor or a
    :class:`pyg_ioaware.Graph`; returns [num_dst, C] (or [num_dst, H, C]) in
    ``x``'s dtype: float32, float64, float16 or bfloat16 (accumulated in
    float32). The functional form is :func:`pyg_ioaware.ops.aggregate`.

    Args:
        hub_quantile (float, optional): Unused by sum (kept for a common
            signature). (default: :obj:`0.99`)
    """
    reduce = "sum"


class MeanAggregation(_WeightedAggregation):
    r"""Mean over the incoming edges (one SpMM; 0 for a node without any):

    .. math::
        \mathbf{x}^{\prime}_i = \frac{1}{|\mathcal{N}(i)|}
        \sum_{j \in \mathcal{N}(i)} w_{j,i} \, \mathbf{x}_j

    with :math:`w_{j,i}` as in :class:`SumAggregation` and
    :math:`|\mathcal{N}(i)|` the number of incoming edges.

    Called as ``aggr(x, adj, size=None)``: ``x`` node features [N, C] or
    [N, H, C], or a bipartite pair ``(x_src, x_dst)``; ``adj`` edge_index
    [2, E] (int32 or int64), EdgeIndex, torch.sparse, SparseTensor or a
    :class:`pyg_ioaware.Graph`; returns [num_dst, C] (or [num_dst, H, C]) in
    ``x``'s dtype: float32, float64, float16 or bfloat16 (accumulated in
    float32). The functional form is :func:`pyg_ioaware.ops.aggregate`.

    Args:
        hub_quantile (float, optional): Unused by mean (kept for a common
            signature). (default: :obj:`0.99`)
    """
    reduce = "mean"


class MinAggregation(_NeighborAggregation):
    r"""Feature-wise minimum over the incoming edges (the reduction
    family's degree-aware kernel; 0 for a node without any):

    .. math::
        \mathbf{x}^{\prime}_{i,f} = \min_{j \in \mathcal{N}(i)} \mathbf{x}_{j,f}

    Edge weights and a sparse adjacency's values are not used. The gradient
    is PyG's (``scatter_reduce`` ``amin``): split evenly among tied entries.
    Over ReLU outputs most elements tie at 0, and the backward then visits
    every entry of a row (see the FAQ, "Min aggregation after a ReLU").

    Called as ``aggr(x, adj, size=None)``: ``x`` node features [N, C] or
    [N, H, C], or a bipartite pair ``(x_src, x_dst)``; ``adj`` edge_index
    [2, E] (int32 or int64), EdgeIndex, torch.sparse, SparseTensor or a
    :class:`pyg_ioaware.Graph`; returns [num_dst, C] (or [num_dst, H, C]) in
    ``x``'s dtype: float32, float64, float16 or bfloat16 (accumulated in
    float32). The functional form is :func:`pyg_ioaware.ops.aggregate`.

    Args:
        hub_quantile (float, optional): Destinations whose in-degree lies
            above this quantile are split over all SMs (CUDA).
            (default: :obj:`0.99`)
    """
    reduce = "min"


class MaxAggregation(_NeighborAggregation):
    r"""Feature-wise maximum over the incoming edges (the reduction
    family's degree-aware kernel; 0 for a node without any):

    .. math::
        \mathbf{x}^{\prime}_{i,f} = \max_{j \in \mathcal{N}(i)} \mathbf{x}_{j,f}

    Edge weights and a sparse adjacency's values are not used. The gradient
    is PyG's (``scatter_reduce`` ``amax``): split evenly among tied entries.

    Called as ``aggr(x, adj, size=None)``: ``x`` node features [N, C] or
    [N, H, C], or a bipartite pair ``(x_src, x_dst)``; ``adj`` edge_index
    [2, E] (int32 or int64), EdgeIndex, torch.sparse, SparseTensor or a
    :class:`pyg_ioaware.Graph`; returns [num_dst, C] (or [num_dst, H, C]) in
    ``x``'s dtype: float32, float64, float16 or bfloat16 (accumulated in
    float32). The functional form is :func:`pyg_ioaware.ops.aggregate`.

    Args:
        hub_quantile (float, optional): Destinations whose in-degree lies
            above this quantile are split over all SMs (CUDA).
            (default: :obj:`0.99`)
    """
    reduce = "max"
