"""pyg_ioaware::spmm / sddmm and the functional API.

The CPU implementation is checked against independent references (a dense
adjacency product, torch.scatter_reduce); every CUDA result is checked
against the float64 CPU result on fresh random graphs, forward and backward.
"""
import zlib

import pytest
import torch
from _helpers import TOLERANCE, native_required, random_graph, relative_error

import pyg_ioaware
from pyg_ioaware import Graph, config, ops
from pyg_ioaware.ops.spmm import SpmmFunction

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def dense_reference(edge_index, weight, num_src, num_dst, x, reduce):
    """out = A x with A[d, s] = sum of weights of edges s -> d (float64)."""
    a = torch.zeros(num_dst, num_src, dtype=torch.float64)
    a.index_put_((edge_index[1], edge_index[0]), weight.double(), accumulate=True)
    out = a @ x.double()
    if reduce == "mean":
        deg = torch.bincount(edge_index[1], minlength=num_dst).clamp(min=1)
        out = out / deg.unsqueeze(1)
    return out


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("num_src, num_dst", [(60, 60), (45, 23)])
def test_cpu_matches_dense_reference(reduce, weighted, num_src, num_dst):
    edge_index = random_graph(num_src, num_dst, 400, seed=11, hub_degree=150)
    weight = torch.rand(edge_index.size(1), dtype=torch.float64) if weighted else None
    x_src = torch.randn(num_src, 7, dtype=torch.float64)
    x_dst = torch.randn(num_dst, 7, dtype=torch.float64)
    out = ops.aggregate((x_src, x_dst), edge_index, reduce=reduce, edge_weight=weight)
    ones = torch.ones(edge_index.size(1), dtype=torch.float64)
    ref = dense_reference(edge_index, ones if weight is None else weight, num_src, num_dst,
                          x_src, reduce)
    assert relative_error(out, ref) < 1e-12


def test_cpu_mean_matches_scatter_reduce():
    edge_index = random_graph(50, 50, 300, seed=12)
    x = torch.randn(50, 5, dtype=torch.float64)
    out = ops.aggregate(x, edge_index, reduce="mean")
    ref = torch.zeros(50, 5, dtype=torch.float64).scatter_reduce(
        0, edge_index[1].unsqueeze(1).expand(-1, 5), x[edge_index[0]], "mean", include_self=False)
    assert relative_error(out, ref) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cpu_low_precision(dtype):
    edge_index = random_graph(40, 40, 300, seed=13)
    x = torch.randn(40, 9)
    out = ops.aggregate(x.to(dtype), edge_index, reduce="mean")
    assert out.dtype == dtype
    ref = ops.aggregate(x.double(), edge_index, reduce="mean")
    assert relative_error(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_cpu_autocast_keeps_the_input_dtype(reduce):
    """Under CPU bf16 autocast an fp32 aggregation stays fp32 (torch.sparse
    has no bf16 CPU mm for autocast to cast it to)."""
    edge_index = random_graph(40, 40, 300, seed=14)
    x = torch.randn(40, 9)
    expected = ops.aggregate(x, edge_index, reduce=reduce)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ops.aggregate(x, edge_index, reduce=reduce)
    assert out.dtype == torch.float32
    assert torch.equal(out, expected)


def test_gradcheck_cpu():
    edge_index = random_graph(12, 9, 40, seed=14)
    x = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    x_dst = torch.empty(9, 3, dtype=torch.float64)
    fn = lambda x, w: ops.aggregate((x, x_dst), edge_index, "mean", edge_weight=w)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w))
    assert torch.autograd.gradgradcheck(lambda x: fn(x, w.detach()), (x,))


