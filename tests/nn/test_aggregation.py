"""Sum / Mean / Min / MaxAggregation against torch_geometric's aggregation
modules over the gathered messages (PyG's scatter; its tie rule for
min / max gradients), on every adjacency kind."""
import importlib

import pytest
import torch
import torch_geometric.nn.aggr as pyg_aggr
from _helpers import TOLERANCE, random_graph, relative_error
from torch_geometric import EdgeIndex

from pyg_ioaware import Graph
from pyg_ioaware.nn import MaxAggregation, MeanAggregation, MinAggregation, SumAggregation

MODULES = {
    "sum": (SumAggregation, pyg_aggr.SumAggregation),
    "mean": (MeanAggregation, pyg_aggr.MeanAggregation),
    "min": (MinAggregation, pyg_aggr.MinAggregation),
    "max": (MaxAggregation, pyg_aggr.MaxAggregation),
}
TOL = TOLERANCE[torch.float64]
# The module (pyg_ioaware.ops.aggregate the attribute is the function).
aggregate_module = importlib.import_module("pyg_ioaware.ops.aggregate")


def tied_features(num_nodes, channels, seed, dtype=torch.float64):
    """Small integers: ties and zeros everywhere."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-2, 3, (num_nodes, channels), generator=gen).to(dtype)


def reference(reduce, x_src, edge_index, num_dst, edge_weight=None):
    """PyG's aggregation module over the gathered (weighted) messages."""
    messages = x_src.index_select(0, edge_index[0])
    if edge_weight is not None:
        messages = messages * edge_weight.view(-1, *([1] * (messages.dim() - 1)))
    return MODULES[reduce][1]()(messages, edge_index[1], dim_size=num_dst, dim=0)


def forward_backward(fn, *tensors):
    """fn(*leaves), and the gradients of the leaves for one fixed output
    gradient (None entries pass through)."""
    leaves = [None if t is None else t.clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    gen = torch.Generator().manual_seed(9)
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(grad.to(out.device, out.dtype))
    return out.detach(), [None if t is None else t.grad for t in leaves]


def assert_match(got, expected, tol=TOL):
    assert relative_error(got[0], expected[0]) < tol
    for g, g_ref in zip(got[1], expected[1]):
        if g_ref is not None:
            assert relative_error(g, g_ref) < tol


@pytest.mark.parametrize("reduce", list(MODULES))
@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_square_matches_pyg(reduce, shape):
    edge_index = random_graph(50, 50, 250, seed=1)  # duplicates, self loops, isolated nodes
    x = tied_features(50, int(torch.tensor(shape).prod()), seed=2).view(50, *shape)
    module = MODULES[reduce][0]()
    got = forward_backward(lambda t: module(t, edge_index), x)
    expected = forward_backward(lambda t: reference(reduce, t, edge_index, 50), x)
    assert got[0].shape == (50, *shape)
    assert_match(got, expected)
    assert (got[0][torch.bincount(edge_index[1], minlength=50) == 0] == 0).all()


@pytest.mark.parametrize("reduce", list(MODULES))
def test_bipartite_and_size(reduce):
    edge_index = random_graph(40, 25, 200, seed=3)
    x_src, x_dst = tied_features(40, 6, seed=4), torch.randn(25, 3, dtype=torch.float64)
    module = MODULES[reduce][0]()
    expected = forward_backward(lambda t: reference(reduce, t, edge_index, 25), x_src)
    assert_match(forward_backward(lambda t: module((t, x_dst), edge_index), x_src), expected)
    assert_match(forward_backward(lambda t: module((t, None), edge_index, size=(40, 25)),
                                  x_src), expected)
    # A larger destination count than the edges reach: zero rows appended.
    out = module((x_src, None), edge_index, size=(40, 30))
    assert out.shape == (30, 6) and relative_error(out[:25], expected[0]) < TOL
    assert not out[25:].any()


@pytest.mark.parametrize("reduce", list(MODULES))
@pytest.mark.parametrize("kind", ["int32", "EdgeIndex", "Graph", "coo", "csr"])
def test_adjacency_kinds(reduce, kind):
    edge_index = random_graph(30, 30, 150, seed=5)
    x = tied_features(30, 4, seed=6)
    weight = None
    if kind == "int32":
        adj = edge_index.int()
    elif kind == "EdgeIndex":
        adj = EdgeIndex(edge_index, sparse_size=(30, 30))
    elif kind == "Graph":
        adj = Graph.from_input(edge_index, num_nodes=30)
    else:
        gen = torch.Generator().manual_seed(7)
        values = torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64)
        adj = torch.sparse_coo_tensor(edge_index.flip(0), values, (30, 30)).coalesce()
        dst, src = adj.indices()
        edge_index = torch.stack([src, dst])  # coalesced: duplicates summed
        # The values weigh sum and mean; min and max ignore them.
        weight = adj.values() if reduce in ("sum", "mean") else None
        if kind == "csr":
            adj = adj.to_sparse_csr()
    module = MODULES[reduce][0]()
    assert_match(forward_backward(lambda t: module(t, adj), x),
                 forward_backward(lambda t: reference(reduce, t, edge_index, 30, weight), x))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_edge_weight_and_its_gradient(reduce):
    edge_index = random_graph(30, 30, 150, seed=8)
    x = torch.randn(30, 4, dtype=torch.float64)
    weight = torch.rand(edge_index.size(1), dtype=torch.float64)
    module = MODULES[reduce][0]()
    got = forward_backward(lambda t, w: module(t, edge_index, edge_weight=w), x, weight)
    expected = forward_backward(lambda t, w: reference(reduce, t, edge_index, 30, w), x, weight)
    assert_match(got, expected)
    assert got[1][1] is not None and got[1][1].abs().sum() > 0


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_ties_split_the_gradient_like_pyg(reduce):
    """Node 0: three tied sources; node 1: a zero result (the zero fill
    counts once more, as in PyG's scatter_reduce); node 2: no edge."""
    edge_index = torch.tensor([[1, 2, 3, 4, 5], [0, 0, 0, 1, 1]])
    sign = 1.0 if reduce == "max" else -1.0
    x = sign * torch.tensor([[9.0], [2.0], [2.0], [2.0], [0.0], [0.0]], dtype=torch.float64)
    module = MODULES[reduce][0]()
    got = forward_backward(lambda t: module((t, None), edge_index, size=(6, 3)), x)
    expected = forward_backward(lambda t: reference(reduce, t, edge_index, 3), x)
    assert_match(got, expected)
    assert got[0].flatten().tolist() == [sign * 2.0, 0.0, 0.0]
    grad = got[1][0].flatten()
    assert grad[1] == grad[2] == grad[3] != 0 and grad[0] == 0
    assert grad[4] == grad[5] != 0


