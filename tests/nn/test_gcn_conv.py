"""GCNConv against torch_geometric's GCNConv with the same state_dict."""
import itertools
import pathlib

import pytest
import torch
import torch_geometric
from _helpers import TOLERANCE, random_graph, relative_error, spy_on_general_checks
from torch_geometric import EdgeIndex

from pyg_ioaware import Graph
from pyg_ioaware.nn import GCNConv

DATA_ROOT = pathlib.Path(__file__).resolve().parents[2] / "data" / "Planetoid"

# (improved, cached, add_self_loops, normalize, bias) combinations PyG allows.
OPTIONS = [opts for opts in itertools.product([False, True], [False, True], [False, True],
                                              [False, True], [False, True])
           if not (opts[2] and not opts[3])]


def pair(in_channels=8, out_channels=5, **kwargs):
    """Our layer and PyG's with identical weights (non-zero bias)."""
    ours = GCNConv(in_channels, out_channels, **kwargs)
    if ours.bias is not None:
        torch.nn.init.uniform_(ours.bias)
    ref = torch_geometric.nn.GCNConv(in_channels, out_channels, **kwargs)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def forward_backward(conv, x, edge_index, edge_weight, grad):
    x = x.clone().requires_grad_()
    w = None if edge_weight is None else edge_weight.clone().requires_grad_()
    out = conv(x, edge_index, w)
    out.backward(grad)
    params = {name: p.grad for name, p in conv.named_parameters()}
    return out, x.grad, None if w is None else w.grad, params


def shadowed_self_loops(edge_index):
    """Self loops that a later loop of the same node replaces (PyG's
    add_remaining_self_loops keeps the last one's weight)."""
    loop = edge_index[0] == edge_index[1]
    shadowed = torch.zeros_like(loop)
    seen = set()
    for e in reversed(range(edge_index.size(1))):
        if loop[e]:
            node = int(edge_index[0, e])
            shadowed[e] = node in seen
            seen.add(node)
    return shadowed


def assert_same(ours, ref, tol, shadowed=None):
    """Outputs and gradients agree. PyG hands the gradient of a node's loop
    weight to every duplicate loop (index_put's backward), although only
    the last one is used; ours is the true derivative: 0 for the others."""
    out, gx, gw, params = ours
    out_r, gx_r, gw_r, params_r = ref
    assert relative_error(out, out_r) < tol
    assert relative_error(gx, gx_r) < tol
    if gw_r is not None:
        keep = torch.ones_like(gw, dtype=torch.bool) if shadowed is None else ~shadowed
        assert relative_error(gw[keep], gw_r[keep]) < tol
        assert not gw[~keep].any()
    assert params.keys() == params_r.keys()
    for name in params:
        assert relative_error(params[name], params_r[name]) < tol, name


@pytest.mark.parametrize("normalize, bias, weighted", [(True, True, False), (True, False, False),
                                                      (False, True, False), (False, False, False),
                                                      (True, True, True), (False, False, True)])
def test_autocast_matches_pyg_dtype_and_values(normalize, bias, weighted):
    """Under torch.autocast PyG's gcn_norm makes its edge weights in the
    input's float32, so 16-bit X W is aggregated into float32 messages and
    output (without normalization or weights: 16-bit messages). Ours gives
    the same dtype and, from the same bf16 X W, the same values."""
    check_autocast_against_pyg("cpu", normalize, bias, weighted)


@pytest.mark.cuda
@pytest.mark.parametrize("normalize, bias, weighted", [(True, True, False), (True, False, False),
                                                      (False, True, False), (True, True, True)])
def test_cuda_autocast_matches_pyg_dtype_and_values(normalize, bias, weighted):
    """As on the CPU, through the native mixed SpMM and its C++ autograd."""
    check_autocast_against_pyg("cuda", normalize, bias, weighted)


