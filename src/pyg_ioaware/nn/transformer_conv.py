"""TransformerConv: PyG's graph transformer operator with its attention
fused into one pass per destination (the attention family's kernels)."""
import typing
from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn import TransformerConv as PygTransformerConv
from torch_geometric.typing import (Adj, NoneType, OptTensor, PairTensor,  # noqa: F401
                                    SparseTensor)

from ..graph import Graph, prefetch
from ..ops.bias_gradient import fusable, fused_linear
from ..ops.dropout import new_seed
from ..ops.hubs import DEFAULT_HUB_QUANTILE
from ..ops.transformer import (graph_transformer, graph_transformer_packed,
                               transformer_weights_trusted)
from .attention_inputs import (attention_pyg_path_reason, check_edge_attr, in_csr_order,
                               in_input_order, input_edge_index, pyg_message_dtype)
from .fused_message_passing import FusedMessagePassing

if typing.TYPE_CHECKING:
    from typing import overload
else:
    from torch.jit import _overload_method as overload

# No __all__ here: PyG's generated propagate module star-imports this one
# for the type names above (Tensor, OptTensor, PairTensor, ...).


class TransformerConv(FusedMessagePassing, PygTransformerConv):
    r"""The graph transformer operator from the `"Masked Label Prediction:
    Unified Message Passing Model for Semi-Supervised Classification"
    <https://arxiv.org/abs/2009.03509>`_ paper, a drop-in replacement for
    :class:`torch_geometric.nn.TransformerConv` (same arguments, parameters,
    ``state_dict`` keys and outputs; a :class:`MessagePassing` subclass):

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i +
        \sum_{j \in \mathcal{N}(i)} \alpha_{i,j} \left(\mathbf{W}_2
        \mathbf{x}_{j} + \mathbf{W}_6 \mathbf{e}_{ij}\right),
        \qquad
        \alpha_{i,j} = \mathrm{softmax}_j \left(
        \frac{(\mathbf{W}_3\mathbf{x}_i)^{\top} (\mathbf{W}_4\mathbf{x}_j +
        \mathbf{W}_6 \mathbf{e}_{ij})} {\sqrt{d}} \right)

    per head (d = ``out_channels``), heads concatenated or averaged; with
    ``beta`` the skip is gated, :math:`\mathbf{x}^{\prime}_i = \beta_i
    \mathbf{W}_1 \mathbf{x}_i + (1 - \beta_i) \mathbf{m}_i` with
    :math:`\beta_i = \textrm{sigmoid}(\mathbf{w}_5^{\top} [\mathbf{W}_1
    \mathbf{x}_i, \mathbf{m}_i, \mathbf{W}_1 \mathbf{x}_i - \mathbf{m}_i])`
    and :math:`\mathbf{m}_i` the attention output.

    **What is fused.** For one node tensor ``x`` the query, key and value
    maps are one matrix product (their weights concatenated, [N, 3 * heads
    * channels]), and q, k, v are strided views of it, read in place; for a
    bipartite ``(x_src, x_dst)`` key and value are one product of
    ``x_src``. The scores, the softmax over each destination's incoming
    edges, attention dropout and the weighted sum are one kernel pass per
    destination (:func:`pyg_ioaware.ops.transformer.graph_transformer`): no
    [E, heads, channels] or [E, heads] tensor is written, only the per-node
    log-sum-exp is kept for backward, which recomputes the scores. Dropout
    masks come from a counter-based generator seeded from torch's and are
    regenerated in backward. The linear maps are plain torch (16-bit under
    autocast). With ``edge_dim`` the projected edge features [E, heads *
    channels] are one tensor (lin_edge's output, in the graph's CSR order);
    ``return_attention_weights`` computes the weights [E, heads] on request
    from the saved log-sum-exp, in the input's edge order (they carry no
    gradient). The skip (``root_weight``, ``beta``) is PyG's code.

    **What takes PyG's path** (PyG's own forward code): explain masks,
    propagate / edge hooks, ``decomposed_layers > 1``, an ``aggr`` other
    than ``"add"``, a subclass overriding ``message`` and friends,
    SparseTensor and torch.sparse adjacencies, ``flow="target_to_source"``,
    ``edge_attr`` without ``edge_dim``, a bipartite input without
    destination features, lazy ``in_channels=-1`` before the first call,
    and TorchScript.

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
        beta (bool, optional): Gate the root weight with a learned
            :math:`\beta_i` (PyG's gated residual). (default: ``False``)
        dropout (float, optional): Dropout probability of the attention
            coefficients (training only). (default: ``0.0``)
        edge_dim (int, optional): Edge feature dimensionality; the
            projected edge features are added to keys and values.
            (default: ``None``)
        bias (bool, optional): Learn an additive bias in the skip
            projection. (default: ``True``)
        root_weight (bool, optional): Add the transformed root node
            features :math:`\mathbf{W}_1 \mathbf{x}_i`. (default: ``True``)
        **kwargs: :class:`MessagePassing` arguments.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` or
          :math:`((|\mathcal{V}_s|, F_s), (|\mathcal{V}_t|, F_t))`, edge
          indices :math:`(2, |\mathcal{E}|)` (or EdgeIndex, a
          :class:`pyg_ioaware.Graph`), edge features
          :math:`(|\mathcal{E}|, D)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}_t|, H * F_{out})`
          (:math:`(|\mathcal{V}_t|, F_{out})` without ``concat``), or
          with ``return_attention_weights=True`` also the edge indices
          :math:`(2, |\mathcal{E}|)` and the coefficients
          :math:`(|\mathcal{E}|, H)`

    Dtypes:
        Node and edge features float32, float64, float16 or bfloat16
        (``torch.autocast`` included; the kernels accumulate in float32 and
        keep the log-sum-exp in float32); edge indices int32 or int64.
    """
    _alpha: OptTensor  # PyG's, restated: TorchScript reads the scripted class's annotations
    hub_quantile = DEFAULT_HUB_QUANTILE

    def __init__(self, *args: Any, **kwargs: Any):
        PygTransformerConv.__init__(self, *args, **kwargs)
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
            reason = self._pyg_path_reason(x, edge_index, edge_attr)
            if reason is None:
                return self.fused_forward(x, edge_index, edge_attr, return_attention_weights)
            self.check_pyg_path_input(edge_index, reason)

        # PyG's path: PyG's forward (TorchScript compiles only this; PyG's
        # class cannot be called from a scripted method), its output
        # combination shared with the fused path.
        H, C = self.heads, self.out_channels

        if isinstance(x, Tensor):
            x = (x, x)

        query = self.lin_query(x[1]).view(-1, H, C)
        key = self.lin_key(x[0]).view(-1, H, C)
        value = self.lin_value(x[0]).view(-1, H, C)

        # propagate_type: (query: Tensor, key:Tensor, value: Tensor,
        #                  edge_attr: OptTensor)
        out = self.propagate(edge_index, query=query, key=key, value=value,
                             edge_attr=edge_attr)

        alpha = self._alpha
        self._alpha = None

        out = self.combine(out, x[1])

        if isinstance(return_attention_weights, bool):
            assert alpha is not None
            if isinstance(edge_index, Tensor):
                return out, (edge_index, alpha)
            elif isinstance(edge_index, SparseTensor):
                return out, edge_index.set_value(alpha, layout='coo')
        else:
            return out

    @torch.jit.unused
    def fused_forward(self, x: Union[Tensor, PairTensor], edge_index: Any,
                      edge_attr: OptTensor = None,
                      return_attention_weights: Optional[bool] = None) -> Any:
        """The fused attention between PyG's linear maps; same result as
        PyG's forward."""
        heads, channels = self.heads, self.out_channels
        x_src, x_dst = self._node_features(x)
        # A new graph's one read of the GPU starts before the projections and
        # is waited for after them: the GPU runs them while the host builds.
        prefetch(edge_index)
        packed, q, k, v = self._projections(x, x_src, x_dst)
        graph = Graph.from_input(edge_index, (x_src.size(0), x_dst.size(0)))

        edge = None
        if self.lin_edge is not None:
            edge = self.lin_edge(in_csr_order(check_edge_attr(self, edge_attr, graph.num_edges),
                                              graph))
            edge = edge.view(-1, heads, channels)
        dropout = self.dropout if self.training else 0.0
        seed = new_seed() if dropout > 0 else 0
        scale = channels ** -0.5
        if packed is not None:
            out, lse = graph_transformer_packed(graph, packed, q, edge, scale, dropout, seed,
                                                self.hub_quantile)
        else:
            out, lse = graph_transformer(graph, q, k, v, edge, scale, dropout, seed,
                                         self.hub_quantile)
        dtype = pyg_message_dtype(out)
        out = out.to(dtype)

        out = self.combine(out, x_dst)
        if not isinstance(return_attention_weights, bool):
            return out
        if packed is not None:  # q and k as the weights read them
            slots = packed.detach().unbind(1)
            q, k = (slots[0] if q is None else q), slots[-2]
        alpha = transformer_weights_trusted(graph.rowptr, graph.col, q.detach(), k.detach(),
                                            None if edge is None else edge.detach(), lse,
                                            scale).to(dtype)
        if isinstance(edge_index, Graph):
            edge_index = input_edge_index(graph)
        return out, (edge_index, in_input_order(alpha, graph))

    def combine(self, out: Tensor, x_dst: Tensor) -> Tensor:
        """PyG's output from the attention's [N_dst, heads, channels]: heads
        concatenated or averaged, then the skip (root_weight, with beta
        gated). Both paths (and TorchScript) run it."""
        if self.concat:
            out = out.reshape(out.size(0), self.heads * self.out_channels)
        else:
            out = out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        return out

    # ------------------------------------------------------------- internals
    @torch.jit.unused
    def _pyg_path_reason(self, x: Any, edge_index: Any, edge_attr: Any) -> Optional[str]:
        """attention_pyg_path_reason plus lazy parameters (PyG's linears
        of in_channels=-1 initialize their weight on their first call; every
        step asks, so only those weights are looked at, not every
        parameter)."""
        reason = attention_pyg_path_reason(self, x, edge_index, edge_attr)
        if reason is None and any(isinstance(lin.weight, UninitializedParameter)
                                  for lin in (self.lin_key, self.lin_query, self.lin_value,
                                              self.lin_edge, self.lin_skip)
                                  if lin is not None):
            return "lazy in_channels=-1 before the first call"
        return reason

    @torch.jit.unused
    def _node_features(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(x_src, x_dst), each a 2-D tensor as wide as its linear maps take."""
        pair = (x, x) if isinstance(x, Tensor) else tuple(x)
        for t, lin, what in ((pair[0], self.lin_key, "source"),
                             (pair[1], self.lin_query, "destination")):
            if not isinstance(t, Tensor) or t.dim() != 2 or t.size(1) != lin.in_channels:
                got = (f"shape {tuple(t.shape)}" if isinstance(t, Tensor)
                       else type(t).__name__)
                raise ValueError(f"'{self.__class__.__name__}' expected {what} node features "
                                 f"of shape [num_nodes, {lin.in_channels}] (in_channels="
                                 f"{self.in_channels}), got {got}")
        return pair

    @torch.jit.unused
    def _projections(self, x: Any, x_src: Tensor,
                     x_dst: Tensor) -> Tuple[OptTensor, OptTensor, OptTensor, OptTensor]:
        """(packed, q, k, v), each [nodes, heads, channels]: the maps that
        read one node tensor as one matrix product, ``packed`` [N, slots,
        heads, channels] (query, key and value of ``x``; key and value of
        ``x_src`` with q its own product for a bipartite input), and None for
        what it holds; where a map needs its module call (hooks, see
        ops.bias_gradient.plain_linear) every map is called, packed None."""
        heads, channels = self.heads, self.out_channels
        square = isinstance(x, Tensor)
        lins = ((self.lin_query, self.lin_key, self.lin_value) if square
                else (self.lin_key, self.lin_value))
        if fusable(lins):
            packed = fused_linear(x_src, lins).view(x_src.size(0), len(lins), heads, channels)
            q = None if square else self.lin_query(x_dst).view(-1, heads, channels)
            return packed, q, None, None
        q = self.lin_query(x_dst).view(-1, heads, channels)
        k = self.lin_key(x_src).view(-1, heads, channels)
        return None, q, k, self.lin_value(x_src).view(-1, heads, channels)
