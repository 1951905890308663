"""SAGEConv: PyG's GraphSAGE operator, its sum / mean aggregation on the
SpMM family's kernels and its min / max aggregation on the reduction
family's."""
from typing import Any, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.nn.aggr import Aggregation, MultiAggregation
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.typing import Adj, OptPairTensor, Size, SparseTensor
from torch_geometric.utils import is_sparse, is_torch_sparse_tensor, spmm

from ..graph import Graph, NumNodes, prefetch
from ..module_reads import parameter, submodule
from ..ops.aggregate import aggregate, aggregate_unweighted
from ..ops.aggregate_linear import aggregate_linear
from ..ops.bias_gradient import add_product, apply_linear, linear, plain_linear
from ..ops.hubs import DEFAULT_HUB_QUANTILE
from .fused_message_passing import FusedMessagePassing

# No __all__ here: PyG's generated propagate module star-imports this one
# for the type names above (Tensor, OptPairTensor, ...).

#: The aggregations with a fused kernel; every other one takes PyG's path.
SAGE_FUSED_AGGRS = ("mean", "sum", "add", "min", "max")


class SAGEConv(FusedMessagePassing):
    r"""The GraphSAGE operator from the `"Inductive Representation Learning on
    Large Graphs" <https://arxiv.org/abs/1706.02216>`_ paper, a drop-in
    replacement for :class:`torch_geometric.nn.SAGEConv` (same arguments,
    parameters, ``state_dict`` keys and outputs; a :class:`MessagePassing`
    subclass):

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \mathbf{W}_2 \cdot
        \mathrm{aggr}_{j \in \mathcal{N}(i)} \mathbf{x}_j

    with :math:`\mathrm{aggr}` the mean (default), sum, min or max over the
    incoming edges (0 for a node with none). If :obj:`project = True`,
    :math:`\mathbf{x}_j` is first projected via

    .. math::
        \mathbf{x}_j \leftarrow \sigma ( \mathbf{W}_3 \mathbf{x}_j +
        \mathbf{b})

    as in Eq. (3) of the paper (:math:`\sigma` = ReLU).

    **What is fused.** For ``aggr`` in ``"mean"``, ``"sum"`` / ``"add"``,
    ``"min"`` and ``"max"`` the aggregation is one kernel over the input's
    cached :class:`pyg_ioaware.Graph`: mean and sum one SpMM (backward one
    SpMM over the CSR^T), min and max the reduction family's degree-aware
    kernel (backward scatters through a saved arg code of one or two
    bytes an element, the winner's position in its row; PyG's tie rule: a
    gradient is split evenly among the tied entries). No per-edge
    feature tensor is ever built. Every edge weighs 1 (a SparseTensor's
    values are ignored, as in PyG), except that a ``torch.sparse``
    adjacency's values weigh sum and mean, as PyG's ``spmm`` does. On CUDA
    the root map, the aggregation and ``lin_l`` are one autograd node in C++
    (``ops.aggregate_linear``: their values, one node's backward, which a
    small mini-batch step's host time needs); ReLU and ``F.normalize`` are
    plain torch.

    **What takes PyG's path** (PyG's own ``forward`` and
    :meth:`MessagePassing.propagate`): every other ``aggr`` (``"lstm"``,
    ``"std"``, ``"softmax"``, lists / :class:`MultiAggregation`,
    :class:`Aggregation` instances), explain masks, propagate or message
    hooks, ``decomposed_layers > 1``, a subclass overriding ``message``,
    sparse node features, min / max over a ``torch.sparse`` adjacency (PyG
    multiplies each message by its sparse value there), a ``torch.sparse``
    layout other than COO / CSR, and TorchScript.

    Args:
        in_channels (int or tuple): Size of each input sample, or :obj:`-1` to
            derive the size from the first input(s) to the forward method.
            A tuple corresponds to the sizes of source and target
            dimensionalities.
        out_channels (int): Size of each output sample.
        aggr (str or list or Aggregation, optional): The aggregation scheme
            to use: any aggregation of :obj:`torch_geometric.nn.aggr`.
            (default: :obj:`"mean"`)
        normalize (bool, optional): If set to :obj:`True`, output features
            will be :math:`\ell_2`-normalized, *i.e.*,
            :math:`\frac{\mathbf{x}^{\prime}_i}
            {\| \mathbf{x}^{\prime}_i \|_2}`. (default: :obj:`False`)
        root_weight (bool, optional): If set to :obj:`False`, the layer will
            not add transformed root node features to the output.
            (default: :obj:`True`)
        project (bool, optional): If set to :obj:`True`, the layer will apply a
            linear transformation followed by an activation function before
            aggregation (Eq. (3) of the paper). (default: :obj:`False`)
        bias (bool, optional): If set to :obj:`False`, the layer will not learn
            an additive bias. (default: :obj:`True`)
        **kwargs (optional): :class:`MessagePassing` arguments: ``flow``
            (both directions), ``node_dim``, ``decomposed_layers``,
            ``aggr_kwargs``.

    The attribute ``hub_quantile`` (default 0.99) is passed to min / max:
    destinations whose in-degree is above this quantile are split over all
    SMs on CUDA.

    Shapes:
        - **inputs:**
          node features :math:`(|\mathcal{V}|, F_{in})` or
          :math:`((|\mathcal{V_s}|, F_{s}), (|\mathcal{V_t}|, F_{t}))`
          if bipartite (:math:`\mathcal{V_t}` features may be :obj:`None`
          with ``size`` given), or :math:`(B, |\mathcal{V}|, F_{in})` for
          a static graph; edges as edge_index :math:`(2, |\mathcal{E}|)`,
          EdgeIndex, torch.sparse or SparseTensor adjacency (``adj_t``), or
          a :class:`pyg_ioaware.Graph`
        - **outputs:** node features :math:`(|\mathcal{V}|, F_{out})` or
          :math:`(|\mathcal{V_t}|, F_{out})` if bipartite

    Dtypes:
        Node features float32, float64, float16 or bfloat16 (``torch.autocast``
        included; the aggregation accumulates in float32); edge indices
        int32 or int64.
    """
    hub_quantile = DEFAULT_HUB_QUANTILE

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        aggr: Optional[Union[str, List[str], Aggregation]] = "mean",
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        **kwargs: Any,
    ):
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.normalize = normalize
        self.root_weight = root_weight
        self.project = project

        if isinstance(in_channels, int):
            in_channels = (in_channels, in_channels)

        if aggr == "lstm":
            kwargs.setdefault("aggr_kwargs", {})
            kwargs["aggr_kwargs"].setdefault("in_channels", in_channels[0])
            kwargs["aggr_kwargs"].setdefault("out_channels", in_channels[0])

        super().__init__(aggr, fused_aggrs=SAGE_FUSED_AGGRS, pyg_path_for_other_aggrs=True,
                         **kwargs)

        if self.project:
            if in_channels[0] <= 0:
                raise ValueError(f"'{self.__class__.__name__}' does not "
                                 f"support lazy initialization with "
                                 f"`project=True`")
            self.lin = Linear(in_channels[0], in_channels[0], bias=True)

        if isinstance(self.aggr_module, MultiAggregation):
            aggr_out_channels = self.aggr_module.get_out_channels(in_channels[0])
        else:
            aggr_out_channels = in_channels[0]

        self.lin_l = Linear(aggr_out_channels, out_channels, bias=bias)
        if self.root_weight:
            self.lin_r = Linear(in_channels[1], out_channels, bias=False)

        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Resets the aggregation module and every linear map."""
        super().reset_parameters()
        if self.project:
            self.lin.reset_parameters()
        self.lin_l.reset_parameters()
        if self.root_weight:
            self.lin_r.reset_parameters()

    def forward(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Adj,
        size: Size = None,
    ) -> Tensor:
        if torch.jit.is_scripting():
            return self.pyg_forward(x, edge_index, size)
        out = self._plain_cuda_forward(x, edge_index, size)
        if out is not None:
            return out
        reason = self._pyg_path_reason(x, edge_index)
        if reason is not None:
            self.check_pyg_path_input(edge_index, reason)
            return self.pyg_forward(x, edge_index, size)
        return self.fused_forward(x, edge_index, size)

    def pyg_forward(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Adj,
        size: Size = None,
    ) -> Tensor:
        """PyG's SAGEConv.forward (MessagePassing.propagate)."""
        pair = self._messages_from(x)
        # propagate_type: (x: OptPairTensor)
        out = self.propagate(edge_index, x=pair, size=size)
        return self._combine(self.lin_l(out), self._root(pair[1]))

    @torch.jit.unused
    def fused_forward(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Adj,
        size: Size = None,
    ) -> Tensor:
        """One fused aggregation between the linear maps; same result as
        :meth:`pyg_forward`. The maps that need no graph (``lin`` with
        ``project``, the root term) are enqueued while a new graph's index
        statistics come back (``pyg_ioaware.graph.prefetch``). The root term
        carries ``lin_l``'s bias where it can (``_root_carries_bias``),
        and ``lin_l`` of the aggregation is then accumulated into it by one
        GEMM: (W_1 x_i + b) + W_2 aggr in two products and no add kernel.
        On CUDA the root term, the aggregation and ``lin_l`` are one C++
        autograd node where it applies (``ops.aggregate_linear``: the same
        values, one node's backward)."""
        self.check_flow(edge_index)
        num_nodes = self._num_nodes((x, x) if isinstance(x, Tensor) else tuple(x), edge_index,
                                    size)
        prefetch(edge_index)
        pair = self._messages_from(x)
        carries_bias = self._root_carries_bias(pair)
        out = self._aggregate_linear(pair, edge_index, num_nodes) if carries_bias else None
        if out is not None:
            return self._combine(out, None)
        return self._composed_forward(pair, edge_index, num_nodes, carries_bias)

    @torch.jit.unused
    def _composed_forward(self, pair: OptPairTensor, edge_index: Any, num_nodes: NumNodes,
                          carries_bias: bool) -> Tensor:
        """:meth:`fused_forward` where the C++ node does not take the call:
        the root term, the aggregation and ``lin_l`` as three ops (with
        ``carries_bias``, ``lin_l``'s bias in the root term and ``lin_l``
        accumulated into it)."""
        root = (linear(pair[1], self.lin_r.weight, self.lin_l.bias) if carries_bias
                else self._root(pair[1]))
        aggregated = self._aggregate(pair, edge_index, num_nodes)
        if carries_bias:
            return self._combine(add_product(root, aggregated, self.lin_l.weight), None)
        return self._combine(apply_linear(self.lin_l, aggregated), root)

    def _messages_from(self, x: Union[Tensor, OptPairTensor]) -> OptPairTensor:
        """(x_src, x_dst), x_src projected by ``lin`` and ReLU with ``project``
        (both paths; TorchScript-compatible)."""
        if isinstance(x, Tensor):
            x = (x, x)
        if self.project and hasattr(self, "lin"):
            x = (self.lin(x[0]).relu(), x[1])
        return x

    def _root(self, x_r: Optional[Tensor]) -> Optional[Tensor]:
        """The root term lin_r(x_r) (with root_weight), else None (both
        paths; TorchScript-compatible)."""
        if self.root_weight and x_r is not None:
            return self.lin_r(x_r)
        return None

    def _combine(self, out: Tensor, root: Optional[Tensor]) -> Tensor:
        """out (lin_l of the aggregation) + root (see :meth:`_root`),
        normalized with ``normalize`` (both paths; TorchScript-compatible)."""
        if root is not None:
            out = out + root
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out

    def message(self, x_j: Tensor) -> Tensor:
        return x_j

    def message_and_aggregate(self, adj_t: Adj, x: OptPairTensor) -> Tensor:
        if isinstance(adj_t, SparseTensor):
            adj_t = adj_t.set_value(None, layout=None)
        return spmm(adj_t, x[0], reduce=self.aggr)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, "
                f"{self.out_channels}, aggr={self.aggr})")

    # ------------------------------------------------------------- internals
    @torch.jit.unused
    def _plain_cuda_forward(self, x: Any, edge_index: Any, size: Size) -> Optional[Tensor]:
        """:meth:`fused_forward` of the most common call, decided in a few
        checks (a small mini-batch step is bound by host time): one 2-D
        strided CUDA feature tensor, a plain edge_index tensor, no ``size``,
        and a layer whose fused path is the C++ node of
        ``ops.aggregate_linear`` (root term, no projection, the default
        flow and node_dim, plain linear maps, nothing that needs PyG's
        path). For such a call :meth:`forward`'s own checks reach the same
        node with the same arguments (the graph of ``x.size(0)`` nodes), or
        the same three ops where the node does not apply; None for every
        other call."""
        if not (size is None and type(x) is Tensor and type(edge_index) is Tensor
                and x.is_cuda and x.dim() == 2 and x.layout == torch.strided
                and edge_index.layout == torch.strided and self.root_weight
                and not self.project and self.flow == "source_to_target"
                and self.node_dim in (0, -2) and self.pyg_path_reason() is None):
            return None
        if not (plain_linear(submodule(self, "lin_l")) and plain_linear(submodule(self, "lin_r"))):
            return None
        num_nodes = x.size(0)
        prefetch(edge_index)
        out = self._node(self._graph(edge_index, num_nodes), x, x)
        if out is None:
            return self._composed_forward((x, x), edge_index, num_nodes, True)
        return self._combine(out, None)

    @torch.jit.unused
    def _root_carries_bias(self, pair: OptPairTensor) -> bool:
        """Whether the fused path folds ``lin_l``'s bias into the root term
        and accumulates ``lin_l`` into it: a root term, 2-D features, and
        both maps computable from their parameters (no hooks, not lazy)."""
        x_j, x_r = pair
        return (self.root_weight and x_r is not None and x_j is not None and x_r.dim() == 2
                and x_j.dim() == 2 and plain_linear(self.lin_l) and plain_linear(self.lin_r))

    @torch.jit.unused
    def _pyg_path_reason(self, x: Any, edge_index: Any) -> Optional[str]:
        """pyg_path_reason plus what this call's inputs need (checked first)."""
        if isinstance(x, (tuple, list)):
            if len(x) != 2:
                raise ValueError(f"'{self.__class__.__name__}' expected node features as a "
                                 f"tensor or a (x_src, x_dst) pair, got a {type(x).__name__} "
                                 f"of {len(x)}")
            pair = tuple(x)
        elif isinstance(x, (Tensor, SparseTensor)):
            pair = (x, None)
        else:
            raise TypeError(f"'{self.__class__.__name__}' expected node features as a tensor "
                            f"or a (x_src, x_dst) pair, got {type(x).__name__}")
        reason = self.pyg_path_reason()
        if reason is not None:
            return reason
        if any(t is not None and is_sparse(t) for t in pair):
            return "sparse node features"
        if is_torch_sparse_tensor(edge_index):
            if edge_index.layout not in (torch.sparse_coo, torch.sparse_csr):
                return f"a {edge_index.layout} adjacency"
            if self.aggr in ("min", "max"):
                return (f"aggr={self.aggr!r} over a torch.sparse adjacency (PyG multiplies "
                        f"each message by its sparse value)")
        return None

    @torch.jit.unused
    def _aggregate_linear(self, pair: OptPairTensor, edge_index: Any,
                          num_nodes: NumNodes) -> Optional[Tensor]:
        """lin_r(x_r) + lin_l(aggr x_j) as one C++ autograd node
        (``ops.aggregate_linear``), or None where it does not apply: 2-D CUDA
        features along dim 0, every edge weighing 1 (no ``torch.sparse``
        adjacency), and what that function asks."""
        x_j, x_r = pair
        if (x_j is None or not x_j.is_cuda or x_j.dim() != 2 or self.fused_node_dim(x_j) != 0
                or is_torch_sparse_tensor(edge_index)):
            return None
        return self._node(self._graph(edge_index, num_nodes), x_j, x_r)

    @torch.jit.unused
    def _node(self, graph: Graph, x_j: Tensor, x_r: Tensor) -> Optional[Tensor]:
        """``ops.aggregate_linear`` over ``graph`` with this layer's maps (x_r
        None for x_j itself), or None where the node does not apply."""
        lin_l = submodule(self, "lin_l")
        return aggregate_linear(graph, self._reduce(), x_j, None if x_r is x_j else x_r,
                                parameter(lin_l, "weight"),
                                parameter(submodule(self, "lin_r"), "weight"),
                                parameter(lin_l, "bias"), self.hub_quantile)

    @torch.jit.unused
    def _reduce(self) -> str:
        """The fused aggregation's reduce: ``aggr``, with ``"add"`` as ``"sum"``."""
        return "sum" if self.aggr == "add" else self.aggr

    @torch.jit.unused
    def _graph(self, edge_index: Any, num_nodes: NumNodes) -> Graph:
        """The Graph the messages flow over: edge_index's, reversed for
        ``flow="target_to_source"``."""
        graph = Graph.from_input(edge_index, num_nodes)
        return graph.reversed() if self.flow == "target_to_source" else graph

    @torch.jit.unused
    def _aggregate(self, x: Tuple[Tensor, Optional[Tensor]], edge_index: Any,
                   num_nodes: NumNodes) -> Tensor:
        """What PyG's ``propagate`` gives here, fused: the messages x_j come
        from x[0] (in both flows, as PyG's generated ``collect`` reads them),
        aggregated along ``node_dim`` over the graph of ``num_nodes``
        (:meth:`_num_nodes`)."""
        x_j = x[0]
        if x_j is None:
            raise ValueError(f"'{self.__class__.__name__}' sends messages from x[0], which "
                             f"is None")
        node_dim = self.fused_node_dim(x_j)
        graph = self._graph(edge_index, num_nodes)
        src = x_j if node_dim == 0 else x_j.movedim(node_dim, 0)
        flat = src if src.dim() == 2 else src.reshape(src.size(0), -1)
        if is_torch_sparse_tensor(edge_index):  # its values weigh sum and mean, as in PyG
            out = aggregate(flat, graph, self._reduce(), size=(graph.num_src, graph.num_dst))
        else:
            out = aggregate_unweighted(graph, flat, self._reduce(), self.hub_quantile)
        if src.dim() != 2:
            out = out.view(out.size(0), *src.shape[1:])
        return out if node_dim == 0 else out.movedim(0, node_dim)

    @torch.jit.unused
    def _num_nodes(self, x: Tuple[Optional[Tensor], Optional[Tensor]], edge_index: Any,
                   size: Size) -> NumNodes:
        """The node counts of edge_index's two rows as PyG's ``propagate``
        finds them: from the adjacency (EdgeIndex, sparse, Graph; ``size``
        is then ignored, as in PyG), else ``size``, else the features'
        rows; a missing count is the other one (a square graph)."""
        if isinstance(edge_index, Graph):
            counts = [edge_index.num_src, edge_index.num_dst]
        elif isinstance(edge_index, EdgeIndex):
            counts = [edge_index.num_rows, edge_index.num_cols]
        elif is_sparse(edge_index):
            counts = [edge_index.size(1), edge_index.size(0)]
        elif size is None:
            counts = [None, None]
        else:
            if len(size) != 2:
                raise ValueError(f"'{self.__class__.__name__}' expected size=(num_src, "
                                 f"num_dst), got {size}")
            counts = [None if s is None else int(s) for s in size]
        for k, t in enumerate(x):
            if t is None:
                continue
            rows = t.size(self.node_dim)
            if counts[k] is None:
                counts[k] = rows
            elif counts[k] != rows:
                raise ValueError(f"'{self.__class__.__name__}': x[{k}] has {rows} nodes in "
                                 f"dimension {self.node_dim}, but the graph (size or "
                                 f"adjacency) has {counts[k]}")
        num_src = counts[0] if counts[0] is not None else counts[1]
        num_dst = counts[1] if counts[1] is not None else counts[0]
        return num_src if num_src == num_dst else (num_src, num_dst)
