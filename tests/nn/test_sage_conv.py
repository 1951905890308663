"""SAGEConv against torch_geometric's SAGEConv with the same state_dict:
every fused aggregation and option, every adjacency kind, flow, static
graphs, PyG's path for everything else, torch.compile and to_hetero."""
import importlib
import warnings

import pytest
import torch
import torch_geometric
from _helpers import (TOLERANCE, random_graph, relative_error, spy_on_general_checks,
                      spy_on_paths)
from torch_geometric import EdgeIndex
from torch_geometric.data import HeteroData
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.nn import MessagePassing, to_hetero
from torch_geometric.nn.aggr import MLPAggregation, MultiAggregation
from torch_geometric.typing import WITH_TORCH_SPARSE

from pyg_ioaware import Graph
from pyg_ioaware.nn import SAGEConv
from pyg_ioaware.nn.fused_message_passing import FusedMessagePassing

PygSAGEConv = torch_geometric.nn.SAGEConv

FUSED_AGGRS = ["mean", "sum", "add", "min", "max"]
OPTIONS = {
    "default": {},
    "project": {"project": True},
    "normalize": {"normalize": True},
    "no-root": {"root_weight": False},
    "no-bias": {"bias": False},
    "all": {"project": True, "normalize": True, "root_weight": False, "bias": False},
}
TOL = TOLERANCE[torch.float64]


@pytest.fixture(autouse=True)
def _quiet_sparse_warnings():
    # PyG's spmm converts COO adjacencies to CSR with a warning.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*to CSR format.*")
        warnings.filterwarnings("ignore", ".*Sparse CSR tensor support is in beta.*")
        yield


@pytest.fixture
def paths(monkeypatch):
    """The path each SAGEConv call took, in order: 'fused' or 'pyg'."""
    return spy_on_paths(monkeypatch, SAGEConv)


def pair(in_channels=6, out_channels=5, dtype=torch.float64, integer_lin=False, **kwargs):
    """Our layer and PyG's with identical weights (non-zero bias). With
    ``integer_lin`` the projection has small integer weights, so that
    relu(lin(x)) of integer features has exact ties and zeros."""
    ours = SAGEConv(in_channels, out_channels, **kwargs).to(dtype)
    if getattr(ours.lin_l, "bias", None) is not None:
        torch.nn.init.uniform_(ours.lin_l.bias)
    if integer_lin and ours.project:
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():
            ours.lin.weight.copy_(torch.randint(-1, 2, ours.lin.weight.shape, generator=gen))
            ours.lin.bias.copy_(torch.randint(-1, 2, ours.lin.bias.shape, generator=gen))
    ref = PygSAGEConv(in_channels, out_channels, **kwargs).to(dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def tied_features(num_nodes, channels, seed, dtype=torch.float64):
    """Small integers (zeros and ties everywhere), so min / max exercise
    PyG's tie rule (the gradient split among equal entries)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-2, 3, (num_nodes, channels), generator=gen).to(dtype)


def run(conv, x, *args, **kwargs):
    """Output and the gradients of the features and of every parameter for
    one fixed output gradient. ``x``: a tensor or a pair (None allowed)."""
    leaf = [None if t is None else t.clone().requires_grad_() for t in
            (x if isinstance(x, tuple) else (x,))]
    out = conv(tuple(leaf) if isinstance(x, tuple) else leaf[0], *args, **kwargs)
    gen = torch.Generator().manual_seed(7)
    out.backward(torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device))
    grads = [None if t is None else t.grad for t in leaf]
    return out.detach(), grads, {n: p.grad for n, p in conv.named_parameters()}


def assert_runs_match(ours, ref, tol=TOL):
    assert relative_error(ours[0], ref[0]) < tol
    for g, g_ref in zip(ours[1], ref[1]):
        assert (g is None) == (g_ref is None)
        if g is not None:
            assert relative_error(g, g_ref) < tol
    assert ours[2].keys() == ref[2].keys()
    for name in ours[2]:
        assert (ours[2][name] is None) == (ref[2][name] is None), name
        if ours[2][name] is not None:
            assert relative_error(ours[2][name], ref[2][name]) < tol, name


def square_graph(seed=11, num_nodes=40, num_edges=160):
    """Heavy-tailed degrees, isolated nodes, duplicate edges, self loops."""
    return random_graph(num_nodes, num_nodes, num_edges, seed=seed)


# ------------------------------------------------------------- fused path
@pytest.mark.parametrize("aggr", FUSED_AGGRS)
@pytest.mark.parametrize("options", list(OPTIONS))
def test_matches_pyg(aggr, options, paths):
    edge_index = square_graph()
    x = tied_features(40, 6, seed=1)
    ours, ref = pair(aggr=aggr, integer_lin=True, **OPTIONS[options])
    assert ours.pyg_path_reason() is None
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index))
    assert paths == ["fused"]


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_root_term_carries_lin_ls_bias(aggr, paths):
    """The fused path forms lin_l(aggr) + lin_r(x) in two products: lin_r
    with lin_l's bias, then lin_l accumulated into it (no add node); a hook
    on lin_l or lin_r gets its module call back, with PyG's result."""
    edge_index = square_graph(seed=31)
    x = torch.randn(40, 6, dtype=torch.float64)
    ours, ref = pair(aggr=aggr)
    assert type(ours(x, edge_index).grad_fn).__name__ == "AddmmBackward0"
    for lin in ("lin_l", "lin_r"):
        seen = []
        handle = getattr(ours, lin).register_forward_hook(
            lambda module, inputs, out: seen.append(out))
        assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index))
        assert len(seen) == 1, lin
        handle.remove()
    assert paths == ["fused"] * 3


