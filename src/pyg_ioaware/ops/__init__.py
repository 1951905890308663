"""Ops of pyg_ioaware: custom torch.library ops, their autograd, and the
family functions layers call.

SpMM family: :func:`aggregate` (sum/mean over incoming edges),
:func:`gcn_adjacency` / :class:`SpmmAdjacency` (GCN's normalized
propagation), :func:`normalized_values`, and the raw checked ops
:func:`spmm_csr` (``torch.ops.pyg_ioaware.spmm``) and :func:`sddmm_csr`
(``torch.ops.pyg_ioaware.sddmm``).
"""
from . import tuning
from .normalize import EdgeValues, normalized_values, weights_in_csr_order
from .spmm import sddmm_csr, spmm_csr
from .spmm_functional import SpmmAdjacency, aggregate, gcn_adjacency

__all__ = ["aggregate", "gcn_adjacency", "SpmmAdjacency", "normalized_values", "EdgeValues",
           "weights_in_csr_order", "spmm_csr", "sddmm_csr", "tuning"]
