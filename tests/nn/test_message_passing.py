"""Our layers are torch_geometric MessagePassing layers: to_hetero, the
explainers, hooks, decomposed_layers, flow, static graphs, Sequential and
TorchScript work as with PyG's layers and give PyG's numbers; the fused path
runs only where nothing needs PyG's per-edge messages."""
import copy

import pytest
import torch
import torch_geometric
from _helpers import random_graph, relative_error, spy_on_paths
from torch_geometric.data import HeteroData
from torch_geometric.explain import Explainer, GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.nn import MessagePassing, to_hetero

from pyg_ioaware import Graph
from pyg_ioaware.nn import GCNConv
from pyg_ioaware.nn.fused_message_passing import FusedMessagePassing

PygGCNConv = torch_geometric.nn.GCNConv


@pytest.fixture
def paths(monkeypatch):
    """The path each GCNConv call took, in order: 'fused' or 'pyg'."""
    return spy_on_paths(monkeypatch, GCNConv)


def pair(in_channels=8, out_channels=5, **kwargs):
    """Our layer and PyG's with identical weights (non-zero bias)."""
    ours = GCNConv(in_channels, out_channels, **kwargs)
    if ours.bias is not None:
        torch.nn.init.uniform_(ours.bias)
    ref = PygGCNConv(in_channels, out_channels, **kwargs)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def run(conv, x, *args):
    """Output and the gradients of x and of the layer's parameters (for one
    fixed output gradient)."""
    x = x.clone().requires_grad_()
    out = conv(x, *args)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.device)
    out.backward(grad)
    return out.detach(), x.grad, {n: p.grad for n, p in conv.named_parameters()}


def assert_runs_match(ours, ref, tol=1e-5):
    assert relative_error(ours[0], ref[0]) < tol
    assert relative_error(ours[1], ref[1]) < tol
    assert ours[2].keys() == ref[2].keys()
    for name in ours[2]:
        assert relative_error(ours[2][name], ref[2][name]) < tol, name


def graph(num_nodes=40, num_edges=160, seed=41):
    edge_index = random_graph(num_nodes, num_nodes, num_edges, seed=seed)
    return torch.randn(num_nodes, 8), edge_index, torch.rand(edge_index.size(1))


def test_is_a_message_passing_layer():
    conv = GCNConv(8, 5)
    assert isinstance(conv, MessagePassing) and isinstance(conv, FusedMessagePassing)
    assert conv.aggr == "add" and conv.flow == "source_to_target" and conv.node_dim == -2
    assert conv.pyg_path_reason() is None
    assert conv.propagate.__module__.endswith("GCNConv_propagate")  # PyG's jinja propagate


