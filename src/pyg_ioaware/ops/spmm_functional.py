"""The SpMM family's orchestration: what GCNConv (and users who want no
module) call; plain sum / mean aggregation is ops.aggregate.

It takes the adjacency in any form :meth:`Graph.from_input` accepts, picks
up edge weights, adds self loops, normalizes, and runs the differentiable
SpMM. Layers stay thin: they hold an :class:`SpmmAdjacency` (or build one
per call) and call :meth:`SpmmAdjacency.propagate` on their projected
features.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from .. import config
from ..graph import Graph, NumNodes
from . import checks
from .normalize import normalized_values, weights_in_csr_order
from .spmm import (HALF_DTYPES, LazyTranspose, NativeSpmmCall, SpmmFunction, mixed_call,
                   native_spmm_call, spmm_trusted)

FLOWS = ("source_to_target", "target_to_source")


class SpmmAdjacency:
    """A graph, its edge weights in CSR order (None: ones) and a
    normalization mode: everything a propagation needs. Made by
    :func:`gcn_adjacency`.

    ``propagate(h)``: out[d] = sum over edges (s -> d) of a_e h[s], with a_e
    as :func:`normalized_values` gives them for ``mode`` (``"sum"``: the
    weights, ``"mean"``: divided by the in-degree, ``"gcn"``: GCN's
    symmetric normalization); differentiable in h and the weights.

    Attributes:
        graph (Graph): the structure propagated over.
        weight_csr (Tensor or None): edge weights in CSR order.
        mode (str): ``"sum"``, ``"mean"`` or ``"gcn"``.
    """

    def __init__(self, graph: Graph, weight_csr: Optional[Tensor], mode: str):
        self.graph = graph
        self.weight_csr = weight_csr
        self.mode = mode

    def propagate(self, h: Tensor, node_dim: int = 0, bias: Optional[Tensor] = None,
                  ones_dtype: Optional[torch.dtype] = None,
                  record: Optional[Callable[[NativeSpmmCall], None]] = None) -> Tensor:
        """Aggregates ``h`` ([N, C], [N, H, C], or [B, N, C] with
        ``node_dim=-2``) over the graph, plus ``bias`` (broadcast over the
        last dimension) where given; the output keeps the layout.

        Messages are in PyG's dtype: the edge weights' promoted with
        ``h``'s, where ``ones_dtype`` is the dtype of the weights PyG makes
        where none are given (GCN's normalization makes ones in the layer
        input's dtype; None: no weights, messages in ``h``'s dtype). So
        float32 weights over 16-bit ``h`` (``torch.autocast``) aggregate
        into float32, as PyG's messages do. A bias of the messages' dtype,
        or a float32 one over 16-bit messages, is added inside the
        aggregation (2-D ``h``; Y then in float32, the dtype torch's add
        promotes to); any other is added after it, promoting as torch does.

        ``record`` is handed the C++ autograd call (ops.spmm.NativeSpmmCall)
        where one call on ``h`` and ``bias`` gave the whole output (2-D
        ``h`` along dim 0, the bias, if any, added inside), as
        :func:`propagate` hands it."""
        graph = self.graph
        if not isinstance(h, Tensor):
            raise TypeError(f"propagate: expected node features as a tensor, got "
                            f"{type(h).__name__}")
        moved = h.movedim(node_dim, 0) if node_dim not in (0, -h.dim()) else h
        checks.node_features(moved, graph.num_src, graph.device, "propagate")
        weight_dtype = ones_dtype if self.weight_csr is None else self.weight_csr.dtype
        out_dtype = h.dtype if weight_dtype is None else torch.promote_types(weight_dtype,
                                                                             h.dtype)
        fused = bias is not None and h.dim() == 2 and bias.shape == (h.size(1),)
        whole = moved is h and h.dim() == 2 and (bias is None or fused)
        out = propagate(graph, self.weight_csr, self.mode, _flat(moved),
                        bias if fused else None, out_dtype, record if whole else None)
        out = _unflat(out, moved)
        out = out if moved is h else out.movedim(0, node_dim)
        if bias is None or fused:
            return out
        # In place where the dtypes agree: saves one output-sized buffer at peak.
        return out.add_(bias) if out.dtype == bias.dtype else out + bias

    def __repr__(self) -> str:
        weighted = self.weight_csr is not None
        return f"SpmmAdjacency({self.graph}, mode={self.mode!r}, weighted={weighted})"


def propagate(graph: Graph, weight_csr: Optional[Tensor], mode: str, x: Tensor,
              bias: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None,
              record: Optional[Callable[[NativeSpmmCall], None]] = None) -> Tensor:
    """out[d] = sum over edges (s -> d) of a_e x[s] (+ bias) for 2-D x,
    already checked, and a bias of x's width; a_e from ``mode`` and
    ``weight_csr``; out in ``out_dtype`` (default x's; float32 for 16-bit x
    reads x as it is, with float32 a_e (the kernels' mixed form); any other
    dtype converts x first). A bias of out's dtype is added inside the
    aggregation. So is a float32 bias over 16-bit x and out (autocast with
    16-bit features): torch's add would promote the sum to float32, and the
    mixed form writes that float32 sum plus the bias in one pass (the sum
    not rounded to 16 bits on the way). Any other bias is added after the
    aggregation, promoting as torch does. Where nothing needs a gradient
    (inference, a first layer's features) no autograd node is recorded (the
    C++ call records none, the op below has none); the CSR^T is built where
    config.spmm_backward says (lazily by default). ``record`` is handed the
    C++ autograd call (ops.spmm.NativeSpmmCall) where one ran on ``x``
    itself and may run again as it is (:attr:`NativeSpmmCall.replayable`)."""
    given = x
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if (bias is not None and out_dtype == x.dtype and x.dtype in HALF_DTYPES
            and bias.dtype == torch.float32):
        out_dtype = torch.float32
    mixed = mixed_call(x.dtype, out_dtype)
    if out_dtype != x.dtype and not mixed:  # e.g. float64 weights: PyG's float64 messages
        x = x.to(out_dtype)
    edge_values = normalized_values(graph, weight_csr, mode, out_dtype)
    values = edge_values.values
    spmm_out = out_dtype if mixed else None
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or values.requires_grad or (
        bias is not None and bias.requires_grad))
    promoting = bias is not None and bias.dtype != out_dtype
    backward = config.spmm_backward
    if backward == "auto" and torch.compiler.is_compiling():
        # Traced code cannot decide later: the CSR^T if the graph has one.
        backward = "materialized" if graph.state.transpose is not None else "transpose"
    # The C++ call also where nothing needs a gradient (it then records no
    # node): the same kernel as the op below, without its Python dispatch.
    # Not with a materialized backward, which would build a CSR^T for it.
    call = (native_spmm_call(graph, edge_values, x, backward)
            if needs_grad or backward == "auto" else None)
    if call is not None:
        if record is not None and x is given and call.replayable:
            record(call)
        return call(graph, x, bias)
    if not needs_grad:
        out = spmm_trusted(graph.rowptr, graph.col, values, x, graph.num_dst, False,
                           None if promoting else bias, spmm_out)
        return out + bias if promoting else out
    if promoting:
        return spmm_function(graph, edge_values, x, None, backward, spmm_out) + bias
    return spmm_function(graph, edge_values, x, bias, backward, spmm_out)


def spmm_function(graph: Graph, edge_values, x: Tensor, bias: Optional[Tensor],
                  backward: str, out_dtype: Optional[torch.dtype]) -> Tensor:
    """SpmmFunction over the graph with config.spmm_backward's ``backward``
    mode (as :func:`propagate` resolved it; ``"materialized"``: over the
    CSR^T, differentiable again), its output in ``out_dtype`` (None: x's)."""
    a = (graph.rowptr, graph.col, edge_values.values)
    if backward == "materialized":
        t = graph.transpose
        return SpmmFunction.apply(*a, t.rowptr, t.col, edge_values.values_t, x, False,
                                  graph.num_dst, None, bias, out_dtype)
    lazy = LazyTranspose(graph, edge_values) if backward == "auto" else None
    return SpmmFunction.apply(*a, None, None, None, x, False, graph.num_dst, lazy, bias,
                              out_dtype)


def input_edge_weight(graph: Graph, edge_weight: Optional[Tensor], who: str) -> Optional[Tensor]:
    """The edge weights to use, one per input edge: ``edge_weight``, else the
    sparse input's values, else None (all ones); checked against the graph."""
    if edge_weight is None:
        edge_weight = graph.input_values
    checks.edge_weight(edge_weight, graph.num_edges, graph.device, who)
    return edge_weight


def gcn_adjacency(adj: Any, num_nodes: NumNodes, edge_weight: Optional[Tensor] = None, *,
                  add_self_loops: bool = True, improved: bool = False, normalize: bool = True,
                  flow: str = "source_to_target") -> SpmmAdjacency:
    r"""The adjacency GCNConv propagates over, ready to use in a layer of
    your own:

    .. math::
        \hat{\mathbf{A}}_{\mathrm{norm}} = \hat{\mathbf{D}}^{-1/2}\hat{\mathbf{A}}
        \hat{\mathbf{D}}^{-1/2}, \qquad \hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}

    With ``normalize=True`` this is PyG's ``gcn_norm``: :math:`\hat{\mathbf{A}}`
    is A plus PyG's remaining self loops where ``add_self_loops`` (fill value
    2 with ``improved`` where weights are given, as PyG) and
    :math:`\hat{D}_{ii}` the weighted in-degree; ``normalize=False`` keeps
    the raw weights. The normalized values are computed once per graph and
    cached with it, so building the adjacency again for the same
    ``edge_index`` costs a lookup.

    Args:
        adj: the edges: anything :meth:`pyg_ioaware.Graph.from_input` takes.
        num_nodes (int or tuple): the node count (a pair is accepted, but
            GCN's graph is square).
        edge_weight (Tensor, optional): [E] edge weights (default: ones).
        add_self_loops (bool): add PyG's remaining self loops. (default: True)
        improved (bool): self loops weigh 2. (default: False)
        normalize (bool): apply the symmetric normalization. (default: True)
        flow (str): ``"target_to_source"`` sends messages from edge_index[1]
            to edge_index[0], as in PyG. (default: ``"source_to_target"``)

    Returns:
        SpmmAdjacency: call ``.propagate(h)`` for
        :math:`\hat{\mathbf{A}}_{\mathrm{norm}} \mathbf{h}` (differentiable
        in ``h`` and ``edge_weight``).

    Example::

        adjacency = ops.gcn_adjacency(edge_index, x.size(0))
        out = adjacency.propagate(x @ weight)        # GCNConv without the bias
    """
    who = "GCNConv"
    if flow not in FLOWS:
        raise ValueError(f"{who}: flow must be one of {FLOWS}, got {flow!r}")
    # A new graph's self-loop graph is built with it where the flow keeps
    # its direction (the reversed graph's loops are built on first use),
    # with its values where they need no weights.
    graph = Graph.from_input(adj, num_nodes,
                             with_self_loops=add_self_loops and flow == "source_to_target",
                             gcn_values=normalize and edge_weight is None)
    if flow == "target_to_source":
        graph = graph.reversed()
    edge_weight = input_edge_weight(graph, edge_weight, who)
    if add_self_loops:
        graph = graph.with_remaining_self_loops()
    weight_csr = weights_in_csr_order(graph, edge_weight, 2.0 if improved else 1.0)
    return SpmmAdjacency(graph, weight_csr, "gcn" if normalize else "sum")


def _flat(x: Tensor) -> Tensor:
    """[N, ...] features as [N, C] (2-D input as is)."""
    return x if x.dim() == 2 else x.flatten(1)


def _unflat(out: Tensor, like: Tensor) -> Tensor:
    """The SpMM output in ``like``'s trailing shape. 2-D outputs are returned
    as they are, not as views: a view would turn a caller's in-place bias add
    into a copy of the whole output in backward."""
    return out if like.dim() == 2 else out.view(out.size(0), *like.shape[1:])
