"""The SpMM kernels of our own (pygio_spmm_csr) against a float64 reference:
hubs far above the hub degree and chunk size, many hubs, empty rows,
bipartite shapes, widths 1..600 (odd ones included), row-strided inputs,
int32 and int64 indices, every dtype, fp32 edge values with 16-bit
features, bias, both directions."""
import pytest
import torch
from _helpers import TOLERANCE, random_graph, relative_error, seed_of

from pyg_ioaware import Graph, _native, config

pytestmark = pytest.mark.cuda

# (name, num_src, num_dst, num_edges, hub_degree)
GRAPHS = [
    ("one-hub", 300, 200, 3000, 5000),
    ("many-hubs", 500, 40, 40000, 0),
    ("bipartite-empty-rows", 50, 700, 900, 0),
]
# 129, 260 and 600 are wide rows (64 pieces and more) of 1-, 4- and
# 8-element pieces (16-bit: four, four and two pieces a lane, 600 in two
# passes, the second partial).
WIDTHS = [1, 2, 3, 8, 17, 64, 100, 129, 260, 600]
DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "fp16": torch.float16,
          "bf16": torch.bfloat16}


def _case(name, width, dtype, values_dtype, index_width, monkeypatch):
    """(graph, values, x for forward, x for transposed, bias), CUDA."""
    _, num_src, num_dst, num_edges, hub = next(g for g in GRAPHS if g[0] == name)
    if index_width == 64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    edge_index = random_graph(num_src, num_dst, num_edges, seed_of(name), hub_degree=hub)
    graph = Graph.from_edge_index(edge_index.cuda(), (num_src, num_dst))
    gen = torch.Generator().manual_seed(seed_of(name, width))
    values = (torch.rand(graph.num_edges, generator=gen) + 0.1).to("cuda", values_dtype)
    x = torch.randn(num_src, width, generator=gen).to("cuda", dtype)
    g = torch.randn(num_dst, width, generator=gen).to("cuda", dtype)
    bias = torch.randn(width, generator=gen).to("cuda", values_dtype)
    return graph, values, x, g, bias


def _dense(graph, values):
    a = torch.zeros(graph.num_dst, graph.num_src, dtype=torch.float64)
    a.index_put_((graph.row.long().cpu(), graph.col.long().cpu()), values.double().cpu(),
                 accumulate=True)
    return a


def _run(graph, values, x, bias, transpose, deterministic=False, out=None, out_dtype=None):
    rows = graph.num_src if transpose else graph.num_dst
    if out is None:
        out = torch.full((rows, x.size(1)), float("nan"), dtype=out_dtype or x.dtype,
                         device=x.device)
    _native.spmm_csr(graph.rowptr, graph.col, values, x, bias, out, transpose, deterministic)
    return out


def _check(out, ref, dtype):
    assert out.dtype == dtype
    assert relative_error(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", [g[0] for g in GRAPHS])
def test_own_kernels_match_float64(name, dtype, index_width, monkeypatch):
    value_dtypes = [dtype] + ([torch.float32] if dtype.itemsize == 2 else [])
    for values_dtype in value_dtypes:
        for width in WIDTHS:
            graph, values, x, g, bias = _case(name, width, dtype, values_dtype, index_width,
                                              monkeypatch)
            a = _dense(graph, values)
            _check(_run(graph, values, x, None, False), a @ x.double().cpu(), dtype)
            _check(_run(graph, values, x, bias, False),
                   a @ x.double().cpu() + bias.double().cpu(), dtype)
            _check(_run(graph, values, g, None, True), a.T @ g.double().cpu(), dtype)


# Mixed calls (float32 values and bias): 16-bit X -> float32 Y (GCNConv's
# PyG messages under autocast), float32 X -> 16-bit Y (their gradient).
MIXED = [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
         (torch.float32, torch.bfloat16), (torch.float32, torch.float16)]


@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype,out_dtype", MIXED,
                         ids=[f"{a}-{b}".replace("torch.", "") for a, b in MIXED])
@pytest.mark.parametrize("name", [g[0] for g in GRAPHS])
def test_own_kernels_mixed_output_dtype_match_float64(name, dtype, out_dtype, index_width,
                                                      monkeypatch):
    for width in WIDTHS:
        graph, values, x, g, bias = _case(name, width, dtype, torch.float32, index_width,
                                          monkeypatch)
        a = _dense(graph, values)
        _check(_run(graph, values, x, None, False, out_dtype=out_dtype),
               a @ x.double().cpu(), out_dtype)
        _check(_run(graph, values, x, bias, False, out_dtype=out_dtype),
               a @ x.double().cpu() + bias.double().cpu(), out_dtype)
        _check(_run(graph, values, g, None, True, out_dtype=out_dtype),
               a.T @ g.double().cpu(), out_dtype)