def test_fused_path_by_default(paths):
    ours, ref = pair()
    x, edge_index, edge_weight = graph()
    assert relative_error(ours(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) < 1e-5
    assert paths == ["fused"]


# ---------------------------------------------------------------- to_hetero
class GCN(torch.nn.Module):
    def __init__(self, conv_class):
        super().__init__()
        self.conv1 = conv_class(-1, 16)
        self.conv2 = conv_class(16, 4)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def hetero_graph():
    """Two node types, three edge types (GCNConv takes one node set, so
    every edge type joins a node type to itself)."""
    data = HeteroData()
    data["paper"].x = torch.randn(30, 8)
    data["author"].x = torch.randn(20, 8)
    data["paper", "cites", "paper"].edge_index = random_graph(30, 30, 90, seed=42)
    data["paper", "rev_cites", "paper"].edge_index = random_graph(30, 30, 60, seed=43)
    data["author", "coauthor", "author"].edge_index = random_graph(20, 20, 50, seed=44)
    return data


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_to_hetero_matches_pyg(aggr, paths):
    data = hetero_graph()
    torch.manual_seed(0)
    ours = to_hetero(GCN(GCNConv), data.metadata(), aggr=aggr)
    ref = to_hetero(GCN(PygGCNConv), data.metadata(), aggr=aggr)
    ours(data.x_dict, data.edge_index_dict)  # initializes the lazy layers
    ref(data.x_dict, data.edge_index_dict)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ref.load_state_dict(ours.state_dict())

    out = ours(data.x_dict, data.edge_index_dict)
    expected = ref(data.x_dict, data.edge_index_dict)
    assert set(out) == set(expected) == {"paper", "author"}  # keyed by node type
    sum(o.square().sum() for o in out.values()).backward()
    sum(o.square().sum() for o in expected.values()).backward()
    for key in out:
        assert out[key].shape == (data[key].num_nodes, 4)
        assert relative_error(out[key], expected[key]) < 1e-5, key
    grads = dict(ours.named_parameters())
    for name, p in ref.named_parameters():
        assert relative_error(grads[name].grad, p.grad) < 1e-5, name
    assert set(paths) == {"fused"}


# ---------------------------------------------------------------- explain
def test_explain_masks_take_pygs_path(paths):
    ours, ref = pair(improved=True)
    x, edge_index, edge_weight = graph()
    fused = ours(x, edge_index, edge_weight)
    mask = torch.randn(edge_index.size(1), requires_grad=True)
    mask_ref = mask.detach().clone().requires_grad_()
    set_masks(ours, mask, edge_index, apply_sigmoid=True)
    set_masks(ref, mask_ref, edge_index, apply_sigmoid=True)
    assert ours.pyg_path_reason() is not None
    got, expected = run(ours, x, edge_index, edge_weight), run(ref, x, edge_index, edge_weight)
    assert_runs_match(got, expected)
    assert relative_error(mask.grad, mask_ref.grad) < 1e-5
    assert relative_error(got[0], fused) > 1e-3  # the masks do change the output
    clear_masks(ours)
    assert relative_error(ours(x, edge_index, edge_weight), fused) < 1e-6
    assert paths == ["fused", "pyg", "fused"]


def test_explain_mask_with_graph_input_is_refused():
    conv = GCNConv(8, 5)
    x, edge_index, _ = graph()
    set_masks(conv, torch.randn(edge_index.size(1)), edge_index)
    with pytest.raises(TypeError, match="per-edge path.*explain"):
        conv(x, Graph.from_input(edge_index, num_nodes=x.size(0)))


def explain(conv_class, data):
    torch.manual_seed(1)
    model = GCN(conv_class)
    model(data.x, data.edge_index)
    torch.manual_seed(2)
    explainer = Explainer(model, GNNExplainer(epochs=3), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification",
                                            task_level="node", return_type="raw"))
    return model, explainer(data.x, data.edge_index, index=torch.arange(5))


def test_gnn_explainer_matches_pyg(paths):
    x, edge_index, _ = graph(seed=45)
    data = torch_geometric.data.Data(x=x, edge_index=edge_index)
    model, explanation = explain(GCNConv, data)
    model_ref, expected = explain(PygGCNConv, data)
    assert relative_error(explanation.edge_mask, expected.edge_mask) < 1e-5
    assert relative_error(explanation.node_mask, expected.node_mask) < 1e-5
    assert "pyg" in paths
    # The explainer clears its masks: the model is back on the fused path.
    paths.clear()
    assert relative_error(model(x, edge_index), model_ref(x, edge_index)) < 1e-5
    assert set(paths) == {"fused"}


def test_cached_layer_explained_after_fused_training(paths):
    """A cached layer filled by the fused path gives PyG's path PyG's cached
    graph (gcn_norm of the first call, self loops last, as explain masks
    expect) and keeps its fused graph for later calls."""
    ours, ref = pair(cached=True)
    x, edge_index, edge_weight = graph()
    first = ours(x, edge_index, edge_weight)
    assert relative_error(first, ref(x, edge_index, edge_weight)) < 1e-5
    assert ours._cached_edge_index is not None and ref._cached_edge_index is not None
    adjacency = ours._cached_edge_index.adjacency
    mask = torch.randn(edge_index.size(1))
    set_masks(ours, mask, edge_index)
    set_masks(ref, mask, edge_index)
    # A second graph: both layers keep using the first one.
    _, other, _ = graph(seed=46)
    assert relative_error(ours(x, other), ref(x, other)) < 1e-5
    ei, ew = ours._cached_edge_index
    ei_ref, ew_ref = ref._cached_edge_index
    assert torch.equal(ei, ei_ref) and relative_error(ew, ew_ref) < 1e-6
    clear_masks(ours)
    clear_masks(ref)
    assert relative_error(ours(x, other), ref(x, other)) < 1e-5
    assert ours._cached_edge_index.adjacency is adjacency
    ours.reset_parameters()
    assert ours._cached_edge_index is None and ours._cached_adj_t is None
    assert paths == ["fused", "pyg", "fused"]