def check_autocast_against_pyg(device, normalize, bias, weighted):
    torch.manual_seed(0)
    edge_index = random_graph(60, 60, 400, seed=33, hub_degree=40)
    shadowed = shadowed_self_loops(edge_index) if weighted and normalize else None
    edge_index = edge_index.to(device)
    edge_weight = torch.rand(edge_index.size(1), device=device) if weighted else None
    if weighted:  # PyG's CUDA index_put keeps any one of a node's loop weights
        edge_weight[edge_index[0] == edge_index[1]] = 0.5
    x = torch.randn(60, 16, device=device)
    ours, ref = pair(16, 24, normalize=normalize, add_self_loops=normalize, bias=bias)
    ours, ref = ours.to(device), ref.to(device)
    grad = torch.randn(60, 24, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        got = forward_backward(ours, x, edge_index, edge_weight, grad)
        expected = forward_backward(ref, x, edge_index, edge_weight, grad)
    assert got[0].dtype == expected[0].dtype
    # The same bf16 X W; PyG sums float32 messages in another order, and
    # 16-bit ones (no weights) in 16 bits on CUDA, where ours sums in float32.
    float32_messages = normalize or weighted
    assert relative_error(got[0], expected[0]) < (
        1e-5 if float32_messages else TOLERANCE[torch.bfloat16])
    # PyG's gradient of X W passes through bf16 per-edge messages; ours not.
    assert_same(got, expected, TOLERANCE[torch.bfloat16],
                None if shadowed is None else shadowed.to(device))


@pytest.mark.parametrize("improved, cached, add_self_loops, normalize, bias", OPTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_pyg(improved, cached, add_self_loops, normalize, bias, weighted):
    torch.manual_seed(0)
    edge_index = random_graph(50, 50, 300, seed=31, hub_degree=60)
    edge_weight = torch.rand(edge_index.size(1)) if weighted else None
    x = torch.randn(50, 8)
    ours, ref = pair(improved=improved, cached=cached, add_self_loops=add_self_loops,
                     normalize=normalize, bias=bias)
    grad = torch.randn(50, 5)
    shadowed = shadowed_self_loops(edge_index) if add_self_loops else None
    # The second call exercises the caches; a cached layer keeps the first
    # call's weights and their autograd graph (as PyG's does), so only once then.
    for _ in range(1 if cached and weighted else 2):
        assert_same(forward_backward(ours, x, edge_index, edge_weight, grad),
                    forward_backward(ref, x, edge_index, edge_weight, grad), 1e-5, shadowed)
        ours.zero_grad()
        ref.zero_grad()


def first_layer_call(conv, x, edge_index, edge_weight, grad):
    """A first layer's call: features and weights need no gradient; the
    output and the parameters' gradients."""
    out = conv(x, edge_index, edge_weight)
    out.backward(grad)
    return out, {name: p.grad for name, p in conv.named_parameters()}


def aggregated_width(monkeypatch):
    """The widths of the features ops.spmm_functional.propagate aggregates
    (the fused path's one propagation, with or without an SpmmAdjacency)."""
    from pyg_ioaware.ops import spmm_functional
    widths, propagate = [], spmm_functional.propagate

    def spy(graph, weight_csr, mode, x, *args, **kwargs):
        widths.append(x.size(-1))
        return propagate(graph, weight_csr, mode, x, *args, **kwargs)

    monkeypatch.setattr(spmm_functional, "propagate", spy)
    return widths


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("in_channels, out_channels", [(8, 8), (8, 13), (13, 8)])
@pytest.mark.parametrize("add_self_loops, weighted", [(True, False), (False, False),
                                                      (True, True)])
def test_first_layer_aggregates_first_like_pyg(device, in_channels, out_channels,
                                               add_self_loops, weighted, monkeypatch):
    """Features that need no gradient, no wider than the output, are
    aggregated before the projection, (A X) W + b: PyG's output and
    parameter gradients; wider ones keep PyG's order, A (X W) + b."""
    edge_index = random_graph(60, 60, 400, seed=34, hub_degree=50).to(device)
    edge_weight = torch.rand(edge_index.size(1), device=device) if weighted else None
    if weighted and add_self_loops:  # PyG's CUDA index_put keeps any duplicate loop's weight
        edge_weight[edge_index[0] == edge_index[1]] = 0.5
    x = torch.randn(60, in_channels, device=device)
    grad = torch.randn(60, out_channels, device=device)
    ours, ref = pair(in_channels, out_channels, add_self_loops=add_self_loops)
    ours, ref = ours.to(device), ref.to(device)
    widths = aggregated_width(monkeypatch)
    out, params = first_layer_call(ours, x, edge_index, edge_weight, grad)
    out_r, params_r = first_layer_call(ref, x, edge_index, edge_weight, grad)
    assert widths == [in_channels if in_channels <= out_channels else out_channels]
    assert relative_error(out, out_r) < 1e-5
    assert params.keys() == params_r.keys()
    for name in params:
        assert relative_error(params[name], params_r[name]) < 1e-5, name


def test_cached_keeps_the_first_graph_like_pyg():
    x = torch.randn(30, 8)
    ours, ref = pair(cached=True)
    first, second = random_graph(30, 30, 100, seed=32), random_graph(30, 30, 100, seed=33)
    for edge_index in (first, second):
        assert relative_error(ours(x, edge_index), ref(x, edge_index)) < 1e-6
    ours.reset_parameters()
    ref.load_state_dict(ours.state_dict())
    ref.reset_parameters()
    ref.load_state_dict(ours.state_dict())
    assert relative_error(ours(x, second), ref(x, second)) < 1e-6


@pytest.mark.parametrize("kind", ["int32", "EdgeIndex", "sparse_coo", "sparse_csr", "Graph"])
def test_input_kinds(kind):
    edge_index = random_graph(40, 40, 200, seed=34)
    x = torch.randn(40, 8)
    ours, ref = pair()
    expected = ref(x, edge_index)
    if kind == "int32":
        adj = edge_index.int()
    elif kind == "EdgeIndex":
        adj = EdgeIndex(edge_index, sparse_size=(40, 40))
    elif kind == "Graph":
        adj = Graph.from_input(edge_index, num_nodes=40)
    else:
        # torch.sparse adjacencies carry weights: duplicates are summed.
        adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)),
                                      (40, 40)).coalesce()
        dst, src = adj.indices()
        expected = ref(x, torch.stack([src, dst]), adj.values())
        if kind == "sparse_csr":
            adj = adj.to_sparse_csr()
    assert relative_error(ours(x, adj), expected) < 1e-5


