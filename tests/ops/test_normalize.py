"""Edge values of the SpMM family: the native CUDA kernels (GCN's symmetric
and mean normalization) against the plain-torch formulas they replace."""
import pytest
import torch
from _helpers import PROPERTY_GRAPHS, native_required, property_case, seed_of

from pyg_ioaware import Graph, _native
from pyg_ioaware.ops import normalize

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def torch_values(graph, weight_csr, mode, dtype, monkeypatch):
    """_compute with the native library hidden: the plain-torch formula."""
    with monkeypatch.context() as patch:
        patch.setattr(normalize, "native_ready", lambda device: False)
        return normalize._compute(graph, weight_csr, mode, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS])
@pytest.mark.parametrize("mode", ["mean", "gcn"])
def test_cuda_native_values_equal_the_torch_formula(name, mode, monkeypatch):
    if native_required():
        assert _native.library() is not None
    edge_index, num_src, num_dst = property_case(name, seed_of("normalize", name))
    if mode == "gcn":
        num_src = num_dst = max(num_src, num_dst)
    graph = Graph.from_edge_index(edge_index.cuda(), (num_src, num_dst))
    graphs = [graph] + ([graph.with_remaining_self_loops()] if num_src == num_dst else [])
    gen = torch.Generator().manual_seed(seed_of("normalize-weights", name))
    for g in graphs:
        weight = (torch.rand(g.num_edges, generator=gen) + 0.1).cuda()
        for weight_csr in (None, weight):
            for dtype in DTYPES:
                got = normalize._compute(g, weight_csr, mode, dtype)
                want = torch_values(g, weight_csr, mode, dtype, monkeypatch)
                assert got.dtype == want.dtype == dtype
                tolerance = 1e-6 if dtype in (torch.float32, torch.float64) else 1e-2
                torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)


@pytest.mark.cuda
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS])
def test_cuda_gcn_values_of_unit_weights_in_one_launch_are_the_weighted_ones(name):
    """Without weights and dropped self loops the native GCN values take one
    launch (the degrees are the row lengths): bitwise what the two-launch
    path (degrees summed from weights) gives for weights that are all 1, on
    a graph and on the self-loop graph of an input without self loops."""
    if native_required():
        assert _native.library() is not None
    edge_index, num_src, num_dst = property_case(name, seed_of("normalize-unit", name))
    num_nodes = max(num_src, num_dst)
    without_loops = edge_index[:, edge_index[0] != edge_index[1]]
    graph = Graph.from_edge_index(edge_index.cuda(), num_nodes)
    # The self-loop graph of an input without self loops has no dropped loop: one launch too.
    looped = Graph.from_edge_index(without_loops.cuda(), num_nodes).with_remaining_self_loops()
    assert graph.self_loops == int((edge_index[0] == edge_index[1]).sum())
    assert not looped.state.dropped_loops
    for g in (graph, looped):
        for dtype in DTYPES:
            acc = normalize.accumulator_dtype(dtype)
            ones = torch.ones(g.num_edges, dtype=acc, device="cuda")
            unit = normalize._compute(g, None, "gcn", dtype)
            weighted = normalize._compute(g, ones, "gcn", dtype)
            assert torch.equal(unit, weighted)
