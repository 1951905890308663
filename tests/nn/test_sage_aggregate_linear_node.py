"""SAGEConv's layer as one C++ autograd node
(cuda/host/aggregate_linear_autograd.cpp, ops.aggregate_linear) against the
three nodes it stands for (the root map, the aggregation, the map of the
aggregation), for sum, mean, min and max: the same forward bitwise where no
atomics add, the same gradients, a double backward, and the cases it
leaves to them."""
import pytest
import torch

from _helpers import host_extension_calls, random_graph, relative_error
from pyg_ioaware import Graph, config
from pyg_ioaware.nn import SAGEConv
from pyg_ioaware.nn import sage_conv as sage_conv_module

pytestmark = pytest.mark.cuda


@pytest.fixture
def calls(monkeypatch):
    """How many times the C++ node ran, by aggregation family (skips where
    the extension is not built)."""
    return host_extension_calls(monkeypatch, ("aggregate_linear", "minmax_linear"))


def node_calls(calls) -> int:
    return sum(calls.values())


def uniform_graph(num_src, num_dst, num_edges, seed):
    """edge_index with a few entries a row and no hub: the SpMM adds every
    row in one pass, in a fixed order (no atomics), so outputs compare
    bitwise."""
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, num_src, (num_edges,), generator=gen),
                        torch.randint(0, num_dst, (num_edges,), generator=gen)]).cuda()


def step(conv, x, edge_index, grad_out, node, monkeypatch, x_needs_grad=True,
         precision=None, create_graph=False):
    """out and the gradients (features, then lin_l, lin_r, bias) of one call,
    through the C++ node (``node``) or the three nodes it stands for."""
    pair = x if isinstance(x, tuple) else (x,)
    leaves = [t.detach().clone().requires_grad_(x_needs_grad) for t in pair]
    with monkeypatch.context() as patch, torch.autocast(
            "cuda", dtype=precision or torch.bfloat16, enabled=precision is not None):
        if not node:
            patch.setattr(sage_conv_module, "aggregate_linear", lambda *args: None)
        out = conv(tuple(leaves) if isinstance(x, tuple) else leaves[0], edge_index)
    params = [p for p in (conv.lin_l.weight, conv.lin_r.weight, conv.lin_l.bias)
              if p is not None]
    inputs = (leaves if x_needs_grad else []) + params
    grads = torch.autograd.grad(out, inputs, grad_out.to(out.dtype), create_graph=create_graph)
    return out, grads


