"""GCNConv: PyG's graph convolution on the SpMM family's cached kernels."""
import weakref
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import zeros
from torch_geometric.typing import Adj, OptPairTensor, OptTensor, SparseTensor
from torch_geometric.utils import spmm

from .. import config
from ..graph import Graph, prefetch
from ..module_reads import parameter, submodule
from ..ops import spmm_functional
from ..ops.bias_gradient import apply_linear, linear, plain_linear
from ..ops.spmm_functional import SpmmAdjacency, gcn_adjacency
from .fused_message_passing import FusedMessagePassing

# No __all__ here: PyG's generated propagate module star-imports this one
# for the type names above (Tensor, OptTensor, ...).


class GCNConv(FusedMessagePassing):
    r"""The graph convolutional operator from the `"Semi-supervised
    Classification with Graph Convolutional Networks"
    <https://arxiv.org/abs/1609.02907>`_ paper, a drop-in replacement for
    :class:`torch_geometric.nn.GCNConv` (same arguments, parameters,
    ``state_dict`` keys and outputs; a :class:`MessagePassing` subclass):

    .. math::
        \mathbf{X}^{\prime} = \mathbf{\hat{D}}^{-1/2} \mathbf{\hat{A}}
        \mathbf{\hat{D}}^{-1/2} \mathbf{X} \mathbf{\Theta} + \mathbf{b},

    where :math:`\mathbf{\hat{A}} = \mathbf{A} + \mathbf{I}` (existing self
    loops replaced by one per node; weight 2 with ``improved=True`` where
    edge weights are given) and :math:`\hat{D}_{ii} = \sum_j \hat{A}_{ji}`
    (weighted in-degree). The aggregation is one SpMM over the cached CSR
    with cached normalized values; backward is one SpMM over the cached
    CSR^T. Features that need no gradient (a first layer's) and are no
    wider than the output are aggregated before the projection,
    :math:`(\mathbf{\hat{D}}^{-1/2} \mathbf{\hat{A}} \mathbf{\hat{D}}^{-1/2}
    \mathbf{X}) \mathbf{\Theta}`, the same product, whose backward needs
    no SpMM (float32 / float64 outside autocast). No per-edge feature tensor
    is ever built.

    Where something needs PyG's per-edge messages (explain masks, propagate
    or message hooks, ``decomposed_layers > 1``, a subclass overriding
    ``message``, SparseTensor features, TorchScript) the layer runs PyG's
    own code instead: ``gcn_norm`` and :meth:`MessagePassing.propagate`.

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
        **kwargs: :class:`MessagePassing` arguments: ``flow`` (both
            directions), ``node_dim``, ``decomposed_layers``; ``aggr`` must
            stay ``"add"`` (or ``"sum"``), else a ValueError.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, or
          :math:`(B, |\mathcal{V}|, F_{in})` for a static graph, edges as
          edge_index :math:`(2, |\mathcal{E}|)`, EdgeIndex, torch.sparse or
          SparseTensor adjacency (``adj_t``), or a :class:`pyg_ioaware.Graph`;
          edge weights :math:`(|\mathcal{E}|)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})` (or
          :math:`(B, |\mathcal{V}|, F_{out})`)

    Dtypes:
        Node features float32, float64, float16 or bfloat16; under
        ``torch.autocast`` the projection runs in the autocast dtype and, as
        in PyG (whose normalized edge weights keep the input's dtype), the
        aggregation reads it with float32 weights and writes float32;
        accumulation in float32 (float64 for float64); edge weights any
        floating dtype; edge indices int32 or int64.
    """
    _cached_edge_index: Optional[OptPairTensor]
    _cached_adj_t: Optional[SparseTensor]

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: Optional[bool] = None,
                 normalize: bool = True, bias: bool = True, **kwargs: Any):
        kwargs.setdefault("aggr", "add")
        super().__init__(**kwargs)
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
        # PyG's caches, one per input kind (SparseTensor or any other):
        # PyG's normalized (edge_index, edge_weight) or adj_t where PyG's
        # path filled or last used it, else a _CachedGraph; _cached_graphs
        # keeps a _CachedGraph aside while its slot holds PyG's form.
        self._cached_edge_index = None
        self._cached_adj_t = None
        self._cached_graphs = {}  # slot -> _CachedGraph (no annotation: TorchScript)
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        if bias:
            self.bias = Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Resets the weights (glorot) and bias (zeros) and clears the caches."""
        super().reset_parameters()
        self.lin.reset_parameters()
        zeros(self.bias)
        self._cached_edge_index = None
        self._cached_adj_t = None
        self._cached_graphs = {}

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        if isinstance(x, (tuple, list)):
            raise ValueError(f"'{self.__class__.__name__}' received a tuple of node features "
                             f"as input while this layer does not support bipartite message "
                             f"passing. Please try other layers such as 'SAGEConv' or "
                             f"'GraphConv' instead")
        if torch.jit.is_scripting():
            return self.pyg_forward(x, edge_index, edge_weight)
        out = self._plain_cuda_forward(x, edge_index, edge_weight)
        if out is not None:
            return out
        reason = self._pyg_path_reason(x)
        if reason is not None:
            self.check_pyg_path_input(edge_index, reason)
            self._caches_to_pyg()
            return self.pyg_forward(x, edge_index, edge_weight)
        return self.fused_forward(x, edge_index, edge_weight)

    def pyg_forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        """PyG's GCNConv.forward: gcn_norm, then MessagePassing.propagate."""
        if self.normalize:
            if isinstance(edge_index, Tensor):
                cache = self._cached_edge_index
                if cache is None:
                    edge_index, edge_weight = gcn_norm(  # yapf: disable
                        edge_index, edge_weight, x.size(self.node_dim),
                        self.improved, self.add_self_loops, self.flow, x.dtype)
                    if self.cached:
                        self._cached_edge_index = (edge_index, edge_weight)
                else:
                    edge_index, edge_weight = cache[0], cache[1]

            elif isinstance(edge_index, SparseTensor):
                cache = self._cached_adj_t
                if cache is None:
                    edge_index = gcn_norm(  # yapf: disable
                        edge_index, edge_weight, x.size(self.node_dim),
                        self.improved, self.add_self_loops, self.flow, x.dtype)
                    if self.cached:
                        self._cached_adj_t = edge_index
                else:
                    edge_index = cache

        x = self.lin(x)

        # propagate_type: (x: Tensor, edge_weight: OptTensor)
        out = self.propagate(edge_index, x=x, edge_weight=edge_weight)

        if self.bias is not None:
            out = out + self.bias

        return out

    @torch.jit.unused
    def fused_forward(self, x: Tensor, edge_index: Adj,
                      edge_weight: OptTensor = None) -> Tensor:
        """One SpMM over the (cached) normalized graph; same result as
        :meth:`pyg_forward`. X W, which needs no graph, is enqueued while a
        new graph's index statistics come back
        (``pyg_ioaware.graph.prefetch``); features that need no gradient (a
        first layer's) are aggregated first (``_aggregates_first``). A call
        like the layer's last one over the same edge_index runs what that
        one resolved (``_ResolvedForward``)."""
        if edge_weight is None and not torch.compiler.is_compiling():
            out = self._resolved_forward(x, edge_index)
            if out is not None:
                return out
        node_dim = self.fused_node_dim(x)
        self.check_flow(edge_index)
        if self._aggregates_first(x, edge_weight, node_dim):
            adjacency = self._adjacency(edge_index, edge_weight, x, node_dim)
            aggregated = adjacency.propagate(x, ones_dtype=x.dtype if self.normalize else None)
            return linear(aggregated, self.lin.weight, self.bias)
        if self._cached_edge_index is None:  # no graph kept from an earlier call
            prefetch(edge_index)
        projected = apply_linear(self.lin, x)
        adjacency = self._adjacency(edge_index, edge_weight, x, node_dim)
        # PyG's gcn_norm makes its all-ones weights in x's dtype: under
        # autocast float32 weights over 16-bit X W, so float32 messages and
        # output (one SpMM reading X W as it is). The bias is added inside
        # the aggregation where its dtype is the messages'.
        calls = []
        out = adjacency.propagate(projected, node_dim=node_dim, bias=self.bias,
                                  ones_dtype=x.dtype if self.normalize else None,
                                  record=calls.append)
        if calls and edge_weight is None and node_dim == 0 and not self.cached:
            _ResolvedForward.keep(self, x, edge_index, adjacency.graph, calls[0])
        return out

    @torch.jit.unused
    def _plain_cuda_forward(self, x: Any, edge_index: Any,
                            edge_weight: Optional[Tensor]) -> Optional[Tensor]:
        """:meth:`fused_forward` of the most common call, decided in a few
        checks (a small mini-batch step is bound by host time): one 2-D
        strided CUDA feature tensor, a plain edge_index tensor on its
        device, no edge weights, and a layer that normalizes each call's
        graph itself (``normalize``, not ``cached``, the default flow and
        node_dim, a plain ``lin``, nothing that needs PyG's path). It runs
        the calls :meth:`fused_forward` makes for such a call (the layer's
        resolved forward where it holds; else the first layer's
        aggregation before its projection, or X W, the graph with its GCN
        values and one SpMM with the bias), without the general checks,
        the adjacency object and the propagation's layout handling; None
        for every other call."""
        if not (edge_weight is None and type(x) is Tensor and type(edge_index) is Tensor
                and x.is_cuda and x.dim() == 2 and x.layout == torch.strided
                and edge_index.layout == torch.strided and x.device == edge_index.device
                and self.normalize and not self.cached and self.flow == "source_to_target"
                and self.node_dim in (0, -2) and self.pyg_path_reason() is None
                and plain_linear(submodule(self, "lin")) and not torch.compiler.is_compiling()):
            return None
        out = self._resolved_forward(x, edge_index)
        if out is not None:
            return out
        num_nodes = x.size(0)
        lin, bias = submodule(self, "lin"), parameter(self, "bias")
        weight = parameter(lin, "weight")
        if self._aggregates_first(x, None, 0):
            aggregated = spmm_functional.propagate(self._plain_graph(edge_index, num_nodes),
                                                   None, "gcn", x)
            return linear(aggregated, weight, bias)
        prefetch(edge_index)
        projected = linear(x, weight, parameter(lin, "bias"))
        graph = self._plain_graph(edge_index, num_nodes)
        # Ones in x's dtype over X W: float32 messages over 16-bit X W (as above).
        calls = []
        out = spmm_functional.propagate(graph, None, "gcn", projected, bias,
                                        torch.promote_types(x.dtype, projected.dtype),
                                        calls.append)
        if calls:
            _ResolvedForward.keep(self, x, edge_index, graph, calls[0])
        return out

    def message(self, x_j: Tensor, edge_weight: OptTensor) -> Tensor:
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Adj, x: Tensor) -> Tensor:
        return spmm(adj_t, x, reduce=self.aggr)

    # ------------------------------------------------------------- internals
    @torch.jit.unused
    def _resolved_forward(self, x: Tensor, edge_index: Any) -> Optional[Tensor]:
        """The layer's last resolved forward run again, where it holds
        (``_ResolvedForward``); else None. For calls without edge weights,
        in eager mode."""
        resolved = _RESOLVED_FORWARDS.get(self)
        return None if resolved is None else resolved.run(self, x, edge_index)

    @torch.jit.unused
    def _plain_graph(self, edge_index: Tensor, num_nodes: int) -> Graph:
        """What :func:`gcn_adjacency` propagates over for a plain edge_index
        without weights and the default flow: its Graph (with the self-loop
        graph and its GCN values, built with it where new), with self loops
        where the layer adds them."""
        graph = Graph.from_input(edge_index, num_nodes, with_self_loops=self.add_self_loops,
                                 gcn_values=True)
        return graph.with_remaining_self_loops() if self.add_self_loops else graph

    @torch.jit.unused
    def _pyg_path_reason(self, x: Tensor) -> Optional[str]:
        reason = self.pyg_path_reason()
        # torch.sparse features take the fused path: only self.lin reads x,
        # the same call on both paths. A SparseTensor takes PyG's.
        if reason is None and isinstance(x, SparseTensor):
            reason = "SparseTensor node features"
        return reason

    @torch.jit.unused
    def _aggregates_first(self, x: Tensor, edge_weight: Optional[Tensor], node_dim: int) -> bool:
        """Whether this call computes (A_norm X) W + b instead of PyG's A_norm
        (X W) + b (the same product): where X needs no gradient (a first
        layer's raw features), the backward then needs no A^T at all, only
        the GEMM dW = (A_norm X)^T dY, and a new graph's first backward no
        transposed SpMM. Taken for 2-D float32 / float64 features no wider
        than the output (the SpMM no wider than PyG's), edge weights that need
        no gradient, outside autocast (where PyG's X W is 16-bit and its output
        float32) and where ``lin`` is called by no hook."""
        lin = submodule(self, "lin")
        return (plain_linear(lin) and node_dim == 0 and x.dim() == 2
                and x.layout == torch.strided and x.dtype in (torch.float32, torch.float64)
                and not x.requires_grad and x.size(1) <= parameter(lin, "weight").size(0)
                and (edge_weight is None or not edge_weight.requires_grad)
                and not torch.is_autocast_enabled(x.device.type))

    @torch.jit.unused
    def _adjacency(self, edge_index: Any, edge_weight: Optional[Tensor],
                   x: Tensor, node_dim: int) -> SpmmAdjacency:
        """The graph to propagate over: the cached one (filled by the first
        call where ``cached`` and ``normalize``), else built now."""
        num_nodes = x.size(node_dim)
        slot = "_cached_adj_t" if isinstance(edge_index, SparseTensor) else "_cached_edge_index"
        cache = getattr(self, slot) if self.normalize else None
        if cache is None:
            adjacency = gcn_adjacency(edge_index, num_nodes, edge_weight,
                                      add_self_loops=self.add_self_loops,
                                      improved=self.improved, normalize=self.normalize,
                                      flow=self.flow)
            if self.cached and self.normalize:
                source = (edge_index, edge_weight, num_nodes, x.dtype)
                setattr(self, slot, _CachedGraph(adjacency, source=source))
            return adjacency
        if not isinstance(cache, _CachedGraph):  # PyG's form: PyG's path ran last
            held = self._cached_graphs.pop(slot, None)
            if held is None or held.pyg is not cache:
                held = _CachedGraph.from_pyg(self, cache, num_nodes)
            cache = held
            setattr(self, slot, cache)
        return cache.adjacency

    @torch.jit.unused
    def _caches_to_pyg(self) -> None:
        """Before PyG's path: a cache the fused path filled is put in PyG's
        form (gcn_norm of the first call's input, as PyG would have cached
        it); the fused form is kept aside for the next fused call."""
        for slot in ("_cached_edge_index", "_cached_adj_t"):
            cache = getattr(self, slot)
            if isinstance(cache, _CachedGraph):
                setattr(self, slot, cache.pyg_form(self))
                self._cached_graphs[slot] = cache

    def __prepare_scriptable__(self) -> "GCNConv":
        self._caches_to_pyg()  # TorchScript sees PyG's cache types
        return self

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"