def test_cached_by_pygs_path_then_fused(paths):
    ours, ref = pair(cached=True)
    x, edge_index, edge_weight = graph()
    ours.decomposed_layers = ref.decomposed_layers = 2
    assert relative_error(ours(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) < 1e-5
    assert isinstance(ours._cached_edge_index, tuple)
    ours.decomposed_layers = ref.decomposed_layers = 1
    _, other, _ = graph(seed=47)
    assert relative_error(ours(x, other), ref(x, other)) < 1e-5
    assert paths == ["pyg", "fused"]


# ---------------------------------------------------------------- hooks
HOOKS = {
    "message_forward_pre": lambda m, inputs: ({**inputs[0], "x_j": 2 * inputs[0]["x_j"]},),
    "message_forward": lambda m, inputs, out: out.flip(-1),
    "aggregate_forward_pre": None,
    "aggregate_forward": lambda m, inputs, out: out + 1,
    "propagate_forward_pre": None,
    "propagate_forward": lambda m, inputs, out: out * 3,
}


@pytest.mark.parametrize("name", list(HOOKS))
def test_hooks_fire_and_match_pyg(name, paths):
    ours, ref = pair()
    x, edge_index, edge_weight = graph()
    fused = ours(x, edge_index, edge_weight)
    calls = []

    def hook(*args):
        calls.append(args[0])
        return None if HOOKS[name] is None else HOOKS[name](*args)

    handles = [getattr(conv, f"register_{name}_hook")(hook) for conv in (ours, ref)]
    got, expected = run(ours, x, edge_index, edge_weight), run(ref, x, edge_index, edge_weight)
    assert calls == [ours, ref]
    assert_runs_match(got, expected)
    for handle in handles:
        handle.remove()
    assert relative_error(ours(x, edge_index, edge_weight), fused) < 1e-6
    assert paths == ["fused", "pyg", "fused"]


def test_module_forward_hooks_stay_on_the_fused_path(paths):
    """get_embeddings (nn.Module forward hooks) needs no per-edge message."""
    from torch_geometric.utils import get_embeddings
    x, edge_index, _ = graph()
    model = GCN(GCNConv)
    embeddings = get_embeddings(model, x, edge_index)
    assert [e.shape for e in embeddings] == [(40, 16), (40, 4)]
    assert set(paths) == {"fused"}


class ScaledGCNConv(GCNConv):
    def message(self, x_j, edge_weight):
        return 2 * super().message(x_j, edge_weight)


class ScaledPygGCNConv(PygGCNConv):
    def message(self, x_j, edge_weight):
        return 2 * super().message(x_j, edge_weight)


def test_subclass_overriding_message_takes_pygs_path(paths):
    x, edge_index, edge_weight = graph()
    ours = ScaledGCNConv(8, 5)
    ref = ScaledPygGCNConv(8, 5)
    ref.load_state_dict(ours.state_dict())
    assert "overrides message" in ours.pyg_path_reason()
    assert relative_error(ours(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) < 1e-5
    assert paths == ["pyg"]


# ------------------------------------------------- flow, static, decomposed
@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_flow_target_to_source_matches_pyg(improved, weighted, paths):
    x, edge_index, edge_weight = graph(seed=48)
    args = (edge_index, edge_weight if weighted else None)
    ours, ref = pair(improved=improved, flow="target_to_source")
    assert_runs_match(run(ours, x, *args), run(ref, x, *args))
    # Reversing the edges and the flow gives the source_to_target result.
    forward, _ = pair(improved=improved)
    forward.load_state_dict(ours.state_dict())
    flipped = (edge_index.flip(0), args[1])
    assert relative_error(forward(x, *flipped), ours(x, *args)) < 1e-5
    assert set(paths) == {"fused"}


def test_flow_target_to_source_with_sparse_input_is_refused_like_pyg():
    x, edge_index, _ = graph()
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)),
                                    (40, 40)).coalesce()
    for conv in pair(flow="target_to_source"):
        with pytest.raises(ValueError, match="target_to_source"):
            conv(x, adj_t)


@pytest.mark.parametrize("weighted", [False, True])
def test_static_graph_matches_pyg(weighted, paths):
    torch.manual_seed(3)
    _, edge_index, edge_weight = graph(seed=49)
    x = torch.randn(3, 40, 8)
    args = (edge_index, edge_weight if weighted else None)
    ours, ref = pair()
    got, expected = run(ours, x, *args), run(ref, x, *args)
    assert got[0].shape == (3, 40, 5)
    assert_runs_match(got, expected)
    # Each batch entry is the 2-D result on its own.
    for b in range(3):
        assert relative_error(got[0][b], ref(x[b], *args)) < 1e-5
    assert set(paths) == {"fused"}