@pytest.mark.parametrize("transpose", [False, True])
def test_fused_bias_gradcheck_cpu(transpose):
    """Y = op(A) X + b: gradients in x, values and the bias."""
    graph = Graph.from_edge_index(random_graph(12, 9, 40, seed=16), (12, 9))
    values = torch.rand(graph.num_edges, dtype=torch.float64, requires_grad=True)
    x = torch.randn(9 if transpose else 12, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    num_out = 12 if transpose else 9
    fn = lambda v, x, b: SpmmFunction.apply(  # noqa: E731
        graph.rowptr, graph.col, v, None, None, None, x, transpose, num_out, None, b)
    assert torch.autograd.gradcheck(fn, (values, x, bias))
    plain = SpmmFunction.apply(graph.rowptr, graph.col, values, None, None, None, x,
                               transpose, num_out)
    assert torch.allclose(fn(values, x, bias), plain + bias)


def op_sample_inputs(device, dtype=torch.float32):
    """Argument tuples for opcheck: plain, transposed, and sddmm's."""
    graph = Graph.from_edge_index(random_graph(20, 14, 90, seed=15).to(device), (20, 14))
    values = ops.normalized_values(graph, None, "mean", dtype).values
    x = torch.randn(20, 6, device=device, dtype=dtype)
    g = torch.randn(14, 6, device=device, dtype=dtype)
    structure = (graph.rowptr, graph.col, values)
    bias = torch.randn(6, device=device, dtype=dtype)
    spmm_args = [structure + (x, 14, False), structure + (g, 20, True),
                 structure + (x, 14, False, bias), structure + (g, 20, True, bias)]
    if dtype == torch.float32:  # the mixed calls: 16-bit X -> float32 Y, and back
        spmm_args += [structure + (x.bfloat16(), 14, False, bias, torch.float32),
                      structure + (g, 20, True, None, torch.float16)]
    return graph, spmm_args, [(graph.rowptr, graph.col, g, x)]


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("x_dtype,out_dtype", [(torch.bfloat16, torch.float32),
                                               (torch.float16, torch.float32),
                                               (torch.float32, torch.bfloat16)])
def test_mixed_output_dtype_matches_float64(device, x_dtype, out_dtype):
    """float32 values and bias, X in one width and Y in the other: Y is
    A X + b of X as it is, in out_dtype."""
    graph = Graph.from_edge_index(random_graph(40, 30, 300, seed=16).to(device), (40, 30))
    values = ops.normalized_values(graph, None, "mean", torch.float32).values
    x = torch.randn(40, 7, device=device).to(x_dtype)
    bias = torch.randn(7, device=device)
    out = torch.ops.pyg_ioaware.spmm(graph.rowptr, graph.col, values, x, 30, False, bias,
                                     out_dtype)
    csr_edges = torch.stack([graph.col, graph.row]).long().cpu()
    expected = dense_reference(csr_edges, values.cpu(), 40, 30, x.cpu(), "sum") + bias.cpu()
    assert out.dtype == out_dtype
    assert relative_error(out, expected) < TOLERANCE[out_dtype]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("entries_per_row", [2, 12])
def test_mixed_propagation_backward_matches_float64(device, dtype, entries_per_row):
    """16-bit h, float32 edge weights and bias (float32 messages and Y, as
    under autocast): dh = A^T dY in h's dtype from the float32 dY, gathered
    as it is (few entries a row of dY) or with dY and the weights cast to
    h's dtype first (many; ops.spmm.CAST_GRAD_FIRST_DEGREE, 4). Both
    within 16-bit rounding of float64; db sums the float32 dY."""
    n = 300
    edge_index = random_graph(n, n, n * entries_per_row, seed=17 + entries_per_row,
                              hub_degree=n).to(device)
    weight = torch.rand(edge_index.size(1), device=device)
    adjacency = ops.gcn_adjacency(edge_index, n, weight, add_self_loops=False, normalize=False)
    h = torch.randn(n, 24, device=device).to(dtype).requires_grad_()
    bias = torch.randn(24, device=device, requires_grad=True)
    grad = torch.randn(n, 24, device=device)
    out = adjacency.propagate(h, bias=bias)
    out.backward(grad)
    assert out.dtype == torch.float32 and h.grad.dtype == dtype
    edges, weight = edge_index.cpu(), weight.cpu()
    expected = dense_reference(edges, weight, n, n, h.cpu(), "sum") + bias.double().cpu()
    assert relative_error(out, expected) < 1e-5
    # A^T dY: the same product over the reversed edges.
    assert relative_error(h.grad, dense_reference(edges.flip(0), weight, n, n, grad.cpu(),
                                                  "sum")) < TOLERANCE[dtype]
    assert relative_error(bias.grad, grad.double().sum(0)) < 1e-6


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    _, spmm_args, sddmm_args = op_sample_inputs(device)
    for args in spmm_args:
        torch.library.opcheck(torch.ops.pyg_ioaware.spmm.default, args)
    for args in sddmm_args:
        torch.library.opcheck(torch.ops.pyg_ioaware.sddmm.default, args)


def test_transposed_op_and_backward_modes(monkeypatch):
    graph, spmm_args, _ = op_sample_inputs("cpu", torch.float64)
    rowptr, col, values, x, num_out, _ = spmm_args[0]
    edge_values = ops.normalized_values(graph, None, "mean", torch.float64)
    t = graph.transpose
    g = torch.randn(num_out, x.size(1), dtype=torch.float64)
    # A^T g through the transposed op equals the SpMM over the materialized CSR^T.
    via_t = ops.spmm_csr(rowptr, col, values, g, x.size(0), True)
    via_csr_t = ops.spmm_csr(t.rowptr, t.col, edge_values.values_t, g, x.size(0), False)
    assert relative_error(via_t, via_csr_t) < 1e-12
    x.requires_grad_()
    grads = {}
    for mode in config.SPMM_BACKWARD_MODES:
        monkeypatch.setattr(config, "spmm_backward", mode)
        out = ops.aggregate((x, torch.empty(num_out, 1)), graph, "mean")
        grads[mode] = torch.autograd.grad(out, x, g)[0]
    assert relative_error(grads["transpose"], grads["materialized"]) < 1e-12
    # The transposed direction is differentiable too: Y = A^T G  =>  dG = A dY.
    gg = g.clone().requires_grad_()
    dy = torch.randn(x.size(0), x.size(1), dtype=torch.float64)
    a = (rowptr, col, values, t.rowptr, t.col, edge_values.values_t)
    (grad_g,) = torch.autograd.grad(SpmmFunction.apply(*a, gg, True, x.size(0)), gg, dy)
    assert relative_error(grad_g, ops.spmm_csr(rowptr, col, values, dy, num_out, False)) < 1e-12


def test_empty_inputs():
    x = torch.randn(4, 3)
    out = ops.aggregate(x, torch.empty(2, 0, dtype=torch.long))
    assert torch.equal(out, torch.zeros(4, 3))
    out = ops.aggregate((torch.randn(0, 3), torch.randn(5, 3)),
                        torch.empty(2, 0, dtype=torch.long))
    assert out.shape == (5, 3) and not out.any()


def test_bad_input_is_rejected_before_any_kernel():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="reduce"):
        ops.aggregate(x, edge_index, reduce="prod")
    with pytest.raises(ValueError, match="shape \\[3\\]"):
        ops.aggregate(x, edge_index, edge_weight=torch.rand(4))
    with pytest.raises(TypeError, match="floating-point"):
        ops.aggregate(x, edge_index, edge_weight=torch.ones(3, dtype=torch.long))
    with pytest.raises(TypeError, match="node features must be one of"):
        ops.aggregate(x.long(), edge_index)
    with pytest.raises(ValueError, match="2-D"):
        ops.aggregate(torch.randn(3, 4, 2, 2), edge_index)
    with pytest.raises(ValueError, match="out of range"):
        ops.aggregate(torch.randn(2, 4), edge_index)
    with pytest.raises(ValueError, match="is on meta"):
        ops.aggregate(x, edge_index, edge_weight=torch.rand(3, device="meta"))
    with pytest.raises(ValueError, match="node features are on meta"):
        ops.aggregate(x.to("meta"), Graph.from_edge_index(edge_index, 3))


