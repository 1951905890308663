"""The attention family's autograd in C++ (cuda/host/attention_autograd.cpp,
pyg_ioaware._native_host) against the Python TransformerFunction and
GATv2Function it stands in for: the same outputs (bitwise: the same forward
kernels) and gradients (up to the order of the hub merges' atomics) through
TransformerConv and GATv2Conv (packed projections, square and bipartite,
edge features, the folded output bias, shared weights, dropout) and the op
(separate q, k, v, one of them a view the kernels cannot read in place), no
CSR^T where nothing records a gradient, a double backward that raises as
once_differentiable's, and the cases it leaves to Python."""
import pytest
import torch

from _helpers import host_extension_calls, random_graph, relative_error
from pyg_ioaware import Graph, config
from pyg_ioaware.nn import GATv2Conv, TransformerConv
from pyg_ioaware.ops.transformer import graph_transformer

pytestmark = pytest.mark.cuda


@pytest.fixture
def calls(monkeypatch):
    """How many times each C++ node ran (skips where the extension is not built)."""
    return host_extension_calls(monkeypatch, ("transformer_attention", "gatv2_attention"))


def layer_step(conv, x, edge_index, edge_attr, grad_out, native, monkeypatch, seed=0):
    """out and the gradients of the inputs and every parameter of one
    attention layer call with the C++ autograd on or off."""
    monkeypatch.setattr(config, "native_host", native)
    xs = [t.detach().clone().requires_grad_() for t in (x if isinstance(x, tuple) else (x,))]
    torch.manual_seed(seed)  # the dropout seed the layer draws
    out = conv(tuple(xs) if isinstance(x, tuple) else xs[0], edge_index, edge_attr)
    params = [p for p in conv.parameters() if p.requires_grad]
    grads = torch.autograd.grad(out, xs + params, grad_out.to(out.dtype))
    return out, grads


def both_paths(conv, in_channels, out_width, edge_dim, dtype, seed, monkeypatch):
    """layer_step's (out, gradients) with the C++ node and with the Python
    Function, under ``dtype`` autocast, on a new graph of 6000 edges (900
    sources; 900 destinations, or 400 where ``in_channels`` is a pair) with
    a destination hub of 2000 entries and a source hub of 700, inputs of
    ``in_channels`` and, with ``edge_dim``, edge attributes."""
    torch.manual_seed(0)
    bipartite = isinstance(in_channels, tuple)
    num_src, num_dst = (900, 400) if bipartite else (900, 900)
    edge_index = random_graph(num_src, num_dst, 6000, seed=seed, hub_degree=2000).cuda()
    edge_index[0, :700] = 5  # a source hub: a long CSR^T row
    x = ((torch.randn(num_src, in_channels[0], device="cuda"),
          torch.randn(num_dst, in_channels[1], device="cuda"))
         if bipartite else torch.randn(num_src, in_channels, device="cuda"))
    edge_attr = (torch.randn(edge_index.size(1), edge_dim, device="cuda")
                 if edge_dim else None)
    grad_out = torch.randn(num_dst, out_width, device="cuda")
    results = {}
    for native in (True, False):
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            results[native] = layer_step(conv, x, edge_index.clone(), edge_attr, grad_out,
                                         native, monkeypatch)
    return results[True], results[False]


def assert_same_step(native, python, dtype, bitwise_forward=True):
    """The same output (bitwise where nothing before the attention adds in
    a varying order) and gradients: relative to each gradient's norm, or to
    1 for one that is zero but for rounding (the key bias's: softmax does
    not see a shift shared by a row's scores)."""
    if bitwise_forward:
        assert torch.equal(native[0], python[0])  # one forward kernel, one order
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert relative_error(native[0], python[0]) < tolerance
    for a, b in zip(native[1], python[1]):
        a, b = a.double(), b.double()
        assert (a - b).norm() <= tolerance * max(b.norm(), 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads,channels,edge_dim,bipartite", [
    (2, 7, None, False), (4, 64, 5, False), (1, 33, None, True), (3, 16, 4, True)])
def test_layer_matches_the_python_function(calls, monkeypatch, dtype, heads, channels,
                                           edge_dim, bipartite):
    """A new graph every call, hubs in the CSR and its CSR^T, degree-0 nodes,
    self loops and duplicates; packed q, k, v (square) or k, v (bipartite)."""
    in_channels = (24, 16) if bipartite else 24
    conv = TransformerConv(in_channels, channels, heads=heads, edge_dim=edge_dim).cuda()
    native, python = both_paths(conv, in_channels, heads * channels, edge_dim, dtype, seed=3,
                                monkeypatch=monkeypatch)
    assert calls["transformer_attention"] == 1
    assert_same_step(native, python, dtype)


LAYERS = [(TransformerConv, "transformer_attention"), (GATv2Conv, "gatv2_attention")]


@pytest.mark.parametrize("layer,node", LAYERS)
def test_dropout_matches_the_python_function(calls, monkeypatch, layer, node):
    """The same seed drops the same weights in forward and backward."""
    edge_index = random_graph(300, 300, 3000, seed=7, hub_degree=600).cuda()
    conv = layer(16, 8, heads=2, dropout=0.3).cuda().train()
    x = torch.randn(300, 16, device="cuda")
    grad_out = torch.randn(300, 16, device="cuda")
    python = layer_step(conv, x, edge_index, None, grad_out, False, monkeypatch, seed=4)
    native = layer_step(conv, x, edge_index, None, grad_out, True, monkeypatch, seed=4)
    assert calls[node] == 1
    assert_same_step(native, python, torch.float32)