CASES = {
    "fp32": (torch.float32, None),
    "bf16 autocast, fp32 x": (torch.float32, torch.bfloat16),
    "fp16 autocast, fp32 x": (torch.float32, torch.float16),
    "bf16 autocast, bf16 x": (torch.bfloat16, torch.bfloat16),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("aggr", ["mean", "sum", "max"])
@pytest.mark.parametrize("x_needs_grad", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_the_three_nodes(calls, monkeypatch, case, aggr, x_needs_grad, bias):
    """Square graph, one feature tensor (x_r = x_j): the forward and the
    weight gradients bitwise (the same kernels in the same order); dX within
    rounding (one product accumulated in place where autograd added two)."""
    x_dtype, precision = CASES[case]
    torch.manual_seed(0)
    edge_index = uniform_graph(500, 500, 2500, seed=1)
    conv = SAGEConv(24, 37, aggr=aggr, bias=bias).cuda()
    if bias:
        torch.nn.init.normal_(conv.lin_l.bias)
    x = torch.randn(500, 24, device="cuda").to(x_dtype)
    grad_out = torch.randn(500, 37, device="cuda")
    three = step(conv, x, edge_index.clone(), grad_out, False, monkeypatch, x_needs_grad,
                 precision)
    assert node_calls(calls) == 0
    fused = step(conv, x, edge_index.clone(), grad_out, True, monkeypatch, x_needs_grad,
                 precision)
    assert node_calls(calls) == 1
    assert fused[0].dtype == three[0].dtype
    assert torch.equal(fused[0], three[0])
    weights = slice(1 if x_needs_grad else 0, None)
    for got, expected in zip(fused[1][weights], three[1][weights]):
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected)
    if x_needs_grad:
        assert fused[1][0].dtype == x.dtype
        tolerance = 1e-6 if precision is None else 1e-2
        assert relative_error(fused[1][0], three[1][0]) < tolerance


@pytest.mark.parametrize("precision", [None, torch.bfloat16])
@pytest.mark.parametrize("project", [False, True])
@pytest.mark.parametrize("aggr", ["mean", "min"])
def test_bipartite_projected_and_hub_graphs(calls, monkeypatch, precision, project, aggr):
    """(x_src, x_dst) features (x_r a separate input: its own gradient), a
    projection before the aggregation (x_j no longer x_r), and a hub far
    above the split degree (the SpMM's chunks add with atomics: within
    rounding; min / max hub chunks merge exactly)."""
    torch.manual_seed(2)
    edge_index = random_graph(700, 300, 5000, seed=3, hub_degree=3000).cuda()
    conv = SAGEConv((20, 28), 33, aggr=aggr, project=project).cuda()
    x_src = torch.randn(700, 20, device="cuda")
    x_dst = torch.randn(300, 28, device="cuda")
    grad_out = torch.randn(300, 33, device="cuda")
    three = step(conv, (x_src, x_dst), edge_index, grad_out, False, monkeypatch,
                 precision=precision)
    fused = step(conv, (x_src, x_dst), edge_index, grad_out, True, monkeypatch,
                 precision=precision)
    assert node_calls(calls) == 1
    tolerance = 1e-5 if precision is None else 1e-2
    assert relative_error(fused[0], three[0]) < tolerance
    for got, expected in zip(fused[1], three[1]):
        assert got.dtype == expected.dtype
        assert relative_error(got, expected) < tolerance


@pytest.mark.parametrize("mode", ["materialized", "deterministic", "reused graph"])
@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_backward_modes(calls, monkeypatch, mode, aggr):
    """The CSR^T rules of the aggregations' C++ nodes hold in this node
    too: the materialized CSR^T (sum / mean), deterministic algorithms
    (min / max too), and a graph whose second backward pass builds its
    CSR^T (sum / mean)."""
    if aggr == "max" and mode != "deterministic":
        pytest.skip("min / max read a CSR^T only in a deterministic backward")
    edge_index = random_graph(400, 400, 3000, seed=5, hub_degree=1500).cuda()
    conv = SAGEConv(16, 16, aggr=aggr).cuda()
    x = torch.randn(400, 16, device="cuda")
    grad_out = torch.randn(400, 16, device="cuda")
    graph = Graph.from_edge_index(edge_index, 400)
    if mode == "materialized":
        monkeypatch.setattr(config, "spmm_backward", "materialized")
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(mode == "deterministic")
    try:
        expected = step(conv, x, edge_index, grad_out, False, monkeypatch)
        runs = 2 if mode == "reused graph" else 1
        for run in range(runs):
            fused = step(conv, x, graph, grad_out, True, monkeypatch)
            if mode == "reused graph" and run == 0:
                assert graph.state.transpose is None  # the first pass scattered over A
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert node_calls(calls) == runs
    assert graph.state.transpose is not None
    for got, want in zip((fused[0], *fused[1]), (expected[0], *expected[1])):
        assert relative_error(got, want) < 1e-5


@pytest.mark.parametrize("precision", [None, torch.bfloat16])
def test_double_backward(calls, monkeypatch, precision):
    """create_graph=True: the node's backward hands over to Python, which
    differentiates the same composition, so a gradient of a gradient
    reaches x and every weight as the three nodes' does."""
    edge_index = random_graph(200, 200, 1500, seed=11).cuda()
    conv = SAGEConv(8, 12).cuda()  # mean: min / max are not twice differentiable
    torch.nn.init.normal_(conv.lin_l.bias)
    x = torch.randn(200, 8, device="cuda")
    grad_out = torch.randn(200, 12, device="cuda", requires_grad=True)
    results = {}
    for node in (False, True):
        _, grads = step(conv, x, edge_index, grad_out, node, monkeypatch,
                        precision=precision, create_graph=True)
        grad_x, grad_w_l, grad_w_r, _ = grads
        loss = grad_x.square().sum() + (grad_w_l * grad_w_r).sum()
        results[node] = torch.autograd.grad(
            loss, (conv.lin_l.weight, conv.lin_r.weight, grad_out), allow_unused=True)
    assert node_calls(calls) == 1
    tolerance = 1e-5 if precision is None else 2e-2
    for got, expected in zip(results[True], results[False]):
        assert relative_error(got, expected) < tolerance


def test_double_backward_through_min_max_raises(calls):
    """As with the reduction's own node (ops.minmax.MinMaxFunction is once
    differentiable): a backward through a gradient that went through min /
    max raises."""
    edge_index = random_graph(200, 200, 1500, seed=12).cuda()
    conv = SAGEConv(8, 12, aggr="max").cuda()
    x = torch.randn(200, 8, device="cuda", requires_grad=True)
    grad_x = torch.autograd.grad(conv(x, edge_index).square().sum(), x, create_graph=True)[0]
    assert node_calls(calls) == 1
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad_x.sum().backward()


@pytest.mark.parametrize("aggr", ["mean", "min"])
def test_inference_matches(calls, monkeypatch, aggr):
    edge_index = random_graph(300, 300, 2000, seed=13).cuda()
    conv = SAGEConv(16, 8, aggr=aggr).cuda()
    x = torch.randn(300, 16, device="cuda")
    with torch.no_grad():
        with monkeypatch.context() as patch:
            patch.setattr(sage_conv_module, "aggregate_linear", lambda *args: None)
            expected = conv(x, edge_index)
        got = conv(x, edge_index)
    assert node_calls(calls) == 1
    assert relative_error(got, expected) < 1e-6


def test_cases_left_to_the_three_nodes(calls, monkeypatch):
    """float64, no root term, a hook on a map, torch.sparse adjacencies
    (weighted) and static graphs ([B, N, F]) keep their paths; so does
    everything with config.native_host off."""
    edge_index = random_graph(100, 100, 600, seed=17).cuda()
    x = torch.randn(100, 8, device="cuda")
    SAGEConv(8, 4).cuda().double()(x.double(), edge_index)
    SAGEConv(8, 4, root_weight=False).cuda()(x, edge_index)
    hooked = SAGEConv(8, 4).cuda()
    hooked.lin_r.register_forward_hook(lambda *args: None)
    hooked(x, edge_index)
    adjacency = torch.sparse_coo_tensor(edge_index.flip(0),
                                        torch.rand(edge_index.size(1), device="cuda"),
                                        (100, 100))
    SAGEConv(8, 4).cuda()(x, adjacency)
    SAGEConv(8, 4).cuda()(x.expand(3, 100, 8), edge_index)
    monkeypatch.setattr(config, "native_host", False)
    SAGEConv(8, 4).cuda()(x, edge_index)
    assert node_calls(calls) == 0
    monkeypatch.setattr(config, "native_host", True)
    SAGEConv(8, 4).cuda()(x, edge_index)
    assert node_calls(calls) == 1