def test_state_dict_repr_and_lazy_init():
    ours, ref = pair()
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert repr(ours) == repr(ref) == "GCNConv(8, 5)"
    lazy = GCNConv(-1, 4)
    edge_index = random_graph(20, 20, 60, seed=35)
    assert lazy(torch.randn(20, 6), edge_index).shape == (20, 4)
    assert lazy.lin.weight.shape == (4, 6)


def test_errors_match_pyg():
    with pytest.raises(ValueError, match="does not support adding self-loops"):
        GCNConv(4, 4, add_self_loops=True, normalize=False)
    # flow="target_to_source" is supported now (test_message_passing.py); a
    # bad flow gets MessagePassing's error, an aggregation other than add ours.
    with pytest.raises(ValueError, match="Expected 'flow'"):
        GCNConv(4, 4, flow="sideways")
    with pytest.raises(ValueError, match="supports aggr"):
        GCNConv(4, 4, aggr="mean")
    conv = GCNConv(4, 4)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="bipartite"):
        conv((torch.randn(3, 4), torch.randn(3, 4)), edge_index)
    with pytest.raises(ValueError, match="out of range"):
        conv(torch.randn(2, 4), edge_index)
    with pytest.raises(ValueError, match="edge_weight must have shape"):
        conv(torch.randn(3, 4), edge_index, torch.rand(3))
    with pytest.raises(TypeError, match="integer"):
        conv(torch.randn(3, 4), edge_index.float())


