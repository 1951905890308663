"""The base of every pyg_ioaware layer: a PyG ``MessagePassing`` with a
fused path beside PyG's own.

A layer here is a :class:`torch_geometric.nn.MessagePassing` subclass, so
everything in PyG that looks for one (``to_hetero``, the explainers,
``get_embeddings``, the propagate/message hooks, ``decomposed_layers``,
TorchScript) finds it. Its ``forward`` has two paths:

- the **fused path** (:meth:`FusedMessagePassing.fused_forward`): one call
  to a family function of :mod:`pyg_ioaware.ops`; no per-edge tensor exists,
  so nothing per-edge can be observed or changed;
- **PyG's path**: PyG's own ``forward`` code, ending in
  :meth:`MessagePassing.propagate` with the layer's ``message`` /
  ``aggregate`` / ``message_and_aggregate``. It gives PyG's result, hooks and
  masks included.

:meth:`FusedMessagePassing.pyg_path_reason` decides, per call: PyG's path
runs where something needs PyG's per-edge messages (explain masks,
propagate-level hooks, ``decomposed_layers > 1``, a subclass overriding
``message`` and friends, TorchScript) or where the layer's ``aggr`` has no
fused kernel (layers that opt in with ``pyg_path_for_other_aggrs``);
otherwise the fused one does.

A layer uses it like this (GCNConv is the worked example)::

    class SAGEConv(FusedMessagePassing):
        def __init__(self, in_channels, out_channels, aggr="mean", ..., **kwargs):
            super().__init__(aggr=aggr, fused_aggrs=("mean", "sum", "add", "max", "min"),
                             pyg_path_for_other_aggrs=True, **kwargs)
            ...  # PyG's __init__, unchanged

        def forward(self, x, edge_index, size=None):
            if torch.jit.is_scripting():
                return self.pyg_forward(x, edge_index, size)
            reason = self.pyg_path_reason()  # plus any input-dependent reason
            if reason is not None:
                self.check_pyg_path_input(edge_index, reason)
                return self.pyg_forward(x, edge_index, size)
            return self.fused_forward(x, edge_index, size)

        def pyg_forward(self, x, edge_index, size=None):
            ...  # PyG's forward, verbatim (it calls self.propagate)

        @torch.jit.unused
        def fused_forward(self, x, edge_index, size=None):
            self.check_flow(edge_index)
            ...  # the family function, along self.fused_node_dim(x)

        def message(self, x_j): ...  # PyG's message etc., verbatim

``fused_forward`` must be marked ``@torch.jit.unused`` (TorchScript then
compiles only PyG's path, and never the family function); the class that
defines ``fused_forward`` vouches that it computes what its ``message`` /
``aggregate`` / ``update`` describe. PyG's generated ``propagate`` parses
the layer's source for the ``# propagate_type: (...)`` comment and
star-imports the layer's module for the names in it, so keep both as in
PyG's file (no ``__all__`` restricting the type names, no
``from __future__ import annotations``: TorchScript reads the annotations).
"""
from typing import Any, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import is_sparse

from ..graph import Graph

#: MessagePassing methods the fused path stands in for. A subclass that
#: overrides one of them (below the class defining ``fused_forward``) gets
#: PyG's path, so its override is honoured.
PER_EDGE_METHODS: Tuple[str, ...] = ("message", "aggregate", "message_and_aggregate",
                                     "update", "edge_update")

#: MessagePassing's hook dictionaries. Each hook sees (and may change)
#: PyG's per-edge inputs or outputs, which only PyG's path has.
PROPAGATE_HOOKS: Tuple[str, ...] = (
    "_propagate_forward_pre_hooks", "_propagate_forward_hooks",
    "_message_forward_pre_hooks", "_message_forward_hooks",
    "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks",
    "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks",
)


