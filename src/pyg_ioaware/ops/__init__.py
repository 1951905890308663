"""Ops of pyg_ioaware: custom torch.library ops, their autograd, and the
family functions layers call.

:func:`aggregate`: sum / mean / min / max over incoming edges, any
adjacency. SpMM family: :func:`gcn_adjacency` / :class:`SpmmAdjacency`
(GCN's normalized propagation), :func:`normalized_values`, and the raw
checked ops :func:`spmm_csr` (``torch.ops.pyg_ioaware.spmm``) and
:func:`sddmm_csr` (``torch.ops.pyg_ioaware.sddmm``). Reduction family:
:func:`neighbor_minmax` (``torch.ops.pyg_ioaware.neighbor_minmax``) and
:func:`neighbor_minmax_backward`.
"""
from . import tuning
from .aggregate import aggregate
from .minmax import neighbor_minmax, neighbor_minmax_backward
from .normalize import EdgeValues, normalized_values, weights_in_csr_order
from .spmm import sddmm_csr, spmm_csr
from .spmm_functional import SpmmAdjacency, gcn_adjacency

# torch.library custom ops document the function they wrap.
for _op in (spmm_csr, sddmm_csr, neighbor_minmax, neighbor_minmax_backward):
    _op.__doc__ = _op._init_fn.__doc__
del _op

__all__ = ["aggregate", "gcn_adjacency", "SpmmAdjacency", "normalized_values", "EdgeValues",
           "weights_in_csr_order", "spmm_csr", "sddmm_csr", "neighbor_minmax",
           "neighbor_minmax_backward", "tuning"]