# ---------------------------------------------------------------- CUDA
@pytest.mark.cuda
def test_native_library_is_used_on_gpu_hosts():
    if native_required():
        assert pyg_ioaware.cuda_available(), "PYG_IOAWARE_REQUIRE_NATIVE=1 but no native library"
    else:
        pytest.skip("native library not required (set PYG_IOAWARE_REQUIRE_NATIVE=1)")


def poison_cuda_allocator(numel, dtype):
    """Leaves a NaN-filled block in torch's cache so an unwritten output shows."""
    block = torch.full((numel,), float("nan"), dtype=dtype, device="cuda")
    del block


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 3, 33, 64, 130])
@pytest.mark.parametrize("reduce, weighted", [("sum", False), ("mean", True), ("sum", True)])
def test_cuda_matches_cpu_float64(dtype, width, reduce, weighted):
    seed = zlib.crc32(f"{dtype}-{width}-{reduce}-{weighted}".encode()) % 10_000
    num_src, num_dst = 300, 257
    edge_index = random_graph(num_src, num_dst, 3000, seed=seed, hub_degree=2500)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num_src, width, generator=gen)
    w = torch.rand(edge_index.size(1), generator=gen) if weighted else None
    grad = torch.randn(num_dst, width, generator=gen)
    x_dst = torch.empty(num_dst, width)

    def run(device, dt):
        xx = x.to(device, dt).requires_grad_()
        ww = None if w is None else w.to(device, dt).requires_grad_()
        poison_cuda_allocator(num_dst * width, dt) if device == "cuda" else None
        out = ops.aggregate((xx, x_dst.to(device, dt)), edge_index.to(device), reduce, ww)
        out.backward(grad.to(device, dt))
        return out, xx.grad, None if ww is None else ww.grad

    ours = run("cuda", dtype)
    ref = run("cpu", torch.float64)
    for got, want in zip(ours, ref):
        if want is not None:
            assert got.dtype == dtype
            assert relative_error(got, want) < TOLERANCE[dtype]