def test_op_with_separate_inputs(calls, monkeypatch):
    """graph_transformer with q, k, v of their own, k a view the kernels
    cannot read in place (copied, its gradient flows back through the copy)."""
    edge_index = random_graph(200, 150, 1500, seed=9, hub_degree=500).cuda()
    graph = Graph.from_edge_index(edge_index, (200, 150))
    gen = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(150, 2, 8, device="cuda", generator=gen)
    k_channels_last = torch.randn(200, 8, 2, device="cuda", generator=gen)
    v = torch.randn(200, 2, 8, device="cuda", generator=gen)
    grad = torch.randn(150, 2, 8, device="cuda", generator=gen)
    results = {}
    for native in (False, True):
        monkeypatch.setattr(config, "native_host", native)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k_channels_last, v)]
        out, lse = graph_transformer(graph, leaves[0], leaves[1].transpose(1, 2), leaves[2])
        assert not lse.requires_grad
        results[native] = (out, lse, *torch.autograd.grad(out, leaves, grad))
    assert calls["transformer_attention"] == 1
    assert torch.equal(results[True][0], results[False][0])
    assert torch.equal(results[True][1], results[False][1])
    for a, b in zip(results[True][2:], results[False][2:]):
        assert relative_error(a, b) < 1e-5


def test_no_transpose_without_a_gradient(calls):
    """Under no_grad (or with nothing requiring a gradient) the forward takes
    no CSR^T, and records nothing."""
    edge_index = random_graph(100, 100, 800, seed=11).cuda()
    conv = TransformerConv(8, 4, heads=2).cuda()
    x = torch.randn(100, 8, device="cuda")
    graph = Graph.from_edge_index(edge_index, 100)
    with torch.no_grad():
        out = conv(x, graph)
    assert calls["transformer_attention"] == 1 and out.grad_fn is None
    assert graph.state.transpose is None
    out = conv(x, graph)  # parameters require a gradient: the CSR^T is taken
    assert calls["transformer_attention"] == 2 and out.grad_fn is not None
    assert graph.state.transpose is not None


@pytest.mark.parametrize("layer,node", LAYERS)
def test_double_backward_raises_as_python(calls, monkeypatch, layer, node):
    """create_graph=True gives first gradients; a backward through them into
    every leaf raises on both paths (the attention is once differentiable;
    a gradient taken only for inputs the error node does not lead to is
    never asked of it, on both paths alike)."""
    edge_index = random_graph(120, 120, 900, seed=13).cuda()
    conv = layer(8, 4, heads=2).cuda()
    x = torch.randn(120, 8, device="cuda")
    grad_out = torch.randn(120, 8, device="cuda", requires_grad=True)
    for native in (False, True):
        monkeypatch.setattr(config, "native_host", native)
        xx = x.clone().requires_grad_()
        grad_x, = torch.autograd.grad(conv(xx, edge_index.clone()), xx, grad_out,
                                      create_graph=True)
        with pytest.raises(RuntimeError, match="differentiate twice"):
            grad_x.square().sum().backward()  # into every leaf: through the error node
    assert calls[node] == 1


def test_cases_left_to_python(calls, monkeypatch):
    """float64 (the reference under autograd), config off, and torch.compile's
    tracing (the custom ops) stay off the C++ node."""
    edge_index = random_graph(80, 80, 500, seed=17).cuda()
    conv = TransformerConv(8, 4, heads=2).cuda()
    x = torch.randn(80, 8, device="cuda", requires_grad=True)
    conv.double()(x.double(), edge_index).sum().backward()
    conv.float()
    monkeypatch.setattr(config, "native_host", False)
    conv(x, edge_index).sum().backward()
    assert calls["transformer_attention"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads,channels,edge_dim,bipartite,share_weights", [
    (2, 7, None, False, False), (4, 64, 5, False, False), (1, 33, None, True, False),
    (3, 16, 4, True, False), (2, 24, None, False, True)])
def test_gatv2_layer_matches_the_python_function(calls, monkeypatch, dtype, heads, channels,
                                                 edge_dim, bipartite, share_weights):
    """GATv2Conv as the transformer above: packed x_l / x_r (square) or
    separate (bipartite, shared weights), the output bias folded into the
    kernels (fp32) or added after (16-bit), hubs, edge features."""
    in_channels = (24, 24 if share_weights else 16) if bipartite else 24
    conv = GATv2Conv(in_channels, channels, heads=heads, edge_dim=edge_dim,
                     add_self_loops=not bipartite, share_weights=share_weights).cuda()
    torch.nn.init.normal_(conv.bias)
    native, python = both_paths(conv, in_channels, heads * channels, edge_dim, dtype, seed=5,
                                monkeypatch=monkeypatch)
    assert calls["gatv2_attention"] == 1
    # The self loops' edge attributes (fill_value "mean") are sums in any order.
    assert_same_step(native, python, dtype, bitwise_forward=edge_dim is None or bipartite)
