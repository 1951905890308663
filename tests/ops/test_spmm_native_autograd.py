"""The SpMM family's autograd in C++ (cuda/host, pyg_ioaware._native_host)
against the Python autograd.Function it stands in for: the same outputs
and gradients (bitwise where no atomics add in another order), the same
lazy CSR^T rule, a double backward, and the cases it leaves to Python."""
import gc
import weakref

import pytest
import torch

from _helpers import TOLERANCE, host_extension_calls, random_graph, relative_error
from pyg_ioaware import Graph, config, ops
from pyg_ioaware.nn import GCNConv
from pyg_ioaware.ops import normalize, spmm

pytestmark = pytest.mark.cuda


@pytest.fixture
def calls(monkeypatch):
    """How many times the C++ SpMM ran (skips where the extension is not built)."""
    return host_extension_calls(monkeypatch, ("spmm",))


def gcn_step(edge_index, x, conv, grad_out, native, monkeypatch, create_graph=False):
    """out, dX, dW, db of one GCNConv call with the C++ autograd on or off."""
    monkeypatch.setattr(config, "native_host", native)
    x = x.detach().clone().requires_grad_()
    out = conv(x, edge_index)
    grads = torch.autograd.grad(out, (x, conv.lin.weight, conv.bias), grad_out,
                                create_graph=create_graph)
    return (out, *grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [7, 64, 130])
def test_gcn_matches_the_python_function(calls, monkeypatch, dtype, width):
    """A new graph every call (the transposed SpMM in backward), hubs far
    above the split degree, degree-0 nodes, loops and duplicates."""
    torch.manual_seed(0)
    edge_index = random_graph(700, 700, 6000, seed=3, hub_degree=3000).cuda()
    conv = GCNConv(32, width).cuda().to(dtype)
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(700, 32, device="cuda", dtype=dtype)
    grad_out = torch.randn(700, width, device="cuda", dtype=dtype)
    python = gcn_step(edge_index.clone(), x, conv, grad_out, False, monkeypatch)
    assert calls["spmm"] == 0
    native = gcn_step(edge_index.clone(), x, conv, grad_out, True, monkeypatch)
    assert calls["spmm"] == 1
    assert torch.equal(native[3], python[3])  # db: the same column sums of one dY
    # The hub's chunks and the transposed SpMM add with atomics, in any order.
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    for a, b in zip(native[:3], python[:3]):
        assert relative_error(a, b) < tolerance


def test_reused_graph_builds_the_transpose_once(calls, monkeypatch):
    """The lazy rule: the first backward pass over a graph scatters, a later
    one builds the CSR^T (through Python, once), and later forwards pass it."""
    edge_index = random_graph(300, 300, 2000, seed=5).cuda()
    graph = Graph.from_edge_index(edge_index, 300)
    x = torch.randn(300, 16, device="cuda", requires_grad=True)
    grads = []
    for _ in range(3):
        out = ops.aggregate(ops.aggregate(x, graph, "mean").relu(), graph, "mean")
        grads.append(torch.autograd.grad(out.square().sum(), x)[0])
        if len(grads) == 1:
            assert graph.state.transpose is None
    assert graph.state.transpose is not None
    assert calls["spmm"] == 6
    assert relative_error(grads[1], grads[0]) < 1e-6
    assert relative_error(grads[2], grads[1]) < 1e-6


@pytest.mark.parametrize("mode", ["materialized", "deterministic"])
def test_csr_transpose_modes_match_python(calls, monkeypatch, mode):
    """Backward over the CSR^T; with deterministic algorithms (no atomics
    anywhere) bitwise the Python path's."""
    if mode == "materialized":
        monkeypatch.setattr(config, "spmm_backward", "materialized")
    else:
        torch.use_deterministic_algorithms(True)
    try:
        edge_index = random_graph(500, 500, 4000, seed=7, hub_degree=2000).cuda()
        conv = GCNConv(24, 40).cuda()
        x = torch.randn(500, 24, device="cuda")
        grad_out = torch.randn(500, 40, device="cuda")
        python = gcn_step(edge_index.clone(), x, conv, grad_out, False, monkeypatch)
        native = gcn_step(edge_index.clone(), x, conv, grad_out, True, monkeypatch)
    finally:
        torch.use_deterministic_algorithms(False)
    assert calls["spmm"] == 1
    for a, b in zip(native, python):
        if mode == "deterministic":
            assert torch.equal(a, b)
        else:
            assert relative_error(a, b) < 1e-6