class FusedMessagePassing(MessagePassing):
    """A :class:`~torch_geometric.nn.MessagePassing` whose ``forward`` runs a
    fused kernel unless something needs PyG's per-edge path (see the module
    docstring for how a layer is written on it).

    Args:
        aggr (str, list or Aggregation, optional): PyG's aggregation; one of
            ``fused_aggrs``, or (with ``pyg_path_for_other_aggrs``) anything
            PyG takes. (default: :obj:`"add"`)
        fused_aggrs (sequence of str, optional): The aggregations the
            layer's fused path implements. (default: :obj:`("add", "sum")`)
        pyg_path_for_other_aggrs (bool, optional): If :obj:`True`, an
            ``aggr`` outside ``fused_aggrs`` (``"lstm"``, a list, an
            :class:`~torch_geometric.nn.aggr.Aggregation`, ...) is accepted
            and every call takes PyG's path (:meth:`pyg_path_reason` says
            so); else it is a ValueError. (default: :obj:`False`)
        **kwargs: The other :class:`MessagePassing` arguments (``flow``,
            ``node_dim``, ``decomposed_layers``, ``aggr_kwargs``), passed on.
    """

    #: Overrides of PER_EDGE_METHODS below the class defining fused_forward.
    _per_edge_overrides: Tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "fused_forward" in cls.__dict__:
            cls._per_edge_overrides = ()
        else:
            cls._per_edge_overrides = cls._per_edge_overrides + tuple(
                name for name in PER_EDGE_METHODS if name in cls.__dict__)

    def __init__(self, aggr: Any = "add", *, fused_aggrs: Sequence[str] = ("add", "sum"),
                 pyg_path_for_other_aggrs: bool = False, **kwargs: Any):
        fused = isinstance(aggr, str) and aggr in fused_aggrs
        if not fused and not pyg_path_for_other_aggrs:
            raise ValueError(f"'{self.__class__.__name__}' supports aggr in "
                             f"{tuple(fused_aggrs)}, got {aggr!r}")
        super().__init__(aggr=aggr, **kwargs)
        # Why every call takes PyG's path (None: the aggregation is fused).
        self._aggr_reason: Optional[str] = self.aggr_reason(self.aggr, fused_aggrs)

    @staticmethod
    def aggr_reason(aggr: Any, fused_aggrs: Sequence[str]) -> Optional[str]:
        """Why every call with MessagePassing's ``aggr`` must take PyG's
        path, or None where it is one of ``fused_aggrs`` (for layers whose
        PyG ``__init__`` sets ``aggr`` itself)."""
        fused = isinstance(aggr, str) and aggr in fused_aggrs
        return None if fused else f"aggr={aggr!r} has no fused kernel"

    # ------------------------------------------------------------ the choice
    @torch.jit.unused
    def pyg_path_reason(self) -> Optional[str]:
        """Why this call must take PyG's per-edge path, or None where the
        fused path gives the same result. Inputs are judged separately by
        each layer (a sparse feature matrix, say)."""
        if self._aggr_reason is not None:
            return self._aggr_reason
        if self.explain:
            return "explain masks (explain=True)"
        if self.decomposed_layers > 1:
            return f"decomposed_layers={self.decomposed_layers}"
        if self._per_edge_overrides:
            return f"{self.__class__.__name__} overrides {', '.join(self._per_edge_overrides)}"
        for name in PROPAGATE_HOOKS:
            if getattr(self, name):
                return f"hooks registered in {name}"
        return None

    # --------------------------------------------------------- input helpers
    @torch.jit.unused
    def fused_node_dim(self, x: Tensor) -> int:
        """The node dimension of ``x`` (``node_dim`` made non-negative, as
        PyG's ``x.size(self.node_dim)`` reads it): 0 for [N, F], 1 for a
        static graph's [B, N, F] with the default ``node_dim=-2``."""
        if not isinstance(x, Tensor):
            raise TypeError(f"'{self.__class__.__name__}' expected node features as a tensor, "
                            f"got {type(x).__name__}")
        dim = self.node_dim + x.dim() if self.node_dim < 0 else self.node_dim
        if not 0 <= dim < x.dim() - 1:
            raise ValueError(f"'{self.__class__.__name__}' propagates along node_dim="
                             f"{self.node_dim}, which for node features of shape "
                             f"{tuple(x.shape)} must name a dimension before the last "
                             f"(feature) one")
        return dim

    @torch.jit.unused
    def check_flow(self, edge_index: Any) -> None:
        """PyG's error for ``flow="target_to_source"`` with a sparse adjacency
        (which is already the transposed ``adj_t``)."""
        if self.flow == "target_to_source" and is_sparse(edge_index):
            raise ValueError(f"'{self.__class__.__name__}': flow direction "
                             f"\"target_to_source\" is invalid for message propagation via "
                             f"'torch_sparse.SparseTensor' or 'torch.sparse.Tensor'. Pass "
                             f"the transposed sparse tensor instead, e.g., 'adj_t.t()'")

    @torch.jit.unused
    def check_pyg_path_input(self, edge_index: Any, reason: str) -> None:
        """PyG's path takes what PyG takes: a pyg_ioaware Graph has lost the
        input's edge order that per-edge masks and hooks refer to."""
        if isinstance(edge_index, Graph):
            raise TypeError(f"'{self.__class__.__name__}' needs PyG's per-edge path here "
                            f"({reason}), which takes edge_index, EdgeIndex, a torch.sparse "
                            f"tensor or a SparseTensor, not a pyg_ioaware.Graph")

    @torch.jit.unused
    def fused_forward(self, *args: Any, **kwargs: Any) -> Any:
        """The layer's fused path (``@torch.jit.unused`` in every layer)."""
        raise NotImplementedError
