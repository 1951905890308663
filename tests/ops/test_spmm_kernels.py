"""The SpMM kernels of our own (pygio_spmm_csr) against a float64 reference:
hubs far above the hub degree and chunk size, many hubs, empty rows,
bipartite shapes, widths 1..600 (odd ones included), row-strided inputs,
int32 and int64 indices, every dtype, fp32 edge values with 16-bit
features, bias, both directions."""
import pytest
import torch
from _helpers import TOLERANCE, random_graph, relative_error, seed_of

from pyg_ioaware import Graph, _native
from pyg_ioaware.graph import ENV_FORCE_INT64

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
        monkeypatch.setenv(ENV_FORCE_INT64, "1")
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