@pytest.mark.cuda
def test_cuda_small_sanitizer():
    """Small problem run under compute-sanitizer by scripts/gpu_check.sh."""
    edge_index = random_graph(37, 29, 200, seed=21, hub_degree=100).cuda()
    x = torch.randn(37, 19, device="cuda", requires_grad=True)
    w = torch.rand(edge_index.size(1), device="cuda", requires_grad=True)
    out = ops.aggregate((x, torch.empty(29, 19, device="cuda")), edge_index, "mean", w)
    out.sum().backward()
    ref = ops.aggregate((x.detach().cpu().double(), torch.empty(29, 19)), edge_index.cpu(),
                        "mean", w.detach().cpu().double())
    assert relative_error(out, ref) < TOLERANCE[torch.float32]
    assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()


@pytest.mark.cuda
def test_cuda_new_weights_on_a_cached_plan():
    """The plan is cached per structure; new edge weights must be used."""
    edge_index = random_graph(200, 200, 2000, seed=22).cuda()
    x = torch.randn(200, 64, device="cuda")
    for _ in range(3):
        w = torch.rand(edge_index.size(1), device="cuda")
        out = ops.aggregate(x, edge_index, "sum", w)
        ref = ops.aggregate(x.cpu().double(), edge_index.cpu(), "sum", w.cpu().double())
        assert relative_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.cuda
def test_cuda_transposed_backward_mode(monkeypatch):
    edge_index = random_graph(150, 120, 1500, seed=23).cuda()
    x = torch.randn(150, 40, device="cuda", requires_grad=True)
    g = torch.randn(120, 40, device="cuda")
    grads = {}
    for mode in config.SPMM_BACKWARD_MODES:
        monkeypatch.setattr(config, "spmm_backward", mode)
        out = ops.aggregate((x, torch.empty(120, 40, device="cuda")), edge_index, "mean")
        grads[mode] = torch.autograd.grad(out, x, g)[0]
    assert relative_error(grads["transpose"], grads["materialized"]) < 1e-5


