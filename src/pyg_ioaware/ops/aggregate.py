"""Neighbourhood aggregation for every reduce, over any adjacency: what
SAGEConv, the aggregation modules and users who want no module call.

    sum:   out[d] = sum_{(s -> d)} w_e x[s]                   (SpMM family)
    mean:  out[d] = (1 / indeg(d)) sum_{(s -> d)} w_e x[s]    (SpMM family)
    min:   out[d, f] = min_{(s -> d)} x[s, f]                 (reduction family)
    max:   out[d, f] = max_{(s -> d)} x[s, f]                 (reduction family)

each 0 where d has no incoming edge, as PyG's aggregations give.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

from torch import Tensor

from ..graph import Graph, NumNodes
from . import checks
from .hubs import DEFAULT_HUB_QUANTILE
from .minmax import graph_minmax
from .normalize import weights_in_csr_order
from .spmm_functional import FLOWS, _flat, _unflat, input_edge_weight, propagate

REDUCES = ("sum", "mean", "min", "max")
PairTensor = Tuple[Tensor, Optional[Tensor]]


def aggregate(x: Union[Tensor, PairTensor], adj: Any, reduce: str = "sum",
              edge_weight: Optional[Tensor] = None, *,
              size: Optional[Sequence[int]] = None, flow: str = "source_to_target",
              hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Tensor:
    r"""Aggregates source features over each node's incoming edges, with no
    per-edge tensor:

    .. math::
        \mathrm{sum:}\ \mathbf{x}'_i = \sum_{j \in \mathcal{N}(i)} w_{j,i}\,\mathbf{x}_j
        \qquad
        \mathrm{mean:}\ \mathbf{x}'_i = \frac{1}{|\mathcal{N}(i)|}
        \sum_{j \in \mathcal{N}(i)} w_{j,i}\,\mathbf{x}_j
        \qquad
        \mathrm{min/max:}\ x'_{i,f} = \min_{j \in \mathcal{N}(i)} x_{j,f}
        \ \ (\max)

    each 0 where node :math:`i` has no incoming edge, as PyG's aggregations
    give. Sum and mean run one SpMM (the SpMM family), min and max the
    degree-aware reduction kernel (the reduction family); the gradient of
    min/max follows PyG's ``scatter_reduce`` rule (split evenly among ties).

    Args:
        x (Tensor or tuple): node features [N, C] or [N, H, C] (a square
            graph), or a pair ``(x_src, x_dst)`` for a bipartite graph
            (``x_dst``, which may be None, only gives the destination count).
        adj: the edges: anything :meth:`pyg_ioaware.Graph.from_input` takes
            (``edge_index`` [2, E], EdgeIndex, torch.sparse, SparseTensor or
            a Graph).
        reduce (str): ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``.
            (default: ``"sum"``)
        edge_weight (Tensor, optional): [E] weights for sum and mean (default:
            a sparse input's values, else ones); min and max take none.
        size (tuple, optional): ``(num_src, num_dst)`` as in PyG's
            ``propagate``.
        flow (str): PyG's message direction; ``"target_to_source"`` sends
            messages from edge_index[1] to edge_index[0], reading ``x_dst``
            as the sources, as PyG does. (default: ``"source_to_target"``)
        hub_quantile (float): min/max split destinations whose in-degree is
            above this quantile (and above 256) over all SMs (CUDA).
            (default: 0.99)

    Returns:
        Tensor: [num_dst, C] (or [num_dst, H, C]) in ``x``'s dtype.

    Dtypes:
        float32, float64, float16, bfloat16 (accumulated in float32 for the
        16-bit types); edge indices int32 or int64.

    Example::

        out = ops.aggregate(x, edge_index, reduce="max")               # [N, C]
        out = ops.aggregate((x_src, x_dst), edge_index, reduce="mean") # bipartite
    """
    who = f"aggregate(reduce={reduce!r})"
    if reduce not in REDUCES:
        raise ValueError(f"{who}: reduce must be one of {REDUCES}")
    if flow not in FLOWS:
        raise ValueError(f"{who}: flow must be one of {FLOWS}, got {flow!r}")
    x_pair = tuple(x) if isinstance(x, (tuple, list)) else (x, x)
    if len(x_pair) != 2:
        raise ValueError(f"{who}: expected a tensor or a (x_src, x_dst) pair")
    graph = Graph.from_input(adj, _num_nodes(x_pair, size, who))
    if flow == "target_to_source":
        graph, x_pair = graph.reversed(), (x_pair[1], x_pair[0])
    x_src = x_pair[0]
    if x_src is None:
        raise ValueError(f"{who}: the source features (x_src) are None")
    checks.node_features(x_src, graph.num_src, graph.device, who)
    if reduce in ("min", "max"):
        if edge_weight is not None:
            raise ValueError(f"{who}: min and max take no edge weights")
        return _unflat(graph_minmax(graph, _flat(x_src), reduce, hub_quantile), x_src)
    weight_csr = weights_in_csr_order(graph, input_edge_weight(graph, edge_weight, who))
    return _unflat(propagate(graph, weight_csr, reduce, _flat(x_src)), x_src)


def aggregate_unweighted(graph: Graph, x_src: Tensor, reduce: str,
                         hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Tensor:
    """:func:`aggregate` over a Graph with every edge weighing 1 (a sparse
    input's values ignored, as SAGEConv does), for ``x_src`` [num_src, C]
    or [num_src, H, C] checked here."""
    who = f"aggregate(reduce={reduce!r})"
    if reduce not in REDUCES:
        raise ValueError(f"{who}: reduce must be one of {REDUCES}")
    checks.node_features(x_src, graph.num_src, graph.device, who)
    flat = _flat(x_src)
    if reduce in ("min", "max"):
        return _unflat(graph_minmax(graph, flat, reduce, hub_quantile), x_src)
    return _unflat(propagate(graph, None, reduce, flat), x_src)


def _num_nodes(x_pair: tuple, size: Optional[Sequence[int]], who: str) -> NumNodes:
    """(num_src, num_dst) of the graph: ``size`` where given (entries may be
    None), else the row counts of the features; a square count where only
    one tensor is given for both."""
    counts = [None, None] if size is None else [None if s is None else int(s) for s in size]
    if len(counts) != 2:
        raise ValueError(f"{who}: size must be (num_src, num_dst), got {size}")
    for i, t in enumerate(x_pair):
        if t is None:
            continue
        if not isinstance(t, Tensor) or t.dim() == 0:
            raise TypeError(f"{who}: expected node features as tensors of at least 1-D")
        if counts[i] is None:
            counts[i] = t.size(0)
    if counts[0] is None or counts[1] is None:
        raise ValueError(f"{who}: cannot tell the node counts: give size=(num_src, num_dst) "
                         f"where x_src or x_dst is None")
    if x_pair[0] is x_pair[1] and counts[0] == counts[1]:
        return counts[0]
    return tuple(counts)