@pytest.mark.parametrize("aggr", ["min", "max"])
def test_ties_and_zeros_split_the_gradient_like_pyg(aggr, paths):
    """Three sources tie for node 0's maximum / minimum, node 1 has a zero
    result (the zero fill counts, as in PyG), node 2 a duplicate edge;
    node 3 has no incoming edge."""
    edge_index = torch.tensor([[1, 2, 3, 4, 5, 4, 4], [0, 0, 0, 1, 1, 2, 2]])
    x = torch.tensor([[5.0], [2.0], [2.0], [2.0], [0.0], [0.0]], dtype=torch.float64)
    x = torch.cat([x, -x], dim=1)  # the same ties for min in column 1
    ours = SAGEConv(2, 2, aggr=aggr, root_weight=False, bias=False).double()
    with torch.no_grad():
        ours.lin_l.weight.copy_(torch.eye(2))
    ref = PygSAGEConv(2, 2, aggr=aggr, root_weight=False, bias=False).double()
    ref.load_state_dict(ours.state_dict())
    got, expected = run(ours, x, edge_index), run(ref, x, edge_index)
    assert_runs_match(got, expected)
    column = 0 if aggr == "max" else 1
    assert got[0][:2, column].tolist() == ([2.0, 0.0] if aggr == "max" else [-2.0, 0.0])
    grad = got[1][0][:, column]
    assert grad[1] == grad[2] == grad[3] != 0  # split among the three tied sources
    assert paths == ["fused"]


@pytest.mark.parametrize("aggr", FUSED_AGGRS)
@pytest.mark.parametrize("project", [False, True])
def test_bipartite_matches_pyg(aggr, project, paths):
    edge_index = random_graph(30, 20, 120, seed=12)
    x_src, x_dst = tied_features(30, 6, seed=2), tied_features(20, 4, seed=3)
    ours, ref = pair((6, 4), 5, aggr=aggr, project=project, integer_lin=True)
    assert repr(ours) == repr(ref) == f"SAGEConv((6, 4), 5, aggr={aggr})"
    assert_runs_match(run(ours, (x_src, x_dst), edge_index),
                      run(ref, (x_src, x_dst), edge_index))
    # x_dst None: the size gives the destination count, no root term.
    got = run(ours, (x_src, None), edge_index, size=(30, 20))
    assert got[0].shape == (20, 5)
    assert_runs_match(got, run(ref, (x_src, None), edge_index, size=(30, 20)))
    assert_runs_match(run(ours, (x_src, x_dst), edge_index, (30, 20)),
                      run(ref, (x_src, x_dst), edge_index, (30, 20)))
    assert paths == ["fused"] * 3


def test_x_dst_none_without_size_is_square_like_pyg():
    edge_index = square_graph(seed=13)
    x = tied_features(40, 6, seed=4)
    ours, ref = pair(aggr="max")
    assert_runs_match(run(ours, (x, None), edge_index), run(ref, (x, None), edge_index))


@pytest.mark.parametrize("aggr", FUSED_AGGRS)
@pytest.mark.parametrize("kind", ["int32", "EdgeIndex", "EdgeIndex-sorted", "coo-ones",
                                  "csr-ones", "Graph"])
