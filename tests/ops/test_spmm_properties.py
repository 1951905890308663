"""Property test of the SpMM family over random graphs (PROPERTY_GRAPHS:
empty, isolated nodes, hubs, duplicates, self loops, bipartite), odd widths,
int32 and int64 indices and every dtype, forward and backward, against a
float64 dense reference: on CPU everywhere, on CUDA where a GPU is visible
(gpu_check.sh runs the CUDA sample under compute-sanitizer)."""
import pytest
import torch
from _helpers import PROPERTY_GRAPHS, PROPERTY_WIDTHS, TOLERANCE, property_case, seed_of

from pyg_ioaware import Graph, config, ops

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
MODES = ["sum", "mean", "gcn"]


def dense_adjacency(edge_index, weight, num_src, num_dst, mode):
    """A[d, s] in float64 for ``mode`` (gcn: with PyG's remaining self loops)."""
    a = torch.zeros(num_dst, num_src, dtype=torch.float64)
    src, dst = edge_index
    if mode == "gcn":
        loops = src == dst
        a.index_put_((dst[~loops], src[~loops]), weight[~loops], accumulate=True)
        diag = torch.ones(num_dst, dtype=torch.float64)  # PyG: the last input loop wins
        for e in torch.nonzero(loops).flatten().tolist():
            diag[dst[e]] = weight[e]
        a += torch.diag(diag)
        deg = a.sum(1)
        inv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
        return inv.unsqueeze(1) * a * inv.unsqueeze(0)
    a.index_put_((dst, src), weight, accumulate=True)
    if mode == "mean":
        a /= torch.bincount(dst, minlength=num_dst).clamp(min=1).unsqueeze(1)
    return a


def run_case(name, mode, weighted, width, dtype, device):
    """(ours on device in dtype, the float64 reference): out, grad x, grad w."""
    edge_index, num_src, num_dst = property_case(name, seed_of(name, mode, weighted, width))
    if mode == "gcn":
        num_src = num_dst = max(num_src, num_dst)
    gen = torch.Generator().manual_seed(seed_of(name, width))
    x = torch.randn(num_src, width, generator=gen, dtype=torch.float64)
    w = torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64) + 0.1
    grad = torch.randn(num_dst, width, generator=gen, dtype=torch.float64)

    # Copies: in float64 on the CPU, .to() would return x itself.
    xx = x.to(device, dtype, copy=True).requires_grad_()
    ww = w.to(device, dtype, copy=True).requires_grad_() if weighted else None
    ei = edge_index.to(device)
    if mode == "gcn":
        out = ops.gcn_adjacency(ei, num_src, ww).propagate(xx)
    else:
        x_dst = torch.empty(num_dst, 1, device=device, dtype=dtype)
        out = ops.aggregate((xx, x_dst), ei, mode, ww)
    out.backward(grad.to(device, dtype))

    xr = x.clone().requires_grad_()
    wr = w.clone().requires_grad_()
    ref = dense_adjacency(edge_index, wr if weighted else torch.ones_like(w), num_src, num_dst,
                          mode) @ xr
    ref.backward(grad)
    ours = (out, xx.grad, ww.grad if weighted else None)
    return ours, (ref, xr.grad, wr.grad if weighted else None)


def assert_close(ours, refs, dtype):
    for got, want in zip(ours, refs):
        if want is None:
            continue
        assert got.dtype == dtype and got.shape == want.shape
        assert torch.isfinite(got).all()
        # Edge-weight gradients of 16-bit runs sum many rounded products.
        tolerance = TOLERANCE[dtype] * (4 if dtype in (torch.float16, torch.bfloat16) else 1)
        # Relative to the reference's norm, or absolute where the exact answer is ~0
        # (e.g. gradients of weights that normalization cancels).
        scale = max(want.double().norm().item(), 1.0)
        assert (got.double().cpu() - want).norm().item() / scale < tolerance


@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS])
@pytest.mark.parametrize("mode", MODES)
def test_cpu_float64_and_float32(name, mode, index_width, monkeypatch):
    if index_width == 64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    for weighted in (False, True):
        for width, dtype in ((3, torch.float64), (17, torch.float32)):
            assert_close(*run_case(name, mode, weighted, width, dtype, "cpu"), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_types(dtype):
    assert_close(*run_case("hub-square", "gcn", True, 33, dtype, "cpu"), dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("index_width", [32, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64", "fp16", "bf16"])
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS])
def test_cuda_property_sample(name, dtype, index_width, monkeypatch):
    """The GPU sample; gpu_check.sh runs its fp32 and bf16 cases under
    compute-sanitizer."""
    if index_width == 64:
        monkeypatch.setattr(config, "force_int64_indices", True)
    for mode in MODES:
        for weighted in (False, True):
            for width in PROPERTY_WIDTHS:
                assert_close(*run_case(name, mode, weighted, width, dtype, "cuda"), dtype)


def test_graph_build_matches_for_int32_and_int64(monkeypatch):
    edge_index, n, _ = property_case("hub-square", 3)
    small = Graph.from_edge_index(edge_index, n)
    monkeypatch.setattr(config, "force_int64_indices", True)
    large = Graph.from_edge_index(edge_index, n)
    assert small.col.dtype == torch.int32 and large.col.dtype == torch.int64
    assert torch.equal(small.col.long(), large.col) and torch.equal(small.rowptr.long(),
                                                                      large.rowptr)
