"""TransformerConv against torch_geometric's TransformerConv with the same
state_dict: every option, bipartite inputs, attention weights, dropout,
autocast, PyG's path, TorchScript, torch.compile, bad inputs; on CUDA the
fused kernels on a graph with a hub."""
from typing import Optional, Tuple

import pytest
import torch
import torch_geometric
from _helpers import (TOLERANCE, assert_compiled_matches_eager, assert_runs_match,
                      random_graph, relative_error, run_attention)
from torch_geometric import EdgeIndex
from torch_geometric.explain.algorithm.utils import set_masks
from torch_geometric.utils import to_torch_csc_tensor

from pyg_ioaware import Graph
from pyg_ioaware.nn import TransformerConv
from pyg_ioaware.nn import transformer_conv as module

PygTransformerConv = torch_geometric.nn.TransformerConv
TOL = TOLERANCE[torch.float64] * 100
# The key bias adds one constant to all scores of a destination: the softmax
# cancels it, its gradient is exactly 0.
ZERO_GRADS = ("lin_key.bias",)

OPTIONS = {
    "default": {},
    "concat-false": {"concat": False},
    "beta": {"beta": True},
    "beta-mean": {"beta": True, "concat": False},
    "no-root": {"root_weight": False},
    "no-bias": {"bias": False},
    "edge": {"edge_dim": 3},
    "edge-beta-mean": {"edge_dim": 2, "beta": True, "concat": False},
    "one-head": {"heads": 1},
    "three-heads-no-bias": {"heads": 3, "bias": False, "edge_dim": 4},
}


