"""PyG-compatible layers: swap ``torch_geometric.nn`` for ``pyg_ioaware.nn``."""
from .fused_message_passing import FusedMessagePassing
from .gcn_conv import GCNConv

__all__ = ["FusedMessagePassing", "GCNConv"]
