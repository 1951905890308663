"""GATv2Conv: PyG's GATv2 operator with its attention fused into one pass
per destination (the attention family's kernels)."""
import typing
from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.nn import GATv2Conv as PygGATv2Conv
from torch_geometric.typing import (Adj, NoneType, OptTensor, PairTensor,  # noqa: F401
                                    SparseTensor, torch_sparse)
from torch_geometric.utils import add_self_loops, is_torch_sparse_tensor, remove_self_loops
from torch_geometric.utils.sparse import set_sparse_value

from ..graph import Graph, prefetch
from ..ops.attention import graph_gatv2, graph_gatv2_packed, gatv2_weights_trusted
from ..ops.bias_gradient import add_bias, apply_linear, fusable, fused_linear
from ..ops.dropout import new_seed
from ..ops.hubs import DEFAULT_HUB_QUANTILE
from .attention_inputs import (attention_pyg_path_reason, check_edge_attr, in_csr_order,
                               in_input_order, input_edge_index, pyg_message_dtype)
from .fused_message_passing import FusedMessagePassing

if typing.TYPE_CHECKING:
    from typing import overload
else:
    from torch.jit import _overload_method as overload

# No __all__ here: PyG's generated propagate module star-imports this one
# for the type names above (Tensor, OptTensor, PairTensor, ...).


