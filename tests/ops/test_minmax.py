"""The reduction family: pyg_ioaware::neighbor_minmax / neighbor_minmax_backward,
graph_minmax / MinMaxFunction and ops.aggregate(reduce="min" | "max").

Every result is checked against PyG 2.8's own computation in float64 with
autograd (torch_geometric.utils.scatter(x[src], dst, reduce=...) on CPU,
i.e. torch.scatter_reduce amin / amax with include_self=False on zeros):
forward values exactly (NaN == NaN, -0.0 == +0.0), gradients elementwise
within TOLERANCE of the sum of the absolute shares each source receives,
and the arg codes, one and two bytes, against the encoding of
pyg_ioaware.h (the position in its row of the one entry equal to the
result; W where the row must be walked in backward, a winner past
position W - 1 included; W + 1 for rows without entries). 16-bit runs are
compared with the float64 reference of their rounded inputs, for which the
forward is exact. CPU always; CUDA under @pytest.mark.cuda (gpu_check.sh
runs the "property_sample" fp32 / bf16 cases and the "sanitizer" tests under
compute-sanitizer).
"""
import functools
import itertools
import math

import pytest
import torch
from _helpers import (PROPERTY_GRAPHS, TOLERANCE, cap_hub_lists, cuda_kernel_names, hubs_graph,
                      native_required, property_case, random_graph, seed_of)
from torch_geometric.utils import scatter

from pyg_ioaware import Graph, _native, config, ops
from pyg_ioaware.graph import structure_state
from pyg_ioaware.ops import hubs, minmax as mm
from pyg_ioaware.ops.minmax import MIN_HUB_DEGREE, graph_minmax, hub_degree, walk_code

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp64", "fp16", "bf16"]
ARG_BYTES = (1, 2)  # the widths of an arg code
REDUCES = ["min", "max"]
GRAPH_NAMES = [g[0] for g in PROPERTY_GRAPHS]
CUDA_WIDTHS = [1, 3, 17, 64, 130, 512]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32,
            torch.float16: torch.int16, torch.bfloat16: torch.int16}

forward_op = torch.ops.pyg_ioaware.neighbor_minmax
backward_op = torch.ops.pyg_ioaware.neighbor_minmax_backward
# The wrappers themselves, for the spies that tests install around them.
NATIVE_MINMAX, NATIVE_MINMAX_BACKWARD = _native.minmax, _native.minmax_backward


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread():
    """The CPU references here are small: OpenMP fan-out costs them more
    than it saves (scatter_reduce_ on an expanded index: ~80 ms a call with
    2 threads on a loaded host, 0.1 ms with one). Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def check_native(device):
    """On GPU hosts (PYG_IOAWARE_REQUIRE_NATIVE=1) CUDA tests must run the
    kernels, not the plain-torch fallback."""
    if torch.device(device).type == "cuda" and native_required():
        assert _native.library() is not None, "PYG_IOAWARE_REQUIRE_NATIVE=1 but no library"


# ------------------------------------------------------------- references
def pyg_reference(edge_index, x64, num_dst, reduce, grad64):
    """(out, grad_x, bound) in float64 exactly as PyG computes them (scatter
    with autograd); bound[s, f] = the sum of |share| source s receives (the
    gradient of |grad_out|), the scale of a gradient's rounding error."""
    edge_index = edge_index.cpu()
    xr = x64.detach().cpu().clone().requires_grad_()
    out = scatter(xr[edge_index[0]], edge_index[1], dim=0, dim_size=num_dst, reduce=reduce)
    grad, bound = torch.zeros_like(xr), torch.zeros_like(xr)
    if out.requires_grad:
        (grad,) = torch.autograd.grad(out, xr, grad64.cpu(), retain_graph=True)
        (bound,) = torch.autograd.grad(out, xr, grad64.cpu().abs())
    return out.detach(), grad, bound


def expected_arg(rowptr, col, x64, out64, reduce, arg_bytes):
    """The arg codes pyg_ioaware.h specifies for the CSR (rowptr, col) and
    the float64 result, as int64: the position in its row of the entry
    equal to the result (NaN equal to NaN) where it alone takes the
    gradient; W = walk_code(arg_bytes) where the result is tied, zero, NaN
    or the worst infinity (+inf for min, -inf for max) or that position is
    W or more; W + 1 where the row has no entry."""
    rowptr, col = rowptr.cpu().long(), col.cpu().long()
    num_dst, width = out64.shape
    dst = torch.repeat_interleave(torch.arange(num_dst), rowptr.diff())
    position = (torch.arange(col.numel()) - rowptr[dst]).unsqueeze(1)
    messages, results = x64.cpu()[col], out64[dst]
    equal = (messages == results) | (messages.isnan() & results.isnan())
    index = dst.unsqueeze(1).expand_as(messages)
    count = torch.zeros(num_dst, width, dtype=torch.long).scatter_add_(0, index, equal.long())
    beyond = 2**40
    candidates = torch.where(equal, position.expand_as(messages), beyond)
    winner = torch.full((num_dst, width), beyond).scatter_reduce_(0, index, candidates, "amin")
    walk = walk_code(arg_bytes)
    worst = math.inf if reduce == "min" else -math.inf
    walks = (count > 1) | (out64 == 0) | out64.isnan() | (out64 == worst) | (winner >= walk)
    return winner.masked_fill_(walks, walk).masked_fill_(count == 0, walk + 1)


def codes(arg):
    """arg's unsigned codes as int64 (int16 storage holds 16-bit codes)."""
    return arg.cpu().long() & (2 ** (8 * arg.element_size()) - 1)


# ------------------------------------------------------------ comparisons
def assert_same_values(got, want, dtype=None):
    """Exactly equal values (NaN == NaN, -0.0 == +0.0, inf == inf)."""
    if dtype is not None:
        assert got.dtype == dtype
    got = got.detach().double().cpu()
    assert got.shape == want.shape, (got.shape, want.shape)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), "NaN in different places"
    bad = (got != want) & ~nan
    assert not bad.any(), (f"{int(bad.sum())} values differ, first at "
                           f"{bad.nonzero()[0].tolist()}: {got[bad][:4]} vs {want[bad][:4]}")


def assert_grad_close(got, want, bound, dtype):
    """got within TOLERANCE[dtype] x (sum of |shares|) of want, plus the
    spacing of dtype's subnormals (a share rounded to one is off by up to
    half of it), elementwise, NaN exactly where want has NaN (an element no
    share reaches must be 0)."""
    assert got.dtype == dtype
    got = got.detach().double().cpu()
    assert got.shape == want.shape, (got.shape, want.shape)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), "NaN gradients in different places"
    error = (got - want).abs().masked_fill(nan, 0.0)
    info = torch.finfo(dtype)
    allowed = TOLERANCE[dtype] * bound.masked_fill(nan, 0.0) + info.smallest_normal * info.eps
    bad = error > allowed
    assert not bad.any(), (f"{int(bad.sum())} gradients off, first at "
                           f"{bad.nonzero()[0].tolist()}: {got[bad][:4]} vs {want[bad][:4]}")


def assert_arg(arg, want, arg_bytes):
    """arg against expected_arg, checked in three steps for clear failures:
    empty rows, the walk flags, then the winners' positions."""
    assert arg.dtype == mm.ARG_DTYPES[arg_bytes] and arg.shape == want.shape, (arg.dtype,
                                                                              arg.shape)
    got, walk = codes(arg), walk_code(arg_bytes)
    assert torch.equal(got == walk + 1, want == walk + 1), "empty rows in the wrong places"
    assert torch.equal(got == walk, want == walk), "wrong walk flags"
    assert torch.equal(got, want), "wrong winners"


def bits(t):
    """The raw bits of a floating tensor (bitwise comparison, NaN included)."""
    return t.detach().contiguous().view(INT_VIEW[t.dtype])


# --------------------------------------------------------------- inputs
def special_values(dtype):
    """+-NaN, +-inf, +-0.0, +-subnormal, +-max, small integers."""
    info = torch.finfo(dtype)
    sub = info.smallest_normal / 2
    return torch.tensor([math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, sub, -sub, info.max,
                         -info.max, 1.0, -1.0, 2.0, -3.0], dtype=torch.float64)


SPECIAL_WEIGHTS = torch.tensor([1, 1, 3, 3, 8, 8, 3, 3, 2, 2, 6, 6, 6, 6], dtype=torch.float64)


def features(num, width, kind, dtype, gen):
    """[num, width] features in dtype (exact float64 values: x.double()).

    ties: integers in [-3, 3] (many ties and zeros), half the zeros -0.0;
    distinct: randn (ties only by rounding); special: special_values()."""
    if kind == "ties":
        x = torch.randint(-3, 4, (num, width), generator=gen).double()
        flip = (x == 0) & (torch.rand(num, width, generator=gen, dtype=torch.float64) < 0.5)
        x[flip] = -0.0
    elif kind == "distinct":
        x = torch.randn(num, width, generator=gen, dtype=torch.float64)
    else:
        table = special_values(dtype)
        pick = torch.multinomial(SPECIAL_WEIGHTS, num * width, replacement=True, generator=gen)
        x = table[pick].view(num, width)
    return x.to(dtype)


def grad_values(num, width, dtype, gen):
    return torch.randn(num, width, generator=gen, dtype=torch.float64).to(dtype)


# ------------------------------------------------------- the property case
def run_property_case(name, reduce, width, dtype, kind, device, index_dtype):
    """ops.aggregate with autograd, the raw forward op (out, arg) and the raw
    backward op (atomic and CSR^T), and on CUDA the bucketed backward (the
    backward kernels with the CSR^T's permutation), each against PyG's
    float64 result."""
    seed = seed_of("minmax", name, reduce, width, dtype, kind)
    edge_index, num_src, num_dst = property_case(name, seed)
    gen = torch.Generator().manual_seed(seed)
    x = features(num_src, width, kind, dtype, gen)
    grad = grad_values(num_dst, width, dtype, gen)
    ref_out, ref_grad, bound = pyg_reference(edge_index, x.double(), num_dst, reduce,
                                             grad.double())
    ei, x_dev, grad_dev = edge_index.to(device), x.to(device), grad.to(device)

    xx = x_dev.clone().requires_grad_()
    out = ops.aggregate(xx, ei, reduce, size=(num_src, num_dst))
    out.backward(grad_dev)
    assert out.device.type == torch.device(device).type
    assert_same_values(out, ref_out, dtype)
    assert_grad_close(xx.grad, ref_grad, bound, dtype)

    graph = Graph.from_edge_index(ei, (num_src, num_dst))
    assert graph.col.dtype == index_dtype
    transpose = graph.transpose
    for arg_bytes in ARG_BYTES:  # one byte: rows past 254 entries walk
        o, arg = forward_op(graph.rowptr, graph.col, x_dev, reduce, arg_bytes=arg_bytes)
        assert_same_values(o, ref_out, dtype)
        assert_arg(arg, expected_arg(graph.rowptr, graph.col, x.double(), ref_out, reduce,
                                     arg_bytes), arg_bytes)
        for rowptr_t, col_t in ((None, None), (transpose.rowptr, transpose.col)):
            gx = backward_op(graph.rowptr, graph.col, rowptr_t, col_t, x_dev, o, arg, grad_dev,
                             reduce)
            assert_grad_close(gx, ref_grad, bound, dtype)
        if mm.bucket_kernels_take(x_dev):
            gx = mm._minmax_backward_kernel(graph.rowptr, graph.col, transpose.rowptr,
                                            transpose.col, x_dev, o, arg, grad_dev, reduce,
                                            transpose.perm)
            assert_grad_close(gx, ref_grad, bound, dtype)