@pytest.mark.cuda
def test_cuda_side_stream_and_graph_capture():
    edge_index = random_graph(500, 500, 5000, seed=24).cuda()
    graph = Graph.from_input(edge_index, num_nodes=500)
    g = torch.randn(500, 96, device="cuda")

    def step(x):
        out = ops.aggregate(x, graph, "mean")
        (gx,) = torch.autograd.grad(out, x, g)
        return out, gx

    x = torch.randn(500, 96, device="cuda", requires_grad=True)
    expected = step(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = step(x)
    torch.cuda.current_stream().wait_stream(side)
    for a, b in zip(got, expected):  # cuSPARSE's ALG1/ALG3 are not bitwise deterministic
        assert relative_error(a, b) < 1e-6

    class Mean(torch.nn.Module):
        def forward(self, x):
            return ops.aggregate(x, graph, "mean")

    # Forward and backward captured as CUDA graphs, replayed on new inputs.
    sample = torch.randn(500, 96, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(Mean(), (sample,))
    for _ in range(2):
        x_new = torch.randn(500, 96, device="cuda", requires_grad=True)
        out = graphed(x_new)
        (gx,) = torch.autograd.grad(out, x_new, g)
        out_ref, gx_ref = step(x_new)
        assert relative_error(out, out_ref) < 1e-6
        assert relative_error(gx, gx_ref) < 1e-6


def bad_raw_op_calls(device):
    """(name, op, args, error) for raw-op inputs that must raise before any
    kernel runs (each once crashed or could crash a CUDA context)."""
    rowptr = torch.tensor([0, 2, 3, 5], device=device)
    col = torch.tensor([0, 2, 1, 0, 3], device=device)
    values = torch.rand(5, device=device)
    x = torch.randn(4, 6, device=device)
    g = torch.randn(3, 6, device=device)
    i32 = lambda t: t.to(torch.int32)  # noqa: E731
    spmm, sddmm = torch.ops.pyg_ioaware.spmm, torch.ops.pyg_ioaware.sddmm
    return [
        ("int16 indices", spmm, (rowptr.short(), col.short(), values, x, 3, False), TypeError),
        ("int64 rowptr, int32 col", sddmm, (rowptr, i32(col), g, x), TypeError),
        ("col out of range", spmm, (rowptr, col, values, x[:3], 3, False), ValueError),
        ("negative col", spmm, (rowptr, col - 1, values, x, 3, False), ValueError),
        ("rowptr past nnz", spmm, (rowptr + 1, col, values, x, 3, False), ValueError),
        ("decreasing rowptr", spmm, (rowptr.flip(0), col, values, x, 3, False), ValueError),
        ("num_out not the row count", spmm, (rowptr, col, values, x, 5, False), ValueError),
        ("transposed x rows", spmm, (rowptr, col, values, x, 4, True), ValueError),
        ("one value short", spmm, (rowptr, col, values[:4], x, 3, False), ValueError),
        ("values dtype", spmm, (rowptr, col, values.double(), x, 3, False), TypeError),
        ("1-D x", spmm, (rowptr, col, values, x[:, 0], 3, False), ValueError),
        ("strided col", spmm, (rowptr, torch.stack([col, col], 1)[:, 0], values, x, 3, False),
         ValueError),
        ("x on meta", spmm, (rowptr, col, values, x.to("meta"), 3, False), ValueError),
        ("bias width", spmm, (rowptr, col, values, x, 3, False, values[:5]), ValueError),
        ("bias dtype", spmm, (rowptr, col, values, x, 3, False, values[:6].double()),
         TypeError),
        ("bias on meta", spmm, (rowptr, col, values, x, 3, False, x[0].to("meta")),
         ValueError),
        ("out_dtype float64", spmm, (rowptr, col, values, x, 3, False, None, torch.float64),
         TypeError),
        ("mixed call, 16-bit values", spmm,
         (rowptr, col, values.bfloat16(), x.bfloat16(), 3, False, None, torch.float32),
         TypeError),
        ("sddmm g rows", sddmm, (rowptr, col, g[:2], x, ), ValueError),
        ("sddmm widths", sddmm, (rowptr, col, g[:, :5], x), ValueError),
        ("sddmm col out of range", sddmm, (rowptr, col, g, x[:2]), ValueError),
        ("sddmm int16", sddmm, (rowptr.short(), col.short(), g, x), TypeError),
    ]


@pytest.mark.parametrize("device", devices())
def test_bad_raw_op_inputs_raise(device):
    for name, op, args, error in bad_raw_op_calls(device):
        with pytest.raises(error):
            op(*args)
    if device == "cuda":
        torch.cuda.synchronize()  # the context survived every call above
        assert torch.ones(1, device="cuda").item() == 1


def test_validated_structure_is_read_once(monkeypatch):
    rowptr, col = torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1])
    x, values = torch.randn(2, 3), torch.rand(3)
    ops.spmm_csr(rowptr, col, values, x, 2, False)
    calls = []
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append(1) or [])
    ops.spmm_csr(rowptr, col, values, x, 2, False)  # remembered: no read
    assert calls == []
    monkeypatch.undo()
    col[0] = 5  # an in-place change is seen
    with pytest.raises(ValueError, match="col entries"):
        ops.spmm_csr(rowptr, col, values, x, 2, False)


@pytest.mark.cuda
def test_cuda_plans_and_graphs_are_released_with_their_edge_index(monkeypatch):
    """No reference cycle keeps a mini-batch's Graph alive: when the
    edge_index dies, the Graph, its CSR^T and their cuSPARSE plans go at
    once (reference counting, no garbage collection needed)."""
    import weakref

    from pyg_ioaware.graph import known_structure_state

    monkeypatch.setenv("PYG_IOAWARE_BACKEND_SPMM", "cusparse-alg2")
    edge_index = random_graph(300, 300, 3000, seed=25).cuda()
    x = torch.randn(300, 32, device="cuda", requires_grad=True)
    ops.gcn_adjacency(edge_index, 300).propagate(x).sum().backward()
    graph = Graph.from_input(edge_index, num_nodes=300).with_remaining_self_loops()
    # Forward and (a one-step graph: transposed) backward plans sit beside A.
    assert len(known_structure_state(graph.rowptr).plans) == 2
    refs = [weakref.ref(graph), weakref.ref(graph.rowptr)]
    del edge_index, graph
    assert all(r() is None for r in refs)