class GATv2Conv(FusedMessagePassing, PygGATv2Conv):
    r"""The GATv2 operator from the `"How Attentive are Graph Attention
    Networks?" <https://arxiv.org/abs/2105.14491>`_ paper, a drop-in
    replacement for :class:`torch_geometric.nn.GATv2Conv` (same arguments,
    parameters, ``state_dict`` keys and outputs; a :class:`MessagePassing`
    subclass):

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in \mathcal{N}(i) \cup \{ i \}}
        \alpha_{i,j}\mathbf{\Theta}_{s}\mathbf{x}_{j},
        \qquad
        \alpha_{i,j} = \mathrm{softmax}_j\left(\mathbf{a}^{\top}
        \mathrm{LeakyReLU}\left(\mathbf{\Theta}_{s} \mathbf{x}_j +
        \mathbf{\Theta}_{t} \mathbf{x}_{i} + \mathbf{\Theta}_{e}
        \mathbf{e}_{j,i}\right)\right)

    per head, concatenated or averaged, plus the residual and the bias.

    **What is fused.** The scores, the softmax over each destination's
    incoming edges, attention dropout and the weighted sum are one kernel
    pass per destination (:func:`pyg_ioaware.ops.attention.graph_gatv2`):
    no [E, heads, channels] or [E, heads] tensor is written, only the
    per-node log-sum-exp is kept for backward, which recomputes the scores;
    dropout masks come from a counter-based generator seeded from torch's
    and are regenerated in backward. Self loops (PyG's remove-then-add, one
    per node below min(num_src, num_dst)) are built once per graph and
    cached with it. The linear maps are plain torch (16-bit under
    autocast); for one node tensor ``lin_l`` and ``lin_r`` are one matrix
    product ([N, 2 * heads * channels], read in place by the kernels, its
    gradient written by them as one tensor). The bias is added in the
    kernels' output pass where no cast and no residual come first (else
    after, with the cast to PyG's dtype inside the add under autocast).
    With ``edge_dim`` the projected edge features [E, heads * channels] are
    one tensor (lin_edge's output); ``return_attention_weights`` computes
    the weights [E, heads] on request from the saved log-sum-exp (they
    carry no gradient).

    **What takes PyG's path** (PyG's own ``forward``): explain masks,
    propagate / edge-update hooks, ``decomposed_layers > 1``, a subclass
    overriding ``message`` or ``edge_update``, SparseTensor and torch.sparse
    adjacencies, ``flow="target_to_source"``, ``edge_attr`` without
    ``edge_dim``, a bipartite input without destination features,
    EdgeIndex with ``return_attention_weights``, and TorchScript.

    The class attribute ``hub_quantile`` (default 0.99): destinations with
    in-degree above that quantile (and above 256) are split over all SMs
    on CUDA.

    Args:
        in_channels (int or tuple): Size of each input sample, -1 to infer
            it lazily, or a (source, destination) pair for bipartite graphs.
        out_channels (int): Size of each output sample per head.
        heads (int, optional): Number of attention heads. (default: ``1``)
        concat (bool, optional): Concatenate the heads' outputs
            (``heads * out_channels``) rather than averaging them.
            (default: ``True``)
        negative_slope (float, optional): LeakyReLU slope. (default: ``0.2``)
        dropout (float, optional): Dropout probability of the attention
            coefficients (training only). (default: ``0.0``)
        add_self_loops (bool, optional): Add self loops (PyG's
            remove-then-add). (default: ``True``)
        edge_dim (int, optional): Edge feature dimensionality.
            (default: ``None``)
        fill_value (float, Tensor or str, optional): Edge features of the
            added self loops (``"mean"``, ``"add"``, ... as PyG).
            (default: ``"mean"``)
        bias (bool, optional): Learn an additive bias. (default: ``True``)
        share_weights (bool, optional): One weight matrix for sources and
            destinations. (default: ``False``)
        residual (bool, optional): Add a residual connection.
            (default: ``False``)
        **kwargs: :class:`MessagePassing` arguments.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` or
          :math:`((|\mathcal{V}_s|, F_s), (|\mathcal{V}_t|, F_t))`, edge
          indices :math:`(2, |\mathcal{E}|)` (or EdgeIndex, a
          :class:`pyg_ioaware.Graph`), edge features
          :math:`(|\mathcal{E}|, D)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}_t|, H * F_{out})`
          (:math:`(|\mathcal{V}_t|, F_{out})` without ``concat``), or
          with ``return_attention_weights=True`` also the edge indices with
          self loops :math:`(2, |\mathcal{E}|)` and the coefficients
          :math:`(|\mathcal{E}|, H)`

    Dtypes:
        Node and edge features float32, float64, float16 or bfloat16
        (``torch.autocast`` included; the kernels accumulate in float32 and
        keep the log-sum-exp in float32); edge indices int32 or int64.
    """
    hub_quantile = DEFAULT_HUB_QUANTILE

    def __init__(self, *args: Any, **kwargs: Any):
        PygGATv2Conv.__init__(self, *args, **kwargs)
        self._aggr_reason = self.aggr_reason(self.aggr, ("add", "sum"))

    @overload
    def forward(
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        return_attention_weights: NoneType = None,
    ) -> Tensor:
        pass

    @overload
    def forward(  # noqa: F811
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Tensor,
        edge_attr: OptTensor = None,
        return_attention_weights: bool = None,
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        pass

    @overload
    def forward(  # noqa: F811
        self,
        x: Union[Tensor, PairTensor],
        edge_index: SparseTensor,
        edge_attr: OptTensor = None,
        return_attention_weights: bool = None,
    ) -> Tuple[Tensor, SparseTensor]:
        pass

    def forward(  # noqa: F811
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Union[
            Tensor,
            Tuple[Tensor, Tuple[Tensor, Tensor]],
            Tuple[Tensor, SparseTensor],
    ]:
        if not torch.jit.is_scripting():
            reason = self._pyg_path_reason(x, edge_index, edge_attr, return_attention_weights)
            if reason is None:
                return self.fused_forward(x, edge_index, edge_attr, return_attention_weights)
            self.check_pyg_path_input(edge_index, reason)

        # PyG's path: PyG's forward, verbatim (TorchScript compiles only
        # this; PyG's class cannot be called from a scripted method).
        H, C = self.heads, self.out_channels

        res: Optional[Tensor] = None

        x_l: OptTensor = None
        x_r: OptTensor = None
        if isinstance(x, Tensor):
            assert x.dim() == 2

            if self.res is not None:
                res = self.res(x)

            x_l = self.lin_l(x).view(-1, H, C)
            if self.share_weights:
                x_r = x_l
            else:
                x_r = self.lin_r(x).view(-1, H, C)
        else:
            x_l, x_r = x[0], x[1]
            assert x[0].dim() == 2

            if x_r is not None and self.res is not None:
                res = self.res(x_r)

            x_l = self.lin_l(x_l).view(-1, H, C)
            if x_r is not None:
                x_r = self.lin_r(x_r).view(-1, H, C)

        assert x_l is not None
        assert x_r is not None

        if self.add_self_loops:
            if isinstance(edge_index, Tensor):
                num_nodes = x_l.size(0)
                if x_r is not None:
                    num_nodes = min(num_nodes, x_r.size(0))
                edge_index, edge_attr = remove_self_loops(
                    edge_index, edge_attr)
                edge_index, edge_attr = add_self_loops(
                    edge_index, edge_attr, fill_value=self.fill_value,
                    num_nodes=num_nodes)
            elif isinstance(edge_index, SparseTensor):
                if self.edge_dim is None:
                    edge_index = torch_sparse.set_diag(edge_index)
                else:
                    raise NotImplementedError(
                        "The usage of 'edge_attr' and 'add_self_loops' "
                        "simultaneously is currently not yet supported for "
                        "'edge_index' in a 'SparseTensor' form")

        # edge_updater_type: (x: PairTensor, edge_attr: OptTensor)
        alpha = self.edge_updater(edge_index, x=(x_l, x_r),
                                  edge_attr=edge_attr)

        # propagate_type: (x: PairTensor, alpha: Tensor)
        out = self.propagate(edge_index, x=(x_l, x_r), alpha=alpha)

        if self.concat:
            out = out.view(-1, self.heads * self.out_channels)
        else:
            out = out.mean(dim=1)

        if res is not None:
            out = out + res

        if self.bias is not None:
            out = out + self.bias

        if return_attention_weights:
            if isinstance(edge_index, Tensor):
                if is_torch_sparse_tensor(edge_index):
                    # TODO TorchScript requires to return a tuple
                    adj = set_sparse_value(edge_index, alpha)
                    return out, (adj, alpha)
                else:
                    return out, (edge_index, alpha)
            elif isinstance(edge_index, SparseTensor):
                return out, edge_index.set_value(alpha, layout='coo')

        return out

    @torch.jit.unused
    def fused_forward(self, x: Union[Tensor, PairTensor], edge_index: Any,
                      edge_attr: OptTensor = None,
                      return_attention_weights: Optional[bool] = None) -> Any:
        """The fused attention between PyG's linear maps; same result as
        PyG's ``forward``."""
        heads, channels = self.heads, self.out_channels
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        assert x_src.dim() == 2 and x_dst.dim() == 2  # as PyG's forward
        num_src, num_dst = x_src.size(0), x_dst.size(0)
        # A new graph's one read of the GPU starts before the projections and
        # is waited for after them: the GPU runs them while the host builds.
        prefetch(edge_index)
        res = self.res(x_dst) if self.res is not None else None
        x_lr = None  # x_l and x_r as the slots of one product (square, two maps)
        if isinstance(x, Tensor) and not self.share_weights and fusable((self.lin_l,
                                                                         self.lin_r)):
            x_lr = fused_linear(x, (self.lin_l, self.lin_r)).view(-1, 2, heads, channels)
            x_l = x_r = None  # its slots, taken only for attention weights
        else:
            x_l = apply_linear(self.lin_l, x_src).view(-1, heads, channels)
            x_r = x_l if self.share_weights and isinstance(x, Tensor) else \
                apply_linear(self.lin_r, x_dst).view(-1, heads, channels)
        graph, pyg_edge_index, kept = self._attention_graph(edge_index, num_src, num_dst)

        edge = None
        if edge_attr is not None:
            num_edges = (edge_index.num_edges if isinstance(edge_index, Graph)
                         else edge_index.size(1))  # the input's, checked by the graph's build
            check_edge_attr(self, edge_attr, num_edges, flat=True)
            edge = self.lin_edge(self._edge_attr_in_csr_order(edge_attr, graph, pyg_edge_index,
                                                              kept, num_src, num_dst))
            edge = edge.view(-1, heads, channels)
        dropout = self.dropout if self.training else 0.0
        seed = new_seed() if dropout > 0 else 0
        # [1, H, C] -> [H, C] as a view (indexing's backward would fill and copy).
        att = self.att.squeeze(0)
        projected = x_l if x_lr is None else x_lr
        dtype = pyg_message_dtype(projected, att)
        out_bias = self._folded_bias(projected.dtype == dtype and res is None)
        if x_lr is not None:
            out, lse = graph_gatv2_packed(graph, x_lr, att, edge, self.negative_slope, dropout,
                                          seed, self.hub_quantile, out_bias)
        else:
            out, lse = graph_gatv2(graph, x_l, x_r, att, edge, self.negative_slope, dropout,
                                   seed, self.hub_quantile, out_bias)
        bias = self.bias if out_bias is None else None  # still to add
        # Heads concatenated with a bias still to add and no residual: the
        # add promotes the kernels' (16-bit) output to PyG's dtype itself,
        # one pass instead of a cast and an add, the same values.
        if out.dtype != dtype and not (self.concat and res is None and bias is not None
                                       and torch.promote_types(out.dtype, bias.dtype) == dtype):
            out = out.to(dtype)

        out = out.reshape(-1, heads * channels) if self.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        if bias is not None:
            out = add_bias(out, bias)
        if not return_attention_weights:
            return out
        if x_lr is not None:
            x_l, x_r = x_lr.unbind(1)
        alpha = gatv2_weights_trusted(graph.rowptr, graph.col, x_l.detach(), x_r.detach(),
                                      att.detach(), None if edge is None else edge.detach(), lse,
                                      self.negative_slope).to(dtype)
        return out, (pyg_edge_index, in_input_order(alpha, graph))

    # ------------------------------------------------------------- internals
    @torch.jit.unused
    def _folded_bias(self, foldable: bool) -> Optional[Tensor]:
        """The bias as the attention op's out_bias [heads, channels] (added
        in the kernels' output pass: no add of its own), where ``foldable``
        (the output needs no cast and no residual comes before the bias);
        repeated over the heads without ``concat`` (the mean of out_h + b is
        the mean plus b). None: the bias is added after, as PyG does."""
        if self.bias is None or not foldable:
            return None
        heads, channels = self.heads, self.out_channels
        return (self.bias.view(heads, channels) if self.concat
                else self.bias.expand(heads, channels))

    @torch.jit.unused
    def _pyg_path_reason(self, x: Any, edge_index: Any, edge_attr: Any,
                         return_attention_weights: Any) -> Optional[str]:
        """attention_pyg_path_reason plus what this call's inputs need."""
        reason = attention_pyg_path_reason(self, x, edge_index, edge_attr)
        if reason is None and return_attention_weights and isinstance(edge_index, EdgeIndex):
            return "EdgeIndex with return_attention_weights"
        return reason

    @torch.jit.unused
    def _attention_graph(self, edge_index: Any, num_src: int,
                         num_dst: int) -> Tuple[Graph, Tensor, Optional[Tensor]]:
        """(the graph the attention runs on, its edge_index in PyG's order,
        the input edges it keeps or None for all). With add_self_loops:
        input self loops removed, one loop per node below min(num_src,
        num_dst) appended (PyG's order), built once per input graph
        (Graph.with_pyg_self_loops: the input's own CSR is never built)."""
        if not self.add_self_loops:
            graph = Graph.from_input(edge_index, (num_src, num_dst))
            return graph, input_edge_index(graph) if isinstance(edge_index, Graph) \
                else edge_index, None
        if not isinstance(edge_index, Graph):
            return Graph.with_pyg_self_loops(edge_index, (num_src, num_dst))
        Graph.from_input(edge_index, (num_src, num_dst))  # checks the node counts
        num_loops = min(num_src, num_dst)
        cached = edge_index.state.attention_graphs.get(num_loops)
        if cached is None:
            cached = Graph.with_pyg_self_loops(input_edge_index(edge_index), (num_src, num_dst))
            edge_index.state.attention_graphs[num_loops] = cached
        return cached

    @torch.jit.unused
    def _edge_attr_in_csr_order(self, edge_attr: Tensor, graph: Graph, pyg_edge_index: Tensor,
                                kept: Optional[Tensor], num_src: int, num_dst: int) -> Tensor:
        """edge_attr with PyG's self-loop fill, in the graph's CSR order."""
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.view(-1, 1)
        if kept is not None:
            num_kept = kept.numel()
            _, edge_attr = add_self_loops(pyg_edge_index[:, :num_kept],
                                          edge_attr.index_select(0, kept),
                                          fill_value=self.fill_value,
                                          num_nodes=min(num_src, num_dst))
        return in_csr_order(edge_attr, graph)
