"""module_reads: a module's registered submodules and parameters read from
its registries give what getattr gives, after every way torch changes them;
a Linear-like module whose weight is not a registered parameter is not
plain_linear, and the layers then call it."""
import torch
import torch_geometric
from torch import nn

from pyg_ioaware.module_reads import parameter, submodule
from pyg_ioaware.nn import GCNConv, SAGEConv
from pyg_ioaware.ops.bias_gradient import plain_linear


def test_reads_follow_every_change():
    conv = GCNConv(4, 3)
    assert submodule(conv, "lin") is conv.lin
    assert parameter(conv, "bias") is conv.bias
    assert parameter(conv.lin, "bias") is None is conv.lin.bias
    conv.lin = torch_geometric.nn.Linear(4, 3, bias=False)  # a replaced submodule
    assert submodule(conv, "lin") is conv.lin
    conv.bias = nn.Parameter(torch.ones(3))  # a replaced parameter
    assert parameter(conv, "bias") is conv.bias
    conv.register_parameter("bias", None)
    assert parameter(conv, "bias") is None is conv.bias
    conv.double()  # _apply: parameters converted (in place or replaced)
    assert parameter(conv.lin, "weight") is conv.lin.weight
    assert parameter(conv.lin, "weight").dtype == torch.float64
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        conv.float()  # _apply replaces every parameter object
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert parameter(conv.lin, "weight") is conv.lin.weight
    assert conv.lin.weight.dtype == torch.float32


class PropertyWeight(nn.Module):
    """A linear map whose weight is a property over a registered factor."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.factor = nn.Parameter(torch.randn(out_channels, in_channels))
        self.calls = 0

    @property
    def weight(self):
        return 2 * self.factor

    @property
    def bias(self):
        return None

    def forward(self, x):
        self.calls += 1
        return x @ self.weight.t()


def test_unregistered_weights_are_not_plain_and_the_layer_calls_the_module():
    assert plain_linear(torch_geometric.nn.Linear(4, 3))
    assert plain_linear(nn.Linear(4, 3, bias=False))
    lin = PropertyWeight(4, 3)
    assert not plain_linear(lin)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    x = torch.randn(4, 4)
    for conv, name in ((GCNConv(4, 3), "lin"), (SAGEConv(4, 3), "lin_r")):
        expected = conv(x, edge_index)
        module = PropertyWeight(4, 3)
        with torch.no_grad():
            module.factor.copy_(getattr(conv, name).weight / 2)
        setattr(conv, name, module)
        assert torch.allclose(conv(x, edge_index), expected, atol=1e-6)
        assert module.calls == 1