def test_transposed_class_matters_only_where_the_backward_may_scatter(calls, monkeypatch):
    """A tuner that gives the transposed SpMM to cuSPARSE (as for a large
    graph) keeps the C++ autograd off where the backward may scatter over
    A, and on where it cannot: the CSR^T built already, or more work than
    LazyTranspose.MATERIALIZE_WORK. Gradients as the Python path's."""
    from pyg_ioaware.ops import spmm as spmm_ops, tuning

    asked = []

    def cusparse_transposed(family, width, dtype, device, nnz, classes):
        asked.append(tuple(direction for direction, _ in classes))
        return ["cusparse-alg2" if direction == "transposed" else "pygio-csr"
                for direction, _ in classes]

    monkeypatch.setattr(tuning, "untimed_choices", cusparse_transposed)
    edge_index = random_graph(400, 400, 3000, seed=17, hub_degree=1000).cuda()
    x = torch.randn(400, 16, device="cuda", requires_grad=True)

    def grad_x(graph):
        out = ops.gcn_adjacency(graph, 400, add_self_loops=False).propagate(x)
        return torch.autograd.grad(out.square().sum(), x)[0]

    python = grad_x(Graph.from_edge_index(edge_index, 400))  # may scatter: Python
    assert calls["spmm"] == 0 and asked[-1] == ("forward", "forward", "transposed")
    transposed = Graph.from_edge_index(edge_index, 400)
    assert transposed.transpose is not None  # built: the backward cannot scatter
    assert relative_error(grad_x(transposed), python) < 1e-6
    assert calls["spmm"] == 1 and asked[-1] == ("forward", "forward")
    monkeypatch.setattr(spmm_ops.LazyTranspose, "MATERIALIZE_WORK", 1)
    fresh = Graph.from_edge_index(edge_index, 400)
    assert relative_error(grad_x(fresh), python) < 1e-6
    assert calls["spmm"] == 2 and fresh.state.transpose is not None


def test_large_bias_gradient_takes_the_gemv(calls, monkeypatch):
    """db as ops.bias_gradient.column_sums computes it at 2^21 elements and
    more (a GEMV), bitwise."""
    edge_index = random_graph(20000, 20000, 60000, seed=9).cuda()
    conv = GCNConv(16, 128).cuda()
    x = torch.randn(20000, 16, device="cuda")
    grad_out = torch.randn(20000, 128, device="cuda")
    python = gcn_step(edge_index, x, conv, grad_out, False, monkeypatch)
    native = gcn_step(edge_index.clone(), x, conv, grad_out, True, monkeypatch)
    assert calls["spmm"] == 1
    assert torch.equal(native[3], python[3])


def test_double_backward_goes_through_python(calls, monkeypatch):
    """create_graph=True: the C++ backward hands over to SpmmFunction, so a
    gradient of the gradient is the Python path's."""
    edge_index = random_graph(200, 200, 1500, seed=11).cuda()
    conv = GCNConv(8, 12).cuda()
    x = torch.randn(200, 8, device="cuda")
    grad_out = torch.randn(200, 12, device="cuda")
    results = {}
    for native in (False, True):
        _, grad_x, _, _ = gcn_step(edge_index.clone(), x, conv, grad_out, native, monkeypatch,
                                   create_graph=True)
        results[native] = torch.autograd.grad(grad_x.square().sum(), conv.lin.weight)[0]
    assert calls["spmm"] == 1
    assert relative_error(results[True], results[False]) < 1e-6


def test_cases_left_to_python(calls, monkeypatch):
    """float64, edge weights that need a gradient, config off and
    torch.compile's tracing stay on the Python Function."""
    edge_index = random_graph(100, 100, 600, seed=13).cuda()
    x64 = torch.randn(100, 8, device="cuda", dtype=torch.float64, requires_grad=True)
    ops.gcn_adjacency(edge_index, 100).propagate(x64).sum().backward()
    weight = torch.rand(edge_index.size(1), device="cuda", requires_grad=True)
    x = torch.randn(100, 8, device="cuda", requires_grad=True)
    ops.gcn_adjacency(edge_index, 100, weight).propagate(x).sum().backward()
    assert weight.grad is not None
    monkeypatch.setattr(config, "native_host", False)
    ops.gcn_adjacency(edge_index, 100).propagate(x).sum().backward()
    assert calls["spmm"] == 0
    monkeypatch.setattr(config, "native_host", True)
    ops.gcn_adjacency(edge_index, 100).propagate(x).sum().backward()
    assert calls["spmm"] == 1


