"""pyg_ioaware: IO-aware GNN layers for PyTorch Geometric.

``from pyg_ioaware.nn import GCNConv`` replaces ``torch_geometric.nn.GCNConv``
with the same outputs, computed by SpMM kernels of our own or cuSPARSE's
(chosen per problem shape) on GPUs and by torch on CPUs.
"""
from typing import Optional

import torch

from . import _native, config
from .graph import Graph, clear_graph_cache

__version__ = "0.1.0"


def native_library_path() -> Optional[str]:
    """Path of the loaded native CUDA library, or None where it is absent."""
    return _native.library_path() if _native.library() is not None else None


def cuda_available() -> bool:
    """True when the native library is loaded and a CUDA GPU is visible, so
    CUDA tensors run the native kernels; False means every op runs its
    plain-torch implementation."""
    return _native.library() is not None and torch.cuda.is_available()


from . import nn, ops  # noqa: E402  (nn and ops import Graph from here)

__all__ = ["Graph", "clear_graph_cache", "cuda_available", "native_library_path", "nn", "ops",
           "config", "__version__"]