class _CachedGraph:
    """The normalized graph a cached GCNConv keeps from its first call, as
    the fused path's :class:`SpmmAdjacency`, with what PyG's path needs to
    rebuild PyG's own form from the same call (``source``: edge_index,
    edge_weight, num_nodes) or that form itself (``pyg``)."""

    def __init__(self, adjacency: SpmmAdjacency, source: Optional[tuple] = None,
                 pyg: Any = None):
        self.adjacency = adjacency
        self.source = source
        self.pyg = pyg

    @classmethod
    def from_pyg(cls, conv: GCNConv, pyg: Any, num_nodes: int) -> "_CachedGraph":
        """From PyG's cached form: a normalized (edge_index, edge_weight) or
        a normalized sparse adj_t (values are the weights)."""
        adj, weight = (pyg, None) if isinstance(pyg, SparseTensor) else pyg
        adjacency = gcn_adjacency(adj, num_nodes, weight, add_self_loops=False,
                                  normalize=False, flow=conv.flow)
        return cls(adjacency, pyg=pyg)

    def pyg_form(self, conv: GCNConv) -> Any:
        """What PyG's path would have cached: gcn_norm of the first call."""
        if self.pyg is None:
            adj, weight, num_nodes, dtype = self.source
            if isinstance(adj, Graph):
                raise TypeError(f"'{conv.__class__.__name__}' cached a pyg_ioaware.Graph, which "
                                f"PyG's per-edge path cannot use; call reset_parameters() or "
                                f"build the layer with cached=False")
            self.pyg = gcn_norm(adj, weight, num_nodes, conv.improved, conv.add_self_loops,
                                conv.flow, dtype)
        return self.pyg