# CPU: every dtype and the odd widths over tie-heavy inputs, plus distinct values.
CPU_CASES = [(w, "ties") for w in (1, 3, 17, 64, 130)] + [(17, "distinct")]


# (dtype, index width) on CPU: int64 indices with one 32- and one 16-bit type.
CPU_VARIANTS = [(dtype, 32) for dtype in DTYPES] + [(torch.float32, 64), (torch.bfloat16, 64)]


@pytest.mark.parametrize("dtype, index_width", CPU_VARIANTS,
                         ids=[f"{DTYPE_IDS[DTYPES.index(d)]}-{w}" for d, w in CPU_VARIANTS])
@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_cpu_property(name, dtype, index_width, monkeypatch):
    if index_width == 64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    index_dtype = torch.int64 if index_width == 64 else torch.int32
    for reduce in REDUCES:
        for width, kind in CPU_CASES:
            run_property_case(name, reduce, width, dtype, kind, "cpu", index_dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", GRAPH_NAMES)
def test_cuda_property_sample(name, dtype, index_width, monkeypatch):
    """The GPU sample; gpu_check.sh runs its fp32 and bf16 cases under
    compute-sanitizer."""
    check_native("cuda")
    if index_width == 64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    index_dtype = torch.int64 if index_width == 64 else torch.int32
    for reduce in REDUCES:
        for width in CUDA_WIDTHS:
            run_property_case(name, reduce, width, dtype, "ties", "cuda", index_dtype)
        run_property_case(name, reduce, 64, dtype, "distinct", "cuda", index_dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_special_values(dtype, device):
    """NaN, +-inf, +-0.0, subnormals and +-max on heavy-tailed graphs with
    duplicates, a hub and empty rows."""
    check_native(device)
    index_dtype = torch.int32
    widths = (3, 64, 130) if torch.device(device).type == "cuda" else (3, 64)
    for name in ("small-square", "hub-square", "bipartite-wide", "dense"):
        for reduce in REDUCES:
            for width in widths:
                run_property_case(name, reduce, width, dtype, "special", device, index_dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_explicit_small_cases(dtype, device):
    """Hand-computed results (not PyG's): ties, the zero fill counted once
    more, -0.0 equal to +0.0, NaN to every source, infinities, empty rows,
    duplicate edges."""
    check_native(device)
    nan, inf = math.nan, math.inf
    # sources 0..5, one feature; destination rows 0..6
    x = torch.tensor([[1.0], [1.0], [-0.0], [0.0], [nan], [inf]], dtype=dtype, device=device)
    rows = [[0, 1, 2],   # max 1: tie of sources 0, 1
            [2, 3],      # max 0: -0.0 and +0.0 tie, plus the zero fill
            [4, 0],      # NaN: every source gets NaN
            [5, 5, 0],   # inf, duplicated: half each -> all to source 5
            [],          # empty: 0, the empty code
            [1, 2],      # max 1 alone: plain winner 1
            [3, 0, 2]]   # max 1: plain winner 0
    rowptr = torch.tensor([0] + [len(r) for r in rows]).cumsum(0).to(device)
    col = torch.tensor([s for r in rows for s in r]).to(device)
    out, arg = forward_op(rowptr, col, x, "max", arg_bytes=1)
    assert_same_values(out, torch.tensor([[1.0], [0.0], [nan], [inf], [0.0], [1.0], [1.0]],
                                         dtype=torch.float64), dtype)
    walk, empty = walk_code(1), walk_code(1) + 1
    # the walks: a tie, a zero, NaN, a duplicated winner; then positions 0 and 1
    assert codes(arg).flatten().tolist() == [walk, walk, walk, walk, empty, 0, 1]
    g = torch.tensor([[6.0], [3.0], [5.0], [2.0], [7.0], [4.0], [8.0]], dtype=dtype, device=device)
    for transpose in (False, True):
        rt, ct = (None, None)
        if transpose:
            graph = Graph.from_edge_index(torch.stack([col, torch.repeat_interleave(
                torch.arange(len(rows), device=device), rowptr.diff())]), (6, 7))
            rt, ct = graph.transpose.rowptr.to(rowptr.dtype), graph.transpose.col.to(col.dtype)
        gx = backward_op(rowptr, col, rt, ct, x, out, arg, g, "max").double().cpu().flatten()
        # source 0: 6/2 (row 0) + NaN (row 2) ; the NaN row poisons sources 0 and 4
        assert gx[0].isnan() and gx[4].isnan()
        assert gx[1].item() == 3.0 + 4.0          # half of row 0, all of row 5
        assert gx[2].item() == 1.0                # row 1: 3 / (2 + zero fill)
        assert gx[3].item() == 1.0
        assert gx[5].item() == 2.0                # both duplicates of row 3
    # min over the same rows: row 0 -> -0.0 == 0 (source 2, with the zero fill)
    out, arg = forward_op(rowptr, col, x, "min")
    assert_same_values(out, torch.tensor([[0.0], [0.0], [nan], [1.0], [0.0], [0.0], [0.0]],
                                         dtype=torch.float64), dtype)
    walk, empty = walk_code(2), walk_code(2) + 1
    assert arg.dtype == torch.int16
    assert codes(arg).flatten().tolist() == [walk, walk, walk, 2, empty, walk, walk]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_rows_whose_winner_is_the_worst_infinity(reduce, dtype, device):
    """Rows where the worst value (+inf for min, -inf for max), which a
    lane's running winner starts from, wins (walks, alone or tied) or
    loses (the better entry keeps its position); NaN in either order walks;
    widths of one and of several pieces a lane. The gradient of a lone
    worst infinity still goes to its one source."""
    check_native(device)
    worst = math.inf if reduce == "min" else -math.inf
    values = [worst, 1.0, math.nan]  # sources 0, 1, 2
    rows = [[0], [0, 0], [1, 0], [0, 1], [2, 0], [0, 2], [0, 1, 0]]
    want = [worst, worst, 1.0, 1.0, math.nan, math.nan, 1.0]
    rowptr = torch.tensor([0] + [len(r) for r in rows]).cumsum(0).to(device)
    col = torch.tensor([s for r in rows for s in r]).to(device)
    walk = walk_code(1)
    for width in (1, 8, 130):
        x = torch.tensor(values, dtype=torch.float64).repeat_interleave(width).view(3, width)
        out, arg = forward_op(rowptr, col, x.to(dtype).to(device), reduce, arg_bytes=1)
        assert_same_values(out, torch.tensor(want, dtype=torch.float64)[:, None].expand(-1, width),
                           dtype)
        assert (codes(arg) == torch.tensor([walk, walk, 0, 1, walk, walk, 1])[:, None]).all()
        grad = torch.arange(1.0, len(rows) + 1, dtype=torch.float64)[:, None].expand(-1, width)
        edge_index = torch.stack([col.cpu(), torch.repeat_interleave(
            torch.arange(len(rows)), rowptr.diff().cpu())])
        _, ref_grad, bound = pyg_reference(edge_index, x, len(rows), reduce, grad)
        gx = backward_op(rowptr, col, None, None, x.to(dtype).to(device), out, arg,
                         grad.to(dtype).to(device), reduce)
        assert_grad_close(gx, ref_grad, bound, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_aggregate_size_flow_heads_and_empty(device):
    """aggregate's bipartite pairs, flow="target_to_source", 3-D features,
    width 0, no sources, and no edge weights for min / max."""
    check_native(device)
    edge_index = random_graph(40, 25, 300, seed=seed_of("minmax-flow"), hub_degree=60)
    gen = torch.Generator().manual_seed(seed_of("minmax-flow-x"))
    x_src = features(40, 12, "ties", torch.float32, gen)
    x_dst = features(25, 12, "ties", torch.float32, gen)
    ei = edge_index.to(device)
    for reduce in REDUCES:
        got = ops.aggregate((x_src.to(device), x_dst.to(device)), ei, reduce)
        want = scatter(x_src.double()[edge_index[0]], edge_index[1], 0, dim_size=25,
                       reduce=reduce)
        assert_same_values(got, want, torch.float32)
        # target_to_source: messages from edge_index[1] (x_dst) to edge_index[0]
        got = ops.aggregate((x_src.to(device), x_dst.to(device)), ei, reduce,
                            flow="target_to_source")
        want = scatter(x_dst.double()[edge_index[1]], edge_index[0], 0, dim_size=40,
                       reduce=reduce)
        assert_same_values(got, want, torch.float32)
        # [N, H, C] features reduce per (head, channel)
        heads = x_src.view(40, 3, 4).to(device).requires_grad_()
        got = ops.aggregate((heads, None), ei, reduce, size=(40, 25))
        g = torch.randn(25, 3, 4, generator=gen)
        got.backward(g.to(device))
        ref_out, ref_grad, bound = pyg_reference(edge_index, x_src.double(), 25, reduce,
                                                 g.double().view(25, 12))
        assert got.shape == (25, 3, 4)
        assert_same_values(got.reshape(25, 12), ref_out, torch.float32)
        assert_grad_close(heads.grad.reshape(40, 12), ref_grad, bound, torch.float32)
        # width 0 and no source nodes at all
        assert ops.aggregate(x_src[:, :0].to(device), random_graph(40, 40, 90, 1).to(device),
                             reduce).shape == (40, 0)
        empty = torch.empty(2, 0, dtype=torch.long, device=device)
        none = torch.zeros(0, 5, device=device, requires_grad=True)
        got = ops.aggregate((none, None), empty, reduce, size=(0, 6))
        assert got.shape == (6, 5) and not got.detach().any()
        got.sum().backward()
        assert none.grad.shape == (0, 5)
        with pytest.raises(ValueError, match="no edge weights"):
            ops.aggregate(x_src.to(device), random_graph(40, 40, 90, 1).to(device), reduce,
                          edge_weight=torch.ones(3, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_strided_features_and_expanded_gradients(dtype, device):
    """x as a row-strided view (misaligned too) or with a column stride,
    and out.sum().backward() (an expanded grad_out)."""
    check_native(device)
    edge_index = random_graph(70, 70, 500, seed=seed_of("minmax-strided"), hub_degree=400)
    gen = torch.Generator().manual_seed(seed_of("minmax-strided-x"))
    base = features(70, 40, "ties", dtype, gen).to(device)
    ei = edge_index.to(device)
    for reduce in REDUCES:
        for view in (base[:, :17], base[:, 1:18], base[:, ::2], base[:, :36].t().contiguous().t()):
            xx = view.detach().requires_grad_()
            out = ops.aggregate(xx, ei, reduce)
            out.sum().backward()
            ones = torch.ones(70, view.size(1), dtype=torch.float64)
            ref_out, ref_grad, bound = pyg_reference(edge_index, view.double(), 70, reduce, ones)
            assert_same_values(out, ref_out, dtype)
            assert_grad_close(xx.grad, ref_grad, bound, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_features(device):
    """x broadcast over the nodes (row stride 0, e.g. emb.expand(N, C)): a
    valid tensor like any other, forward and backward."""
    check_native(device)
    edge_index = random_graph(60, 60, 400, seed=seed_of("minmax-expanded"), hub_degree=300)
    row = torch.tensor([[1.0, -2.0, 0.0, 3.0, -0.0]], device=device)
    for reduce in REDUCES:
        xx = row.clone().requires_grad_()
        x = xx.expand(60, 5)
        out = ops.aggregate(x, edge_index.to(device), reduce)
        grad = torch.randn(60, 5, generator=torch.Generator().manual_seed(5))
        out.backward(grad.to(device))
        xr = row.double().cpu().requires_grad_()
        ref = scatter(xr.expand(60, 5)[edge_index[0]], edge_index[1], 0, dim_size=60,
                      reduce=reduce)
        ref.backward(grad.double())
        assert_same_values(out, ref.detach(), torch.float32)
        torch.testing.assert_close(xx.grad.double().cpu(), xr.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_raw_backward_takes_views(device):
    """The raw backward op with out column-major, arg a contiguous view at
    an offset of one row (not 16-byte aligned for width 3) and an expanded
    grad_out: the same gradient as with fresh contiguous tensors."""
    check_native(device)
    edge_index, num_src, num_dst = property_case("hub-square", seed_of("minmax-views"))
    graph = Graph.from_edge_index(edge_index.to(device), (num_src, num_dst))
    gen = torch.Generator().manual_seed(seed_of("minmax-views-x"))
    x = features(num_src, 3, "ties", torch.float32, gen).to(device)
    for reduce in REDUCES:
        out, arg = forward_op(graph.rowptr, graph.col, x, reduce)
        grad = torch.full((num_dst, 3), 0.5, device=device)
        want = backward_op(graph.rowptr, graph.col, None, None, x, out, arg, grad, reduce)
        out_t = out.t().contiguous().t()
        arg_offset = torch.cat([torch.zeros(1, 3, dtype=arg.dtype, device=device), arg])[1:]
        assert arg_offset.is_contiguous() and torch.equal(arg_offset, arg)
        grad_expanded = torch.tensor([[0.5]], device=device).expand(num_dst, 3)
        for o, a, g in ((out_t, arg, grad), (out, arg_offset, grad), (out, arg, grad_expanded)):
            got = backward_op(graph.rowptr, graph.col, None, None, x, o, a, g, reduce)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("native_host", [False, True], ids=["python", "cpp"])
def test_training_keeps_one_byte_codes_where_rows_are_short(native_host, monkeypatch):
    """What a training forward keeps per element: a one-byte code where no
    row of the graph is known to hold more than 254 entries (a graph built
    from edges grouped by destination knows its longest row), two bytes
    where a row is longer; PyG's outputs and gradients either way, through
    the Python Function and the C++ node."""
    check_native("cuda")
    from pyg_ioaware import _native_host, config
    monkeypatch.setattr(config, "native_host", native_host)
    arg_bytes = []
    if native_host:
        module = _native_host.active()
        if module is None:
            pytest.skip("the C++ host extension is not built for this torch")
        aggregate = module.minmax_aggregate
        monkeypatch.setattr(module, "minmax_aggregate",
                            lambda *args: arg_bytes.append(args[8]) or aggregate(*args))
    else:
        monkeypatch.setattr(mm, "native_autograd_minmax", lambda *args: None)

        def spy(rowptr, col, x, reduce, degree, max_hubs, out, arg):
            arg_bytes.append(arg.element_size())
            return NATIVE_MINMAX(rowptr, col, x, reduce, degree, max_hubs, out, arg)
        monkeypatch.setattr(_native, "minmax", spy)
    for hub, want in ((0, 1), (300, 2)):
        seed = seed_of("minmax-arg-bytes", hub)
        edge_index = random_graph(300, 200, 600, seed=seed, hub_degree=hub)
        edge_index = edge_index[:, edge_index[1].argsort(stable=True)]
        graph = Graph.from_edge_index(edge_index.cuda(), (300, 200))
        assert (graph.degree_bound <= walk_code(1)) == (want == 1), graph.degree_bound
        gen = torch.Generator().manual_seed(seed)
        x64, grad64 = features(300, 20, "ties", torch.float64, gen), grad_values(200, 20,
                                                                                torch.float64, gen)
        for reduce in REDUCES:
            ref_out, ref_grad, bound = pyg_reference(edge_index, x64, 200, reduce, grad64)
            x = x64.float().cuda().requires_grad_()
            out = ops.aggregate((x, None), graph, reduce, size=(300, 200))
            out.backward(grad64.float().cuda())
            assert arg_bytes[-1] == want
            assert_same_values(out, ref_out, torch.float32)
            assert_grad_close(x.grad, ref_grad, bound, torch.float32)


# --------------------------------------------------------------------- hubs
HUB_SCALES = {  # (light rows, big hub, hubs, boundary rows)
    "cpu": (1000, 1200, 600, (256, 257, 300)),
    "cuda": (2000, 42000, 3000, (255, 256, 257, 512, 513)),
}
R_BLOCK, K_BLOCK, Z_BLOCK = 500, 64, 64


@functools.lru_cache(maxsize=None)
def hub_case(scale):
    """(edge_index in CSR order, num_src, num_rows, base features for max
    [num_src, 130] float64, dict name -> row): light rows of degree 0..6
    among hubs (rows above the chunk size, here far above it) built so that:

      big:      ties spread over every chunk (integers in [-3, 3], -0.0 too)
      constant: every source has the same value (the tie spans all chunks)
      last:     the only winner is the last entry (in the last chunk)
      split:    two winners, the first and the last entry
      zero:     the result is 0 (+0.0 and -0.0 sources, the fill counted)
      nan:      a NaN source in the middle chunk (feature 0 only)
      d<n>:     rows of n entries around the chunk size

    For min, the features are negated (-0.0 <-> +0.0, NaN stays NaN)."""
    light, big, hub, boundaries = HUB_SCALES[scale]
    gen = torch.Generator().manual_seed(seed_of("minmax-hubs", scale))
    r0, k0, z0 = 0, R_BLOCK, R_BLOCK + K_BLOCK
    w, w1, w2, nan_node = z0 + Z_BLOCK, z0 + Z_BLOCK + 1, z0 + Z_BLOCK + 2, z0 + Z_BLOCK + 3
    num_src = nan_node + 1
    width = 130
    x = torch.randint(-3, 4, (num_src, width), generator=gen).double()
    x[(x == 0) & (torch.rand(num_src, width, generator=gen, dtype=torch.float64) < 0.5)] = -0.0
    x[k0:z0] = 2.0
    zero_block = torch.tensor([0.0, -0.0, -1.0, -2.0], dtype=torch.float64)
    x[z0:w] = zero_block[torch.randint(0, 4, (Z_BLOCK, width), generator=gen)]
    x[z0, :] = 0.0  # every feature has a zero source in the zero hub
    x[w] = x[w1] = x[w2] = 10.0
    x[nan_node] = 0.0
    x[nan_node, 0] = math.nan

    def randoms(n, low, high):
        return torch.randint(low, high, (n,), generator=gen)

    hubs = {
        "big": randoms(big, r0, R_BLOCK),
        "constant": randoms(hub, k0, z0),
        "last": torch.cat([randoms(hub - 1, r0, R_BLOCK), torch.tensor([w])]),
        "split": torch.cat([torch.tensor([w2]), randoms(hub - 2, r0, R_BLOCK),
                            torch.tensor([w1])]),
        "zero": torch.cat([randoms(hub // 3, z0, w), torch.tensor([z0]),
                           randoms(hub - hub // 3 - 1, z0, w)]),
        "nan": torch.cat([randoms(hub // 2, r0, R_BLOCK), torch.tensor([nan_node]),
                          randoms(hub - hub // 2 - 1, r0, R_BLOCK)]),
    }
    for d in boundaries:
        hubs[f"d{d}"] = randoms(d, r0, R_BLOCK)
    light_cols = [randoms(int(d), 0, num_src) for d in randoms(light, 0, 7)]
    names = list(hubs)
    num_rows = light + len(names)
    positions = torch.randperm(num_rows, generator=gen)[: len(names)].tolist()
    rows_of = dict(zip(names, positions))
    cols, light_iter = [], iter(light_cols)
    by_position = {p: n for n, p in rows_of.items()}
    for r in range(num_rows):
        cols.append(hubs[by_position[r]] if r in by_position else next(light_iter))
    col = torch.cat(cols)
    dst = torch.repeat_interleave(torch.arange(num_rows), torch.tensor([c.numel() for c in cols]))
    return torch.stack([col, dst]), num_src, num_rows, x, rows_of, (w, w1, w2, nan_node)


@functools.lru_cache(maxsize=None)
def hub_reference(scale, reduce, width):
    edge_index, num_src, num_rows, x, _, _ = hub_case(scale)
    x = (x if reduce == "max" else -x)[:, :width].contiguous()
    gen = torch.Generator().manual_seed(seed_of("minmax-hub-grad", scale, reduce, width))
    # Multiples of 1/4 in [-2, 2] without 0: exact in every dtype.
    grad = (torch.randint(1, 9, (num_rows, width), generator=gen).double() / 4
            * (torch.randint(0, 2, (num_rows, width), generator=gen) * 2 - 1))
    out, ref_grad, bound = pyg_reference(edge_index, x, num_rows, reduce, grad)
    return x, grad, out, ref_grad, bound, expected_args(edge_index, num_rows, x, out, reduce)


def expected_args(edge_index, num_rows, x64, out64, reduce):
    """expected_arg for every code width (ARG_BYTES), for an edge_index in
    CSR order (grouped by destination) of num_rows rows."""
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long),
                        torch.bincount(edge_index[1], minlength=num_rows).cumsum(0)])
    return {b: expected_arg(rowptr, edge_index[0], x64, out64, reduce, b) for b in ARG_BYTES}


def check_hub_structure(rowptr, nnz, rows_of, quantile):
    """hub_degree really selects the hubs for quantile < 1 (and none at 1)."""
    degree, max_hubs = hub_degree(rowptr, nnz, quantile)
    hub_rows = [r for n, r in rows_of.items() if not n.startswith("d")]
    smallest_hub = int(rowptr.diff()[hub_rows].min())
    if quantile >= 1.0:
        assert degree is None and max_hubs == 0
        return
    assert degree is not None and degree.dtype == torch.int64 and degree.dim() == 0
    assert max(int(degree), MIN_HUB_DEGREE) < smallest_hub
    assert max_hubs > 0
    assert hub_degree(rowptr, nnz, quantile)[0] is degree  # cached beside the structure


def run_hub_case(scale, reduce, width, dtype, device, index_dtype, monkeypatch):
    monkeypatch.setattr(hubs, "SMALL_STRUCTURE_ENTRIES", 0)  # thresholds above 256 too
    edge_index, num_src, num_rows, _, rows_of, _ = hub_case(scale)
    x64, grad64, ref_out, ref_grad, bound, ref_args = hub_reference(scale, reduce, width)
    if index_dtype == torch.int64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    graph = Graph.from_edge_index(edge_index.to(device), (num_src, num_rows))
    assert graph.col.dtype == index_dtype
    assert torch.equal(graph.col.long().cpu(), edge_index[0]), "CSR order is the input order"
    x, grad = x64.to(device, dtype), grad64.to(device, dtype)
    assert torch.equal(x.double().cpu().nan_to_num(7.0), x64.nan_to_num(7.0))  # exact inputs

    # The constructed hubs are what they claim to be: the last entry the
    # only winner (one-byte codes walk there), the others walking.
    r, ref_arg, walk = rows_of, ref_args[2], walk_code(2)
    last = int(graph.rowptr[r["last"] + 1] - graph.rowptr[r["last"]]) - 1
    assert (ref_arg[r["last"]] == last).all() and (ref_args[1][r["last"]] == walk_code(1)).all()
    assert (ref_arg[r["split"]] == walk).all() and (ref_arg[r["constant"]] == walk).all()
    assert (ref_out[r["zero"]] == 0).all()
    assert ref_out[r["nan"], 0].isnan() and not ref_out[r["nan"], 1:].isnan().any()

    native_calls = []
    if torch.device(device).type == "cuda":
        def spy(rowptr, col, x, reduce, degree, max_hubs, out, arg):
            native_calls.append((degree is not None, max_hubs))
            return NATIVE_MINMAX(rowptr, col, x, reduce, degree, max_hubs, out, arg)
        monkeypatch.setattr(_native, "minmax", spy)

    results = {}
    for quantile in (0.99, 0.5, 0.0, 1.0):
        check_hub_structure(graph.rowptr, graph.num_edges, rows_of, quantile)
        for arg_bytes in ARG_BYTES:
            out, arg = forward_op(graph.rowptr, graph.col, x, reduce, quantile,
                                  arg_bytes=arg_bytes)
            assert_same_values(out, ref_out, dtype)
            assert_arg(arg, ref_args[arg_bytes], arg_bytes)
            results[quantile, arg_bytes] = (out, arg)
        plain, empty_arg = forward_op(graph.rowptr, graph.col, x, reduce, quantile, False)
        assert empty_arg.numel() == 0 and torch.equal(bits(plain), bits(out))
    for (quantile, arg_bytes), (out, arg) in results.items():  # the split changes no bit
        assert torch.equal(bits(out), bits(results[1.0, arg_bytes][0])), quantile
        assert torch.equal(arg, results[1.0, arg_bytes][1]), quantile
    if native_calls:
        assert native_calls[0][0] and native_calls[0][1] > 0  # 0.99: hubs split
        assert native_calls[-1] == (False, 0)                  # 1.0: no split

    t = graph.transpose
    for arg_bytes in ARG_BYTES:
        out, arg = results[0.99, arg_bytes]
        for rowptr_t, col_t in ((None, None), (t.rowptr, t.col)):
            gx = backward_op(graph.rowptr, graph.col, rowptr_t, col_t, x, out, arg, grad, reduce)
            assert_grad_close(gx, ref_grad, bound, dtype)
    # through aggregate's autograd, with and without splitting
    for quantile in (0.5, 1.0):
        xx = x.clone().requires_grad_()
        got = ops.aggregate((xx, None), graph, reduce, size=(num_src, num_rows),
                            hub_quantile=quantile)
        got.backward(grad)
        assert_same_values(got, ref_out, dtype)
        assert_grad_close(xx.grad, ref_grad, bound, dtype)
    # The NaN hub's feature 0 poisons every source of that hub.
    nan_sources = edge_index[0][edge_index[1] == rows_of["nan"]].unique()
    assert ref_grad[nan_sources, 0].isnan().all()


@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("reduce", REDUCES)
def test_cpu_hubs(reduce, index_width, monkeypatch):
    index_dtype = torch.int64 if index_width == 64 else torch.int32
    for dtype, width in ((torch.float32, 3), (torch.float64, 17), (torch.bfloat16, 64),
                         (torch.float16, 1)):
        run_hub_case("cpu", reduce, width, dtype, "cpu", index_dtype, monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_hubs(reduce, dtype, index_width, monkeypatch):
    """Hubs of 42000 and 3000 entries (and rows around 256): identical
    results whatever hub_quantile; fp64 is never split but must agree too."""
    check_native("cuda")
    index_dtype = torch.int64 if index_width == 64 else torch.int32
    for width in (1, 3, 64, 130):
        run_hub_case("cuda", reduce, width, dtype, "cuda", index_dtype, monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_one_slot_hub_list(reduce, monkeypatch):
    """A hub list of one slot: the row kernels do the hubs a full list
    refuses themselves, with the bits of a call that splits none; the
    backward's hub walk likewise."""
    check_native("cuda")
    monkeypatch.setattr(hubs, "SMALL_STRUCTURE_ENTRIES", 0)  # thresholds above 256 too
    edge_index, num_src, num_rows, _, _, _ = hub_case("cuda")
    x64, grad64, ref_out, ref_grad, bound, _ = hub_reference("cuda", reduce, 64)
    graph = Graph.from_edge_index(edge_index.cuda(), (num_src, num_rows))
    x, grad = x64.to("cuda", torch.float32), grad64.to("cuda", torch.float32)
    unsplit, unsplit_arg = forward_op(graph.rowptr, graph.col, x, reduce, 1.0, arg_bytes=2)
    cut = cap_hub_lists(monkeypatch, mm, 1)
    out, arg = forward_op(graph.rowptr, graph.col, x, reduce, 0.5, arg_bytes=2)
    assert torch.equal(bits(out), bits(unsplit)) and torch.equal(arg, unsplit_arg)
    assert_same_values(out, ref_out, torch.float32)
    grad_x = backward_op(graph.rowptr, graph.col, None, None, x, out, arg, grad, reduce)
    assert_grad_close(grad_x, ref_grad, bound, torch.float32)
    assert cut[0][0] > cut[0][1]  # the forward's list was cut


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cuda_sanitizer_hub_chunks(dtype, monkeypatch):
    """The CPU-sized hub graph on the GPU (chunks, merges, backward hub walks)
    for the compute-sanitizer sample."""
    check_native("cuda")
    for reduce in REDUCES:
        for width in (3, 64):
            run_hub_case("cpu", reduce, width, dtype, "cuda", torch.int32, monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cuda_hubs_of_a_structure_with_full_chunks(dtype):
    """The kernels cut hubs into chunks of 256 entries where the structure
    has enough entries to fill the GPU's warps twice over with them, and
    into smaller chunks below (the other hub tests: 32 on an H200). Here
    hubs of 100k entries make a structure past that size on this GPU; its
    tie-heavy features (every hub element tied across chunks) against PyG's
    float64 result, forward (out, both arg widths) and backward."""
    check_native("cuda")
    props = torch.cuda.get_device_properties(0)
    warps = props.multi_processor_count * getattr(props, "max_threads_per_multi_processor",
                                                  2048) // 32
    hub_entries, light_rows, num_src, width = 100_000, 50_000, 20_000, 4
    num_hubs = -(-2 * warps * MIN_HUB_DEGREE * 11 // 10 // hub_entries)
    gen = torch.Generator().manual_seed(seed_of("minmax-full-chunks", dtype))
    degree = torch.cat([torch.full((num_hubs,), hub_entries),
                        torch.randint(0, 5, (light_rows,), generator=gen)])
    dst = torch.repeat_interleave(torch.arange(degree.numel()), degree)
    edge_index = torch.stack([torch.randint(num_src, (dst.numel(),), generator=gen), dst])
    assert edge_index.size(1) >= 2 * warps * MIN_HUB_DEGREE
    graph = Graph.from_edge_index(edge_index.cuda(), (num_src, degree.numel()))
    x = features(num_src, width, "ties", dtype, gen)
    grad = grad_values(degree.numel(), width, dtype, gen)
    for reduce in REDUCES:
        ref_out, ref_grad, bound = pyg_reference(edge_index, x.double(), degree.numel(),
                                                 reduce, grad.double())
        for arg_bytes in ARG_BYTES:
            out, arg = forward_op(graph.rowptr, graph.col, x.cuda(), reduce,
                                  arg_bytes=arg_bytes)
            assert_same_values(out, ref_out, dtype)
            assert_arg(arg, expected_arg(graph.rowptr, graph.col, x.double(), ref_out,
                                         reduce, arg_bytes), arg_bytes)
            gx = backward_op(graph.rowptr, graph.col, None, None, x.cuda(), out, arg,
                             grad.cuda(), reduce)
            assert_grad_close(gx, ref_grad, bound, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_cuda_full_hub_list(dtype):
    """More hubs than hub slots: the rows the list refuses are done whole
    (the native wrappers called directly with max_hubs = 1 and a threshold
    of 0, forward and backward), in one pass over the features and in
    several (130 features: 65 two-feature pieces, more than a warp holds in
    one pass: three passes of one piece a lane, two where fp32 forward rows
    take two pieces a lane)."""
    check_native("cuda")
    edge_index, num_src, num_rows, _, _, _ = hub_case("cpu")
    graph = Graph.from_edge_index(edge_index.cuda(), (num_src, num_rows))
    threshold = torch.zeros((), dtype=torch.int64, device="cuda")
    for reduce, width in itertools.product(REDUCES, (64, 130)):
        x64, grad64, ref_out, ref_grad, bound, ref_args = hub_reference("cpu", reduce, width)
        x, grad = x64.to("cuda", dtype), grad64.to("cuda", dtype)
        for max_hubs in (1, 2, 10**6):
            out = torch.full((num_rows, width), math.nan, dtype=dtype, device="cuda")
            arg = torch.full((num_rows, width), 12345, dtype=torch.int16, device="cuda")
            _native.minmax(graph.rowptr, graph.col, x, reduce, threshold, max_hubs, out, arg)
            assert_same_values(out, ref_out, dtype)
            assert_arg(arg, ref_args[2], 2)
            grad_x = torch.full_like(x, math.nan)
            _native.minmax_backward(graph.rowptr, graph.col, None, x, out, arg, grad, reduce,
                                    threshold, max_hubs, grad_x, "atomics")
            assert_grad_close(grad_x, ref_grad, bound, dtype)


# Column slabs of the forward (cuda/minmax/minmax_launch.cu): x at least
# this many times the L2 cache, rows of at least this many entries on
# average.
SLAB_MIN_L2_MULTIPLE, SLAB_MIN_DEGREE = 32, 8
# (dtype, width), slabs of 512 bytes a row: 64 two-element pieces (fp32,
# 130 columns: the second slab holds one piece), 32 four-element pieces
# (fp32, 200: 32 and 18), 64 four-element pieces (16-bit, 300: 64 and 11).
SLAB_CASES = [(torch.float32, 130), (torch.float32, 200), (torch.bfloat16, 300),
              (torch.float16, 300)]


@functools.lru_cache(maxsize=None)
def slab_reference(reduce, dtype, width):
    """The rows of a graph whose forward runs in column slabs, on the CPU,
    and their float64 PyG results: hub_case("cpu")'s rows (every hub
    pattern, light rows, empty rows) and 200 rows of 20 tied entries (on
    average past SLAB_MIN_DEGREE entries a row). Returns (edge_index,
    num_src, num_rows, x64, grad64, out, grad_x, bound, arg codes per
    width)."""
    edge_index, num_src, num_rows, base, _, _ = hub_case("cpu")
    gen = torch.Generator().manual_seed(seed_of("minmax-slabs", reduce, dtype, width))
    extra_rows, extra_degree = 200, 20
    extra = torch.stack([torch.randint(num_src, (extra_rows * extra_degree,), generator=gen),
                         torch.arange(num_rows, num_rows + extra_rows).repeat_interleave(
                             extra_degree)])
    edge_index, num_rows = torch.cat([edge_index, extra], 1), num_rows + extra_rows
    assert edge_index.size(1) >= SLAB_MIN_DEGREE * num_rows
    x64 = (base if reduce == "max" else -base).repeat(1, 3)[:, :width].contiguous()
    x64 = x64.to(dtype).double()  # the values the kernels see
    grad64 = torch.randint(-8, 9, (num_rows, width), generator=gen).double() / 4
    out, ref_grad, bound = pyg_reference(edge_index, x64, num_rows, reduce, grad64)
    args = expected_args(edge_index, num_rows, x64, out, reduce)
    return edge_index, num_src, num_rows, x64, grad64, out, ref_grad, bound, args


def slab_case(reduce, dtype, width):
    """slab_reference's graph on CUDA with its sources spread over an x of
    at least SLAB_MIN_L2_MULTIPLE L2 caches (zeros elsewhere; built per
    test, not kept): (graph, x, the rows of x holding the sources, grad,
    out, grad_x of the sources, bound, arg codes per width)."""
    edge_index, num_src, num_rows, x64, grad64, *reference = slab_reference(reduce, dtype,
                                                                             width)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    element = torch.finfo(dtype).bits // 8
    num_big = -(-SLAB_MIN_L2_MULTIPLE * l2 // (width * element)) + num_src
    big_rows = torch.arange(num_src) * (num_big // num_src)
    x = torch.zeros(num_big, width, dtype=dtype, device="cuda")
    x[big_rows.cuda()] = x64.to("cuda", dtype)
    graph = Graph.from_edge_index(torch.stack([big_rows[edge_index[0]], edge_index[1]]).cuda(),
                                  (num_big, num_rows))
    return (graph, x, big_rows.cuda(), grad64.to("cuda", dtype), *reference)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, width", SLAB_CASES, ids=["fp32-130", "fp32-200", "bf16-300",
                                                          "fp16-300"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_column_slabs(reduce, dtype, width):
    """The forward in column slabs (x past SLAB_MIN_L2_MULTIPLE L2 caches,
    rows past SLAB_MIN_DEGREE entries on average): out and both arg widths
    against PyG's float64 result, with the hubs split (the first slab
    registers them, the others leave them to the hub kernels) and with a
    hub list of one slot (the others then do every hub themselves, the
    native wrapper called with max_hubs = 1 and a threshold of 0); the
    backward from those codes."""
    check_native("cuda")
    graph, x, big_rows, grad, ref_out, ref_grad, bound, ref_args = slab_case(reduce, dtype,
                                                                              width)
    for arg_bytes in ARG_BYTES:
        out, arg = forward_op(graph.rowptr, graph.col, x, reduce, arg_bytes=arg_bytes)
        assert_same_values(out, ref_out, dtype)
        assert_arg(arg, ref_args[arg_bytes], arg_bytes)
    threshold = torch.zeros((), dtype=torch.int64, device="cuda")
    out = torch.full_like(out, math.nan)
    arg = torch.full(out.shape, 12345, dtype=torch.int16, device="cuda")
    _native.minmax(graph.rowptr, graph.col, x, reduce, threshold, 1, out, arg)
    assert_same_values(out, ref_out, dtype)
    assert_arg(arg, ref_args[2], 2)
    grad_x = backward_op(graph.rowptr, graph.col, None, None, x, out, arg, grad, reduce)
    assert_grad_close(grad_x[big_rows], ref_grad, bound, dtype)
    assert grad_x.count_nonzero() == grad_x[big_rows].count_nonzero()


@pytest.mark.cuda
def test_cuda_column_slabs_are_launched_one_after_another():
    """Where the slab rule applies, the rows kernel runs once a slab (two
    for 200 fp32 columns); the same rows over an x of the sources alone
    (below the rule's size) run it once."""
    check_native("cuda")
    graph, x, big_rows, *_ = slab_case("max", torch.float32, 200)
    small = Graph.from_edge_index(
        torch.stack([torch.searchsorted(big_rows, graph.col.long()), graph.row]),
        (big_rows.numel(), graph.num_dst))
    for rowptr, col, features, launches in ((graph.rowptr, graph.col, x, 2),
                                            (small.rowptr, small.col, x[big_rows], 1)):
        names, _ = cuda_kernel_names(lambda: forward_op(rowptr, col, features, "max"))
        assert sum("minmax_rows_kernel" in name for name in names) == launches


def test_hub_degree(monkeypatch):
    monkeypatch.setattr(hubs, "SMALL_STRUCTURE_ENTRIES", 0)  # the quantile at every size
    rowptr = torch.tensor([0, 1, 1, 3, 303, 306, 1306])  # degrees 1 0 2 300 3 1000
    degree, max_hubs = hub_degree(rowptr, 1306, 0.5)
    assert int(degree) == 2 and max_hubs == min(3, 1306 // (MIN_HUB_DEGREE + 1))
    assert hub_degree(rowptr, 1306, 1.0) == (None, 0)
    degree, max_hubs = hub_degree(rowptr, 1306, 0.0)  # the smallest degree
    assert int(degree) == 0 and max_hubs == 5
    assert hub_degree(rowptr[:4], 3, 0.0) == (None, 0)  # no row can exceed 256
    assert hub_degree(torch.zeros(1, dtype=torch.long), 0, 0.5) == (None, 0)  # no rows


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_hub_degree_of_a_small_structure(device):
    """Up to SMALL_STRUCTURE_ENTRIES entries no quantile is computed: the
    threshold is 0 (the kernels split above MIN_HUB_DEGREE), for at most
    nnz // 257 rows, every quantile but 1."""
    rowptr = torch.tensor([0, 1, 1, 3, 303, 306, 1306], device=device)  # 1 0 2 300 3 1000
    for quantile in (0.0, 0.5):
        degree, max_hubs = hub_degree(rowptr, 1306, quantile)
        assert degree.device == rowptr.device and degree.dtype == torch.int64
        assert int(degree) == 0 and max_hubs == 1306 // (MIN_HUB_DEGREE + 1) == 5
        assert not structure_state(rowptr).hub_degrees  # nothing computed or kept
    for quantile in (0.99, 1.0):  # no row above the quantile of 6 rows
        assert hub_degree(rowptr, 1306, quantile) == (None, 0)
    # Rows above 256 never outnumber the slots, whatever the quantile would
    # bound them by: 40 rows of 300 entries and 160 of one.
    degrees = torch.tensor([300] * 40 + [1] * 160, device=device)
    many = torch.cat([degrees.new_zeros(1), degrees.cumsum(0)])
    degree, max_hubs = hub_degree(many, 12160, 0.99)  # the quantile's bound: 2 rows
    assert int(degree) == 0 and max_hubs == 12160 // (MIN_HUB_DEGREE + 1) == 47


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_hub_degree_kthvalue_equals_sort(device, monkeypatch):
    """Small structures take kthvalue, large ones a sort: the same quantile."""
    monkeypatch.setattr(hubs, "SMALL_STRUCTURE_ENTRIES", 0)
    gen = torch.Generator().manual_seed(5)
    for num_rows in (300, 5000):
        degrees = (torch.rand(num_rows, generator=gen) ** -1.5).long().clamp(max=5000)
        rowptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)]).to(device)
        nnz = int(rowptr[-1])
        for quantile in (0.0, 0.5, 0.9, 0.99):
            small, bound = hub_degree(rowptr, nnz, quantile)
            with monkeypatch.context() as patch:
                patch.setattr(hubs, "KTHVALUE_MAX_ROWS", 0)
                hubs_of_structure = structure_state(rowptr).hub_degrees
                hubs_of_structure.clear()  # computed anew by the other path
                large, same_bound = hub_degree(rowptr, nnz, quantile)
                hubs_of_structure.clear()
            assert bound == same_bound
            k = min(max(math.ceil(quantile * num_rows), 1), num_rows)
            expected = int(degrees.sort().values[k - 1])
            if small is None:
                assert large is None
            else:
                assert int(small) == int(large) == expected


# -------------------------------------------------- deterministic backward
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_deterministic_backward(reduce, dtype, monkeypatch):
    """Under torch.use_deterministic_algorithms(True) graph_minmax's
    backward takes the CSR^T path: bitwise identical across runs and equal
    to the atomic path (and PyG) within tolerance."""
    check_native("cuda")
    seed = seed_of("minmax-deterministic", reduce, dtype)
    edge_index = random_graph(3000, 3000, 30000, seed=seed, hub_degree=5000)
    gen = torch.Generator().manual_seed(seed)
    transposes = []

    def spy(rowptr, col, transpose, *rest):
        transposes.append(transpose is not None)
        return NATIVE_MINMAX_BACKWARD(rowptr, col, transpose, *rest)
    monkeypatch.setattr(_native, "minmax_backward", spy)
    # The Python Function, whose launches the spy sees (the C++ node's
    # deterministic backward: tests/ops/test_minmax_native_autograd.py).
    monkeypatch.setattr(mm, "native_autograd_minmax", lambda *args: None)
    for width in (1, 3, 64, 130):
        x = features(3000, width, "ties", dtype, gen)
        grad = grad_values(3000, width, dtype, gen)
        ref_out, ref_grad, bound = pyg_reference(edge_index, x.double(), 3000, reduce,
                                                 grad.double())
        graph = Graph.from_edge_index(edge_index.cuda(), 3000)
        xx = x.cuda().requires_grad_()

        def gradient():
            out = graph_minmax(graph, xx, reduce)
            assert_same_values(out, ref_out, dtype)
            return torch.autograd.grad(out, xx, grad.cuda())[0]

        atomic = gradient()
        previous = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            first, second = gradient(), gradient()
        finally:
            torch.use_deterministic_algorithms(previous)
        assert transposes[-3:] == [False, True, True]
        assert torch.equal(bits(first), bits(second))
        for got in (atomic, first):
            assert_grad_close(got, ref_grad, bound, dtype)
        assert_grad_close(first, atomic.double().cpu(), bound, dtype)


# ------------------------------------------- few walking elements a pass
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_sanitizer_few_walking_elements(reduce, dtype):
    """A pass whose elements mostly take one winner and a few walk (the
    kernels stage those few and walk their entries over the whole warp at
    once, a pair of element and entry a lane: stage_walks): random values
    with rare ties (16-bit rounding), a sprinkle of NaN, infinities and
    zeros, on heavy-tailed rows (dozens of 33 to 256 entries, whose pairs
    take several rounds of 32 lanes, and a dozen hubs of more, walked in
    chunks), widths that fill one pass and several; the raw backward op and
    autograd against PyG in float64."""
    check_native("cuda")
    seed = seed_of("minmax-few-walks", reduce, dtype)
    edge_index = random_graph(1500, 700, 21000, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    for width in (3, 130, 512):
        x = torch.randn(1500, width, generator=gen, dtype=torch.float64)
        sprinkle = torch.rand(1500, width, generator=gen, dtype=torch.float64)
        x[sprinkle < 2e-4] = math.nan
        x[(sprinkle >= 2e-4) & (sprinkle < 4e-4)] = math.inf if reduce == "min" else -math.inf
        x[(sprinkle >= 4e-4) & (sprinkle < 1e-3)] = 0.0
        x = x.to(dtype)
        grad = grad_values(700, width, dtype, gen)
        ref_out, ref_grad, bound = pyg_reference(edge_index, x.double(), 700, reduce,
                                                 grad.double())
        graph = Graph.from_edge_index(edge_index.cuda(), (1500, 700))
        x_dev, grad_dev = x.cuda(), grad.cuda()
        out, arg = forward_op(graph.rowptr, graph.col, x_dev, reduce)
        assert_same_values(out, ref_out, dtype)
        got = backward_op(graph.rowptr, graph.col, None, None, x_dev, out, arg, grad_dev, reduce)
        assert_grad_close(got, ref_grad, bound, dtype)
        xx = x_dev.clone().requires_grad_()
        graph_minmax(graph, xx, reduce).backward(grad_dev)
        assert_grad_close(xx.grad, ref_grad, bound, dtype)


# ------------------------------------------- rows tied in every element
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_sanitizer_rows_tied_everywhere(reduce, dtype):
    """Features with a few distinct values (mostly 0, as a min or max over
    ReLU features meets them), so nearly every element ties among many of
    its row's entries: rows of 1 to 80 entries, whose ties take the first
    two sources a walk keeps, or a second walk that adds each match its
    share with one masked vector atomic an entry; widths of one to four
    features a lane and of one and several sub-groups; the raw backward op
    and autograd against PyG in float64."""
    check_native("cuda")
    seed = seed_of("minmax-tied-everywhere", reduce, dtype)
    gen = torch.Generator().manual_seed(seed)
    num_src = 300
    degrees = list(range(1, 81)) + [0, 0]  # and two rows without entries
    dst = torch.cat([torch.full((d,), v, dtype=torch.long) for v, d in enumerate(degrees)])
    src = torch.cat([torch.randperm(num_src, generator=gen)[:d] for d in degrees])
    edge_index = torch.stack([src, dst])
    num_dst = len(degrees)
    for width in (1, 2, 6, 64, 512):
        pick = torch.rand(num_src, width, generator=gen)
        x = torch.where(pick < 0.7, 0.0, torch.where(pick < 0.85, 1.0, -1.0)).to(dtype)
        grad = grad_values(num_dst, width, dtype, gen)
        ref_out, ref_grad, bound = pyg_reference(edge_index, x.double(), num_dst, reduce,
                                                 grad.double())
        graph = Graph.from_edge_index(edge_index.cuda(), (num_src, num_dst))
        x_dev, grad_dev = x.cuda(), grad.cuda()
        out, arg = forward_op(graph.rowptr, graph.col, x_dev, reduce)
        assert_same_values(out, ref_out, dtype)
        got = backward_op(graph.rowptr, graph.col, None, None, x_dev, out, arg, grad_dev, reduce)
        assert_grad_close(got, ref_grad, bound, dtype)
        xx = x_dev.clone().requires_grad_()
        graph_minmax(graph, xx, reduce).backward(grad_dev)
        assert_grad_close(xx.grad, ref_grad, bound, dtype)


# ------------------------------------------------------ bucketed backward
def long_sources_graph(num_src, num_dst, num_edges, dst_hubs, seed, gen):
    """A random graph with hub destinations ``dst_hubs`` and sources 1-4 of
    3000, 700, 257 and 256 more entries: the first three above a source
    chunk (PYGIO_MINMAX_BUCKET_SOURCE_CHUNK, 256), the last exactly at it."""
    return hubs_graph(num_src, num_dst, num_edges, seed, dst_hubs=dst_hubs,
                      src_hubs=[(1, 3000), (2, 700), (3, 257), (4, 256)], gen=gen)


LONG_SOURCES_NODES = (900, 700)


def long_sources_cases(test, reduce, dtype, index_width, num_edges, dst_hubs, widest,
                       monkeypatch):
    """The long-source backward tests' cases on the GPU: their graph
    (long_sources_graph, LONG_SOURCES_NODES nodes, the index width set),
    then per feature case (odd widths and ``widest``) the features, output
    gradient and PyG's float64 reference: (edge_index, x, grad, ref_out,
    ref_grad, bound)."""
    check_native("cuda")
    if index_width == 64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    seed = seed_of(test, reduce, dtype, index_width)
    gen = torch.Generator().manual_seed(seed)
    num_src, num_dst = LONG_SOURCES_NODES
    edge_index = long_sources_graph(num_src, num_dst, num_edges, dst_hubs, seed, gen)
    for width, kind in ((1, "ties"), (17, "special"), (130, "ties"), (64, "distinct"),
                        (widest, "ties")):
        x = features(num_src, width, kind, dtype, gen)
        grad = grad_values(num_dst, width, dtype, gen)
        yield (edge_index, x, grad, *pyg_reference(edge_index, x.double(), num_dst, reduce,
                                                   grad.double()))


@pytest.mark.cuda
@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_sanitizer_bucketed_backward(reduce, dtype, index_width, monkeypatch):
    """config.minmax_backward = "buckets": graph_minmax's backward (the C++
    node and the Python Function) writes the plain winners grouped by entry
    and gathers them per source over the CSR^T, against PyG in float64, on
    a graph with sources of far more entries than a chunk (each walked in
    chunks: 3000, 700 and 257 entries; 256 is not split), destinations of
    more entries than a bucketed row holds (their winners take atomics),
    ties, special values, degree-0 nodes and duplicate edges; odd widths
    and the widest bucketed width. "atomics" gives the same gradients."""
    paths = []

    def spy(rowptr, col, transpose, *rest):
        paths.append(None if transpose is None else len(transpose))
        return NATIVE_MINMAX_BACKWARD(rowptr, col, transpose, *rest)
    monkeypatch.setattr(_native, "minmax_backward", spy)
    for edge_index, x, grad, ref_out, ref_grad, bound in long_sources_cases(
            "minmax-buckets", reduce, dtype, index_width, 12000, [(5, 300), (9, 257)],
            mm.BUCKET_MAX_WIDTH, monkeypatch):
        gradients = {}
        for mode, native_host in (("buckets", True), ("buckets", False), ("atomics", False)):
            monkeypatch.setattr(config, "minmax_backward", mode)
            monkeypatch.setattr(config, "native_host", native_host)
            graph = Graph.from_edge_index(edge_index.cuda(), LONG_SOURCES_NODES)
            xx = x.cuda().requires_grad_()
            out = graph_minmax(graph, xx, reduce)
            assert_same_values(out, ref_out, dtype)
            (gradients[mode, native_host],) = torch.autograd.grad(out, xx, grad.cuda())
            assert_grad_close(gradients[mode, native_host], ref_grad, bound, dtype)
        assert_grad_close(gradients["buckets", True], gradients["atomics", False].double().cpu(),
                          bound, dtype)
    # The Python Function's launches (the C++ node's go to the library
    # directly: test_backward_buckets_choice sees their kernels).
    assert 3 in paths and None in paths


# -------------------------------------- deterministic backward, by position
@pytest.mark.cuda
@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_sanitizer_deterministic_long_sources(reduce, dtype, index_width, monkeypatch):
    """The deterministic backward gathers each source's gradient over its
    CSR^T row, an entry's winners found by its position in its row (the
    CSR^T's permutation; the raw kernels by value too, without it): the
    C++ node and the Python Function under deterministic algorithms, and
    the raw kernels both ways, bitwise the same twice, against PyG in
    float64 on a graph with sources of far more entries than a chunk
    (3000, 700 and 257 entries, summed in chunks, then in chunk order; 256
    is not split), hub destinations, ties, special values, degree-0 nodes
    and duplicate edges; odd widths and a wide one."""
    paths = []

    def spy(*args):
        paths.append(args[-1])
        return NATIVE_MINMAX_BACKWARD(*args)
    monkeypatch.setattr(_native, "minmax_backward", spy)
    for edge_index, x, grad, ref_out, ref_grad, bound in long_sources_cases(
            "minmax-deterministic-long", reduce, dtype, index_width, 2000, [(5, 600), (9, 257)],
            512, monkeypatch):
        for native_host in (True, False):
            monkeypatch.setattr(config, "native_host", native_host)
            graph = Graph.from_edge_index(edge_index.cuda(), LONG_SOURCES_NODES)
            xx = x.cuda().requires_grad_()
            out = graph_minmax(graph, xx, reduce)
            assert_same_values(out, ref_out, dtype)
            previous = torch.are_deterministic_algorithms_enabled()
            torch.use_deterministic_algorithms(True)
            try:
                (got,) = torch.autograd.grad(out, xx, grad.cuda())
            finally:
                torch.use_deterministic_algorithms(previous)
            assert_grad_close(got, ref_grad, bound, dtype)
        t, x_dev, grad_dev = graph.transpose, x.cuda(), grad.cuda()
        out, arg = forward_op(graph.rowptr, graph.col, x_dev, reduce)
        for perm in (t.perm, None):
            first, second = (mm._minmax_backward_kernel(graph.rowptr, graph.col, t.rowptr,
                                                        t.col, x_dev, out, arg, grad_dev,
                                                        reduce, perm, "deterministic")
                             for _ in range(2))
            assert_grad_close(first, ref_grad, bound, dtype)
            assert torch.equal(bits(first), bits(second))
    # The Python Function's launches (the C++ node's go to the library directly).
    assert "deterministic" in paths


@pytest.mark.cuda
def test_backward_buckets_choice(monkeypatch):
    """config.minmax_backward: "atomics" never buckets, "buckets" wherever
    the kernels take the features, "auto" only where the in-degree and the
    source gradient's size call for it; float64, too wide, CPU: never. The
    C++ node's backward launches the bucket kernels exactly when chosen."""
    check_native("cuda")
    graph = Graph.from_edge_index(random_graph(300, 300, 3000, seed=7).cuda(), 300)
    for mode in ("buckets", "atomics"):
        monkeypatch.setattr(config, "minmax_backward", mode)
        xx = torch.randn(300, 64, device="cuda", requires_grad=True)
        names, _ = cuda_kernel_names(lambda: graph_minmax(graph, xx, "max").sum().backward())
        assert any("minmax_grad_bucket_sums_kernel" in n for n in names) == (mode == "buckets")
    dense = Graph.from_edge_index(torch.tensor([[0, 1], [1, 0]], device="cuda").repeat(1, 8), 2)
    x = torch.zeros(2, 64, device="cuda")
    for mode, want in (("atomics", "atomics"), ("buckets", "buckets"), ("auto", "atomics")):
        monkeypatch.setattr(config, "minmax_backward", mode)
        assert mm.backward_path(dense, x) == want
    monkeypatch.setattr(config, "minmax_backward", "buckets")
    assert mm.backward_path(dense, x.double()) == "atomics"
    too_wide = torch.zeros(2, mm.BUCKET_MAX_WIDTH + 1, device="cuda")
    assert mm.backward_path(dense, too_wide) == "atomics"
    assert mm.backward_path(dense, x.cpu()) == "atomics"
    monkeypatch.setattr(config, "minmax_backward", "auto")
    # BUCKET_MIN_DEGREE entries a destination and a float32 gradient of
    # BUCKET_MIN_L2_MULTIPLE L2 caches: buckets, for float32 features only.
    num_src = mm.BUCKET_MIN_L2_MULTIPLE * mm._l2_bytes(x.device) // (4 * 64) + 1
    entries = 2 * mm.BUCKET_MIN_DEGREE

    def star(num_src, num_entries):
        return Graph.from_edge_index(torch.zeros(2, num_entries, dtype=torch.long,
                                                 device="cuda"), (num_src, 2))
    assert mm.backward_path(star(num_src, entries), x) == "buckets"
    assert mm.backward_path(star(num_src, entries), x.bfloat16()) == "atomics"
    assert mm.backward_path(star(num_src, entries - 1), x) == "atomics"
    assert mm.backward_path(star(num_src - 2, entries), x) == "atomics"


# ------------------------------------------------------------ CPU training
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_cpu_training_path_is_pygs_computation(dtype):
    """On the CPU the differentiable min / max is PyG's own computation
    under torch's autograd (no arg, no MinMaxFunction), 16-bit inputs
    reduced in float32; values and gradients are PyG's (the property tests
    check them against float64)."""
    edge_index, num_src, num_dst = property_case("hub-square", seed_of("minmax-cpu-training"))
    graph = Graph.from_edge_index(edge_index, (num_src, num_dst))
    x = torch.randn(num_src, 5, generator=torch.Generator().manual_seed(3)).to(dtype)
    for reduce in REDUCES:
        out = graph_minmax(graph, x.clone().requires_grad_(), reduce)
        nodes, node = [], out.grad_fn
        while node is not None and len(nodes) < 4:
            nodes.append(type(node).__name__)
            node = node.next_functions[0][0] if node.next_functions else None
        assert "ScatterReduceBackward0" in nodes and "MinMaxFunctionBackward" not in nodes
        assert out.dtype == dtype
        want = scatter(x.double()[edge_index[0]], edge_index[1], 0, dim_size=num_dst,
                       reduce=reduce)
        assert torch.equal(out.double(), want.to(dtype).double())


# ------------------------------------------------------------------ inference
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_inference_needs_no_arg(dtype, device, monkeypatch):
    check_native(device)
    edge_index, num_src, num_dst = property_case("hub-square", seed_of("minmax-inference"))
    gen = torch.Generator().manual_seed(seed_of("minmax-inference-x"))
    x = features(num_src, 33, "ties", dtype, gen).to(device)
    graph = Graph.from_edge_index(edge_index.to(device), (num_src, num_dst))
    with_arg_flags = []
    if torch.device(device).type == "cuda":
        def spy(rowptr, col, x, reduce, degree, max_hubs, out, arg):
            with_arg_flags.append(arg is not None)
            return NATIVE_MINMAX(rowptr, col, x, reduce, degree, max_hubs, out, arg)
        monkeypatch.setattr(_native, "minmax", spy)
    else:
        real = mm.minmax_reference

        def spy(rowptr, col, x, reduce, with_arg=True, arg_bytes=2):
            with_arg_flags.append(with_arg)
            return real(rowptr, col, x, reduce, with_arg, arg_bytes)
        monkeypatch.setattr(mm, "minmax_reference", spy)
    for reduce in REDUCES:
        want = scatter(x.double().cpu()[edge_index[0]], edge_index[1], 0, dim_size=num_dst,
                       reduce=reduce)
        out, arg = forward_op(graph.rowptr, graph.col, x, reduce)
        plain, no_arg = forward_op(graph.rowptr, graph.col, x, reduce, 0.99, False)
        assert no_arg.dtype == torch.int16 and no_arg.numel() == 0
        assert torch.equal(bits(plain), bits(out))
        assert_same_values(plain, want, dtype)
        xx = x.clone().requires_grad_()
        with torch.no_grad():
            got = graph_minmax(graph, xx, reduce)
            via_aggregate = ops.aggregate(xx, graph, reduce)
        assert not got.requires_grad and not via_aggregate.requires_grad
        assert torch.equal(bits(got), bits(out)) and torch.equal(bits(via_aggregate), bits(out))
        assert torch.equal(bits(graph_minmax(graph, x, reduce)), bits(out))  # no grad needed
        assert with_arg_flags[-5:] == [True, False, False, False, False]


# ------------------------------------------------------------- bad inputs
def _valid_inputs(device):
    rowptr = torch.tensor([0, 2, 2, 5], dtype=torch.int32, device=device)
    col = torch.tensor([0, 3, 1, 1, 2], dtype=torch.int32, device=device)
    x = torch.randn(4, 6, device=device)
    out = torch.zeros(3, 6, device=device)
    arg = torch.zeros(3, 6, dtype=torch.int16, device=device)
    grad = torch.randn(3, 6, device=device)
    rowptr_t = torch.tensor([0, 1, 3, 4, 5], dtype=torch.int32, device=device)
    col_t = torch.tensor([0, 2, 2, 2, 0], dtype=torch.int32, device=device)
    return rowptr, col, x, out, arg, grad, rowptr_t, col_t


def _forward_cases(device):
    """(what, args) of neighbor_minmax calls that must raise, and the type."""
    rowptr, col, x, _, _, _, _, _ = _valid_inputs(device)
    wide = torch.zeros(8, dtype=torch.int32, device=device)
    return [
        ("reduce sum", (rowptr, col, x, "sum"), ValueError),
        ("reduce MAX", (rowptr, col, x, "MAX"), ValueError),
        ("quantile < 0", (rowptr, col, x, "max", -0.01), ValueError),
        ("quantile > 1", (rowptr, col, x, "min", 1.5), ValueError),
        ("quantile nan", (rowptr, col, x, "min", math.nan), ValueError),
        ("arg_bytes 4", (rowptr, col, x, "min", 0.99, True, 4), ValueError),
        ("arg_bytes 0", (rowptr, col, x, "min", 0.99, True, 0), ValueError),
        ("int16 indices", (rowptr.short(), col.short(), x, "max"), TypeError),
        ("mixed index dtypes", (rowptr, col.long(), x, "max"), TypeError),
        ("float rowptr", (rowptr.float(), col.float(), x, "max"), TypeError),
        ("non-contiguous rowptr", (wide.view(4, 2)[:, 0], col, x, "max"), ValueError),
        ("non-contiguous col", (rowptr, torch.zeros(10, dtype=torch.int32,
                                                    device=device)[::2], x, "max"), ValueError),
        ("2-D rowptr", (rowptr.view(2, 2), col, x, "max"), ValueError),
        ("empty rowptr", (rowptr[:0], col[:0], x, "max"), ValueError),
        ("x 1-D", (rowptr, col, x[:, 0], "max"), ValueError),
        ("x 3-D", (rowptr, col, x.view(4, 2, 3), "max"), ValueError),
        ("x int", (rowptr, col, x.int(), "max"), TypeError),
        ("x on meta", (rowptr, col, x.to("meta"), "max"), ValueError),
        ("col out of range", (rowptr, torch.tensor([0, 3, 1, 4, 2], dtype=torch.int32,
                                                   device=device), x, "max"), ValueError),
        ("col negative", (rowptr, torch.tensor([0, 3, -1, 1, 2], dtype=torch.int32,
                                               device=device), x, "max"), ValueError),
        ("rowptr decreasing", (torch.tensor([0, 3, 2, 5], dtype=torch.int32, device=device),
                               col, x, "max"), ValueError),
        ("rowptr not from 0", (torch.tensor([1, 2, 2, 5], dtype=torch.int32, device=device),
                               col, x, "max"), ValueError),
        ("rowptr not to nnz", (torch.tensor([0, 2, 2, 4], dtype=torch.int32, device=device),
                               col, x, "max"), ValueError),
    ] + ([("x on cpu", (rowptr, col, x.cpu(), "max"), ValueError)]
         if torch.device(device).type == "cuda" else [])


def _backward_cases(device):
    rowptr, col, x, out, arg, grad, rowptr_t, col_t = _valid_inputs(device)
    ok = dict(rowptr=rowptr, col=col, rowptr_t=None, col_t=None, x=x, out=out, arg=arg,
              grad_out=grad, reduce="max")

    def case(what, exc, **changes):
        args = dict(ok, **changes)
        return what, tuple(args.values()), exc

    i32 = dict(dtype=torch.int32, device=device)
    return [
        case("reduce", ValueError, reduce="mean"),
        case("out rows", ValueError, out=torch.zeros(4, 6, device=device)),
        case("out width", ValueError, out=torch.zeros(3, 5, device=device)),
        case("out dtype", TypeError, out=out.double()),
        case("out 1-D", ValueError, out=out.flatten()),
        case("arg dtype", TypeError, arg=arg.int()),
        case("arg shape", ValueError, arg=arg[:, :5]),
        case("arg of with_arg=False", ValueError, arg=arg.new_zeros(0)),
        case("grad_out shape", ValueError, grad_out=grad[:2]),
        case("grad_out dtype", TypeError, grad_out=grad.half()),
        case("only rowptr_t", ValueError, rowptr_t=rowptr_t),
        case("only col_t", ValueError, col_t=col_t),
        case("rowptr_t length", ValueError, rowptr_t=rowptr_t[:4], col_t=col_t),
        case("col_t length", ValueError, rowptr_t=torch.tensor([0, 1, 3, 4, 4], **i32),
             col_t=col_t[:4]),
        case("rowptr_t dtype", ValueError, rowptr_t=rowptr_t.long(), col_t=col_t.long()),
        case("col_t out of range", ValueError, rowptr_t=rowptr_t,
             col_t=torch.tensor([0, 2, 3, 2, 0], **i32)),
        case("rowptr_t decreasing", ValueError, rowptr_t=torch.tensor([0, 3, 1, 4, 5], **i32),
             col_t=col_t),
        case("col out of range", ValueError, col=torch.tensor([0, 4, 1, 1, 2], **i32)),
        case("rowptr decreasing", ValueError, rowptr=torch.tensor([0, 3, 2, 5], **i32)),
        case("x 3-D", ValueError, x=x.view(4, 2, 3)),
        case("x on meta", ValueError, x=x.to("meta")),
        case("out on meta", ValueError, out=out.to("meta")),
        case("int16 indices", TypeError, rowptr=rowptr.short(), col=col.short()),
        case("non-contiguous rowptr", ValueError,
             rowptr=torch.zeros(8, **i32).view(4, 2)[:, 0]),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_before_any_kernel(device, monkeypatch):
    check_native(device)

    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel was reached")
    monkeypatch.setattr(mm, "_minmax_kernel", no_kernel)
    monkeypatch.setattr(mm, "_minmax_backward_kernel", no_kernel)
    monkeypatch.setattr(_native, "minmax", no_kernel)
    monkeypatch.setattr(_native, "minmax_backward", no_kernel)
    for what, args, exc in _forward_cases(device):
        with pytest.raises(exc, match="neighbor_minmax"):
            forward_op(*args)
    for what, args, exc in _backward_cases(device):
        with pytest.raises(exc, match="neighbor_minmax"):
            backward_op(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_valid_inputs_of_the_bad_input_cases_run(device):
    """The cases above differ from a valid call in one thing only."""
    check_native(device)
    rowptr, col, x, out, arg, grad, rowptr_t, col_t = _valid_inputs(device)
    out, arg = forward_op(rowptr, col, x, "max")
    want = scatter(x.double().cpu()[col.long().cpu()], torch.tensor([0, 0, 2, 2, 2]), 0,
                   dim_size=3, reduce="max")
    assert_same_values(out, want, torch.float32)
    for rt, ct in ((None, None), (rowptr_t, col_t)):
        assert backward_op(rowptr, col, rt, ct, x, out, arg, grad, "max").shape == x.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64],
                         ids=["fp32", "bf16", "fp64"])
@pytest.mark.parametrize("path", ["atomics", "deterministic", "deterministic by position"])
def test_sanitizer_garbage_arg_never_reads_out_of_bounds(path, dtype, device):
    """An arg that is not the forward's (random codes of one and two bytes,
    the walk and empty codes, positions at and past a row's end) and an out
    of random values give a wrong gradient but never an illegal memory
    access (on CUDA: the synchronize after each call raises on one), on
    every backward path (the deterministic one by value and by position)."""
    check_native(device)
    cuda = torch.device(device).type == "cuda"
    edge_index, num_src, num_rows, _, _, _ = hub_case("cpu")
    graph = Graph.from_edge_index(edge_index.to(device), (num_src, num_rows))
    t = graph.transpose
    rowptr_t, col_t = (None, None) if path == "atomics" else (t.rowptr, t.col)
    perm_t = t.perm if path == "deterministic by position" else None
    gen = torch.Generator().manual_seed(seed_of("minmax-garbage", path, dtype))
    for width in ((1, 3, 64) if cuda else (3,)):
        x = features(num_src, width, "ties", dtype, gen).to(device)
        grad = grad_values(num_rows, width, dtype, gen).to(device)
        out, _ = forward_op(graph.rowptr, graph.col, x, "max")
        noise = features(num_rows, width, "special", dtype, gen).to(device)
        for arg_bytes in ARG_BYTES:
            walk = walk_code(arg_bytes)
            extremes = torch.tensor([0, 1, 6, 7, 255, 256, 1200, walk - 1, walk, walk + 1])
            garbage = torch.randint(0, walk + 2, (num_rows, width), generator=gen)
            pick = torch.rand(num_rows, width, generator=gen) < 0.5
            garbage[pick] = extremes[torch.randint(0, len(extremes), (int(pick.sum()),),
                                                   generator=gen)]
            garbage = garbage.to(mm.ARG_DTYPES[arg_bytes]).to(device)
            for reduce in REDUCES:
                for o in (out, noise):
                    gx = mm._minmax_backward_kernel(graph.rowptr, graph.col, rowptr_t, col_t,
                                                    x, o, garbage, grad, reduce, perm_t,
                                                    path.split()[0])
                    if cuda:
                        torch.cuda.synchronize()
                    assert gx.shape == x.shape and gx.dtype == dtype
    # The device is still healthy.
    assert torch.ones(3, device=device).sum().item() == 3.0


# ---------------------------------------------------- torch.compile, opcheck
def _compile_case(device):
    edge_index = random_graph(50, 50, 400, seed=seed_of("minmax-compile"), hub_degree=300)
    gen = torch.Generator().manual_seed(seed_of("minmax-compile-x"))
    x = features(50, 9, "ties", torch.float32, gen).to(device)
    grad = grad_values(50, 9, torch.float32, gen).to(device)
    return edge_index.to(device), x, grad


def _eager_and_compiled(fn, adj, x, grad, backend):
    results = []
    for f in (fn, torch.compile(fn, backend=backend)):
        xx = x.clone().requires_grad_()
        out = f(xx, adj)
        (gx,) = torch.autograd.grad(out, xx, grad)
        results.append((out.detach(), gx))
    return results


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_cpu(backend):
    edge_index, x, grad = _compile_case("cpu")

    def fn(x, edge_index):
        return ops.aggregate(x, edge_index, "max")

    (out, gx), (c_out, c_gx) = _eager_and_compiled(fn, edge_index, x, grad, backend)
    assert torch.equal(bits(out), bits(c_out)) and torch.equal(bits(gx), bits(c_gx))
    ref_out, ref_grad, bound = pyg_reference(edge_index, x.double(), 50, "max", grad.double())
    assert_same_values(c_out, ref_out, torch.float32)
    assert_grad_close(c_gx, ref_grad, bound, torch.float32)


def test_compile_cpu_fullgraph_with_a_graph():
    """With a Graph passed in, min and max trace without a graph break."""
    edge_index, x, grad = _compile_case("cpu")
    graph = Graph.from_input(edge_index, 50)

    def fn(x, graph):
        return ops.aggregate(x, graph, "min") * 2 + ops.aggregate(x, graph, "max")

    explanation = torch._dynamo.explain(fn)(x, graph)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    fullgraph = functools.partial(torch.compile, fullgraph=True)
    results = []
    for f in (fn, fullgraph(fn, backend="aot_eager")):
        xx = x.clone().requires_grad_()
        out = f(xx, graph)
        results.append((out.detach(), torch.autograd.grad(out, xx, grad)[0]))
    (out, gx), (c_out, c_gx) = results
    assert torch.equal(bits(out), bits(c_out)) and torch.equal(bits(gx), bits(c_gx))


@pytest.mark.cuda
def test_compile_cuda_inductor():
    check_native("cuda")
    edge_index, x, grad = _compile_case("cuda")

    def fn(x, edge_index):
        return ops.aggregate(x, edge_index, "max").relu() * 3

    (out, gx), (c_out, c_gx) = _eager_and_compiled(fn, edge_index, x, grad, "inductor")
    assert torch.equal(bits(out), bits(c_out))
    m = scatter(x.double().cpu()[edge_index[0].cpu()], edge_index[1].cpu(), 0, dim_size=50,
                reduce="max")
    assert_same_values(c_out, m.relu() * 3, torch.float32)
    # d(3 relu(m)) / dm = 3 where m > 0, then through the max
    grad_m = grad.double().cpu() * torch.where(m > 0, 3.0, 0.0)
    _, ref_grad, bound = pyg_reference(edge_index, x.double(), 50, "max", grad_m)
    for g in (gx, c_gx):
        assert_grad_close(g, ref_grad, bound, torch.float32)


def _opcheck_args(device):
    edge_index = random_graph(20, 14, 90, seed=seed_of("minmax-opcheck"))
    graph = Graph.from_edge_index(edge_index.to(device), (20, 14))
    gen = torch.Generator().manual_seed(seed_of("minmax-opcheck-x"))
    x = features(20, 6, "ties", torch.float32, gen).to(device)
    grad = grad_values(14, 6, torch.float32, gen).to(device)
    return graph, x, grad


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    check_native(device)
    graph, x, grad = _opcheck_args(device)
    t = graph.transpose
    torch.library.opcheck(forward_op.default, (graph.rowptr, graph.col, x, "min"))
    torch.library.opcheck(forward_op.default, (graph.rowptr, graph.col, x, "max", 0.0, False))
    out, arg = forward_op(graph.rowptr, graph.col, x, "max")
    torch.library.opcheck(backward_op.default, (graph.rowptr, graph.col, None, None, x, out,
                                                arg, grad, "max"))
    torch.library.opcheck(backward_op.default, (graph.rowptr, graph.col, t.rowptr, t.col, x,
                                                out, arg, grad, "max"))