def test_isolated_nodes_get_bias_only():
    conv = GCNConv(4, 3, add_self_loops=False)
    torch.nn.init.uniform_(conv.bias)
    out = conv(torch.randn(5, 4), torch.tensor([[0, 1], [1, 0]]))
    assert torch.equal(out[2:], conv.bias.expand(3, 3))


@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_no_edges_gives_the_self_loop_result_like_pyg(improved, weighted):
    """add_self_loops on a graph without edges (an empty edge_weight too):
    every node sees only its own loop, as in PyG."""
    edge_index = torch.empty(2, 0, dtype=torch.long)
    edge_weight = torch.empty(0) if weighted else None
    ours, ref = pair(improved=improved)
    x, grad = torch.randn(6, 8), torch.randn(6, 5)
    assert_same(forward_backward(ours, x, edge_index, edge_weight, grad),
                forward_backward(ref, x, edge_index, edge_weight, grad), 1e-6)


def test_cora_matches_pyg():
    from torch_geometric.datasets import Planetoid
    data = Planetoid(str(DATA_ROOT), "Cora")[0]
    ours, ref = pair(data.num_features, 16)
    grad = torch.randn(data.num_nodes, 16)
    assert_same(forward_backward(ours, data.x, data.edge_index, None, grad),
                forward_backward(ref, data.x, data.edge_index, None, grad), 1e-5)


def test_compile_without_graph_breaks():
    edge_index = random_graph(60, 60, 300, seed=36)
    graph = Graph.from_input(edge_index, num_nodes=60)
    conv1, conv2 = GCNConv(8, 16), GCNConv(16, 4)

    def forward(x, graph):
        return conv2(conv1(x, graph).relu(), graph)

    x = torch.randn(60, 8)
    forward(x, graph)  # an eager call fills the Graph's caches (self loops, values)
    explanation = torch._dynamo.explain(forward)(x, graph)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(forward, backend="aot_eager", fullgraph=True)
    x.requires_grad_()
    out = compiled(x, graph)
    (gx,) = torch.autograd.grad(out.sum(), x)
    x_ref = x.detach().requires_grad_()
    out_ref = forward(x_ref, graph)
    (gx_ref,) = torch.autograd.grad(out_ref.sum(), x_ref)
    assert relative_error(out, out_ref) < 1e-6 and relative_error(gx, gx_ref) < 1e-6


