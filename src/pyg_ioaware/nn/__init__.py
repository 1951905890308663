"""PyG-compatible layers: swap ``torch_geometric.nn`` for ``pyg_ioaware.nn``."""
from .gcn_conv import GCNConv

__all__ = ["GCNConv"]