def test_adjacency_kinds(aggr, kind, paths):
    edge_index = square_graph(seed=14)
    x = tied_features(40, 6, seed=5)
    ours, ref = pair(aggr=aggr)
    if kind == "int32":
        adj, adj_ref = edge_index.int(), edge_index
    elif kind.startswith("EdgeIndex"):
        adj = EdgeIndex(edge_index, sparse_size=(40, 40))
        if kind.endswith("sorted"):  # PyG then aggregates by segments (ptr)
            adj = adj.sort_by("col")[0]
        adj_ref = adj
    elif kind == "Graph":
        adj, adj_ref = Graph.from_input(edge_index, num_nodes=40), edge_index
    else:
        # PyG's own test (assert_module) feeds torch.sparse adjacencies of ones.
        adj = adj_ref = torch.sparse_coo_tensor(
            edge_index.flip(0), torch.ones(edge_index.size(1), dtype=torch.float64),
            (40, 40)).coalesce()
        if kind == "csr-ones":
            adj = adj_ref = adj.to_sparse_csr()
    assert_runs_match(run(ours, x, adj), run(ref, x, adj_ref))
    expected = ["pyg"] if kind.endswith("ones") and aggr in ("min", "max") else ["fused"]
    assert paths == expected


@pytest.mark.parametrize("aggr", FUSED_AGGRS)
@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_torch_sparse_values_weigh_like_pyg(aggr, layout, paths):
    """PyG's spmm multiplies each message by the sparse value: sum and mean
    weigh by it on the fused path; min / max take PyG's path, and so does a
    CSC adjacency (no fused layout)."""
    edge_index = square_graph(seed=15)
    gen = torch.Generator().manual_seed(6)
    values = torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), values, (40, 40)).coalesce()
    if layout != "coo":
        adj = adj.to_sparse_csr() if layout == "csr" else adj.to_sparse_csc()
    x = torch.randn(40, 6, generator=gen, dtype=torch.float64)
    ours, ref = pair(aggr=aggr)
    got = run(ours, x, adj)
    assert_runs_match(got, run(ref, x, adj))
    # The values matter: the unweighted result differs.
    assert relative_error(got[0], ref(x, edge_index).detach()) > 1e-3
    if aggr in ("min", "max") or layout == "csc":
        assert paths == ["pyg"]
    else:
        assert paths == ["fused"]


@pytest.mark.skipif(not WITH_TORCH_SPARSE, reason="needs torch_sparse")
@pytest.mark.parametrize("aggr", FUSED_AGGRS)
def test_sparse_tensor_values_are_ignored_like_pyg(aggr, paths):
    from torch_geometric.typing import SparseTensor
    edge_index = square_graph(seed=16)
    values = torch.rand(edge_index.size(1), dtype=torch.float64)
    adj_t = SparseTensor(row=edge_index[1], col=edge_index[0], value=values,
                         sparse_sizes=(40, 40))
    x = tied_features(40, 6, seed=7)
    ours, ref = pair(aggr=aggr)
    assert_runs_match(run(ours, x, adj_t), run(ref, x, adj_t))
    assert_runs_match(run(ours, x, adj_t), run(ref, x, edge_index))
    assert paths == ["fused", "fused"]


@pytest.mark.parametrize("aggr", FUSED_AGGRS)
@pytest.mark.parametrize("project", [False, True])
def test_flow_target_to_source_matches_pyg(aggr, project, paths):
    edge_index = square_graph(seed=17)
    x = tied_features(40, 6, seed=8)
    ours, ref = pair(aggr=aggr, project=project, integer_lin=True, flow="target_to_source")
    got = run(ours, x, edge_index)
    assert_runs_match(got, run(ref, x, edge_index))
    # Reversing the edges and the flow gives the same result.
    forward, _ = pair(aggr=aggr, project=project)
    forward.load_state_dict(ours.state_dict())
    assert relative_error(forward(x, edge_index.flip(0)), got[0]) < TOL
    assert set(paths) == {"fused"}


def test_flow_target_to_source_with_sparse_input_is_refused_like_pyg():
    edge_index = square_graph()
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)),
                                    (40, 40)).coalesce()
    for conv in pair(dtype=torch.float32, flow="target_to_source"):
        with pytest.raises(ValueError, match="target_to_source"):
            conv(torch.randn(40, 6), adj_t)


