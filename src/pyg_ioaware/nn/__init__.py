"""PyG-compatible layers: swap ``torch_geometric.nn`` for ``pyg_ioaware.nn``."""
from .aggregation import MaxAggregation, MeanAggregation, MinAggregation, SumAggregation
from .fused_message_passing import FusedMessagePassing
from .gatv2_conv import GATv2Conv
from .gcn_conv import GCNConv
from .sage_conv import SAGEConv
from .transformer_conv import TransformerConv

__all__ = ["FusedMessagePassing", "GATv2Conv", "GCNConv", "SAGEConv", "TransformerConv",
           "SumAggregation", "MeanAggregation", "MinAggregation", "MaxAggregation"]