@pytest.mark.cuda
def test_cuda_plans_built_during_capture():
    """The first SpMM on a Graph happens inside CUDA-graph capture: values,
    plan and workspace are made there (no timing, no synchronisation) and
    replays give the eager result."""
    edge_index = random_graph(400, 400, 4000, seed=26, hub_degree=1000).cuda()
    graph = Graph.from_input(edge_index, num_nodes=400)  # eager: the one sync
    x = torch.randn(400, 40, device="cuda")
    cuda_graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(cuda_graph):
        out = ops.gcn_adjacency(graph, 400).propagate(x)
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        cuda_graph.replay()
        ref = ops.gcn_adjacency(edge_index.cpu(), 400).propagate(x.cpu().double())
        assert relative_error(out, ref) < TOLERANCE[torch.float32]


def test_auto_backward_builds_the_transpose_only_for_a_reused_graph():
    edge_index = random_graph(50, 50, 400, seed=27)
    graph = Graph.from_input(edge_index, num_nodes=50)
    x = torch.randn(50, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(50, 6, dtype=torch.float64)

    def step():  # two layers over one graph, one backward pass: one training step
        out = ops.aggregate(ops.aggregate(x, graph, "mean").tanh(), graph, "mean")
        return torch.autograd.grad(out, x, g)[0]

    first = step()
    assert graph.state.transpose is None  # a one-step graph never sorts for A^T
    second = step()  # a later backward pass: the graph is reused
    assert graph.state.transpose is not None
    assert relative_error(first, second) < 1e-12
    fresh = Graph.from_edge_index(edge_index, 50)
    torch.use_deterministic_algorithms(True)
    try:
        ops.aggregate(x, fresh, "mean").backward(g)
    finally:
        torch.use_deterministic_algorithms(False)
    assert fresh.state.transpose is not None  # deterministic: always the CSR^T


def test_auto_backward_builds_the_transpose_for_a_large_transposed_spmm(monkeypatch):
    """A transposed SpMM of MATERIALIZE_WORK entries x width or more runs
    over a CSR^T even in a graph's first backward pass, with the same
    gradient; below it, the first pass builds none."""
    from pyg_ioaware.ops.spmm import LazyTranspose

    edge_index = random_graph(50, 50, 400, seed=29)
    work = edge_index.size(1) * 6  # the graph's entries x width
    x = torch.randn(50, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(50, 6, dtype=torch.float64)
    grads = {}
    for threshold in (work + 1, work):
        monkeypatch.setattr(LazyTranspose, "MATERIALIZE_WORK", threshold)
        graph = Graph.from_edge_index(edge_index, 50)
        grads[threshold] = torch.autograd.grad(ops.aggregate(x, graph, "mean"), x, g)[0]
        assert (graph.state.transpose is not None) == (threshold == work)
    first, second = grads.values()
    assert relative_error(first, second) < 1e-12


def test_2d_outputs_are_not_views():
    """An in-place bias add on a view of the SpMM output would make backward
    copy the whole output (CopySlices): 2-D results must be plain tensors."""
    edge_index = random_graph(40, 40, 200, seed=28)
    x = torch.randn(40, 5, requires_grad=True)
    for out in (ops.gcn_adjacency(edge_index, 40).propagate(x), ops.aggregate(x, edge_index)):
        assert out._base is None
        out.add_(1.0)
        assert type(out.grad_fn).__name__ == "AddBackward0"


def test_cpu_path_repeats_its_numbers():
    """The CPU path (torch.sparse.mm forward, reference transposed) gives
    bitwise the same forward and backward on every run."""
    edge_index = random_graph(300, 200, 4000, seed=27, hub_degree=500)
    x = torch.randn(300, 33, requires_grad=True)
    x_dst = torch.empty(200, 1)

    def run():
        x.grad = None
        out = ops.aggregate((x, x_dst), edge_index, "mean")
        out.backward(torch.ones_like(out))
        return out.detach().clone(), x.grad.clone()

    first = run()
    for _ in range(3):
        again = run()
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
