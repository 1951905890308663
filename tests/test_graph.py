"""Graph: every input kind, the CSR / CSR^T invariants, the cache, bad input."""
import gc

import numpy as np
import pytest
import torch
from _helpers import PROPERTY_GRAPHS, count_syncs, property_case, random_graph, seed_of
from torch_geometric import EdgeIndex
from torch_geometric.utils import add_remaining_self_loops, add_self_loops, remove_self_loops

from pyg_ioaware import Graph, config, ops
from pyg_ioaware.graph import _GRAPH_CACHE, DROPPED_LOOP, NEW_LOOP


def assert_structure(graph: Graph, edge_index: torch.Tensor, num_src: int, num_dst: int,
                     stable: bool = True):
    """CSR by destination (input order within a destination where
    ``stable``) and CSR^T by source describe exactly edge_index."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    num_edges = src.numel()
    assert (graph.num_src, graph.num_dst, graph.num_edges) == (num_src, num_dst, num_edges)
    row = torch.repeat_interleave(torch.arange(num_dst), graph.rowptr.long().diff())
    perm = torch.arange(num_edges) if graph.edge_perm is None else graph.edge_perm.long()
    assert torch.equal(graph.row.long(), row)
    assert torch.equal(graph.col.long(), src[perm])
    assert torch.equal(row, dst[perm])
    assert torch.equal(torch.sort(perm).values, torch.arange(num_edges))
    if stable:  # input order kept within a destination
        keys = row * num_edges + perm
        assert bool((keys[1:] > keys[:-1]).all()), "CSR not grouped by destination, stably"
    # CSR^T: rows are sources, perm points at the same edge in CSR.
    t = graph.transpose
    row_t = torch.repeat_interleave(torch.arange(num_src), t.rowptr.long().diff())
    assert torch.equal(t.row.long(), row_t)
    assert torch.equal(row_t, graph.col.long()[t.perm.long()])
    assert torch.equal(t.col.long(), row[t.perm.long()])
    assert torch.equal(graph.in_degree.long(), torch.bincount(dst, minlength=num_dst))
    assert torch.equal(graph.out_degree.long(), torch.bincount(src, minlength=num_src))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_from_edge_index(dtype):
    edge_index = random_graph(40, 40, 300, seed=1)
    graph = Graph.from_edge_index(edge_index.to(dtype), num_nodes=40)
    assert_structure(graph, edge_index, 40, 40)
    assert graph.col.dtype == torch.int32 and graph.rowptr.dtype == torch.int32


def test_bipartite_and_inferred_sizes():
    edge_index = random_graph(30, 12, 200, seed=2)
    graph = Graph.from_edge_index(edge_index, num_nodes=(30, 12))
    assert_structure(graph, edge_index, 30, 12)
    assert graph.is_bipartite
    inferred = Graph.from_edge_index(edge_index)
    n = int(edge_index.max()) + 1
    assert (inferred.num_src, inferred.num_dst) == (n, n)


def test_from_edge_index_class():
    edge_index = random_graph(25, 25, 100, seed=3)
    ei = EdgeIndex(edge_index, sparse_size=(25, 25))
    graph = Graph.from_input(ei)
    assert_structure(graph, edge_index, 25, 25)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_from_torch_sparse(layout):
    edge_index = random_graph(20, 15, 80, seed=4)
    values = torch.rand(edge_index.size(1))
    # PyG's adj_t convention: rows are destinations.
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), values, (15, 20)).coalesce()
    if layout == "csr":
        adj_t = adj_t.to_sparse_csr()
    graph = Graph.from_input(adj_t)
    coalesced = torch.sparse_coo_tensor(edge_index.flip(0), values, (15, 20)).coalesce()
    dst, src = coalesced.indices()
    assert_structure(graph, torch.stack([src, dst]), 20, 15)
    assert graph.edge_perm is None  # already grouped by destination: no sort
    torch.testing.assert_close(graph.input_values, coalesced.values())


def test_from_sparse_tensor():
    torch_sparse = pytest.importorskip("torch_sparse")
    edge_index = random_graph(20, 20, 80, seed=5)
    adj_t = torch_sparse.SparseTensor(row=edge_index[1], col=edge_index[0],
                                      sparse_sizes=(20, 20))
    dst, src, _ = adj_t.coo()
    assert_structure(Graph.from_input(adj_t), torch.stack([src, dst]), 20, 20)


def test_empty_graph():
    graph = Graph.from_edge_index(torch.empty(2, 0, dtype=torch.long), num_nodes=5)
    assert graph.num_edges == 0 and graph.rowptr.tolist() == [0] * 6
    assert graph.in_degree.tolist() == [0] * 5


def test_cache_hit_does_no_graph_work(monkeypatch):
    edge_index = random_graph(30, 30, 100, seed=6)
    first = Graph.from_input(edge_index, num_nodes=30)

    def fail(*args, **kwargs):
        raise AssertionError("graph rebuilt on a cache hit")

    monkeypatch.setattr(Graph, "_build", fail)
    assert Graph.from_input(edge_index, num_nodes=30) is first
    with pytest.raises(AssertionError, match="rebuilt"):
        Graph.from_input(edge_index.clone(), num_nodes=30)  # another tensor: rebuilt


def test_with_self_loops_shares_the_graph_and_its_cache_entry():
    """Graph.from_input(with_self_loops=True) gives adj's Graph, cached under
    the same key as a plain call, with the same self-loop graph as one built
    on first use (on the CPU: built on first use; CUDA: test_native_host)."""
    edge_index = random_graph(40, 40, 150, seed=9)
    graph = Graph.from_input(edge_index, num_nodes=40, with_self_loops=True)
    assert Graph.from_input(edge_index, num_nodes=40) is graph
    assert Graph.from_input(edge_index, num_nodes=40, with_self_loops=True) is graph
    assert_structure(graph, edge_index, 40, 40)
    reference = Graph.from_edge_index(edge_index, 40).with_remaining_self_loops()
    looped = graph.with_remaining_self_loops()
    for name in ("rowptr", "col", "row"):
        assert torch.equal(getattr(looped, name), getattr(reference, name)), name
    assert torch.equal(looped.state.edge_origin, reference.state.edge_origin)


def test_cache_sees_in_place_edits_and_node_counts():
    edge_index = random_graph(30, 30, 100, seed=7)
    first = Graph.from_input(edge_index, num_nodes=30)
    assert Graph.from_input(edge_index, num_nodes=31) is not first
    edge_index[0, 0] = (edge_index[0, 0] + 1) % 30  # bumps the version counter
    second = Graph.from_input(edge_index, num_nodes=30)
    assert second is not first
    assert_structure(second, edge_index, 30, 30)


def test_cache_holds_tensors_weakly():
    gc.collect()  # earlier tests' tensors in reference cycles go now, not mid-test
    before = len(_GRAPH_CACHE)
    edge_index = random_graph(30, 30, 100, seed=8)
    graph = Graph.from_input(edge_index, num_nodes=30)
    assert len(_GRAPH_CACHE) == before + 1
    del edge_index
    gc.collect()
    assert len(_GRAPH_CACHE) == before
    assert graph.num_edges > 0  # the Graph itself stays usable


def test_nbytes_counts_structure_and_derived_state():
    graph = Graph.from_edge_index(random_graph(30, 30, 100, seed=9), num_nodes=30)
    size = lambda *ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    base = graph.nbytes
    assert base == size(graph.rowptr, graph.col, graph.row, graph.edge_perm)
    t = graph.transpose
    with_t = base + size(t.rowptr, t.col, t.row, t.perm)
    assert graph.nbytes == with_t
    looped = graph.with_remaining_self_loops()
    assert graph.nbytes == with_t + looped.nbytes
    assert looped.nbytes == size(looped.rowptr, looped.col, looped.row,
                                 looped.state.edge_origin)


def test_derived_state_is_lazy():
    graph = Graph.from_edge_index(random_graph(30, 30, 100, seed=16), num_nodes=30)
    assert graph.state.transpose is None and graph.state.self_loop_graph is None
    graph.with_remaining_self_loops()
    assert graph.state.transpose is None  # self loops need no CSR^T (nor a sort)


def test_grouped_input_needs_no_sort(monkeypatch):
    edge_index = random_graph(30, 30, 100, seed=17)
    grouped = edge_index[:, torch.argsort(edge_index[1], stable=True)]

    def fail(*args, **kwargs):
        raise AssertionError("sorted")

    monkeypatch.setattr(torch, "sort", fail)
    graph = Graph.from_edge_index(grouped, num_nodes=30)
    assert graph.edge_perm is None
    graph.with_remaining_self_loops()
    monkeypatch.undo()
    assert_structure(graph, grouped, 30, 30)


def test_forced_int64_indices(monkeypatch):
    monkeypatch.setattr(config, "force_int64_indices", True)
    edge_index = random_graph(30, 20, 100, seed=18)
    graph = Graph.from_edge_index(edge_index, num_nodes=(30, 20))
    assert graph.col.dtype == graph.rowptr.dtype == torch.int64
    assert graph.transpose.col.dtype == torch.int64
    assert_structure(graph, edge_index, 30, 20)


def test_reversed_graph():
    edge_index = random_graph(30, 20, 100, seed=19)
    graph = Graph.from_edge_index(edge_index, num_nodes=(30, 20))
    reversed_graph = graph.reversed()
    assert reversed_graph is graph.reversed()
    assert_structure(reversed_graph, edge_index.flip(0), 20, 30, stable=False)


def test_with_remaining_self_loops_matches_pyg():
    edge_index = random_graph(25, 25, 120, seed=10)
    weight = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(10))
    graph = Graph.from_edge_index(edge_index, num_nodes=25)
    looped = graph.with_remaining_self_loops()
    assert looped is graph.with_remaining_self_loops()
    ref_index, ref_weight = add_remaining_self_loops(edge_index, weight, 7.0, 25)
    origin = looped.state.edge_origin
    dropped = origin == DROPPED_LOOP
    # Input loops stay in the structure with weight 0; everything else is PyG's.
    assert looped.num_edges == ref_index.size(1) + int(dropped.sum())
    assert torch.equal(looped.col[dropped], looped.row[dropped])
    fill = torch.where(origin == NEW_LOOP, 7.0, 0.0)
    ours = torch.where(origin >= 0, weight[origin.clamp(min=0)], fill)[~dropped]

    def canon(index, w):  # as multisets of (dst, src, weight): by key, then weight
        keys = index[1] * 25 + index[0]
        by_weight = torch.argsort(w, stable=True)
        order = by_weight[torch.argsort(keys[by_weight], stable=True)]
        return keys[order], w[order]

    row = looped.row.long()[~dropped]
    k1, w1 = canon(torch.stack([looped.col.long()[~dropped], row]), ours)
    k2, w2 = canon(ref_index, ref_weight)
    assert torch.equal(k1, k2)
    torch.testing.assert_close(w1, w2)
    # The structure is a valid CSR: rows grouped, one loop first in every row.
    assert torch.equal(looped.rowptr.long().diff(), torch.bincount(looped.row.long(),
                                                                  minlength=25))
    assert torch.equal(looped.col[looped.rowptr[:-1].long()].long(), torch.arange(25))


@pytest.mark.parametrize("num_src, num_dst, num_edges", [(25, 25, 120), (30, 20, 90),
                                                         (20, 30, 90), (6, 6, 0)])
def test_with_pyg_self_loops_matches_pyg(num_src, num_dst, num_edges):
    edge_index = random_graph(num_src, num_dst, num_edges, seed=12) if num_edges \
        else torch.empty(2, 0, dtype=torch.long)
    graph, looped, kept = Graph.with_pyg_self_loops(edge_index, (num_src, num_dst))
    plain, _ = remove_self_loops(edge_index)
    ref, _ = add_self_loops(plain, num_nodes=(num_src, num_dst))
    assert torch.equal(looped, ref)  # PyG's order: kept edges, then the loops
    assert torch.equal(edge_index[:, kept], plain)
    assert_structure(graph, looped, num_src, num_dst)
    assert Graph.with_pyg_self_loops(edge_index, (num_src, num_dst))[0] is graph  # cached
    assert Graph.with_pyg_self_loops(edge_index, (num_src, num_dst + 1))[0] is not graph


def test_degree_bound_of_grouped_input():
    """A graph built from edges grouped by destination knows its largest
    in-degree (the self-loop graphs one more); other inputs know none."""
    edge_index = random_graph(40, 40, 300, seed=38, hub_degree=90)
    grouped = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    max_degree = int(torch.bincount(edge_index[1]).max())
    graph = Graph.from_edge_index(grouped, 40)
    assert graph.degree_bound == max_degree
    assert graph.with_remaining_self_loops().degree_bound == max_degree + 1
    looped, _, _ = Graph.with_pyg_self_loops(grouped, (40, 40))
    assert looped.degree_bound == max_degree + 1
    assert int(looped.in_degree.max()) <= looped.degree_bound
    if not torch.equal(grouped, edge_index):
        assert Graph.from_edge_index(edge_index, 40).degree_bound is None
        assert Graph.with_pyg_self_loops(edge_index, (40, 40))[0].degree_bound is None
    assert Graph.from_edge_index(torch.empty(2, 0, dtype=torch.long), 5).degree_bound == 0


@pytest.mark.cuda
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS] + ["loops"])
@pytest.mark.parametrize("force_int64", [False, True])
def test_cuda_native_pyg_self_loops_equal_the_torch_build(name, force_int64, monkeypatch):
    """The native remove + add self loops of grouped edges (one call) gives
    the torch build's graph, edge list and kept edges exactly: every
    property graph, int32 and int64 edges, strided, with many input loops."""
    monkeypatch.setattr(config, "force_int64_indices", force_int64)
    if name == "loops":
        num_src = num_dst = 60
        edge_index = random_graph(60, 60, 400, seed=39)
        edge_index[0, ::3] = edge_index[1, ::3]  # a third of the edges become self loops
    else:
        edge_index, num_src, num_dst = property_case(name, seed_of("native-pyg-loops", name))
    grouped = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    for dtype in (torch.int32, torch.int64):
        want_graph, want_looped, want_kept = Graph.with_pyg_self_loops(grouped.to(dtype),
                                                                       (num_src, num_dst))
        for layout in _layouts(grouped.to(dtype).cuda()):
            graph, looped, kept = Graph.with_pyg_self_loops(layout, (num_src, num_dst))
            assert looped.dtype == dtype and torch.equal(looped.cpu(), want_looped)
            assert torch.equal(kept.cpu(), want_kept)
            for got, want in ((graph.rowptr, want_graph.rowptr), (graph.col, want_graph.col),
                              (graph.row, want_graph.row),
                              (graph.edge_perm, want_graph.edge_perm)):
                assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
            assert graph.degree_bound == want_graph.degree_bound


@pytest.mark.parametrize("bad, match", [
    (torch.tensor([[0, -1], [1, 2]]), "negative"),
    (torch.tensor([[0, 1, 3], [1, 2, 3]]), "out of range"),  # a self loop past the nodes
    (torch.tensor([[0, 1], [1, 2]], dtype=torch.float32), "integer"),
])
def test_with_pyg_self_loops_checks_before_dropping_loops(bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        Graph.with_pyg_self_loops(bad, (3, 3))


@pytest.mark.parametrize("bad, error, match", [
    (torch.tensor([[0, 1], [1, 2]], dtype=torch.float32), TypeError, "integer"),
    (torch.tensor([[0, 1], [1, 2]], dtype=torch.int16), TypeError, "int32 or int64"),
    (torch.tensor([0, 1, 2]), ValueError, r"\[2, num_edges\]"),
    (torch.tensor([[0, 1, 2], [1, 2, 0], [0, 0, 0]]), ValueError, r"\[2, num_edges\]"),
    (torch.tensor([[0, -1], [1, 2]]), ValueError, "negative"),
    (torch.tensor([[0, 1], [1, 5]]), ValueError, "out of range"),
])
def test_bad_edge_index(bad, error, match):
    with pytest.raises(error, match=match):
        Graph.from_input(bad, num_nodes=3)


def test_bad_inputs_of_other_kinds():
    with pytest.raises(TypeError, match="expected an edge_index"):
        Graph.from_input([[0, 1], [1, 0]])
    with pytest.raises(TypeError, match="edge_index must be a tensor, got list"):
        Graph.from_edge_index([[0, 1], [1, 0]], num_nodes=3)
    with pytest.raises(ValueError, match="non-negative"):
        Graph.from_edge_index(torch.tensor([[0], [0]]), num_nodes=(-1, 3))
    for count in (2.5, "3", torch.tensor(3.0)):  # never truncated or parsed
        with pytest.raises(TypeError, match="node counts must be integers"):
            Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=count)
        with pytest.raises(TypeError, match="node counts must be integers"):
            Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=(3, count))
    for count in (torch.tensor(3), np.int64(3)):  # integers of other kinds
        assert Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=count).num_dst == 3
    graph = Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=3)
    with pytest.raises(ValueError, match="expected"):
        Graph.from_input(graph, num_nodes=4)
    with pytest.raises(ValueError, match="square"):
        Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=(3, 2)) \
            .with_remaining_self_loops()


@pytest.mark.cuda
@pytest.mark.parametrize("grouped", [False, True])
def test_cuda_new_graph_costs_one_sync(grouped):
    from pyg_ioaware.nn import GCNConv

    edge_index = random_graph(2000, 2000, 20000, seed=33).cuda()
    if grouped:
        edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    conv = GCNConv(16, 16).cuda()
    x = torch.randn(2000, 16, device="cuda")
    conv(x, edge_index.clone()).sum().backward()  # warm-up: library loading, plans
    fresh = edge_index.clone()
    assert count_syncs(lambda: Graph.from_input(fresh, num_nodes=2000)) == 1
    fresh = edge_index.clone()
    # A whole training step on a new graph: build, self loops, values, CSR^T, plans.
    assert count_syncs(lambda: conv(x, fresh).sum().backward()) == 1


@pytest.mark.cuda
def test_cuda_ungrouped_graph_learns_its_degree_bound_without_a_wait(monkeypatch):
    """Edges not grouped by destination give a Graph without a degree
    bound; its first SpMM requests the bound (no host wait) and later calls
    use it (no hub launches), with the same output."""
    from pyg_ioaware.graph import known_structure_state

    edge_index = random_graph(3000, 3000, 30000, seed=34).cuda()
    assert not bool((edge_index[1].diff() >= 0).all())  # not grouped
    graph = Graph.from_edge_index(edge_index, num_nodes=3000)
    assert graph.degree_bound is None
    state = known_structure_state(graph.rowptr)
    assert state.known_degree_bound() is None
    x = torch.randn(3000, 24, device="cuda")
    first = ops.aggregate(x, graph, "sum")
    torch.cuda.synchronize()
    assert state.known_degree_bound() == int(graph.in_degree.max())
    assert torch.allclose(ops.aggregate(x, graph, "sum"), first, atol=1e-5)
    # The CSR^T learns its own (the backward's plain SpMM over it).
    monkeypatch.setattr(config, "spmm_backward", "materialized")
    x.requires_grad_()
    ops.aggregate(x, graph, "sum").sum().backward()
    torch.cuda.synchronize()
    ops.aggregate(x, graph, "sum").sum().backward()
    transpose_state = known_structure_state(graph.transpose.rowptr)
    assert transpose_state.known_degree_bound() == int(graph.out_degree.max())
    graph.reversed()  # a Graph over the CSR^T keeps what the structure learned
    assert transpose_state.known_degree_bound() == int(graph.out_degree.max())
    assert torch.allclose(x.grad, 2 * graph.out_degree.float().unsqueeze(1).expand_as(x))


@pytest.mark.cuda
@pytest.mark.parametrize("layer", ["GATv2Conv", "TransformerConv"])
def test_cuda_new_graph_attention_step_costs_one_sync(layer):
    """A training step of an attention layer on a new graph (GATv2Conv with
    PyG's self loops, a hub split forward and backward) reads one thing back
    from the GPU: the index range (and loop count) of the new edge_index."""
    import pyg_ioaware.nn

    edge_index = random_graph(2000, 2000, 20000, seed=35, hub_degree=3000).cuda()
    conv = getattr(pyg_ioaware.nn, layer)(16, 8, heads=2).cuda()
    x = torch.randn(2000, 16, device="cuda")
    conv(x, edge_index.clone()).sum().backward()  # warm-up
    fresh = edge_index.clone()
    assert count_syncs(lambda: conv(x, fresh).sum().backward()) == 1


@pytest.mark.cuda
@pytest.mark.parametrize("host", [False, True])
def test_cuda_prefetch_starts_the_one_read_of_a_new_graph(host, monkeypatch):
    """graph.prefetch enqueues a new edge_index's statistics (from Python,
    or from C++ where the host extension is loaded); the build then reads
    them (the one wait) and gives the Graph it gives without; a tensor
    changed in place since, a cached graph, other inputs, a graph below
    PREFETCH_MIN_EDGES and a dead tensor leave nothing behind, and bad
    indices still raise at the build."""
    from pyg_ioaware import _native_host, config
    from pyg_ioaware import graph as graph_module
    from pyg_ioaware.graph import prefetch

    if host and _native_host.extension() is None:
        pytest.skip("the C++ host extension is not built for this torch")
    monkeypatch.setattr(config, "native_host", host)
    # A registry of this test's own (an earlier test's tensor may still be
    # alive, its statistics in flight, until the garbage collector runs).
    _STATS_IN_FLIGHT = {}
    monkeypatch.setattr(graph_module, "_STATS_IN_FLIGHT", _STATS_IN_FLIGHT)
    edge_index = random_graph(300, 300, 3000, seed=36).cuda()
    monkeypatch.setattr(graph_module, "PREFETCH_MIN_EDGES", edge_index.size(1) + 1)
    prefetch(edge_index.clone())
    assert not _STATS_IN_FLIGHT  # too small to be worth it
    monkeypatch.setattr(graph_module, "PREFETCH_MIN_EDGES", edge_index.size(1))
    reference = Graph.from_edge_index(edge_index, 300)
    fresh = edge_index.clone()
    prefetch(fresh)
    assert id(fresh) in _STATS_IN_FLIGHT
    assert count_syncs(lambda: Graph.from_input(fresh, num_nodes=300)) == 1
    graph = Graph.from_input(fresh, num_nodes=300)
    assert not _STATS_IN_FLIGHT
    for got, want in ((graph.rowptr, reference.rowptr), (graph.col, reference.col),
                      (graph.edge_perm, reference.edge_perm)):
        assert torch.equal(got, want)
    prefetch(fresh)  # cached: nothing to start
    prefetch(edge_index.cpu())
    prefetch(torch.empty(2, 0, dtype=torch.long, device="cuda"))
    assert not _STATS_IN_FLIGHT

    changed = edge_index.clone()
    prefetch(changed)
    changed[0, 0] = 300  # out of range, written after the statistics were enqueued
    with pytest.raises(ValueError, match="out of range"):
        Graph.from_input(changed, num_nodes=300)
    assert id(changed) not in _STATS_IN_FLIGHT
    bad = edge_index.clone()
    bad[1, 7] = -1
    prefetch(bad)
    with pytest.raises(ValueError, match="negative"):
        Graph.from_input(bad, num_nodes=300)
    assert id(bad) not in _STATS_IN_FLIGHT
    dropped = edge_index.clone()
    prefetch(dropped)
    del dropped
    gc.collect()
    # Only tensors alive hold statistics in flight (a dead one's entry goes with it).
    assert all(in_flight.tensor() is not None for in_flight in _STATS_IN_FLIGHT.values())


@pytest.mark.cuda
@pytest.mark.parametrize("layer", ["GCNConv", "SAGEConv", "GATv2Conv", "TransformerConv"])
def test_cuda_layers_prefetch_a_new_graph(layer, monkeypatch):
    """Every layer starts a new graph's statistics before its projections
    and gives the same outputs and gradients as without (up to the order of
    the hub rows' and the transposed SpMM's atomic sums: a few fp32 ulps of
    the largest value, 1.9e-6 on gradients of 20 measured on an H200)."""
    import importlib

    import pyg_ioaware.graph

    module = importlib.import_module(
        "pyg_ioaware.nn." + {"GCNConv": "gcn_conv", "SAGEConv": "sage_conv",
                             "GATv2Conv": "gatv2_conv",
                             "TransformerConv": "transformer_conv"}[layer])
    edge_index = random_graph(500, 500, 5000, seed=37, hub_degree=700).cuda()
    x = torch.randn(500, 12, device="cuda", requires_grad=True)
    conv = getattr(module, layer)(12, 8).cuda()
    started = []

    def counted(*args):
        started.append(args[0])
        return pyg_ioaware.graph.prefetch(*args)

    results = []
    for wrapper in (lambda *args: None, counted):
        monkeypatch.setattr(module, "prefetch", wrapper)
        out = conv(x, edge_index.clone())
        grad, = torch.autograd.grad(out.square().sum(), x)
        results.append((out, grad))
    assert len(started) == 1
    for a, b in zip(*results):
        ulp_of_largest = torch.finfo(b.dtype).eps * b.abs().max().item()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=max(4 * ulp_of_largest, 1e-6))


@pytest.mark.cuda
@pytest.mark.parametrize("grouped", [False, True])
def test_cuda_native_self_loops_equal_the_torch_structure(grouped, monkeypatch):
    edge_index = random_graph(300, 300, 3000, seed=34, hub_degree=2000)
    if grouped:
        edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    for force_int64 in (False, True):
        monkeypatch.setattr(config, "force_int64_indices", force_int64)
        graph = Graph.from_edge_index(edge_index.cuda(), 300)
        native = graph.with_remaining_self_loops()
        reference = graph._self_loop_structure(graph.index_dtype)
        for got, want in zip((native.rowptr, native.col, native.row, native.state.edge_origin),
                             reference):
            assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.cuda
@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("grouped", [False, True])
def test_cuda_self_loops_in_one_launch_equal_the_torch_structure(host, grouped, monkeypatch):
    """pygio_csr_add_self_loops with GCN values (one launch: rows and
    entries together, the input holding no self loop) writes the structure
    the torch build does, for a hub, nodes without edges and duplicate
    edges, both index widths, from C++ and through ctypes."""
    from pyg_ioaware import _native

    monkeypatch.setattr(config, "native_host", host)
    edge_index = random_graph(300, 300, 3000, seed=35, hub_degree=2000)
    edge_index = torch.cat([edge_index, edge_index[:, :50]], dim=1)  # duplicates
    edge_index = edge_index[:, (edge_index[0] != edge_index[1]) & (edge_index[1] < 280)]
    if grouped:
        edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    for force_int64 in (False, True):
        monkeypatch.setattr(config, "force_int64_indices", force_int64)
        graph = Graph.from_edge_index(edge_index.cuda(), 300)
        *structure, values = _native.csr_add_self_loops(graph.rowptr, graph.col, graph.row,
                                                        graph.edge_perm, gcn_values=True)
        reference = graph._self_loop_structure(graph.index_dtype)
        for got, want in zip(structure, reference):
            assert got.dtype == want.dtype and torch.equal(got, want)
        expected = _native.gcn_norm(*structure[:3], None, None, torch.float32)
        assert torch.equal(values, expected)


def _layouts(edge_index: torch.Tensor) -> list:
    """edge_index as given and as a strided view (the rows of an [E, 2] tensor)."""
    return [edge_index, edge_index.t().contiguous().t()]


@pytest.mark.cuda
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS])
@pytest.mark.parametrize("force_int64", [False, True])
def test_cuda_native_build_equals_the_cpu_build(name, force_int64, monkeypatch):
    """The native index statistics and CSR build (grouped input) give the
    CPU build's structure for every property graph, int32 and int64 input,
    contiguous and strided, grouped and not; leading, inner and trailing
    rows without edges included."""
    monkeypatch.setattr(config, "force_int64_indices", force_int64)
    edge_index, num_src, num_dst = property_case(name, seed_of("native-build", name))
    grouped = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    for ei in (grouped, edge_index):
        for dtype in (torch.int32, torch.int64):
            reference = Graph.from_edge_index(ei.to(dtype), (num_src, num_dst))
            for layout in _layouts(ei.to(dtype).cuda()):
                graph = Graph.from_edge_index(layout, (num_src, num_dst))
                for got, want in ((graph.rowptr, reference.rowptr), (graph.col, reference.col),
                                  (graph.row, reference.row)):
                    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
                assert (graph.edge_perm is None) == (reference.edge_perm is None)
                if graph.edge_perm is not None:
                    assert torch.equal(graph.edge_perm.cpu(), reference.edge_perm)


@pytest.mark.cuda
@pytest.mark.parametrize("name", [g[0] for g in PROPERTY_GRAPHS] + ["wide-sources"])
@pytest.mark.parametrize("force_int64", [False, True])
def test_cuda_native_transpose_equals_the_cpu_transpose(name, force_int64, monkeypatch):
    """The native CSR^T (a stable radix sort over the sources' bits) is the
    CPU build's torch.sort result exactly: every property graph, both index
    widths, and sources spread over 2^20 ids (several sort passes) with
    duplicates and sources without edges."""
    monkeypatch.setattr(config, "force_int64_indices", force_int64)
    if name == "wide-sources":
        gen = torch.Generator().manual_seed(seed_of("native-transpose", force_int64))
        num_src, num_dst = (1 << 20) + 3, 500
        src = torch.randint(num_src, (30000,), generator=gen)
        src[:2000] = num_src - 1  # the largest id, many times
        edge_index = torch.stack([src, torch.randint(num_dst, (30000,), generator=gen)])
    else:
        edge_index, num_src, num_dst = property_case(name, seed_of("native-transpose", name))
    reference = Graph.from_edge_index(edge_index, (num_src, num_dst)).transpose
    graph = Graph.from_edge_index(edge_index.cuda(), (num_src, num_dst))
    t = graph.transpose
    for got, want in ((t.rowptr, reference.rowptr), (t.col, reference.col),
                      (t.row, reference.row), (t.perm, reference.perm)):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


@pytest.mark.cuda
def test_cuda_native_index_statistics():
    """One native pass finds the index range, whether the destinations are
    non-decreasing, the largest in-degree of grouped edges (their longest
    run of one destination) and the self loops, for any layout and index
    width, wide and narrow index ranges (runs and loops)."""
    from pyg_ioaware import _native

    gen = torch.Generator().manual_seed(7)
    for num_edges in (1, 2, 257, 100_000):
        for dtype in (torch.int32, torch.int64):
            for high in (2**30, 40):
                edge_index = torch.randint(-5, high, (2, num_edges), generator=gen).to(dtype)
                for grouped in (False, True):
                    ei = edge_index[:, torch.argsort(edge_index[1])] if grouped else edge_index
                    low, high_ = ei.min(1).values.tolist(), ei.max(1).values.tolist()
                    in_order = bool((ei[1, 1:] >= ei[1, :-1]).all())
                    loops = int((ei[0] == ei[1]).sum())
                    for layout in _layouts(ei.cuda()):
                        stats = _native.edge_index_stats(layout)
                        assert stats[:5] == (*low, *high_, in_order)
                        assert stats.self_loops == loops
                        if in_order:
                            assert stats.longest_run == int(
                                torch.unique(ei[1], return_counts=True)[1].max())
    extreme = torch.tensor([[2**62, 0], [0, 2**63 - 1]], device="cuda")
    assert _native.edge_index_stats(extreme) == (0, 0, 2**62, 2**63 - 1, True, 1, 0)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["single-node", "small-square", "hub-square", "dense"])
@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("force_int64", [False, True])
def test_cuda_gcn_values_built_with_the_self_loop_graph(name, host, force_int64, monkeypatch):
    """Graph.from_input(with_self_loops=True, gcn_values=True) of grouped
    edges without self loops: the self-loop graph's GCN values come from the
    build's own launches (C++ and ctypes alike), bitwise pygio_gcn_norm's,
    and the first float32 "gcn" request takes them (then releases the
    slot); with an input self loop (or no edge) the build writes none and
    the values are computed as before."""
    from pyg_ioaware import _native
    from pyg_ioaware.ops.normalize import normalized_values

    monkeypatch.setattr(config, "native_host", host)
    monkeypatch.setattr(config, "force_int64_indices", force_int64)
    edge_index, n, _ = property_case(name, seed_of("gcn-values", name))
    for with_loop in (False, True):
        ei = edge_index[:, edge_index[0] != edge_index[1]]
        if with_loop:
            ei = torch.cat([ei, torch.zeros(2, 1, dtype=ei.dtype)], dim=1)
        ei = ei[:, torch.argsort(ei[1], stable=True)].cuda()
        looped = Graph.from_input(ei, n, with_self_loops=True,
                                  gcn_values=True).with_remaining_self_loops()
        built = looped.state.gcn_values
        expected = _native.gcn_norm(looped.rowptr, looped.col, looped.row, None,
                                    looped.state.edge_origin if with_loop else None,
                                    torch.float32)
        # (An input without edges builds no native graph: its loops come on first use.)
        assert (built is None) == (with_loop or ei.size(1) == 0)
        if built is not None:
            assert built.dtype == torch.float32 and torch.equal(built, expected)
            before = looped.nbytes
        values = normalized_values(looped, None, "gcn", torch.float32).values
        assert torch.equal(values, expected) and looped.state.gcn_values is None
        if built is not None:
            assert values is built and looped.nbytes == before


@pytest.mark.cuda
@pytest.mark.parametrize("entries", [True, False])
def test_cuda_native_statistics_write_the_grouped_csr(entries):
    """The statistics' launch with the CSR outputs (a new graph's build in
    one launch): the same statistics as without, and where the edges are
    grouped and in range the CSR pygio_csr_from_grouped writes, for both
    index widths in and out and any layout; ungrouped, negative or out of
    range indices give a meaningless CSR, written in bounds (memcheck)."""
    from pyg_ioaware import _native

    gen = torch.Generator().manual_seed(8)
    for num_edges in (1, 257, 100_000):
        for dtype in (torch.int32, torch.int64):
            edge_index = torch.randint(-3, 60, (2, num_edges), generator=gen).to(dtype)
            for grouped in (False, True):
                ei = edge_index[:, torch.argsort(edge_index[1])] if grouped else edge_index
                for layout in _layouts(ei.cuda()):
                    expected = _native.edge_index_stats(layout)
                    for index_dtype in (torch.int32, torch.int64):
                        for num_rows in (45, 70):
                            loops = entries or (index_dtype == layout.dtype
                                                and layout.stride(1) == 1)
                            gcn_values = num_rows == 70
                            stats, csr, looped = _native.grouped_graph(
                                layout, num_rows, num_rows, index_dtype, entries, loops,
                                gcn_values)
                            assert stats == expected
                            assert len(csr) == (3 if entries else 1)
                            assert all(t.dtype == index_dtype for t in csr)
                            in_range = stats.min_dst >= 0 and stats.max_dst < num_rows
                            assert (looped is not None) == (
                                loops and _native.grouped_in_range(stats, num_rows, num_rows))
                            if not (stats.grouped and in_range):
                                continue
                            want = _native.csr_from_grouped(layout, num_rows, index_dtype)
                            for got, reference in zip(csr, want):
                                assert torch.equal(got, reference)
                            if looped is not None:  # the self-loop graph over that CSR
                                for got, reference in zip(looped[:4], _native.csr_add_self_loops(
                                        *want, None)):
                                    assert torch.equal(got, reference)
                                # Its GCN values where asked for and the input has no loop:
                                # pygio_gcn_norm's, bitwise.
                                assert (looped[4] is not None) == (
                                    gcn_values and stats.self_loops == 0)
                                if looped[4] is not None:
                                    assert torch.equal(looped[4], _native.gcn_norm(
                                        *looped[:3], None, None, torch.float32))


def test_cpu_index_statistics_match_the_native_contract():
    """The CPU pass (the CUDA pass's twin) on a grouped graph with loops."""
    from pyg_ioaware.graph import _index_stats

    edge_index = torch.tensor([[3, 1, 1, 2, 0, 4], [0, 1, 1, 1, 3, 3]])
    assert _index_stats(edge_index) == (0, 0, 4, 3, True, 3, 2)
    assert _index_stats(edge_index.flip(1)).grouped is False


@pytest.mark.cuda
@pytest.mark.parametrize("bad, match", [
    (torch.tensor([[0, -1], [1, 2]]), "negative"),
    (torch.tensor([[0, 1], [-3, 2]]), "negative"),
    (torch.tensor([[0, 1], [1, 5]]), "out of range"),
    (torch.tensor([[0, 2**20], [0, 1]]), "out of range"),
])
def test_cuda_bad_edge_index(bad, match):
    for dtype in (torch.int64, torch.int32):
        with pytest.raises(ValueError, match=match):
            Graph.from_input(bad.to(dtype).cuda(), num_nodes=3)


def test_structure_state_lives_as_long_as_its_rowptr():
    from pyg_ioaware.graph import _STRUCTURES, known_structure_state, structure_state

    rowptr = torch.tensor([0, 1, 2])
    state = structure_state(rowptr)
    assert structure_state(rowptr) is state and known_structure_state(rowptr) is state
    assert known_structure_state(rowptr.clone()) is None  # another tensor, same values
    key = id(rowptr)
    del rowptr
    assert key not in _STRUCTURES
