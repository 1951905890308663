"""The min / max autograd in C++ (cuda/host/minmax_autograd.cpp,
pyg_ioaware._native_host) against the Python autograd.Function it stands
in for (ops.minmax.MinMaxFunction): the same outputs, the same gradients
(bitwise with deterministic algorithms, which add without atomics), the
CSR^T asked of the graph only for a deterministic backward, once
differentiable, and the cases it leaves to Python."""
import pytest
import torch

from _helpers import host_extension_calls, random_graph, relative_error
from pyg_ioaware import Graph, config, ops
from pyg_ioaware.nn import SAGEConv

pytestmark = pytest.mark.cuda


@pytest.fixture
def calls(monkeypatch):
    """How many times the C++ min / max ran, alone and followed by linear
    maps (skips where the extension is not built)."""
    return host_extension_calls(monkeypatch, ("minmax_aggregate", "minmax_linear"))


def features(num_nodes: int, width: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Integer-valued features: many ties, zeros and negative values."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, (num_nodes, width), generator=gen).to("cuda", dtype)


def aggregate_and_grad(graph, x, grad_out, reduce, native, monkeypatch):
    """out and dX of ops.aggregate over a bipartite graph with the C++
    autograd on or off."""
    monkeypatch.setattr(config, "native_host", native)
    x = x.detach().clone().requires_grad_()
    out = ops.aggregate((x, None), graph, reduce, size=(graph.num_src, graph.num_dst))
    return out, torch.autograd.grad(out, x, grad_out)[0]


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomics", "deterministic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=["fp32", "bf16", "fp16", "fp64"])
@pytest.mark.parametrize("width", [7, 64, 130])
@pytest.mark.parametrize("reduce", ["min", "max"])
def test_matches_the_python_function(calls, monkeypatch, reduce, width, dtype, deterministic):
    """A hub far above the split degree, degree-0 nodes, loops, duplicate
    edges and ties; with deterministic algorithms bitwise the Python path's
    (the C++ backward reads the graph's CSR^T), else up to the order in
    which atomics add."""
    edge_index = random_graph(900, 700, 6000, seed=3, hub_degree=3000).cuda()
    graph = Graph.from_input(edge_index, (900, 700))
    x = features(900, width, dtype, seed=5)
    grad_out = torch.randn(700, width, device="cuda", dtype=dtype)
    torch.use_deterministic_algorithms(deterministic)
    try:
        python = aggregate_and_grad(graph, x, grad_out, reduce, False, monkeypatch)
        assert calls["minmax_aggregate"] == 0
        native = aggregate_and_grad(graph, x, grad_out, reduce, True, monkeypatch)
        assert calls["minmax_aggregate"] == 1
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(native[0], python[0])
    if deterministic:
        assert graph.state.transpose is not None
        assert torch.equal(native[1], python[1])
    else:
        tolerance = 1e-6 if dtype in (torch.float32, torch.float64) else 1e-2
        assert relative_error(native[1], python[1]) < tolerance


def test_own_hub_quantile_and_expanded_gradient(calls, monkeypatch):
    """A forward split at another quantile than the backward's default,
    and the expanded gradient of out.sum() (read through a copy)."""
    edge_index = random_graph(500, 500, 5000, seed=7, hub_degree=2000).cuda()
    graph = Graph.from_input(edge_index, 500)
    x = torch.randn(500, 33, device="cuda")
    results = {}
    for native in (False, True):
        monkeypatch.setattr(config, "native_host", native)
        leaf = x.clone().requires_grad_()
        out = ops.aggregate(leaf, graph, "max", hub_quantile=0.5)
        out.sum().backward()
        results[native] = (out, leaf.grad)
    assert calls["minmax_aggregate"] == 1
    assert torch.equal(results[True][0], results[False][0])
    assert relative_error(results[True][1], results[False][1]) < 1e-6


def test_twice_differentiating_raises_as_in_python(calls, monkeypatch):
    """create_graph=True gives a gradient whose own backward raises, as
    once_differentiable's does on the Python Function."""
    edge_index = random_graph(200, 200, 1500, seed=11).cuda()
    graph = Graph.from_input(edge_index, 200)
    for native in (False, True):
        monkeypatch.setattr(config, "native_host", native)
        x = torch.randn(200, 8, device="cuda", requires_grad=True)
        out = ops.aggregate(x, graph, "min")
        grad_x = torch.autograd.grad(out.square().sum(), x, create_graph=True)[0]
        with pytest.raises(RuntimeError, match="differentiate twice"):
            grad_x.sum().backward()
    assert calls["minmax_aggregate"] == 1


def test_sage_conv_takes_it(calls, monkeypatch):
    """SAGEConv(aggr="max"): one C++ node a call (the aggregation with the
    layer's linear maps, ops.aggregate_linear), PyG's-layer results kept."""
    edge_index = random_graph(300, 300, 2500, seed=13).cuda()
    conv = SAGEConv(16, 24, aggr="max").cuda()
    x = torch.randn(300, 16, device="cuda", requires_grad=True)
    results = {}
    for native in (False, True):
        monkeypatch.setattr(config, "native_host", native)
        out = conv(x, edge_index)
        grads = torch.autograd.grad(out.square().sum(), (x, conv.lin_l.weight))
        results[native] = (out, *grads)
    assert calls == {"minmax_aggregate": 0, "minmax_linear": 1}
    for a, b in zip(results[True], results[False]):
        assert relative_error(a, b) < 1e-6


def test_cases_left_to_python(calls, monkeypatch):
    """Features that need no gradient (no arg kept), the CPU and config
    off stay off the C++ node."""
    edge_index = random_graph(100, 100, 600, seed=15).cuda()
    graph = Graph.from_input(edge_index, 100)
    x = torch.randn(100, 8, device="cuda")
    ops.aggregate(x, graph, "max")
    cpu = x.cpu().requires_grad_()
    ops.aggregate(cpu, edge_index.cpu(), "max").sum().backward()
    monkeypatch.setattr(config, "native_host", False)
    ops.aggregate(x.clone().requires_grad_(), graph, "max").sum().backward()
    assert calls["minmax_aggregate"] == 0