def pair(in_channels, out_channels, dtype=torch.float64, **kwargs):
    kwargs.setdefault("heads", 2)
    torch.manual_seed(0)
    ours = TransformerConv(in_channels, out_channels, **kwargs).to(dtype)
    ref = PygTransformerConv(in_channels, out_channels, **kwargs).to(dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def edge_features(edge_index, edge_dim, dtype=torch.float64):
    if edge_dim is None:
        return None
    return torch.randn(edge_index.size(1), edge_dim, dtype=dtype, device=edge_index.device)


def fused_only(conv):
    """``conv``, failing the test if it runs PyG's per-edge message."""
    def no_message(*args, **kwargs):
        raise AssertionError("PyG's per-edge path ran")

    conv.message = no_message
    return conv


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_matches_pyg(option):
    kwargs = dict(OPTIONS[option])
    edge_index = random_graph(60, 60, 500, seed=1, hub_degree=80)
    x = torch.randn(60, 12, dtype=torch.float64)
    edge_attr = edge_features(edge_index, kwargs.get("edge_dim"))
    ours, ref = pair(12, 5, **kwargs)
    got = run_attention(fused_only(ours), x, edge_index, edge_attr)
    assert got[1][0] is edge_index  # PyG returns the input edge_index itself
    assert_runs_match(got, run_attention(ref, x, edge_index, edge_attr), TOL, ZERO_GRADS)
    assert ours._alpha is None


@pytest.mark.parametrize("kwargs", [{"beta": True, "edge_dim": 3}, {"concat": False},
                                    {"root_weight": False, "bias": False}])
def test_bipartite_matches_pyg(kwargs):
    edge_index = random_graph(70, 30, 400, seed=2, hub_degree=50)
    x = (torch.randn(70, 9, dtype=torch.float64), torch.randn(30, 7, dtype=torch.float64))
    edge_attr = edge_features(edge_index, kwargs.get("edge_dim"))
    ours, ref = pair((9, 7), 4, **kwargs)
    assert_runs_match(run_attention(fused_only(ours), x, edge_index, edge_attr),
                      run_attention(ref, x, edge_index, edge_attr), TOL, ZERO_GRADS)
    # An int in_channels with a pair of node sets of that width.
    x = (x[0], torch.randn(30, 9, dtype=torch.float64))
    ours, ref = pair(9, 4, **kwargs)
    assert_runs_match(run_attention(fused_only(ours), x, edge_index, edge_attr),
                      run_attention(ref, x, edge_index, edge_attr), TOL, ZERO_GRADS)


def capture_op(monkeypatch):
    """(packed, q, k, v, edge) of every attention op call of the layer
    (graph_transformer: packed None; graph_transformer_packed: k, v None)."""
    seen = []
    op, packed_op = module.graph_transformer, module.graph_transformer_packed

    def spy(graph, q, k, v, edge, *args):
        seen.append((None, q, k, v, edge))
        return op(graph, q, k, v, edge, *args)

    def packed_spy(graph, packed, q, edge, *args):
        seen.append((packed, q, None, None, edge))
        return packed_op(graph, packed, q, edge, *args)

    monkeypatch.setattr(module, "graph_transformer", spy)
    monkeypatch.setattr(module, "graph_transformer_packed", packed_spy)
    return seen


def test_one_projection_read_in_place(monkeypatch):
    seen = capture_op(monkeypatch)
    edge_index = random_graph(40, 40, 200, seed=3)
    ours, _ = pair(8, 6, heads=3)
    ours(torch.randn(40, 8, dtype=torch.float64), edge_index)
    (packed, q, _, _, _), = seen  # query, key and value: one [N, 3 * H * C] product
    assert q is None and packed.shape == (40, 3, 3, 6) and packed.is_contiguous()
    # Bipartite: the query alone, key and value one product of x_src.
    seen.clear()
    ours, _ = pair((8, 5), 6, heads=3)
    ours((torch.randn(40, 8, dtype=torch.float64), torch.randn(40, 5, dtype=torch.float64)),
         edge_index)
    (packed, q, _, _, _), = seen
    assert q.shape == (40, 3, 6) and packed.shape == (40, 2, 3, 6) and packed.is_contiguous()


def test_a_hooked_map_is_called_as_a_module(monkeypatch):
    # A forward hook on one of the maps: every map runs as its own module
    # call (PyG's order) and the hook sees it; the result is PyG's.
    seen = capture_op(monkeypatch)
    edge_index = random_graph(40, 40, 200, seed=5)
    x = torch.randn(40, 8, dtype=torch.float64)
    ours, ref = pair(8, 6, heads=3)
    calls = []
    for layer in (ours, ref):
        layer.lin_key.register_forward_hook(lambda mod, inp, out: calls.append(out.shape))
    assert_runs_match(run_attention(fused_only(ours), x, edge_index),
                      run_attention(ref, x, edge_index), TOL, ZERO_GRADS)
    (packed, q, k, v, _), = seen
    assert packed is None and q.shape == k.shape == v.shape == (40, 3, 6)
    assert calls == [(40, 18), (40, 18)]


def test_edge_features_follow_the_csr_order(monkeypatch):
    seen = capture_op(monkeypatch)
    edge_index = random_graph(30, 30, 150, seed=4)
    edge_attr = torch.randn(edge_index.size(1), 2, dtype=torch.float64)
    ours, _ = pair(8, 4, edge_dim=2)
    ours(torch.randn(30, 8, dtype=torch.float64), edge_index, edge_attr)
    graph = Graph.from_input(edge_index, 30)
    assert graph.edge_perm is not None  # random_graph is not grouped by destination
    expected = ours.lin_edge(edge_attr[graph.edge_perm.long()]).view(-1, 2, 4)
    assert torch.equal(seen[0][4], expected)


def test_edge_index_kinds_and_graph_input():
    edge_index = random_graph(40, 40, 300, seed=5)
    x = torch.randn(40, 8, dtype=torch.float64)
    edge_attr = edge_features(edge_index, 3)
    ours, ref = pair(8, 6, edge_dim=3)
    expected = run_attention(ref, x, edge_index, edge_attr)
    for adj in (EdgeIndex(edge_index, sparse_size=(40, 40)), edge_index.int()):
        got = run_attention(fused_only(ours), x, adj, edge_attr)
        assert got[1][0] is adj
        got = (got[0], (edge_index, got[1][1]), got[2], got[3])
        assert_runs_match(got, expected, TOL, ZERO_GRADS)
    # A Graph: edge_attr, edge_index and alpha in the Graph's input edge order.
    graph = Graph.from_edge_index(edge_index, 40)
    assert graph.edge_perm is not None
    assert_runs_match(run_attention(ours, x, graph, edge_attr), expected, TOL, ZERO_GRADS)


def test_attention_weights_on_request_only():
    edge_index = random_graph(50, 50, 300, seed=6)
    x = torch.randn(50, 8, dtype=torch.float64)
    ours, ref = pair(8, 3, heads=4, dropout=0.3)
    out = ours(x, edge_index)
    assert isinstance(out, torch.Tensor)
    # PyG returns the weights for any bool, False included.
    _, (ei, alpha) = ours(x, edge_index, return_attention_weights=False)
    _, (_, ref_alpha) = ref(x, edge_index, return_attention_weights=False)
    assert ei is edge_index and not alpha.requires_grad
    assert relative_error(alpha, ref_alpha) < TOL
    # In training the weights are those before dropout, as PyG's.
    ours.train()
    _, (_, alpha) = ours(x, edge_index, return_attention_weights=True)
    assert relative_error(alpha, ref_alpha) < TOL
    assert torch.allclose(torch.zeros(50, 4, dtype=torch.float64).index_add_(
        0, edge_index[1], alpha), (torch.bincount(edge_index[1], minlength=50) > 0).double()
        .unsqueeze(1).expand(-1, 4))  # they sum to one per destination with edges


def test_isolated_nodes_and_no_edges():
    x = torch.randn(12, 8, dtype=torch.float64)
    # No edges: nothing reaches the scores (their gradients are exactly 0).
    no_scores = ZERO_GRADS + ("lin_query.bias", "lin_key.weight", "lin_query.weight",
                              "lin_edge.weight")
    for edge_index, zero_grads in ((torch.empty(2, 0, dtype=torch.long), no_scores),
                                   (torch.tensor([[0, 1], [2, 2]]), ZERO_GRADS)):
        for kwargs in ({"beta": True}, {"root_weight": False, "edge_dim": 2}):
            ours, ref = pair(8, 4, **kwargs)
            edge_attr = edge_features(edge_index, kwargs.get("edge_dim"))
            assert_runs_match(run_attention(fused_only(ours), x, edge_index, edge_attr),
                              run_attention(ref, x, edge_index, edge_attr), TOL, zero_grads)
    ours, ref = pair(8, 4)
    empty = torch.empty(0, 8, dtype=torch.float64)
    assert ours(empty, torch.empty(2, 0, dtype=torch.long)).shape == (0, 8)


def test_dropout_is_fused_reproducible_and_unbiased():
    edge_index = random_graph(60, 60, 900, seed=7)
    x = torch.randn(60, 8, dtype=torch.float64)
    ours, ref = pair(8, 4, dropout=0.5, root_weight=False)
    ours.eval(), ref.eval()
    assert relative_error(ours(x, edge_index), ref(x, edge_index)) < TOL  # eval: no dropout
    ours.train()
    torch.manual_seed(1)
    first = run_attention(ours, x, edge_index, weights=False)
    torch.manual_seed(1)
    again = run_attention(ours, x, edge_index, weights=False)
    assert torch.equal(first[0], again[0]) and torch.equal(first[2][0], again[2][0])
    with torch.no_grad():
        runs = torch.stack([ours(x, edge_index) for _ in range(200)])
    ours.eval()
    clean = ours(x, edge_index)
    # E[dropout(alpha)] = alpha: the mean over runs approaches the clean output.
    assert relative_error(runs.mean(0), clean) < 0.1
    assert relative_error(runs[0], clean) > 0.2
    assert relative_error(first[0], clean) > 0.2


def test_bf16_autocast_runs_the_projection_in_16_bit(monkeypatch):
    seen = capture_op(monkeypatch)
    edge_index = random_graph(80, 80, 600, seed=8)
    x = torch.randn(80, 32)
    ours, ref = pair(32, 16, dtype=torch.float32, edge_dim=4, beta=True)
    edge_attr = edge_features(edge_index, 4, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = run_attention(ours, x, edge_index, edge_attr, weights=False)
        ref_bf16 = run_attention(ref, x, edge_index, edge_attr, weights=False)
    expected = run_attention(ref, x, edge_index, edge_attr, weights=False)
    assert all(t.dtype == torch.bfloat16 for t in seen[0] if t is not None)
    assert got[0].dtype == ref_bf16[0].dtype
    floor = TOLERANCE[torch.bfloat16]
    assert relative_error(got[0], expected[0]) <= 2 * relative_error(ref_bf16[0],
                                                                     expected[0]) + floor
    for name in expected[3]:
        if name not in ZERO_GRADS:
            assert relative_error(got[3][name], expected[3][name]) <= 2 * relative_error(
                ref_bf16[3][name], expected[3][name]) + floor, name


# ------------------------------------------------------------- PyG's path
def explain(conv, edge_index):
    set_masks(conv, torch.linspace(-2, 2, edge_index.size(1), dtype=torch.float64),
              edge_index, apply_sigmoid=True)


def message_hook(conv, edge_index):
    conv.register_message_forward_hook(lambda module, inputs, out: out * 2)


PYG_PATH = {
    "explain": ({}, explain),
    "message-hook": ({}, message_hook),
    "aggr-mean": ({"aggr": "mean"}, None),
    "flow-target-to-source": ({"flow": "target_to_source"}, None),
    "edge-attr-without-edge-dim": ({}, None),
    "torch-sparse-adjacency": ({}, None),
}


@pytest.mark.parametrize("case", sorted(PYG_PATH))
def test_pyg_path_gives_pyg_result(case, monkeypatch):
    kwargs, setup = PYG_PATH[case]
    edge_index = random_graph(30, 30, 150, seed=9)
    x = torch.randn(30, 8, dtype=torch.float64)
    # Without edge_dim PyG adds edge_attr to the values unprojected.
    edge_attr = torch.randn(edge_index.size(1), 1, 4, dtype=torch.float64) \
        if case == "edge-attr-without-edge-dim" else None
    ours, ref = pair(8, 4, **kwargs)
    if setup is not None:
        setup(ours, edge_index), setup(ref, edge_index)
    sparse = case == "torch-sparse-adjacency"
    adj = to_torch_csc_tensor(edge_index, size=(30, 30)).t() if sparse else edge_index
    assert ours._pyg_path_reason(x, adj, edge_attr) is not None
    monkeypatch.setattr(TransformerConv, "fused_forward", None)  # PyG's path only
    expected = ref(x, adj, edge_attr, return_attention_weights=True)
    got = ours(x, adj, edge_attr, return_attention_weights=True)
    assert relative_error(got[0], expected[0]) < TOL
    assert relative_error(got[1][1], expected[1][1]) < TOL
    if not sparse:  # a Graph has lost the edge order PyG's path needs
        with pytest.raises(TypeError, match="needs PyG's per-edge path"):
            ours(x, Graph.from_input(edge_index, 30), edge_attr)


def test_pyg_path_reasons_that_pyg_cannot_run_here():
    x, edge_index = torch.randn(30, 8), random_graph(30, 30, 150, seed=9)
    # PyG's decomposed_layers splits the channels of query and key (its own
    # TransformerConv fails on it); the choice is what is tested.
    reason = TransformerConv(8, 4, decomposed_layers=2)._pyg_path_reason(x, edge_index, None)
    assert reason == "decomposed_layers=2"
    # Lazy in_channels: PyG's path until the first call initializes the linears.
    lazy = TransformerConv(-1, 4, heads=2)
    assert "lazy" in lazy._pyg_path_reason(x, edge_index, None)
    first = lazy(x, edge_index)
    assert lazy._pyg_path_reason(x, edge_index, None) is None
    assert relative_error(fused_only(lazy)(x, edge_index), first) < 1e-6
    assert "bipartite" in lazy._pyg_path_reason((x, None), edge_index, None)


class Script(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_attr: Optional[torch.Tensor]) -> torch.Tensor:
        return self.conv(x, edge_index, edge_attr)


class ScriptWeights(Script):
    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,  # type: ignore[override]
                edge_attr: Optional[torch.Tensor]
                ) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        return self.conv(x, edge_index, edge_attr, return_attention_weights=True)


def test_torchscript_runs_pyg_path():
    edge_index = random_graph(20, 20, 80, seed=10)
    x = torch.randn(20, 8, dtype=torch.float64)
    edge_attr = torch.randn(edge_index.size(1), 3, dtype=torch.float64)
    conv, ref = pair(8, 4, edge_dim=3, beta=True)
    expected = ref(x, edge_index, edge_attr, return_attention_weights=True)
    assert relative_error(torch.jit.script(Script(conv))(x, edge_index, edge_attr),
                          expected[0]) < TOL
    out, (ei, alpha) = torch.jit.script(ScriptWeights(conv))(x, edge_index, edge_attr)
    assert relative_error(out, expected[0]) < TOL and torch.equal(ei, edge_index)
    assert relative_error(alpha, expected[1][1]) < TOL


def test_compile_matches_eager_without_graph_breaks():
    edge_index = random_graph(40, 40, 300, seed=11)
    graph = Graph.from_input(edge_index, 40)
    graph.transpose  # filled: the compiled backward reads it without building
    x = torch.randn(40, 8, requires_grad=True)
    conv1, conv2 = TransformerConv(8, 8, heads=2, beta=True), TransformerConv(16, 4, heads=1)

    def forward(x):
        return conv2(conv1(x, graph).relu(), graph)

    expected = forward(x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    assert torch._dynamo.explain(forward)(x).graph_break_count == 0
    got = torch.compile(forward)(x)
    (grad,) = torch.autograd.grad(got.sum(), x)
    assert relative_error(got, expected) < 1e-6 and relative_error(grad, expected_grad) < 1e-6


# -------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors():
    edge_index = random_graph(20, 20, 60, seed=12)
    x = torch.randn(20, 8)
    conv = TransformerConv(8, 4, heads=2, edge_dim=3)
    with pytest.raises(ValueError, match=r"edge_dim=3 expected edge_attr .* got None"):
        conv(x, edge_index)
    num_edges = edge_index.size(1)
    with pytest.raises(ValueError, match=rf"\[{num_edges}, 3\], got shape \(65, 3\)"):
        conv(x, edge_index, torch.randn(65, 3))
    with pytest.raises(ValueError, match=r"source node features of shape \[num_nodes, 8\]"):
        conv(torch.randn(20, 7), edge_index, torch.randn(num_edges, 3))
    with pytest.raises(ValueError, match=r"destination node features .*in_channels=\(8, 5\)"):
        TransformerConv((8, 5), 4)(x, edge_index)  # one tensor for two widths
    with pytest.raises(ValueError, match="out of range"):
        TransformerConv(8, 4)(torch.randn(10, 8), edge_index)
    with pytest.raises(ValueError, match="got shape"):
        TransformerConv(8, 4)(torch.randn(2, 20, 8), edge_index)


def test_repr_and_state_dict_keys_are_pyg_s():
    ours, ref = pair((8, 6), 4, heads=3, beta=True, edge_dim=2)
    assert repr(ours) == repr(ref).replace(type(ref).__name__, "TransformerConv")
    assert list(ours.state_dict()) == list(ref.state_dict())


# -------------------------------------------------------------------- CUDA
def cuda_case(seed):
    edge_index = random_graph(600, 600, 6000, seed=seed, hub_degree=2500).cuda()
    assert torch.bincount(edge_index[1].cpu()).max() > 2000
    return edge_index


@pytest.mark.cuda
def test_cuda_compile_matches_eager_with_gradients():
    # The kernels under torch.compile: the custom ops and the packed
    # projection's gradient stacked from the op's slots.
    edge_index = cuda_case(seed=14)
    graph = Graph.from_input(edge_index, 600)
    graph.transpose  # filled: the compiled backward reads it without building
    x = torch.randn(600, 16, device="cuda", requires_grad=True)
    torch.manual_seed(0)
    conv1 = TransformerConv(16, 8, heads=2, beta=True).cuda()
    conv2 = TransformerConv(16, 4, heads=2, concat=False).cuda()

    def forward(x):
        return conv2(conv1(x, graph).relu(), graph)

    assert_compiled_matches_eager(forward, x, (conv1, conv2), ZERO_GRADS)


@pytest.mark.cuda
@pytest.mark.parametrize("option", ["default", "concat-false", "beta", "edge", "no-root"])
def test_cuda_matches_pyg(option):
    kwargs = dict(OPTIONS[option])
    edge_index = cuda_case(seed=13)
    x = torch.randn(600, 24, device="cuda")
    edge_attr = edge_features(edge_index, kwargs.get("edge_dim"), torch.float32)
    ours, ref = pair(24, 32, dtype=torch.float32, **kwargs)
    ours, ref = ours.cuda(), ref.cuda()
    assert_runs_match(run_attention(ours, x, edge_index, edge_attr),
                      run_attention(ref, x, edge_index, edge_attr), 1e-4, ZERO_GRADS)


@pytest.mark.cuda
def test_cuda_bf16_autocast_within_pyg_error():
    edge_index = cuda_case(seed=14)
    x = torch.randn(600, 256, device="cuda")
    ours, ref = pair(256, 64, dtype=torch.float32, heads=4, root_weight=False)
    ours, ref = ours.cuda(), ref.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = run_attention(ours, x, edge_index, weights=False)
        ref_bf16 = run_attention(ref, x, edge_index, weights=False)
    expected = run_attention(ref, x, edge_index, weights=False)
    floor = TOLERANCE[torch.bfloat16]
    assert got[0].dtype == ref_bf16[0].dtype
    assert relative_error(got[0], expected[0]) <= 2 * relative_error(ref_bf16[0],
                                                                     expected[0]) + floor
    for name in expected[3]:
        if name not in ZERO_GRADS:
            assert relative_error(got[3][name], expected[3][name]) <= 2 * relative_error(
                ref_bf16[3][name], expected[3][name]) + floor, name