@pytest.mark.parametrize("features", [torch.float32, torch.bfloat16])
def test_compile_under_autocast_gives_the_eager_dtype_and_values(features):
    """The mixed SpMM (bf16 X W, float32 messages; with bf16 features the
    float32 bias promotes them) traced as the custom op with its out_dtype,
    forward and backward (6 entries a row: dY cast first)."""
    graph = Graph.from_input(random_graph(60, 60, 300, seed=37), num_nodes=60)
    conv = GCNConv(8, 16)
    x = torch.randn(60, 8, dtype=features, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = conv(x, graph)  # also fills the Graph's caches
        got = torch.compile(conv, backend="aot_eager", fullgraph=True)(x, graph)
    assert got.dtype == expected.dtype == torch.float32
    assert relative_error(got, expected) < 1e-6
    (g_got,) = torch.autograd.grad(got.sum(), x)
    (g_expected,) = torch.autograd.grad(expected.sum(), x)
    assert relative_error(g_got, g_expected) < 1e-6


# ---------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("improved", [False, True])
def test_cuda_matches_pyg(weighted, improved):
    edge_index = random_graph(500, 500, 5000, seed=37, hub_degree=3000).cuda()
    edge_weight = torch.rand(edge_index.size(1), device="cuda") if weighted else None
    if weighted:
        # PyG's add_remaining_self_loops picks any duplicate loop's weight on
        # CUDA (index_put with repeated indices): give duplicates one weight.
        is_loop = edge_index[0] == edge_index[1]
        edge_weight[is_loop] = 0.5
    x = torch.randn(500, 33, device="cuda")
    ours, ref = pair(33, 65, improved=improved)
    ours, ref = ours.cuda(), ref.cuda()
    grad = torch.randn(500, 65, device="cuda")
    assert_same(forward_backward(ours, x, edge_index, edge_weight, grad),
                forward_backward(ref, x, edge_index, edge_weight, grad), 1e-5,
                shadowed_self_loops(edge_index.cpu()).cuda())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_autocast_16bit_features_sum_in_float32(device):
    """16-bit features under autocast: PyG's fp32 bias promotes its 16-bit
    aggregation to fp32. Ours writes that fp32 output with the bias added
    inside the aggregation, the sum never rounded to 16 bits: within fp32
    rounding of A_norm (X W) + b computed in float64 from the layer's own
    bf16 X W; PyG's dtypes, and its values within bf16 rounding."""
    # PyG's CUDA scatter sums 16-bit messages in 16 bits: rows of a few
    # dozen entries keep that within the bf16 tolerance.
    n = 60
    edge_index = random_graph(n, n, 400, seed=37, hub_degree=40).to(device)
    x = torch.randn(n, 32, device=device).bfloat16()
    ours, ref = pair(32, 48)
    ours, ref = ours.to(device), ref.to(device)
    grad = torch.randn(n, 48, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        got = forward_backward(ours, x, edge_index, None, grad)
        expected = forward_backward(ref, x, edge_index, None, grad)
        projected = ours.lin(x).double()
    loops = torch.arange(n, device=device).repeat(2, 1)
    kept = edge_index[:, edge_index[0] != edge_index[1]]
    src, dst = torch.cat([kept, loops], dim=1)
    deg = torch.zeros(n, dtype=torch.float64, device=device).index_add_(
        0, dst, torch.ones_like(dst, dtype=torch.float64))
    norm = deg[src].rsqrt() * deg[dst].rsqrt()
    exact = torch.zeros_like(projected).index_add_(0, dst, norm[:, None] * projected[src])
    exact = exact + ours.bias.double()
    assert got[0].dtype == expected[0].dtype == torch.float32
    assert got[1].dtype == expected[1].dtype == torch.bfloat16
    assert relative_error(got[0], exact) < 1e-5
    assert_same(got, expected, TOLERANCE[torch.bfloat16])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_autocast(dtype):
    edge_index = random_graph(400, 400, 4000, seed=38).cuda()
    x = torch.randn(400, 64, device="cuda")
    ours, ref = pair(64, 128)
    ours, ref = ours.cuda(), ref.cuda()
    grad = torch.randn(400, 128, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        got = forward_backward(ours, x, edge_index, None, grad)
    expected = forward_backward(ref, x, edge_index, None, grad)  # fp32 reference
    assert_same(got, expected, TOLERANCE[dtype])


@pytest.mark.cuda
def test_cuda_compile_reduce_overhead():
    edge_index = random_graph(300, 300, 3000, seed=39).cuda()
    graph = Graph.from_input(edge_index, num_nodes=300)
    conv = GCNConv(32, 32).cuda()
    conv(torch.randn(300, 32, device="cuda"), graph)  # fills the Graph's caches
    compiled = torch.compile(conv, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        x = torch.randn(300, 32, device="cuda")
        assert relative_error(compiled(x, graph), conv(x, graph)) < 1e-5


@pytest.fixture
def general(monkeypatch):
    """The arguments of every GCNConv call that went through
    ``fused_forward``'s general checks from now on."""
    return spy_on_general_checks(monkeypatch, GCNConv)


@pytest.mark.cuda
@pytest.mark.parametrize("add_self_loops", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("first_layer", [True, False])
@pytest.mark.parametrize("autocast", [False, True])
def test_cuda_plain_call_matches_the_general_checks(add_self_loops, bias, first_layer, autocast,
                                                    general):
    """The common call (one 2-D CUDA feature tensor, a plain edge_index, no
    edge weights) enters the fused path through ``_plain_cuda_forward``, not
    ``fused_forward``'s general checks, and gives what those give for the
    same call on a new graph of the same edges: a first layer's features
    (no gradient: aggregated before the projection outside autocast) and a
    later layer's, with and without bf16 autocast; the forward bitwise
    (uniform degrees, no hub: the same kernels, no atomics), the gradients
    within rounding (the backward scatters)."""
    gen = torch.Generator().manual_seed(66)
    edge_index = torch.randint(0, 600, (2, 6000), generator=gen).cuda()
    x = torch.randn(600, 33, device="cuda")
    conv = GCNConv(33, 40, add_self_loops=add_self_loops, bias=bias).cuda()
    if bias:
        torch.nn.init.uniform_(conv.bias)
    grad = torch.randn(600, 40, device="cuda")

    def run(call):
        conv.zero_grad()
        inputs = x.clone().requires_grad_(not first_layer)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = call(inputs, edge_index.clone())  # a new graph every call
        out.backward(grad)
        grads = [inputs.grad] if not first_layer else []
        return [out, *grads, *(p.grad for p in conv.parameters())]

    plain = run(conv)
    assert not general
    checked = run(conv.fused_forward)
    assert len(general) == 1
    assert torch.equal(plain[0], checked[0])
    for a, b in zip(plain[1:], checked[1:]):
        assert relative_error(a, b) < 1e-6


@pytest.mark.cuda
def test_cuda_other_calls_take_the_general_checks(general):
    """Every call but the common one goes through ``fused_forward`` (or PyG's
    path), with PyG's result: edge weights, an EdgeIndex, a Graph, the
    reversed flow, ``cached``, ``normalize=False``, a hook on ``lin``; an
    edge_index on another device than the features gets the general
    checks' error."""
    edge_index = random_graph(300, 300, 2000, seed=67).cuda()
    x = torch.randn(300, 12, device="cuda")
    weight = torch.rand(edge_index.size(1), device="cuda")
    weight[edge_index[0] == edge_index[1]] = 0.5  # PyG's CUDA index_put keeps any duplicate's
    calls = {
        "weights": ({}, lambda conv: conv(x, edge_index, weight)),
        "EdgeIndex": ({}, lambda conv: conv(x, EdgeIndex(edge_index, sparse_size=(300, 300)))),
        "graph": ({}, lambda conv: conv(x, Graph.from_input(edge_index, 300))),
        "flow": ({"flow": "target_to_source"}, lambda conv: conv(x, edge_index)),
        "cached": ({"cached": True}, lambda conv: conv(x, edge_index)),
        "normalize": ({"normalize": False}, lambda conv: conv(x, edge_index)),
    }
    for name, (options, call) in calls.items():
        ours, ref = pair(12, 5, **options)
        ours, ref = ours.cuda(), ref.cuda()
        before = len(general)
        expected = ref(x, edge_index, weight if name == "weights" else None)
        assert relative_error(call(ours), expected) < 1e-5, name
        assert len(general) == before + 1, name
    ours, ref = pair(12, 5)
    ours, ref = ours.cuda(), ref.cuda()
    seen = []
    ours.lin.register_forward_hook(lambda module, inputs, out: seen.append(out))
    assert relative_error(ours(x, edge_index), ref(x, edge_index)) < 1e-5
    assert len(seen) == 1 and len(general) == len(calls) + 1
    with pytest.raises(ValueError, match="on cuda"):
        ours(x, edge_index.cpu())
    assert len(general) == len(calls) + 2