@pytest.mark.parametrize("aggr", FUSED_AGGRS)
def test_static_graph_matches_pyg(aggr, paths):
    edge_index = square_graph(seed=18)
    x = tied_features(3 * 40, 6, seed=9).view(3, 40, 6)
    ours, ref = pair(aggr=aggr)
    got = run(ours, x, edge_index)
    assert got[0].shape == (3, 40, 5)
    assert_runs_match(got, run(ref, x, edge_index))
    for b in range(3):  # each batch entry is the 2-D result on its own
        assert relative_error(got[0][b], ref(x[b], edge_index).detach()) < TOL
    assert set(paths) == {"fused"}


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_node_dim_zero_matches_pyg(aggr, paths):
    edge_index = square_graph(seed=19)
    x = tied_features(40, 6, seed=10)
    ours, ref = pair(aggr=aggr, node_dim=0)
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index))
    assert paths == ["fused"]


def test_empty_graph_like_pyg(paths):
    for aggr in FUSED_AGGRS:
        ours, ref = pair(aggr=aggr)
        x = torch.randn(7, 6, dtype=torch.float64)
        empty = torch.empty(2, 0, dtype=torch.long)
        got = run(ours, x, empty)
        assert_runs_match(got, run(ref, x, empty))
        # No neighbour: lin_l sees zeros, only its bias and the root term remain.
        root = ours.lin_r(x) + ours.lin_l.bias
        assert relative_error(got[0], root.detach()) < TOL
    assert paths == ["fused"] * len(FUSED_AGGRS)


# ------------------------------------------------------------- PyG's path
def sorted_graph(seed=20):
    edge_index = square_graph(seed=seed)
    return edge_index[:, edge_index[1].argsort(stable=True)]


@pytest.mark.parametrize("aggr", [
    "lstm", "std", "softmax", ["mean", "max"], "MeanAggregation", "MLPAggregation",
])
def test_other_aggrs_take_pygs_path(aggr, paths):
    edge_index = sorted_graph()  # lstm and MLPAggregation need sorted destinations
    x = torch.randn(40, 6, dtype=torch.float64)
    if aggr == "MeanAggregation":
        def make():
            return torch_geometric.nn.aggr.MeanAggregation()
    elif aggr == "MLPAggregation":
        def make():
            return MLPAggregation(6, 6, max_num_elements=64, num_layers=1)
    else:
        def make():
            return aggr
    torch.manual_seed(0)
    ours = SAGEConv(6, 5, aggr=make()).double()
    ref = PygSAGEConv(6, 5, aggr=make()).double()
    assert list(ours.state_dict()) == list(ref.state_dict())
    ref.load_state_dict(ours.state_dict())
    assert repr(ours) == repr(ref)
    assert "has no fused kernel" in ours.pyg_path_reason()
    if isinstance(aggr, list):
        assert isinstance(ours.aggr_module, MultiAggregation)
        assert ours.lin_l.in_channels == 12
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index), tol=1e-10)
    assert paths == ["pyg"]


def test_lstm_refuses_unsorted_edges_like_pyg():
    conv = SAGEConv(6, 5, aggr="lstm")
    with pytest.raises(ValueError, match="not sorted"):
        conv(torch.randn(4, 6), torch.tensor([[0, 1, 2, 3], [1, 0, 1, 0]]))


def test_other_aggr_with_graph_input_is_refused():
    conv = SAGEConv(6, 5, aggr="lstm")
    graph = Graph.from_input(sorted_graph(), num_nodes=40)
    with pytest.raises(TypeError, match="per-edge path.*aggr='lstm' has no fused kernel"):
        conv(torch.randn(40, 6), graph)


HOOKS = {
    "message_forward_pre": lambda m, inputs: ({**inputs[0], "x_j": 2 * inputs[0]["x_j"]},),
    "message_forward": lambda m, inputs, out: out.flip(-1),
    "aggregate_forward": lambda m, inputs, out: out + 1,
    "propagate_forward": lambda m, inputs, out: out * 3,
}


