"""A new graph's native launches from C++ (the host extension, cuda/host)
against the same launches through ctypes: the same statistics, CSR and
edge values, bitwise, and the same errors (CUDA)."""
import pytest
import torch

from _helpers import host_extension_calls, random_graph
from pyg_ioaware import Graph, config
from pyg_ioaware.ops.normalize import normalized_values

pytestmark = pytest.mark.cuda

LAUNCHES = ("EdgeStatsRead", "edge_index_stats", "grouped_graph", "csr_from_grouped",
            "csr_add_self_loops", "csr_pyg_self_loops", "csr_transpose", "gcn_norm", "mean_norm",
            "spmm_csr", "minmax", "minmax_backward", "gatv2", "gatv2_backward", "transformer",
            "transformer_backward")


@pytest.fixture
def calls(monkeypatch):
    """Counts of the extension's graph launches (skips where it is not built)."""
    return host_extension_calls(monkeypatch, LAUNCHES)


def build(edge_index, num_nodes, host, monkeypatch):
    """The graph, its self-loop graphs (GCN's; PyG's remove + add) and their
    edge values, built with the extension on or off."""
    monkeypatch.setattr(config, "native_host", host)
    graph = Graph.from_edge_index(edge_index, num_nodes)
    looped = graph.with_remaining_self_loops()
    # A copy: the PyG self-loop graph is cached on its input.
    pyg_looped, pyg_edges, kept = Graph.with_pyg_self_loops(edge_index.clone(),
                                                            (num_nodes, num_nodes))
    values = [normalized_values(graph, None, mode, dtype).values
              for mode in ("gcn", "mean") for dtype in (torch.float32, torch.bfloat16)]
    values.append(normalized_values(looped, None, "gcn", torch.float16).values)
    values += [looped.state.edge_origin, pyg_edges, kept]
    values += [getattr(graph.transpose, name) for name in ("rowptr", "col", "row", "perm")]
    return (graph, looped, pyg_looped), values


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_graph_launches_match_ctypes(calls, monkeypatch, grouped, index_dtype):
    edge_index = random_graph(500, 500, 4000, seed=41, hub_degree=900)
    if grouped:
        edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    edge_index = edge_index.to(index_dtype).cuda()
    ctypes_graphs, ctypes_values = build(edge_index, 500, False, monkeypatch)
    assert sum(calls.values()) == 0
    host_graphs, host_values = build(edge_index, 500, True, monkeypatch)
    # The graph in one call (statistics and CSR), the PyG self-loop graph's statistics apart.
    assert calls["grouped_graph"] == 1 and calls["edge_index_stats"] == 1
    assert calls["EdgeStatsRead"] == 0
    assert calls["csr_from_grouped"] == 0 and calls["csr_add_self_loops"] == 1
    assert calls["csr_pyg_self_loops"] == (1 if grouped else 0) and calls["csr_transpose"] == 1
    assert calls["gcn_norm"] == 3 and calls["mean_norm"] == 2
    for host_graph, ctypes_graph in zip(host_graphs, ctypes_graphs):
        assert host_graph.degree_bound == ctypes_graph.degree_bound
        for name in ("rowptr", "col", "row", "edge_perm"):
            a, b = getattr(host_graph, name), getattr(ctypes_graph, name)
            assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b)), name
    for a, b in zip(host_values, ctypes_values):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_stats_read_started_early_matches_ctypes(calls, monkeypatch, index_dtype):
    """EdgeStatsRead (graph.prefetch's start from C++) reads what the ctypes
    start reads, after work enqueued behind it, and a second read of it
    gives the same values."""
    from pyg_ioaware import _native
    edge_index = random_graph(400, 300, 5000, seed=44, hub_degree=800).to(index_dtype).cuda()
    monkeypatch.setattr(config, "native_host", False)
    expected = _native.start_edge_index_stats(edge_index).read()
    monkeypatch.setattr(config, "native_host", True)
    pending = _native.start_edge_index_stats(edge_index)
    torch.randn(512, 512, device="cuda").matmul(torch.randn(512, 512, device="cuda"))
    assert calls["EdgeStatsRead"] == 1
    assert pending.read() == expected == pending.read()
    assert _native.decode_edge_index_stats(expected) == _native.edge_index_stats(edge_index)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_self_loop_graph_built_with_the_graph(calls, monkeypatch, grouped, index_dtype):
    """Graph.from_input(with_self_loops=True) builds the self-loop graph in
    the graph's own call where the edges come grouped (from C++ and through
    ctypes alike) and it equals the one built on first use."""
    edge_index = random_graph(300, 300, 2500, seed=47, hub_degree=400)
    if grouped:
        edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    edge_index = edge_index.to(index_dtype).cuda()
    reference = Graph.from_edge_index(edge_index, 300).with_remaining_self_loops()
    for host in (False, True):
        monkeypatch.setattr(config, "native_host", host)
        before = dict(calls)
        graph = Graph.from_input(edge_index.clone(), 300, with_self_loops=True)
        prebuilt = graph.state.self_loop_graph is not None
        assert prebuilt == grouped
        looped = graph.with_remaining_self_loops()
        if host:
            assert calls["grouped_graph"] - before["grouped_graph"] == 1
            assert calls["csr_add_self_loops"] - before["csr_add_self_loops"] == (
                0 if grouped else 1)
        assert looped.degree_bound == reference.degree_bound
        assert looped.state.dropped_loops == reference.state.dropped_loops
        for name in ("rowptr", "col", "row"):
            assert torch.equal(getattr(looped, name), getattr(reference, name)), name
        assert torch.equal(looped.state.edge_origin, reference.state.edge_origin)