def test_own_kernels_mixed_output_row_strided_and_unaligned(monkeypatch):
    """A float32 Y of 16-bit X whose rows start 4 bytes apart from 16:
    the stores narrow to what Y allows."""
    graph, values, x, _, bias = _case("one-hub", 64, torch.bfloat16, torch.float32, 32,
                                      monkeypatch)
    wide_out = torch.zeros(graph.num_dst, 70, device="cuda")
    out = _run(graph, values, x, bias, False, out=wide_out[:, 1:65])
    _check(out, _dense(graph, values) @ x.double().cpu() + bias.double().cpu(), torch.float32)
    assert (wide_out[:, :1] == 0).all() and (wide_out[:, 65:] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_own_kernels_sanitizer_sample(dtype, monkeypatch):
    """Small enough for compute-sanitizer (gpu_check.sh runs it there): a
    hub, many hubs, empty rows, a vectorized and an odd width."""
    for name in [g[0] for g in GRAPHS]:
        for width in (3, 64):
            graph, values, x, g, bias = _case(name, width, dtype, dtype, 32, monkeypatch)
            a = _dense(graph, values)
            _check(_run(graph, values, x, bias, False),
                   a @ x.double().cpu() + bias.double().cpu(), dtype)
            _check(_run(graph, values, g, None, True), a.T @ g.double().cpu(), dtype)
            if dtype == torch.bfloat16:  # the mixed forms, both ways
                values32, bias32 = values.float(), bias.float()
                _check(_run(graph, values32, x, bias32, False, out_dtype=torch.float32),
                       a @ x.double().cpu() + bias.double().cpu(), torch.float32)
                _check(_run(graph, values32, g.float(), None, True, out_dtype=dtype),
                       a.T @ g.double().cpu(), dtype)


def _batched_rows_case(seed):
    """(rowptr, col, num_src), int32 on CUDA, with enough destination rows
    for the row-batch kernel (spmm_row_batches_kernel): a pass of the grid
    (8 blocks of 8 warps an SM) takes 32 rows a warp, and the kernel wants
    4 batches a sub-group, so 8192 rows an SM and more. Most rows hold one
    entry or none, some a few; hubs above the hub degree stand alone, side
    by side and at both ends."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_dst, num_src = 8192 * sms + 37, 100_003
    gen = torch.Generator().manual_seed(seed)
    pick = torch.rand(num_dst, generator=gen)
    degree = (pick < 0.6).long()
    few = pick >= 0.85
    degree[few] = torch.randint(2, 13, (int(few.sum()),), generator=gen)
    hubs = torch.cat([torch.tensor([0, 8, 9, 10, 11, 16, 23, num_dst - 1]),
                      torch.randint(num_dst, (40,), generator=gen)])
    degree[hubs] = torch.randint(257, 3000, (hubs.numel(),), generator=gen)
    rowptr = torch.zeros(num_dst + 1, dtype=torch.long)
    rowptr[1:] = degree.cumsum(0)
    col = torch.randint(num_src, (int(rowptr[-1]),), generator=gen)
    return rowptr.int().cuda(), col.int().cuda(), num_src


@pytest.mark.parametrize("width", [9, 24, 64])
@pytest.mark.parametrize("dtype,values_dtype", [
    (torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32)],
    ids=["fp32", "bf16", "bf16-fp32-values", "fp16-fp32-values"])
def test_own_kernels_row_batches_match_float64_row_by_row(width, dtype, values_dtype):
    """A graph large enough for the row-batch kernel (narrow rows of large
    graphs), each output element against float64 within the rounding of
    its own sum: a row summed into its neighbour or lost at a batch's or a
    hub's edge would stand out (a norm over a million rows would hide it).
    Rows without entries are the bias exactly."""
    rowptr, col, num_src = _batched_rows_case(seed_of("row-batches", width))
    num_dst, nnz = rowptr.numel() - 1, col.numel()
    gen = torch.Generator(device="cuda").manual_seed(seed_of(width, dtype))
    values = (torch.rand(nnz, generator=gen, device="cuda") + 0.1).to(values_dtype)
    x = torch.randn(num_src, width, generator=gen, device="cuda").to(dtype)
    bias = torch.randn(width, generator=gen, device="cuda").to(values_dtype)
    out = torch.full((num_dst, width), float("nan"), dtype=dtype, device="cuda")
    _native.spmm_csr(rowptr, col, values, x, bias, out, False, False)
    row = torch.repeat_interleave(torch.arange(num_dst, device="cuda"),
                                  rowptr.diff().long())
    terms = values.double()[:, None] * x.double()[col.long()]
    ref = torch.zeros(num_dst, width, dtype=torch.float64, device="cuda")
    ref.index_add_(0, row, terms).add_(bias.double())
    magnitude = torch.zeros_like(ref).index_add_(0, row, terms.abs()).add_(bias.double().abs())
    rounding = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    error = (out.double() - ref).abs()
    assert torch.isfinite(out).all()
    assert (error <= rounding * ref.abs() + 2e-5 * magnitude + 1e-6).all()
    empty = rowptr.diff() == 0
    assert torch.equal(out[empty], bias.to(dtype).expand(int(empty.sum()), width))


def test_own_kernels_row_strided_inputs_and_outputs(monkeypatch):
    graph, values, x, g, bias = _case("one-hub", 40, torch.float32, torch.float32, 32,
                                      monkeypatch)
    a = _dense(graph, values)
    wide_x = torch.randn(x.size(0), 48, device="cuda")
    wide_x[:, 3:43] = x
    wide_out = torch.zeros(max(graph.num_src, graph.num_dst), 50, device="cuda")
    out = _run(graph, values, wide_x[:, 3:43], bias, False,
               out=wide_out[:graph.num_dst, 5:45])
    _check(out, a @ x.double().cpu() + bias.double().cpu(), torch.float32)
    assert (wide_out[:, :5] == 0).all() and (wide_out[:, 45:] == 0).all()
    wide_out.zero_()
    out = _run(graph, values, g, None, True, out=wide_out[:graph.num_src, 5:45])
    _check(out, a.T @ g.double().cpu(), torch.float32)
    assert (wide_out[:, :5] == 0).all() and (wide_out[:, 45:] == 0).all()


def test_own_kernels_deterministic_forward_is_repeatable(monkeypatch):
    """No hub split with ``deterministic``: bitwise the same every run."""
    graph, values, x, _, bias = _case("many-hubs", 64, torch.float32, torch.float32, 32,
                                      monkeypatch)
    first = _run(graph, values, x, bias, False, deterministic=True)
    for _ in range(3):
        assert torch.equal(_run(graph, values, x, bias, False, deterministic=True), first)
    _check(first, _dense(graph, values) @ x.double().cpu() + bias.double().cpu(),
           torch.float32)


def test_own_kernels_empty_problems():
    graph = Graph.from_edge_index(torch.empty(2, 0, dtype=torch.long, device="cuda"), (4, 6))
    values = torch.empty(0, device="cuda")
    x = torch.randn(4, 5, device="cuda")
    bias = torch.randn(5, device="cuda")
    assert torch.equal(_run(graph, values, x, bias, False), bias.expand(6, 5))
    assert torch.equal(_run(graph, values, torch.randn(6, 5, device="cuda"), None, True),
                       torch.zeros(4, 5, device="cuda"))
    assert _run(graph, values, x[:, :0], None, False).shape == (6, 0)


def test_own_kernels_refuse_bad_parameters():
    graph = Graph.from_edge_index(torch.tensor([[0, 1], [1, 0]], device="cuda"), 2)
    x = torch.randn(2, 4, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(2, 4, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(_native.NativeError, match="values_dtype"):
        _native.spmm_csr(graph.rowptr, graph.col, torch.ones(2, device="cuda",
                         dtype=torch.float64), x, None, out, False, False)
    with pytest.raises(_native.NativeError, match="no bias"):
        _native.spmm_csr(graph.rowptr, graph.col, torch.ones(2, device="cuda"), x,
                         torch.ones(4, device="cuda"), out, True, False)
    # Y of another dtype only with float32 values, float32 <-> 16-bit.
    with pytest.raises(_native.NativeError, match="y_dtype"):
        _native.spmm_csr(graph.rowptr, graph.col, torch.ones(2, device="cuda",
                         dtype=torch.bfloat16), x, None, out.float(), False, False)
    with pytest.raises(_native.NativeError, match="y_dtype"):
        _native.spmm_csr(graph.rowptr, graph.col, torch.ones(2, device="cuda"), x, None,
                         out.double(), False, False)