@pytest.mark.parametrize("name", list(HOOKS))
def test_hooks_take_pygs_path(name, paths):
    edge_index = square_graph(seed=21)
    x = torch.randn(40, 6, dtype=torch.float64)
    ours, ref = pair(aggr="max")
    fused = ours(x, edge_index)
    calls = []

    def hook(*args):
        calls.append(args[0])
        return HOOKS[name](*args)

    handles = [getattr(conv, f"register_{name}_hook")(hook) for conv in (ours, ref)]
    assert "hooks" in ours.pyg_path_reason()
    got = run(ours, x, edge_index)
    assert_runs_match(got, run(ref, x, edge_index))
    assert calls == [ours, ref]
    assert relative_error(got[0], fused.detach()) > 1e-3  # the hook does change the output
    for handle in handles:
        handle.remove()
    assert relative_error(ours(x, edge_index), fused) < TOL
    assert paths == ["fused", "pyg", "fused"]


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_explain_masks_take_pygs_path(aggr, paths):
    edge_index = square_graph(seed=22)
    x = torch.randn(40, 6, dtype=torch.float64)
    ours, ref = pair(aggr=aggr)
    fused = ours(x, edge_index)
    mask = torch.randn(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    mask_ref = mask.detach().clone().requires_grad_()
    set_masks(ours, mask, edge_index, apply_sigmoid=True)
    set_masks(ref, mask_ref, edge_index, apply_sigmoid=True)
    assert "explain" in ours.pyg_path_reason()
    got = run(ours, x, edge_index)
    assert_runs_match(got, run(ref, x, edge_index))
    assert relative_error(mask.grad, mask_ref.grad) < TOL
    assert relative_error(got[0], fused.detach()) > 1e-3
    clear_masks(ours)
    assert relative_error(ours(x, edge_index), fused) < TOL
    assert paths == ["fused", "pyg", "fused"]


class ScaledSAGEConv(SAGEConv):
    def message(self, x_j):
        return 2 * x_j


class ScaledPygSAGEConv(PygSAGEConv):
    def message(self, x_j):
        return 2 * x_j


def test_subclass_overriding_message_and_decomposed_layers_take_pygs_path(paths):
    edge_index = square_graph(seed=23)
    x = torch.randn(40, 6, dtype=torch.float64)
    ours, ref = ScaledSAGEConv(6, 4, aggr="max").double(), ScaledPygSAGEConv(6, 4, aggr="max")
    ref.double().load_state_dict(ours.state_dict())
    assert "overrides message" in ours.pyg_path_reason()
    assert relative_error(ours(x, edge_index), ref(x, edge_index)) < TOL
    # PyG's SAGEConv cannot decompose its (x_src, x_dst) pair: ours fails as PyG's does.
    ours, ref = pair(6, 4, aggr="mean", decomposed_layers=2)
    assert "decomposed_layers=2" in ours.pyg_path_reason()
    for conv in (ours, ref):
        with pytest.raises(AttributeError, match="'tuple' object has no attribute 'chunk'"):
            conv(x, edge_index)
    assert paths == ["pyg", "pyg"]


def test_sparse_node_features_take_pygs_path(paths):
    edge_index = square_graph(seed=24)
    x = torch.randn(40, 6, dtype=torch.float64)
    ours, ref = pair(aggr="sum", project=True)
    sparse = x.to_sparse()
    assert relative_error(ours(sparse, edge_index), ref(x, edge_index)) < TOL
    assert paths == ["pyg"]


def test_torchscript_runs_pygs_path():
    edge_index = square_graph(seed=25)
    x = torch.randn(40, 6, dtype=torch.float64)
    ours, ref = pair(aggr="max", project=True)
    scripted = torch.jit.script(ours)
    assert relative_error(scripted(x, edge_index), ref(x, edge_index)) < TOL


# ------------------------------------------------------------ MessagePassing
def test_is_a_message_passing_layer():
    conv = SAGEConv(6, 5, aggr="max")
    assert isinstance(conv, MessagePassing) and isinstance(conv, FusedMessagePassing)
    assert conv.aggr == "max" and conv.flow == "source_to_target" and conv.node_dim == -2
    assert conv.pyg_path_reason() is None
    assert conv.propagate.__module__.endswith("SAGEConv_propagate")  # PyG's jinja propagate


def test_state_dict_repr_and_lazy_init():
    for kwargs in ({}, {"project": True}, {"root_weight": False}, {"bias": False}):
        ours, ref = pair(**kwargs)
        assert list(ours.state_dict()) == list(ref.state_dict())
        assert repr(ours) == repr(ref) == "SAGEConv(6, 5, aggr=mean)"
    lazy = SAGEConv(-1, 4, aggr="max")
    assert lazy(torch.randn(20, 6), square_graph(num_nodes=20, num_edges=60)).shape == (20, 4)
    assert lazy.lin_l.weight.shape == (4, 6) and lazy.lin_r.weight.shape == (4, 6)
    with pytest.raises(ValueError, match="does not support lazy"):
        SAGEConv(-1, 4, project=True)


def test_hub_quantile_reaches_min_max(monkeypatch):
    aggregate_module = importlib.import_module("pyg_ioaware.ops.aggregate")
    seen = []
    original = aggregate_module.graph_minmax

    def spy(graph, x, reduce, hub_quantile):
        seen.append((reduce, hub_quantile))
        return original(graph, x, reduce, hub_quantile)

    monkeypatch.setattr(aggregate_module, "graph_minmax", spy)
    conv = SAGEConv(6, 5, aggr="max")
    assert conv.hub_quantile == 0.99
    conv.hub_quantile = 0.5
    conv(torch.randn(40, 6), square_graph())
    SAGEConv(6, 5, aggr="min")(torch.randn(40, 6), square_graph())
    assert seen == [("max", 0.5), ("min", 0.99)]


def test_compile_two_layers_without_graph_breaks():
    edge_index = square_graph(seed=26, num_nodes=60, num_edges=300)
    graph = Graph.from_input(edge_index, num_nodes=60)
    torch.manual_seed(0)
    conv1, conv2 = SAGEConv(8, 16, aggr="max", project=True), SAGEConv(16, 4, aggr="mean")

    def forward(x, graph):
        return conv2(conv1(x, graph).relu(), graph)

    x = torch.randn(60, 8)
    forward(x, graph)  # an eager call fills the Graph's caches (normalized values)
    # fullgraph=True: a graph break would raise.
    compiled = torch.compile(forward, backend="aot_eager", fullgraph=True)
    x.requires_grad_()
    out = compiled(x, graph)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    x_ref = x.detach().requires_grad_()
    out_ref = forward(x_ref, graph)
    (gx_ref,) = torch.autograd.grad(out_ref.square().sum(), x_ref)
    assert relative_error(out, out_ref) < 1e-6 and relative_error(gx, gx_ref) < 1e-6


# ---------------------------------------------------------------- to_hetero
class SAGE(torch.nn.Module):
    def __init__(self, conv_class):
        super().__init__()
        self.conv1 = conv_class((-1, -1), 16, aggr="max")
        self.conv2 = conv_class((16, 16), 4, aggr="mean", project=True)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def hetero_graph():
    """Two node types of different widths, bipartite edge types both ways
    and one within a type."""
    torch.manual_seed(5)
    data = HeteroData()
    data["paper"].x = torch.randn(30, 8)
    data["author"].x = torch.randn(20, 5)
    data["author", "writes", "paper"].edge_index = random_graph(20, 30, 80, seed=42)
    data["paper", "written_by", "author"].edge_index = random_graph(30, 20, 80, seed=43)
    data["paper", "cites", "paper"].edge_index = random_graph(30, 30, 90, seed=44)
    return data


def test_to_hetero_matches_pyg(paths):
    data = hetero_graph()
    torch.manual_seed(0)
    ours = to_hetero(SAGE(SAGEConv), data.metadata(), aggr="sum")
    ref = to_hetero(SAGE(PygSAGEConv), data.metadata(), aggr="sum")
    ours(data.x_dict, data.edge_index_dict)  # initializes the lazy layers
    ref(data.x_dict, data.edge_index_dict)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ref.load_state_dict(ours.state_dict())
    paths.clear()

    out = ours(data.x_dict, data.edge_index_dict)
    expected = ref(data.x_dict, data.edge_index_dict)
    assert set(out) == set(expected) == {"paper", "author"}
    sum(o.square().sum() for o in out.values()).backward()
    sum(o.square().sum() for o in expected.values()).backward()
    for key in out:
        assert out[key].shape == (data[key].num_nodes, 4)
        assert relative_error(out[key], expected[key]) < 1e-5, key
    grads = dict(ours.named_parameters())
    for name, p in ref.named_parameters():
        assert relative_error(grads[name].grad, p.grad) < 1e-5, name
    assert paths and set(paths) == {"fused"}


# --------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors():
    conv = SAGEConv(6, 5, aggr="max")
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x = torch.randn(3, 6)
    with pytest.raises(ValueError, match="SAGEConv.*pair.*tuple of 3"):
        conv((x, x, x), edge_index)
    with pytest.raises(TypeError, match="SAGEConv.*expected node features"):
        conv(x.numpy(), edge_index)
    with pytest.raises(ValueError, match="SAGEConv.*x\\[0\\] has 3 nodes.*has 4"):
        conv(x, edge_index, size=(4, 4))
    with pytest.raises(ValueError, match="SAGEConv.*x\\[1\\] has 2 nodes.*has 3"):
        SAGEConv((6, 6), 5)((x, x[:2]), edge_index, size=(3, 3))
    with pytest.raises(ValueError, match="SAGEConv.*expected size"):
        conv(x, edge_index, size=(3, 3, 3))
    with pytest.raises(ValueError, match="SAGEConv.*x\\[0\\], which is None"):
        conv((None, x), edge_index)
    with pytest.raises(ValueError, match="out of range"):
        conv(torch.randn(2, 6), edge_index)
    with pytest.raises(ValueError, match="is negative"):
        conv(x, torch.tensor([[0, -1], [1, 2]]))
    with pytest.raises(TypeError, match="integer"):
        conv(x, edge_index.float())
    with pytest.raises(ValueError, match="node_dim=-1"):
        SAGEConv(6, 5, node_dim=-1)(x, edge_index)
    with pytest.raises(ValueError, match="Expected 'flow'"):
        SAGEConv(6, 5, flow="sideways")
    with pytest.raises(ValueError, match="SAGEConv.*x\\[0\\] has 3 nodes.*has 4"):
        conv(x, Graph.from_input(edge_index, num_nodes=4))


# ---------------------------------------------------------------- CUDA
def cuda_case(seed, hub_degree=2500, device="cuda"):
    """A graph with one hub of degree > 2000 (the hub path of min / max)."""
    edge_index = random_graph(600, 600, 6000, seed=seed, hub_degree=hub_degree).to(device)
    assert torch.bincount(edge_index[1].cpu()).max() > 2000
    return edge_index


@pytest.mark.cuda
@pytest.mark.parametrize("aggr", FUSED_AGGRS)
@pytest.mark.parametrize("options", ["default", "all"])
def test_cuda_matches_pyg(aggr, options, paths):
    edge_index = cuda_case(seed=60)
    x = torch.randn(600, 33, device="cuda")
    ours, ref = pair(33, 65, dtype=torch.float32, aggr=aggr, **OPTIONS[options])
    ours, ref = ours.cuda(), ref.cuda()
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index), tol=1e-5)
    assert paths == ["fused"]


