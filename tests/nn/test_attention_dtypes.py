"""The attention layers give their output and attention weights in the
dtype PyG's layers give them under torch.autocast (PyG's scores and softmax
may run in float32 while the projections run in 16 bits), with and without
the fp32 terms (bias, root weight) that would promote the output anyway."""
import pytest
import torch
from _helpers import random_graph
from torch_geometric.nn import GATv2Conv as PygGATv2Conv
from torch_geometric.nn import TransformerConv as PygTransformerConv

from pyg_ioaware.nn import GATv2Conv, TransformerConv

LAYERS = {
    "gatv2": (GATv2Conv, PygGATv2Conv, dict(bias=False)),
    "gatv2-bias": (GATv2Conv, PygGATv2Conv, dict()),
    "transformer": (TransformerConv, PygTransformerConv, dict(root_weight=False)),
    "transformer-root": (TransformerConv, PygTransformerConv, dict()),
}


def dtypes_of(conv, x, edge_index, device):
    with torch.autocast(device, dtype=torch.bfloat16):
        out, (_, alpha) = conv(x, edge_index, return_attention_weights=True)
    return out.dtype, alpha.dtype


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_autocast_dtypes_match_pyg(layer, device):
    ours_class, pyg_class, kwargs = LAYERS[layer]
    torch.manual_seed(0)
    ours = ours_class(16, 8, heads=2, **kwargs).to(device)
    ref = pyg_class(16, 8, heads=2, **kwargs).to(device)
    ref.load_state_dict(ours.state_dict())
    edge_index = random_graph(40, 40, 200, seed=3).to(device)
    x = torch.randn(40, 16, device=device)
    assert dtypes_of(ours, x, edge_index, device) == dtypes_of(ref, x, edge_index, device)