class _ResolvedForward:
    """What a fused forward of one GCNConv resolved for an edge_index: X W by
    ``F.linear``, then one C++ SpMM call (ops.spmm.NativeSpmmCall) over the
    normalized graph. A later call runs the two directly where the layer,
    its inputs and the global settings are as they were (:meth:`signature`,
    the edge_index's identity and version, the graph's CSR^T, which the
    call holds where the graph had one): the same result for a small
    graph's forward without its host time. Held per layer in
    ``_RESOLVED_FORWARDS``, outside the module (which stays picklable); it
    holds the edge_index and the graph weakly and goes when the graph does,
    with the structure its call holds."""

    __slots__ = ("edge_index", "version", "graph", "signature_", "call")

    def __init__(self, conv: GCNConv, edge_index: Tensor, graph: Graph, signature: tuple,
                 call: Any):
        conv_ref, forwards = weakref.ref(conv), _RESOLVED_FORWARDS  # no global at teardown

        def forget(graph_ref: weakref.ref) -> None:
            layer = conv_ref()
            entry = None if layer is None else forwards.get(layer)
            if entry is not None and entry.graph is graph_ref:
                del forwards[layer]

        self.edge_index = weakref.ref(edge_index)
        self.version = edge_index._version
        self.graph = weakref.ref(graph, forget)
        self.signature_ = signature
        self.call = call

    @classmethod
    def keep(cls, conv: GCNConv, x: Tensor, edge_index: Any, graph: Graph, call: Any) -> None:
        """Keeps a fused forward's resolution for the layer's next calls,
        where it may replay (a plain edge_index tensor, eager mode)."""
        signature = cls.signature(conv, x)
        if type(edge_index) is Tensor and signature is not None:
            _RESOLVED_FORWARDS[conv] = cls(conv, edge_index, graph, signature, call)

    @staticmethod
    def signature(conv: GCNConv, x: Tensor) -> Optional[tuple]:
        """Everything besides the graph that the fused forward's choices
        depend on (PyG's path excluded by the caller), or None where no
        resolution may be kept or replayed."""
        lin = submodule(conv, "lin")
        if (torch.compiler.is_compiling() or type(x) is not Tensor or not x.is_cuda
                or not plain_linear(lin) or parameter(lin, "bias") is not None):
            return None
        weight, bias = parameter(lin, "weight"), parameter(conv, "bias")
        return (x.dtype, x.device, x.shape, x.layout, x.requires_grad,
                weight.dtype, weight.device, weight.shape, weight.requires_grad,
                None if bias is None else (bias.dtype, bias.device, bias.shape,
                                           bias.requires_grad),
                conv.node_dim, conv.flow, conv.add_self_loops, conv.improved, conv.normalize,
                conv.cached, torch.is_grad_enabled(), torch.is_autocast_enabled("cuda"),
                torch.get_autocast_dtype("cuda"), torch.are_deterministic_algorithms_enabled(),
                config.spmm_backward, config.native_host)

    def run(self, conv: GCNConv, x: Tensor, edge_index: Any) -> Optional[Tensor]:
        """The forward, where this resolution still holds; else None."""
        graph = self.graph()
        if (self.edge_index() is not edge_index or edge_index._version != self.version
                or graph is None
                or (graph.state.transpose is not None) != (self.call.transpose is not None)
                or self.signature(conv, x) != self.signature_):
            return None
        return self.call(graph, F.linear(x, parameter(submodule(conv, "lin"), "weight")),
                         parameter(conv, "bias"))


# GCNConv -> its _ResolvedForward (weak keys: a layer's entry goes with it).
_RESOLVED_FORWARDS: "weakref.WeakKeyDictionary[GCNConv, _ResolvedForward]" = (
    weakref.WeakKeyDictionary())