def test_hub_quantile_is_passed_through(monkeypatch):
    seen = []
    original = aggregate_module.graph_minmax

    def spy(graph, x, reduce, hub_quantile):
        seen.append((reduce, hub_quantile))
        return original(graph, x, reduce, hub_quantile)

    monkeypatch.setattr(aggregate_module, "graph_minmax", spy)
    edge_index = random_graph(20, 20, 80, seed=9)
    x = torch.randn(20, 3)
    MaxAggregation(hub_quantile=0.5)(x, edge_index)
    MinAggregation()(x, edge_index)
    assert seen == [("max", 0.5), ("min", 0.99)]


def test_repr_and_bad_inputs():
    assert repr(MaxAggregation()) == "MaxAggregation()"
    assert isinstance(MinAggregation(), torch.nn.Module)
    for bad in (-0.1, 1.5, "0.9"):
        with pytest.raises(ValueError, match="'MaxAggregation' expects hub_quantile"):
            MaxAggregation(hub_quantile=bad)
    module = MaxAggregation()
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ValueError, match="x_src.*None"):
        module((None, torch.randn(3, 2)), edge_index)
    with pytest.raises(ValueError, match="out of range"):
        module(torch.randn(2, 4), edge_index)
    with pytest.raises(ValueError, match="cannot tell the node counts"):
        module((torch.randn(3, 4), None), edge_index)
    with pytest.raises(TypeError, match="expected an edge_index tensor"):
        module(torch.randn(3, 4), edge_index.tolist())
    with pytest.raises(TypeError, match="node features must be one of"):
        module(torch.ones(3, 4, dtype=torch.long), edge_index)
    with pytest.raises(ValueError, match="min and max take no edge weights"):
        aggregate_module.aggregate(torch.randn(3, 4), edge_index, "max", torch.rand(3))


# ---------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("reduce", list(MODULES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_pyg_with_a_hub(reduce, dtype):
    """A destination of degree > 2000 (the hub path of min / max), bipartite,
    width not a multiple of 4."""
    edge_index = random_graph(900, 500, 6000, seed=10, hub_degree=2500).cuda()
    assert torch.bincount(edge_index[1]).max() > 2000
    x = torch.randn(900, 37, device="cuda").to(dtype)
    module = MODULES[reduce][0]()
    got = forward_backward(lambda t: module((t, None), edge_index, size=(900, 500)), x)
    # The reference runs in fp32 on the same (exactly representable) values:
    # ours accumulates in fp32, so only the output's rounding remains.
    expected = forward_backward(lambda t: reference(reduce, t, edge_index, 500), x.float())
    assert_match(got, expected, tol=TOLERANCE[dtype])


@pytest.mark.cuda
@pytest.mark.parametrize("reduce", ["min", "max"])
def test_cuda_ties_with_a_hub(reduce):
    edge_index = random_graph(900, 900, 6000, seed=11, hub_degree=3000).cuda()
    x = tied_features(900, 21, seed=12, dtype=torch.float32).cuda()
    module = MODULES[reduce][0](hub_quantile=0.9)
    got = forward_backward(lambda t: module(t, edge_index), x)
    expected = forward_backward(lambda t: reference(reduce, t, edge_index, 900), x)
    assert_match(got, expected, tol=1e-6)