@pytest.mark.parametrize("features", ["float32", "16-bit"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_bias_inside_the_mixed_aggregation(calls, monkeypatch, dtype, features):
    """Under autocast, over float32 features (float32 edge values) and over
    16-bit ones (an fp32 bias promotes the 16-bit sum), the fp32 bias is
    added inside the aggregation, Y in fp32, and its gradient sums the
    fp32 dY: bitwise the Python path's (deterministic algorithms: no
    atomics). dX and dW come from the linear map, whose C++ node (on with
    the host extension) writes them in float32 from the 16-bit products,
    where autocast's F.linear rounds them to 16 bits first: within that
    rounding of each other."""
    edge_index = random_graph(400, 400, 3000, seed=15, hub_degree=1500).cuda()
    conv = GCNConv(24, 40).cuda()
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(400, 24, device="cuda", dtype=torch.float32 if features == "float32" else dtype)
    grad_out = torch.randn(400, 40, device="cuda")
    torch.use_deterministic_algorithms(True)
    try:
        with torch.autocast("cuda", dtype=dtype):
            python = gcn_step(edge_index.clone(), x, conv, grad_out, False, monkeypatch)
            native = gcn_step(edge_index.clone(), x, conv, grad_out, True, monkeypatch)
    finally:
        torch.use_deterministic_algorithms(False)
    assert calls["spmm"] == 1
    assert native[0].dtype == torch.float32
    assert torch.equal(native[0], python[0]) and torch.equal(native[3], python[3])
    for a, b in zip(native[1:3], python[1:3]):
        assert a.dtype == b.dtype and relative_error(a, b) < TOLERANCE[dtype]


def test_resolved_calls_are_kept_on_the_graph(calls):
    """A call resolved over a graph's cached values runs again as it is
    (GraphState.native_spmm_calls); other features, the deterministic flag
    and a CSR^T built since resolve anew; the kept calls hold no Graph, so a
    mini-batch's graph goes with its edge_index (no cycle left to the
    collector)."""
    edge_index = random_graph(300, 300, 2000, seed=7).cuda()
    graph = Graph.from_input(edge_index, 300)
    x = torch.randn(300, 16, device="cuda")
    values = normalize.normalized_values(graph, None, "mean", x.dtype)
    # Its edges come in no order: the first call starts reading the degree
    # bound, and only a call that knows it is kept.
    assert not spmm.native_spmm_call(graph, values, x, "auto").replayable
    torch.cuda.synchronize()
    first = spmm.native_spmm_call(graph, values, x, "auto")
    assert first is not None and first.replayable
    assert spmm.native_spmm_call(graph, values, x, "auto") is first
    assert spmm.native_spmm_call(graph, values, x[:, :8].contiguous(), "auto") is not first
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert spmm.native_spmm_call(graph, values, x, "auto") is not first
    finally:
        torch.use_deterministic_algorithms(previous)
    graph.transpose  # built: the calls from now on pass the CSR^T
    with_transpose = spmm.native_spmm_call(graph, values, x, "auto")
    assert with_transpose is not first and with_transpose.transpose is not None
    assert relative_error(with_transpose(graph, x, None), ops.aggregate(x, graph, "mean")) < 1e-6

    gc.collect()
    gc.disable()
    try:
        held = weakref.ref(graph)
        del graph, values, first, with_transpose
        del edge_index  # the graph cache's key: its Graph goes with it
        assert held() is None
    finally:
        gc.enable()


def test_no_gradient_takes_the_cpp_call_and_records_no_node(calls, monkeypatch):
    """Features that need no gradient (a first layer's, inference) take the
    C++ call too, which then records no node: the raw op's values, bitwise
    (the degree bound known to both); with a materialized backward the op
    runs instead, and no CSR^T is built for a call without a backward.
    Uniform degrees: no hub row, whose chunks would add in any order."""
    gen = torch.Generator().manual_seed(8)
    edge_index = torch.randint(0, 300, (2, 2000), generator=gen).cuda()
    adjacency = ops.gcn_adjacency(edge_index, 300)
    graph = adjacency.graph
    x = torch.randn(300, 16, device="cuda")
    adjacency.propagate(x)
    torch.cuda.synchronize()  # the first SpMM over the graph reads its degree bound
    out = adjacency.propagate(x)
    with torch.no_grad():
        out_no_grad = adjacency.propagate(x.clone().requires_grad_())
    assert calls["spmm"] == 3
    assert out.grad_fn is None and out_no_grad.grad_fn is None
    values = normalize.normalized_values(graph, None, "gcn", x.dtype).values
    expected = torch.ops.pyg_ioaware.spmm(graph.rowptr, graph.col, values, x, 300, False)
    assert torch.equal(out, expected) and torch.equal(out_no_grad, expected)
    monkeypatch.setattr(config, "spmm_backward", "materialized")
    assert torch.equal(adjacency.propagate(x), expected)
    assert calls["spmm"] == 3 and graph.state.transpose is None
