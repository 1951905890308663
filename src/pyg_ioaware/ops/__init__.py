"""Ops of pyg_ioaware: custom torch.library ops and their functional API."""
from .functional import aggregate, propagate, spmm
from .norm import edge_values, weights_in_csr_order
from .spmm import SpmmFunction, sddmm, spmm_forward
from .spmm import spmm as spmm_op

__all__ = ["aggregate", "spmm", "propagate", "spmm_op", "spmm_forward", "SpmmFunction", "sddmm",
           "edge_values", "weights_in_csr_order"]
