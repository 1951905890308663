"""An aggregation and the linear maps after it as one autograd node in C++
(cuda/host/aggregate_linear_autograd.cpp): SAGEConv's layer,

    Y = aggr(X_s) W_a^T + X_r W_r^T + b

with aggr the sum or mean over each destination's incoming edges (every
edge weighing 1; the SpMM family) or their min or max (the reduction
family). On a small mini-batch the three autograd nodes it stands for (the
root map ``ops.bias_gradient.linear``, the aggregation's node, the map of
the aggregation ``add_product``) cost a training step more host time than
their kernels take; one node has one backward. Its forward gives their
values bitwise (the same kernels in the same order); its gradients are
theirs up to the order of one sum (dX_s where X_r = X_s, accumulated in
place where autograd added two gradients).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import config
from ..graph import Graph
from . import checks
from .bias_gradient import host_linear
from .hubs import DEFAULT_HUB_QUANTILE
from .minmax import MinMaxFunction, native_minmax_operand, rows_readable
from .normalize import normalized_values
from .spmm import native_spmm_call
from .spmm_functional import spmm_function

REDUCES = ("sum", "mean", "min", "max")
# The name errors give, per reduce (made once: the node's call is on a
# small mini-batch step's host-time path).
_WHO = {reduce: f"aggregate_linear(reduce={reduce!r})" for reduce in REDUCES}


class Recompute:
    """What the C++ node asks Python for where its backward records a graph
    (create_graph=True): the gradients of its forward, recomputed from
    differentiable ops (``aggregate``, differentiable in x, then
    ``F.linear`` with the factors cast to ``dtype`` where given, as autocast
    casts them) and differentiated with create_graph."""

    def __init__(self, aggregate: Callable[[Tensor], Tensor], dtype: Optional[torch.dtype]):
        self.aggregate = aggregate
        self.dtype = dtype

    def gradients(self, grad_out: Tensor, x_src: Tensor, x_root: Optional[Tensor],
                  w_agg: Tensor, w_root: Tensor, bias: Optional[Tensor]) -> tuple:
        """(dX_s, dX_r, dW_a, dW_r, db), None for an input that is None or
        needs no gradient."""
        def cast(t: Optional[Tensor]) -> Optional[Tensor]:
            return t if t is None or self.dtype is None else t.to(self.dtype)

        inputs = (x_src, x_root, w_agg, w_root, bias)
        wanted = [t for t in inputs if t is not None and t.requires_grad]
        with torch.enable_grad():
            root = x_src if x_root is None else x_root
            out = (F.linear(cast(root), cast(w_root), cast(bias))
                   + F.linear(cast(self.aggregate(x_src)), cast(w_agg)))
            grads = iter(torch.autograd.grad(out, wanted, grad_out, create_graph=True,
                                             materialize_grads=True))
        return tuple(next(grads) if t is not None and t.requires_grad else None
                     for t in inputs)


def aggregate_linear(graph: Graph, reduce: str, x_src: Tensor, x_root: Optional[Tensor],
                     w_agg: Tensor, w_root: Tensor, bias: Optional[Tensor],
                     hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Optional[Tensor]:
    """Y = aggr(x_src) w_agg^T + x_root w_root^T + bias as one C++
    autograd node, aggr the graph's unweighted ``reduce`` (``"sum"``,
    ``"mean"``, ``"min"`` or ``"max"``; min / max split destinations above
    the ``hub_quantile`` degree quantile as ops.aggregate does), x_root
    None for x_src itself; None where the node does not apply (compose the
    three ops then).

    It applies where the C++ linear node takes x_root and the parameters
    (ops.bias_gradient.host_linear: 2-D CUDA, eager, one float dtype or
    autocast's), x_src is 2-D of x_root's dtype (any under autocast), and
    the C++ autograd of the aggregation takes the graph (sum / mean:
    ops.spmm.native_spmm_call with config.spmm_backward's mode; min / max:
    ops.minmax.native_minmax_operand)."""
    who = _WHO.get(reduce)
    if who is None:
        raise ValueError(f"aggregate_linear(reduce={reduce!r}): reduce must be one of "
                         f"{REDUCES}")
    root = x_src if x_root is None else x_root
    taken = host_linear(root, (w_agg, w_root) if bias is None else (w_agg, w_root, bias))
    if taken is None or x_src.dim() != 2 or (taken[1] is None and x_src.dtype != root.dtype):
        return None
    dtype = taken[1]
    checks.node_features(x_src, graph.num_src, graph.device, who)
    if root.size(0) != graph.num_dst:
        raise ValueError(f"{who}: x_root has {root.size(0)} rows, the graph "
                         f"{graph.num_dst} destinations")
    if reduce in ("min", "max"):
        native = native_minmax_operand(graph, x_src, reduce, hub_quantile)
        if native is None:
            return None
        extension, operand = native
        recompute = Recompute(lambda x: MinMaxFunction.apply(graph, x, reduce, hub_quantile),
                              dtype)
        return extension.minmax_linear(rows_readable(x_src), x_root, w_agg, w_root, bias,
                                       *operand, recompute, dtype)
    edge_values = normalized_values(graph, None, reduce, x_src.dtype)
    call = native_spmm_call(graph, edge_values, x_src, config.spmm_backward)
    if call is None:
        return None
    recompute = Recompute(
        lambda x: spmm_function(graph, edge_values, x, None, "materialized", None), dtype)
    x_src = x_src if x_src.stride(1) == 1 else x_src.contiguous()
    return call.extension.aggregate_linear(x_src, x_root, w_agg, w_root, bias,
                                           *call.operand(graph), recompute, dtype)
