"""GCNConv: PyG's graph convolution on the SpMM family's cached kernels."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.dense.linear import Linear

from ..graph import Graph
from ..ops.functional import check_features, graph_edge_weight, propagate
from ..ops.norm import edge_values, weights_in_csr_order


class GCNConv(torch.nn.Module):
    r"""The graph convolutional operator from the `"Semi-supervised
    Classification with Graph Convolutional Networks"
    <https://arxiv.org/abs/1609.02907>`_ paper, a drop-in replacement for
    :class:`torch_geometric.nn.GCNConv` (same arguments, parameters,
    ``state_dict`` keys and outputs):

    .. math::
        \mathbf{X}^{\prime} = \mathbf{\hat{D}}^{-1/2} \mathbf{\hat{A}}
        \mathbf{\hat{D}}^{-1/2} \mathbf{X} \mathbf{\Theta} + \mathbf{b},

    where :math:`\mathbf{\hat{A}} = \mathbf{A} + \mathbf{I}` (existing self
    loops replaced by one per node; weight 2 with ``improved=True`` where
    edge weights are given) and :math:`\hat{D}_{ii} = \sum_j \hat{A}_{ji}`
    (weighted in-degree). The aggregation is one SpMM over the cached CSR
    with cached normalized values; backward is one SpMM over the cached
    CSR^T. No per-edge feature tensor is ever built.

    Args:
        in_channels (int): Size of each input sample, or -1 to infer it lazily.
        out_channels (int): Size of each output sample.
        improved (bool, optional): Self loops weigh 2 (where edge weights are
            given, as in PyG). (default: :obj:`False`)
        cached (bool, optional): Cache the normalized graph of the first call
            and reuse it for every later call (transductive learning only).
            (default: :obj:`False`)
        add_self_loops (bool, optional): Add self loops. Defaults to
            ``normalize``. (default: :obj:`None`)
        normalize (bool, optional): Apply the symmetric normalization.
            (default: :obj:`True`)
        bias (bool, optional): Learn an additive bias. (default: :obj:`True`)
        **kwargs: ``aggr="add"``, ``flow="source_to_target"`` and
            ``node_dim`` in (-2, 0) are accepted for compatibility; other
            values raise a ValueError.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edges as
          edge_index :math:`(2, |\mathcal{E}|)`, EdgeIndex, torch.sparse or
          SparseTensor adjacency (``adj_t``), or a :class:`pyg_ioaware.Graph`;
          edge weights :math:`(|\mathcal{E}|)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`
    """

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: Optional[bool] = None,
                 normalize: bool = True, bias: bool = True, **kwargs: Any):
        super().__init__()
        _check_message_passing_kwargs(self.__class__.__name__, kwargs)
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise ValueError(f"'{self.__class__.__name__}' does not support adding self-loops "
                             f"to the graph when no on-the-fly normalization is applied")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.improved = improved
        self.cached = cached
        self.add_self_loops = add_self_loops
        self.normalize = normalize
        self._cached_graph: Optional[tuple] = None
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        if bias:
            self.bias = Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Resets the weights (glorot) and bias (zeros) and clears the cache."""
        self.lin.reset_parameters()
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        self._cached_graph = None

    def forward(self, x: Tensor, edge_index: Any, edge_weight: Optional[Tensor] = None) -> Tensor:
        name = self.__class__.__name__
        if isinstance(x, (tuple, list)):
            raise ValueError(f"'{name}' received a tuple of node features as input while this "
                             f"layer does not support bipartite message passing. Please try "
                             f"other layers such as 'SAGEConv' or 'GraphConv' instead")
        graph, weight_csr = self._graph_and_weights(x, edge_index, edge_weight)
        check_features(x, graph, name)
        # X W is not bound to a name: it is freed as soon as the SpMM has read it.
        out = self._propagate(graph, weight_csr, self.lin(x))
        if self.bias is not None:
            # In place where the dtypes agree: saves one [N, F_out] buffer at peak.
            out = out.add_(self.bias) if out.dtype == self.bias.dtype else out + self.bias
        return out

    def _propagate(self, graph: Graph, weight_csr: Optional[Tensor], h: Tensor) -> Tensor:
        mode = "gcn" if self.normalize else "sum"
        values, values_t = edge_values(graph, weight_csr, mode, h.dtype)
        return propagate(graph, values, values_t, h)

    def _graph_and_weights(self, x: Tensor, edge_index: Any,
                           edge_weight: Optional[Tensor]) -> tuple:
        """The graph to aggregate over (with self loops where asked) and the
        edge weights in its CSR order (None: all ones)."""
        if self._cached_graph is not None:
            return self._cached_graph
        if not isinstance(x, Tensor):
            raise TypeError(f"'{self.__class__.__name__}': expected node features as a tensor, "
                            f"got {type(x).__name__}")
        graph = Graph.from_input(edge_index, num_nodes=x.size(0))
        edge_weight = graph_edge_weight(graph, edge_weight, self.__class__.__name__)
        if self.add_self_loops:
            graph = graph.with_remaining_self_loops()
        weight_csr = weights_in_csr_order(graph, edge_weight, 2.0 if self.improved else 1.0)
        if self.cached and self.normalize:
            self._cached_graph = (graph, weight_csr)
        return graph, weight_csr

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"


def _check_message_passing_kwargs(name: str, kwargs: dict) -> None:
    """Accepts the MessagePassing kwargs whose PyG defaults we implement."""
    supported = {"aggr": ("add",), "flow": ("source_to_target",), "node_dim": (-2, 0)}
    for key, value in kwargs.items():
        if key not in supported:
            raise ValueError(f"'{name}' does not support the argument {key}={value!r}")
        if value not in supported[key]:
            raise ValueError(f"'{name}' supports {key} in {supported[key]}, got {value!r}")
