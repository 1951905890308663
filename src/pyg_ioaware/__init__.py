"""pyg_ioaware: IO-aware GNN layers for PyTorch Geometric.

``from pyg_ioaware.nn import GCNConv`` (or ``SAGEConv``, ``GATv2Conv``,
``TransformerConv``) replaces the ``torch_geometric.nn`` layer of the same
name with the same outputs, computed by fused CUDA kernels on GPUs (where
the native library is built) and by plain torch on CPUs.

Public names: :mod:`nn` (layers), :mod:`ops` (functional ops),
:mod:`loader` (mini-batch sampling), :class:`Graph` and
:func:`clear_graph_cache`, :func:`cuda_available`,
:func:`native_library_path`, :mod:`config`.
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


from . import loader, nn, ops  # noqa: E402  (nn and ops import Graph from here)

__all__ = ["Graph", "clear_graph_cache", "cuda_available", "native_library_path", "nn", "ops",
           "loader", "config", "__version__"]


def __dir__():
    """Only the public names: ``dir(pyg_ioaware)`` lists ``__all__``."""
    return sorted(__all__)
