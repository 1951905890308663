"""What the attention layers (GATv2Conv, TransformerConv) share about their
inputs and outputs: which inputs take PyG's path, the shape edge_attr must
have, per-edge tensors moved between the input's edge order and the Graph's
CSR order (the order the attention ops read and write per-edge tensors in),
and the dtype PyG's softmax leaves its messages in."""
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.utils import is_sparse

from ..graph import Graph

__all__ = ["attention_pyg_path_reason", "check_edge_attr", "in_csr_order", "in_input_order",
           "input_edge_index", "pyg_message_dtype"]


def attention_pyg_path_reason(layer: Any, x: Any, edge_index: Any,
                              edge_attr: Any) -> Optional[str]:
    """``layer.pyg_path_reason()`` plus what every attention layer's inputs
    need PyG's path for: TorchScript, a sparse adjacency, ``flow=
    "target_to_source"``, ``edge_attr`` without ``edge_dim`` (PyG adds it
    unprojected) and a bipartite input without destination features."""
    reason = layer.pyg_path_reason()
    if reason is not None:
        return reason
    if torch.jit.is_scripting():
        return "TorchScript"
    if is_sparse(edge_index):
        return "a sparse adjacency"
    if layer.flow != "source_to_target":
        return f"flow={layer.flow!r}"
    if edge_attr is not None and layer.lin_edge is None:
        return "edge_attr without edge_dim"
    if not isinstance(x, Tensor) and (len(x) != 2 or x[1] is None):
        return "bipartite input without destination features"
    return None


def check_edge_attr(layer: Any, edge_attr: Any, num_edges: int, flat: bool = False) -> Tensor:
    """``edge_attr`` as given where it is a tensor of shape [num_edges,
    layer.edge_dim] (or, with ``flat`` and edge_dim 1, [num_edges], which
    PyG's GATv2Conv views as one column); else a ValueError saying what is
    wrong. Checked on the host before anything gathers edge_attr by edge
    position: an index past its rows would stop the GPU."""
    expected = (num_edges, layer.edge_dim)
    shape = tuple(edge_attr.shape) if isinstance(edge_attr, Tensor) else None
    if shape == expected or (flat and layer.edge_dim == 1 and shape == (num_edges,)):
        return edge_attr
    got = ("None" if edge_attr is None else
           f"shape {shape}" if shape is not None else type(edge_attr).__name__)
    also = f" (or [{num_edges}])" if flat and layer.edge_dim == 1 else ""
    raise ValueError(f"'{layer.__class__.__name__}' with edge_dim={layer.edge_dim} expected "
                     f"edge_attr of shape [num_edges, edge_dim] = {list(expected)}{also}, "
                     f"got {got}")


def in_csr_order(values: Tensor, graph: Graph) -> Tensor:
    """``values`` [E, ...], one row per input edge of ``graph``, in its CSR
    order."""
    return values if graph.edge_perm is None else values.index_select(
        0, graph.edge_perm.long())


def in_input_order(values: Tensor, graph: Graph) -> Tensor:
    """``values`` [E, ...] in ``graph``'s CSR order, back in its input edge
    order (the inverse of :func:`in_csr_order`)."""
    if graph.edge_perm is None:
        return values
    return torch.empty_like(values).index_copy_(0, graph.edge_perm.long(), values)


def input_edge_index(graph: Graph) -> Tensor:
    """The int64 edge_index ``graph`` was built from (its input edge order)."""
    return in_input_order(torch.stack([graph.col, graph.row], dim=1).long(), graph).t()


def pyg_message_dtype(features: Tensor, *score_operands: Tensor) -> torch.dtype:
    """The dtype PyG's attention layer leaves its attention weights and
    aggregated messages in, for projected ``features``: its scores take the
    promoted dtype of the features and ``score_operands`` (GATv2's fp32
    ``att`` makes them fp32 under autocast), its softmax runs in float32
    under CUDA autocast (exp autocasts to float32 there, not on CPU), and
    the messages take the weights' dtype."""
    dtype = features.dtype
    for operand in score_operands:
        dtype = torch.promote_types(dtype, operand.dtype)
    if features.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        dtype = torch.promote_types(dtype, torch.float32)
    return dtype
