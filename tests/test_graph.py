"""Graph: every input kind, the CSR / CSR^T invariants, the cache, bad input."""
import gc

import pytest
import torch
from _helpers import random_graph
from torch_geometric import EdgeIndex
from torch_geometric.utils import add_remaining_self_loops

from pyg_ioaware import Graph
from pyg_ioaware.graph import _GRAPH_CACHE


def assert_structure(graph: Graph, edge_index: torch.Tensor, num_src: int, num_dst: int):
    """CSR by destination and CSR^T by source describe exactly edge_index."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    assert (graph.num_src, graph.num_dst, graph.num_edges) == (num_src, num_dst, src.numel())
    row = torch.repeat_interleave(torch.arange(num_dst), graph.rowptr.long().diff())
    perm = graph.edge_perm.long()
    assert torch.equal(graph.col.long(), src[perm])
    assert torch.equal(row, dst[perm])
    keys = row * num_src + graph.col.long()
    assert bool((keys[1:] >= keys[:-1]).all()), "CSR not sorted by (dst, src)"
    assert torch.equal(torch.sort(perm).values, torch.arange(src.numel()))
    # CSR^T: rows are sources, t_to_csr points at the same edge in CSR.
    row_t = torch.repeat_interleave(torch.arange(num_src), graph.rowptr_t.long().diff())
    t = graph.t_to_csr.long()
    assert torch.equal(row_t, graph.col.long()[t])
    assert torch.equal(graph.col_t.long(), row[t])
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
    torch.testing.assert_close(graph.edge_values, coalesced.values())


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


def test_cache_sees_in_place_edits_and_node_counts():
    edge_index = random_graph(30, 30, 100, seed=7)
    first = Graph.from_input(edge_index, num_nodes=30)
    assert Graph.from_input(edge_index, num_nodes=31) is not first
    edge_index[0, 0] = (edge_index[0, 0] + 1) % 30  # bumps the version counter
    second = Graph.from_input(edge_index, num_nodes=30)
    assert second is not first
    assert_structure(second, edge_index, 30, 30)


def test_cache_holds_tensors_weakly():
    before = len(_GRAPH_CACHE)
    edge_index = random_graph(30, 30, 100, seed=8)
    graph = Graph.from_input(edge_index, num_nodes=30)
    assert len(_GRAPH_CACHE) == before + 1
    del edge_index
    gc.collect()
    assert len(_GRAPH_CACHE) == before
    assert graph.num_edges > 0  # the Graph itself stays usable


def test_nbytes_counts_structure_and_caches():
    graph = Graph.from_edge_index(random_graph(30, 30, 100, seed=9), num_nodes=30)
    base = graph.nbytes
    expected = sum(t.numel() * t.element_size() for t in
                   (graph.rowptr, graph.col, graph.rowptr_t, graph.col_t, graph.edge_perm,
                    graph.t_to_csr))
    assert base == expected
    _ = graph.row
    with_row = base + graph.row.numel() * graph.row.element_size()
    assert graph.nbytes == with_row
    looped = graph.with_remaining_self_loops()
    assert graph.nbytes == with_row + looped.nbytes


def test_with_remaining_self_loops_matches_pyg():
    edge_index = random_graph(25, 25, 120, seed=10)
    weight = torch.rand(edge_index.size(1))
    graph = Graph.from_edge_index(edge_index, num_nodes=25)
    looped = graph.with_remaining_self_loops()
    assert looped is graph.with_remaining_self_loops()
    ref_index, ref_weight = add_remaining_self_loops(edge_index, weight, 7.0, 25)
    assert looped.num_edges == ref_index.size(1)
    origin = looped.cache["edge_origin"]
    ours = torch.where(origin >= 0, weight[origin.clamp(min=0)], torch.tensor(7.0))
    # Compare as multisets of (dst, src, weight).
    def canon(index, w):
        keys = index[1] * 25 + index[0]
        order = torch.argsort(keys * 1000 + (w * 999).long())
        return keys[order], w[order]
    row = torch.repeat_interleave(torch.arange(25), looped.rowptr.long().diff())
    k1, w1 = canon(torch.stack([looped.col.long(), row]), ours)
    k2, w2 = canon(ref_index, ref_weight)
    assert torch.equal(k1, k2)
    torch.testing.assert_close(w1, w2)


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
    with pytest.raises(ValueError, match="int64 CSR sort keys"):
        Graph.from_edge_index(torch.tensor([[0], [0]]), num_nodes=2**31)
    with pytest.raises(ValueError, match="non-negative"):
        Graph.from_edge_index(torch.tensor([[0], [0]]), num_nodes=(-1, 3))
    graph = Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=3)
    with pytest.raises(ValueError, match="expected"):
        Graph.from_input(graph, num_nodes=4)
    with pytest.raises(ValueError, match="square"):
        Graph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=(3, 2)) \
            .with_remaining_self_loops()