@pytest.fixture
def general(monkeypatch):
    """The arguments of every SAGEConv call that went through
    ``fused_forward``'s general checks from now on."""
    return spy_on_general_checks(monkeypatch, SAGEConv)


@pytest.mark.cuda
@pytest.mark.parametrize("aggr", ["mean", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_cuda_plain_call_matches_the_general_checks(aggr, normalize, general):
    """The common call (one 2-D CUDA feature tensor, a plain edge_index, no
    ``size``) enters the fused path through ``_plain_cuda_forward``, not
    ``fused_forward``'s general checks, and gives what those give for the
    same call with ``size`` spelled out: the forward bitwise (uniform degrees,
    no hub, the graph's degree bound known to both: the same kernels, no
    atomics), the gradients within rounding (the backward scatters)."""
    gen = torch.Generator().manual_seed(66)
    edge_index = torch.randint(0, 600, (2, 6000), generator=gen).cuda()
    x = torch.randn(600, 33, device="cuda")
    conv = SAGEConv(33, 17, aggr=aggr, normalize=normalize).cuda()
    torch.nn.init.uniform_(conv.lin_l.bias)
    conv(x, edge_index)  # the first SpMM over the graph reads its degree bound
    torch.cuda.synchronize()
    plain = run(conv, x, edge_index)
    assert not general
    conv.zero_grad()
    checked = run(conv, x, edge_index, (600, 600))
    assert len(general) == 1
    assert torch.equal(plain[0], checked[0])
    assert_runs_match(plain, checked, tol=1e-6)


@pytest.mark.cuda
def test_cuda_other_calls_take_the_general_checks(general):
    """Every call but the common one goes through ``fused_forward`` (or PyG's
    path), with PyG's result: a pair of features, a Graph, ``size``, the
    reversed flow, a projection, a hook on a linear map."""
    edge_index = random_graph(300, 300, 2000, seed=67).cuda()
    x = torch.randn(300, 12, device="cuda")
    calls = {
        "pair": ({}, lambda conv: conv((x, x), edge_index)),
        "graph": ({}, lambda conv: conv(x, Graph.from_input(edge_index, 300))),
        "size": ({}, lambda conv: conv(x, edge_index, (300, 300))),
        "flow": ({"flow": "target_to_source"}, lambda conv: conv(x, edge_index)),
        "project": ({"project": True}, lambda conv: conv(x, edge_index)),
    }
    for name, (options, call) in calls.items():
        ours, ref = pair(12, 5, dtype=torch.float32, **options)
        ours, ref = ours.cuda(), ref.cuda()
        before = len(general)
        expected = ref(x, edge_index, **({"size": (300, 300)} if name == "size" else {}))
        assert relative_error(call(ours), expected) < 1e-5, name
        assert len(general) == before + 1, name
    ours, ref = pair(12, 5, dtype=torch.float32)
    ours, ref = ours.cuda(), ref.cuda()
    seen = []
    ours.lin_l.register_forward_hook(lambda module, inputs, out: seen.append(out))
    assert relative_error(ours(x, edge_index), ref(x, edge_index)) < 1e-5
    assert len(seen) == 1 and len(general) == len(calls) + 1


@pytest.mark.cuda
@pytest.mark.parametrize("aggr", ["min", "max"])
def test_cuda_ties_match_pyg(aggr, paths):
    """Integer features in float32: exact ties, zeros, a hub; PyG's tie rule."""
    edge_index = cuda_case(seed=61)
    x = tied_features(600, 19, seed=62, dtype=torch.float32).cuda()
    ours, ref = pair(19, 7, dtype=torch.float32, aggr=aggr, project=True, integer_lin=True)
    ours, ref = ours.cuda(), ref.cuda()
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index), tol=1e-5)
    bipartite = random_graph(700, 300, 4000, seed=63, hub_degree=2500).cuda()
    x_src, x_dst = torch.randn(700, 19, device="cuda"), torch.randn(300, 19, device="cuda")
    ours, ref = pair(19, 7, dtype=torch.float32, aggr=aggr, flow="source_to_target")
    ours, ref = ours.cuda(), ref.cuda()
    assert_runs_match(run(ours, (x_src, x_dst), bipartite), run(ref, (x_src, x_dst), bipartite),
                      tol=1e-5)
    assert paths == ["fused", "fused"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("aggr", FUSED_AGGRS)
def test_bf16_autocast(aggr, device):
    """Under bf16 autocast the output has PyG's dtype, and our error against
    PyG in fp32 stays within twice PyG's own bf16 error (plus a floor)."""
    edge_index = cuda_case(seed=64, device=device)
    x = torch.randn(600, 64, device=device)
    ours, ref = pair(64, 128, dtype=torch.float32, aggr=aggr, project=True)
    ours, ref = ours.to(device), ref.to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        got = run(ours, x, edge_index)
        ref_bf16 = run(ref, x, edge_index)
    assert got[0].dtype == ref_bf16[0].dtype
    ref.zero_grad()
    expected = run(ref, x, edge_index)  # fp32 reference
    floor = TOLERANCE[torch.bfloat16]
    assert relative_error(got[0], expected[0]) <= 2 * relative_error(ref_bf16[0],
                                                                     expected[0]) + floor
    assert relative_error(got[1][0], expected[1][0]) <= 2 * relative_error(
        ref_bf16[1][0], expected[1][0]) + floor
    for name in got[2]:
        assert relative_error(got[2][name], expected[2][name]) <= 2 * relative_error(
            ref_bf16[2][name], expected[2][name]) + floor, name


@pytest.mark.cuda
def test_cuda_compile_matches_eager():
    edge_index = cuda_case(seed=65)
    graph = Graph.from_input(edge_index, num_nodes=600)
    conv1 = SAGEConv(32, 32, aggr="max").cuda()
    conv2 = SAGEConv(32, 16, aggr="mean").cuda()

    def forward(x, graph):
        return conv2(conv1(x, graph).relu(), graph)

    forward(torch.randn(600, 32, device="cuda"), graph)  # fills the Graph's caches
    compiled = torch.compile(forward, fullgraph=True)
    for _ in range(2):
        x = torch.randn(600, 32, device="cuda")
        assert relative_error(compiled(x, graph), forward(x, graph)) < 1e-5