def test_stats_reads_in_flight_together_each_read_their_own(calls, monkeypatch):
    """Reads share pinned slots: many held at once (the largest launch's
    rows included), some dropped unread while their kernel may still run,
    and slots taken again after them, each read gives its own graph's
    values."""
    from pyg_ioaware import _native
    sizes = [(40, 300), (3000, 400_000), (700, 5000), (90, 64), (1200, 30_000)]
    graphs = [random_graph(n, n, e, seed=60 + k, hub_degree=n // 2).cuda()
              for k, (n, e) in enumerate(sizes)]
    monkeypatch.setattr(config, "native_host", False)
    expected = [_native.start_edge_index_stats(g).read() for g in graphs]
    monkeypatch.setattr(config, "native_host", True)
    for _ in range(3):
        pending = [_native.start_edge_index_stats(g) for g in graphs]
        dropped = [_native.start_edge_index_stats(g) for g in reversed(graphs)]
        del dropped  # unread: their slots go back while their kernels may run
        again = [_native.start_edge_index_stats(g) for g in graphs]
        assert [p.read() for p in reversed(again)] == expected[::-1]
        assert [p.read() for p in pending] == expected
    assert calls["EdgeStatsRead"] == 3 * 3 * len(graphs)


def test_stats_slot_not_taken_while_another_stream_may_write_it(calls, monkeypatch):
    """A read dropped unread on a stream that has not reached its kernel
    yet keeps its slot out of use: a read started meanwhile on another
    stream gets its own rows, which the late kernel does not overwrite."""
    from pyg_ioaware import _native
    late, now = (random_graph(n, n, 5 * n, seed=70 + n).cuda() for n in (80, 120))
    monkeypatch.setattr(config, "native_host", True)
    expected = _native.start_edge_index_stats(now).read()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # its kernel runs long after the read below started
        dropped = _native.start_edge_index_stats(late)
    del dropped
    pending = _native.start_edge_index_stats(now)
    torch.cuda.synchronize()  # the late kernel has written its rows by now
    assert pending.read() == expected
    assert pending.read() != _native.start_edge_index_stats(late).read()


def test_bad_indices_still_raise_before_any_kernel(calls, monkeypatch):
    monkeypatch.setattr(config, "native_host", True)
    edge_index = random_graph(50, 50, 300, seed=43).cuda()
    edge_index[0, 7] = 50
    with pytest.raises(ValueError, match="out of range"):
        Graph.from_edge_index(edge_index, 50)
    edge_index[0, 7] = -1
    with pytest.raises(ValueError, match="negative|out of range"):
        Graph.from_edge_index(edge_index, 50)
    assert calls["grouped_graph"] == 2 and calls["edge_index_stats"] == 0
    for num_nodes in (0, (50, 0), (0, 50)):  # no nodes at one end: every edge out of range
        with pytest.raises(ValueError, match="out of range"):
            Graph.from_edge_index(edge_index.abs(), num_nodes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_launch_matches_ctypes(calls, monkeypatch, dtype, transpose):
    """_native.spmm_csr from C++ (every SpMM of our kernels outside the C++
    autograd: inference, the Python Function) writes what the ctypes launch
    writes: bitwise for the deterministic forward (a strided x, a bias, a
    known degree bound, and an output row whose row stride torch reports
    as anything), up to the order of the transposed form's atomic sums; a
    bad inner stride raises the same ValueError before any launch."""
    from pyg_ioaware import _native
    graph = Graph.from_edge_index(random_graph(300, 200, 4000, seed=45, hub_degree=1500).cuda(),
                                  (300, 200))
    values = torch.rand(graph.num_edges, device="cuda")
    x = torch.randn(200 if transpose else 300, 48, device="cuda").to(dtype)[:, :40]
    bias = None if transpose else torch.randn(40, device="cuda")  # in the values' dtype
    rows = 300 if transpose else 200
    bound = -1 if transpose else int(graph.in_degree.max())
    outs = []
    for host in (False, True):
        monkeypatch.setattr(config, "native_host", host)
        out = torch.full((rows, 40), float("nan"), device="cuda", dtype=dtype)
        _native.spmm_csr(graph.rowptr, graph.col, values, x, bias, out, transpose,
                         not transpose, bound)
        outs.append(out)
    assert calls["spmm_csr"] == 1
    if transpose:  # fp32 atomics, then one rounding to dtype
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-5 if dtype == torch.float32
                                   else 1e-2, atol=1e-5)
    else:
        assert torch.equal(outs[0], outs[1])
    if not transpose:
        one_row = graph.rowptr[:2].clone()  # one destination
        x_row = torch.randn(300, 8, device="cuda").to(dtype)
        outs = []
        for host in (False, True):
            monkeypatch.setattr(config, "native_host", host)
            out = torch.empty(8, 1, device="cuda", dtype=dtype).t()  # one row, stride (1, 1)
            _native.spmm_csr(one_row, graph.col, values, x_row, None, out, False, True)
            outs.append(out.clone())
        assert torch.equal(outs[0], outs[1])
    monkeypatch.setattr(config, "native_host", True)
    with pytest.raises(ValueError, match="inner stride"):
        _native.spmm_csr(graph.rowptr, graph.col, values, x.t().contiguous().t(), bias,
                         torch.empty(rows, 40, device="cuda", dtype=dtype), transpose, True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("deterministic, backward", [(False, "atomics"), (False, "buckets"),
                                                     (True, "buckets")])
def test_minmax_launches_match_ctypes(calls, monkeypatch, dtype, deterministic, backward):
    """The min / max aggregation's forward and backward launched from C++
    give what the ctypes launches give: the same output (hub rows split
    over the SMs, merged order-independently), the same gradient (bitwise
    over the CSR^T under deterministic algorithms, which win over buckets,
    else up to the order of its atomic sums; bucketed too); a bad inner
    stride raises the same ValueError."""
    from pyg_ioaware import _native, ops
    from pyg_ioaware.ops import minmax
    # The Python Function's launches (the whole node in C++ is
    # tests/ops/test_minmax_native_autograd.py's).
    monkeypatch.setattr(minmax, "native_autograd_minmax", lambda *args: None)
    monkeypatch.setattr(config, "minmax_backward", backward)
    graph = Graph.from_edge_index(random_graph(400, 300, 6000, seed=46, hub_degree=2500).cuda(),
                                  (400, 300))
    x0 = torch.randn(400, 24, device="cuda").to(dtype)
    results = []
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        for host in (False, True):
            monkeypatch.setattr(config, "native_host", host)
            x = x0.clone().requires_grad_()
            out = ops.aggregate(x, graph, "max", size=(400, 300))
            grad, = torch.autograd.grad(out.float().square().sum(), x)
            results.append((out, grad))
    finally:
        torch.use_deterministic_algorithms(previous)
    assert calls["minmax"] == 1 and calls["minmax_backward"] == 1
    assert torch.equal(results[0][0], results[1][0])
    if deterministic:
        assert torch.equal(results[0][1], results[1][1])
    else:
        torch.testing.assert_close(results[0][1], results[1][1])
    out = torch.empty(300, 24, device="cuda", dtype=dtype)
    with pytest.raises(ValueError, match="inner stride"):
        _native.minmax(graph.rowptr, graph.col, x0.t().contiguous().t(), "max", None, 0, out,
                       None)


def attention(layer, dtype, seed):
    """out, lse and the input gradients of one attention op over a graph
    with hub rows (split over the SMs), edge features and dropout, x_l /
    x_r (q / k / v) the slots of one packed projection."""
    from pyg_ioaware.ops.attention import graph_gatv2_packed
    from pyg_ioaware.ops.transformer import graph_transformer_packed
    generator = torch.Generator().manual_seed(seed)
    edge_index = random_graph(500, 500, 6000, seed=seed, hub_degree=1200)
    graph = Graph.from_edge_index(edge_index.cuda(), 500)
    slots = 2 if layer == "gatv2" else 3
    packed = torch.randn(500, slots, 3, 20, generator=generator).to(dtype).cuda()
    edge = torch.randn(graph.num_edges, 3, 20, generator=generator).to(dtype).cuda()
    packed.requires_grad_(), edge.requires_grad_()
    inputs = [packed, edge]
    if layer == "gatv2":
        att = torch.randn(3, 20, generator=generator).cuda().requires_grad_()
        inputs.append(att)
        out, lse = graph_gatv2_packed(graph, packed, att, edge, dropout_p=0.3, seed=seed)
    else:
        out, lse = graph_transformer_packed(graph, packed, edge=edge, dropout_p=0.3, seed=seed)
    grad_out = torch.randn(out.shape, generator=generator).to(dtype).cuda()
    return out, lse, torch.autograd.grad(out, inputs, grad_out)


@pytest.mark.parametrize("layer", ["gatv2", "transformer"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_launches_match_ctypes(calls, monkeypatch, layer, dtype):
    """GATv2's and the graph transformer's forward and backward launched
    from C++ give what the ctypes launches give: the same out and lse
    (bitwise), the same gradients up to the order of their atomic sums; a
    bad layout raises the same ValueError before any launch. Through the
    Python autograd Functions, which call the launches one by one (the C++
    autograd nodes are tests/ops/test_attention_native_autograd.py's)."""
    from pyg_ioaware import _native
    from pyg_ioaware.ops import attention as attention_ops, transformer as transformer_ops
    for ops_module in (attention_ops, transformer_ops):
        monkeypatch.setattr(ops_module, "_native_autograd", lambda *args: None)
    results = []
    for host in (False, True):
        monkeypatch.setattr(config, "native_host", host)
        results.append(attention(layer, dtype, seed=47))
    assert calls[layer] == 1 and calls[f"{layer}_backward"] == 1
    (out_a, lse_a, grads_a), (out_b, lse_b, grads_b) = results
    assert torch.equal(out_a, out_b) and torch.equal(lse_a, lse_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-5 if dtype == torch.float32 else 1e-2,
                                   atol=1e-5 if dtype == torch.float32 else 1e-2)
    graph = Graph.from_edge_index(random_graph(50, 50, 300, seed=48).cuda(), 50)
    x = torch.randn(50, 2, 3, 8, device="cuda").to(dtype)
    strided = torch.randn(50, 8, 3, device="cuda").to(dtype).transpose(1, 2)  # channels strided
    monkeypatch.setattr(config, "native_host", True)
    with pytest.raises(ValueError, match="contiguous heads and channels"):
        if layer == "gatv2":
            _native.gatv2(graph.rowptr, graph.col, strided, x[:, 1], None,
                          torch.zeros(3, 8, device="cuda"), 0.2, 0.0, 0, None, 0, None)
        else:
            _native.transformer(graph.rowptr, graph.col, x[:, 0], strided, x[:, 1], None, 0.3,
                                0.0, 0, None, 0)
    assert calls[layer] == 1