def test_node_dim_zero_matches_pyg(paths):
    x, edge_index, edge_weight = graph()
    ours, ref = pair(node_dim=0)
    assert_runs_match(run(ours, x, edge_index, edge_weight), run(ref, x, edge_index, edge_weight))
    assert paths == ["fused"]


def test_bad_node_dim_is_refused():
    x, edge_index, _ = graph()
    with pytest.raises(ValueError, match="node_dim=-1"):
        GCNConv(8, 5, node_dim=-1)(x, edge_index)


def test_decomposed_layers_match_pyg(paths):
    x, edge_index, edge_weight = graph()
    ours, ref = pair(8, 6, decomposed_layers=3)
    assert ours.propagate.__module__.endswith("message_passing")  # PyG's generic propagate
    seen = []
    ours.register_message_forward_pre_hook(lambda m, inputs: seen.append(inputs[0]["x_j"].shape))
    assert_runs_match(run(ours, x, edge_index, edge_weight), run(ref, x, edge_index, edge_weight))
    assert [s[-1] for s in seen] == [2, 2, 2]
    ours._message_forward_pre_hooks.clear()
    ours.decomposed_layers = 1
    assert ours.propagate.__module__.endswith("GCNConv_propagate")
    assert relative_error(ours(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) < 1e-5
    assert paths == ["pyg", "fused"]


# ------------------------------------------------ Sequential, TorchScript, copies
def test_sequential_matches_pyg(paths):
    def model(conv_class):
        return torch_geometric.nn.Sequential("x, edge_index, edge_weight", [
            (conv_class(8, 16), "x, edge_index, edge_weight -> x"),
            torch.nn.ReLU(),
            (conv_class(16, 4, cached=True), "x, edge_index -> x"),
        ])

    x, edge_index, edge_weight = graph()
    ours, ref = model(GCNConv), model(PygGCNConv)
    ref.load_state_dict(ours.state_dict())
    assert_runs_match(run(ours, x, edge_index, edge_weight), run(ref, x, edge_index, edge_weight))
    assert set(paths) == {"fused"}


def test_torchscript_runs_pygs_path():
    x, edge_index, edge_weight = graph()
    ours, ref = pair(cached=True)
    eager = ours(x, edge_index, edge_weight)  # the fused path fills the cache
    scripted = torch.jit.script(ours)
    assert isinstance(ours._cached_edge_index, tuple)  # PyG's form for TorchScript
    _, other, _ = graph(seed=50)
    assert relative_error(scripted(x, other), eager) < 1e-5  # the cached first graph
    assert relative_error(scripted(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) \
        < 1e-5
    assert relative_error(ours(x, other), eager) < 1e-6  # and eager is fused again


def test_deepcopy_and_state_dict_round_trip():
    x, edge_index, edge_weight = graph()
    ours, ref = pair(cached=True)
    ours(x, edge_index, edge_weight)
    clone = copy.deepcopy(ours)
    assert relative_error(clone(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) < 1e-5
    fresh = GCNConv(8, 5)
    fresh.load_state_dict(ref.state_dict())
    assert relative_error(fresh(x, edge_index, edge_weight), ref(x, edge_index, edge_weight)) \
        < 1e-5


# ---------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("case", ["target_to_source", "static", "explain"])
def test_cuda_matches_pyg(case, paths):
    edge_index = random_graph(300, 300, 3000, seed=51, hub_degree=1000).cuda()
    edge_weight = torch.rand(edge_index.size(1), device="cuda")
    # PyG's add_remaining_self_loops picks any duplicate loop's weight on
    # CUDA: give duplicate loops one weight.
    edge_weight[edge_index[0] == edge_index[1]] = 0.5
    x = torch.randn(4, 300, 33, device="cuda") if case == "static" else \
        torch.randn(300, 33, device="cuda")
    kwargs = {"flow": "target_to_source"} if case == "target_to_source" else {}
    ours, ref = (conv.cuda() for conv in pair(33, 65, **kwargs))
    if case == "explain":
        mask = torch.randn(edge_index.size(1), device="cuda")
        set_masks(ours, mask, edge_index)
        set_masks(ref, mask, edge_index)
    assert_runs_match(run(ours, x, edge_index, edge_weight), run(ref, x, edge_index, edge_weight))
    assert paths == ["pyg" if case == "explain" else "fused"]
