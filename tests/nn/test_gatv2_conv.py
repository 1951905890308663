"""GATv2Conv against torch_geometric's GATv2Conv with the same state_dict:
every option, bipartite inputs, attention weights, dropout, PyG's path,
torch.compile; on CUDA the fused kernels on a graph with a hub."""
import pytest
import torch
import torch_geometric
from _helpers import (TOLERANCE, assert_compiled_matches_eager, assert_runs_match,
                      random_graph, relative_error)
from _helpers import run_attention as run
from torch_geometric import EdgeIndex

import pyg_ioaware.graph as graph_module
from pyg_ioaware import Graph
from pyg_ioaware.nn import GATv2Conv

PygGATv2Conv = torch_geometric.nn.GATv2Conv

OPTIONS = {
    "default": {},
    "concat-false": {"concat": False},
    "share-weights": {"share_weights": True},
    "residual": {"residual": True},
    "no-loops": {"add_self_loops": False},
    "no-bias": {"bias": False},
    "edge-mean": {"edge_dim": 3},
    "edge-float": {"edge_dim": 3, "fill_value": 0.5},
    "edge-add": {"edge_dim": 3, "fill_value": "add"},
    "edge-max-1d": {"edge_dim": 1, "fill_value": "max"},
    "three-heads": {"heads": 3, "negative_slope": 0.1},
}


def pair(in_channels, out_channels, dtype=torch.float64, **kwargs):
    kwargs.setdefault("heads", 2)
    torch.manual_seed(0)
    ours = GATv2Conv(in_channels, out_channels, **kwargs).to(dtype)
    ref = PygGATv2Conv(in_channels, out_channels, **kwargs).to(dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_matches_pyg(option):
    kwargs = dict(OPTIONS[option])
    edge_index = random_graph(60, 60, 500, seed=1, hub_degree=80)
    x = torch.randn(60, 12, dtype=torch.float64)
    edge_dim = kwargs.get("edge_dim")
    edge_attr = None if edge_dim is None else torch.randn(edge_index.size(1), edge_dim,
                                                          dtype=torch.float64)
    if edge_dim == 1:
        edge_attr = edge_attr.view(-1)
    ours, ref = pair(12, 5, **kwargs)
    assert_runs_match(run(ours, x, edge_index, edge_attr), run(ref, x, edge_index, edge_attr),
                      TOLERANCE[torch.float64] * 100)


@pytest.mark.parametrize("share_weights", [False, True])
def test_bipartite_matches_pyg(share_weights):
    edge_index = random_graph(70, 30, 400, seed=2, hub_degree=50)
    x = (torch.randn(70, 9, dtype=torch.float64), torch.randn(30, 9, dtype=torch.float64))
    ours, ref = pair(9, 4, share_weights=share_weights, residual=True)
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index), 1e-8)
    ours, ref = pair((9, 9), 4, share_weights=share_weights, add_self_loops=False)
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index), 1e-8)


def test_edge_index_kinds_and_graph_input():
    edge_index = random_graph(40, 40, 300, seed=3)
    x = torch.randn(40, 8, dtype=torch.float64)
    ours, ref = pair(8, 6)
    expected = run(ref, x, edge_index, weights=False)
    for adj in (EdgeIndex(edge_index, sparse_size=(40, 40)), edge_index.int()):
        assert_runs_match(run(ours, x, adj, weights=False), expected, 1e-8)
    graph = Graph.from_edge_index(edge_index, 40)
    assert relative_error(run(ours, x, graph, weights=False)[0], expected[0]) < 1e-8


def test_attention_weights_in_pyg_order_and_cached_loops(monkeypatch):
    builds = []
    build = graph_module._pyg_self_looped
    monkeypatch.setattr(graph_module, "_pyg_self_looped",
                        lambda *args: builds.append(args) or build(*args))
    edge_index = random_graph(50, 50, 300, seed=4)
    x = torch.randn(50, 8, dtype=torch.float64)
    ours, ref = pair(8, 3, heads=4)
    out, (ei, alpha) = ours(x, edge_index, return_attention_weights=True)
    ref_out, (ref_ei, ref_alpha) = ref(x, edge_index, return_attention_weights=True)
    assert torch.equal(ei, ref_ei) and relative_error(alpha, ref_alpha) < 1e-10
    ours(x, edge_index)
    assert len(builds) == 1  # the self-looped graph is built once per input, then cached


def test_dropout_is_fused_reproducible_and_unbiased():
    edge_index = random_graph(80, 80, 1500, seed=5)
    x = torch.randn(80, 8, dtype=torch.float64)
    ours, ref = pair(8, 4, dropout=0.5)
    ours.eval(), ref.eval()
    assert relative_error(ours(x, edge_index), ref(x, edge_index)) < 1e-10  # eval: no dropout
    ours.train()
    torch.manual_seed(1)
    first = ours(x, edge_index)
    torch.manual_seed(1)
    assert torch.equal(first, ours(x, edge_index))
    runs = torch.stack([ours(x, edge_index) for _ in range(300)])
    ours.eval()
    clean = ours(x, edge_index)
    # E[dropout(alpha)] = alpha: the mean over runs approaches the clean output.
    assert relative_error(runs.mean(0), clean) < 0.1
    assert relative_error(runs[0], clean) > 0.1


def test_pyg_path_reasons():
    edge_index = random_graph(30, 30, 100, seed=6)
    ours, _ = pair(8, 4)
    num_edges = edge_index.size(1)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(num_edges), (30, 30))
    assert ours._pyg_path_reason(torch.zeros(30, 8), adj, None, None) is not None
    assert ours._pyg_path_reason(torch.zeros(30, 8), edge_index, None, None) is None
    assert "edge_attr" in ours._pyg_path_reason(torch.zeros(30, 8), edge_index,
                                                 torch.zeros(num_edges, 2), None)
    ours.explain = True
    assert "explain" in ours._pyg_path_reason(torch.zeros(30, 8), edge_index, None, None)


def test_compile_matches_eager():
    edge_index = random_graph(40, 40, 300, seed=7)
    x = torch.randn(40, 8)
    conv1, conv2 = GATv2Conv(8, 8, heads=2), GATv2Conv(16, 4, heads=1)

    def forward(x):
        return conv2(conv1(x, edge_index).relu(), edge_index)

    expected = forward(x)
    assert relative_error(torch.compile(forward)(x), expected) < 1e-6


# -------------------------------------------------------------------- CUDA
def cuda_case(seed):
    edge_index = random_graph(600, 600, 6000, seed=seed, hub_degree=2500).cuda()
    assert torch.bincount(edge_index[1].cpu()).max() > 2000
    return edge_index


@pytest.mark.cuda
def test_cuda_compile_matches_eager_with_gradients():
    # The kernels under torch.compile: the custom ops, the packed projection's
    # gradient stacked from the op's slots, the bias in the output pass.
    edge_index = cuda_case(seed=10)
    x = torch.randn(600, 24, device="cuda", requires_grad=True)
    torch.manual_seed(0)
    conv1, conv2 = GATv2Conv(24, 8, heads=2).cuda(), GATv2Conv(16, 4, concat=False).cuda()

    def forward(x):
        return conv2(conv1(x, edge_index).relu(), edge_index)

    assert_compiled_matches_eager(forward, x, (conv1, conv2))


@pytest.mark.cuda
@pytest.mark.parametrize("option", ["default", "concat-false", "edge-mean", "three-heads",
                                    "residual"])
def test_cuda_matches_pyg(option):
    kwargs = dict(OPTIONS[option])
    edge_index = cuda_case(seed=8)
    x = torch.randn(600, 24, device="cuda")
    edge_attr = torch.randn(edge_index.size(1), 3, device="cuda") if "edge_dim" in kwargs \
        else None
    ours, ref = pair(24, 32, dtype=torch.float32, **kwargs)
    ours, ref = ours.cuda(), ref.cuda()
    assert_runs_match(run(ours, x, edge_index, edge_attr), run(ref, x, edge_index, edge_attr),
                      1e-4)


@pytest.mark.cuda
def test_cuda_bf16_autocast_within_pyg_error():
    edge_index = cuda_case(seed=9)
    x = torch.randn(600, 64, device="cuda")
    ours, ref = pair(64, 64, dtype=torch.float32)
    ours, ref = ours.cuda(), ref.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = run(ours, x, edge_index, weights=False)
        ref_bf16 = run(ref, x, edge_index, weights=False)
    expected = run(ref, x, edge_index, weights=False)
    floor = TOLERANCE[torch.bfloat16]
    assert got[0].dtype == ref_bf16[0].dtype
    assert relative_error(got[0], expected[0]) <= 2 * relative_error(ref_bf16[0],
                                                                     expected[0]) + floor
    for name in expected[3]:
        assert relative_error(got[3][name], expected[3][name]) <= 2 * relative_error(
            ref_bf16[3][name], expected[3][name]) + floor, name


@pytest.mark.parametrize("add_self_loops", [False, True])
def test_graph_input_keeps_its_input_edge_order(add_self_loops):
    """With a Graph, edge_attr, the returned edge_index and alpha are in the
    order of the edges the Graph was built from."""
    edge_index = random_graph(40, 40, 300, seed=10)
    graph = Graph.from_edge_index(edge_index, 40)
    assert graph.edge_perm is not None
    x = torch.randn(40, 8, dtype=torch.float64)
    edge_attr = torch.randn(edge_index.size(1), 3, dtype=torch.float64)
    ours, ref = pair(8, 6, edge_dim=3, add_self_loops=add_self_loops)
    assert_runs_match(run(ours, x, graph, edge_attr), run(ref, x, edge_index, edge_attr), 1e-8)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("add_self_loops", [False, True])
def test_bad_edge_attr_raises_before_any_gather(add_self_loops, device):
    """edge_attr with too few or too many rows, or the wrong width, is a
    ValueError naming the shape expected, for an edge_index and a Graph,
    before anything gathers it by edge position (on a GPU an index past its
    rows would stop the device; too many rows were taken silently); a flat
    edge_attr with edge_dim=1 runs, as PyG's does."""
    edge_index = random_graph(30, 30, 200, seed=13).to(device)
    num_edges = edge_index.size(1)
    x = torch.randn(30, 8, device=device)
    conv = GATv2Conv(8, 4, heads=2, edge_dim=3, add_self_loops=add_self_loops).to(device)
    for adjacency in (edge_index, Graph.from_edge_index(edge_index, 30)):
        for rows, width in ((num_edges - 1, 3), (num_edges + 5, 3), (num_edges, 2)):
            with pytest.raises(ValueError, match=rf"edge_dim=3 expected edge_attr of shape "
                                                 rf"\[num_edges, edge_dim\] = \[{num_edges}, 3\], "
                                                 rf"got shape \({rows}, {width}\)"):
                conv(x, adjacency, torch.randn(rows, width, device=device))
        with pytest.raises(ValueError, match=rf"got shape \({num_edges},\)"):
            conv(x, adjacency, torch.randn(num_edges, device=device))
    flat = GATv2Conv(8, 4, heads=2, edge_dim=1, add_self_loops=add_self_loops).to(device)
    ref = PygGATv2Conv(8, 4, heads=2, edge_dim=1, add_self_loops=add_self_loops).to(device)
    ref.load_state_dict(flat.state_dict())
    edge_attr = torch.randn(num_edges, device=device)
    assert relative_error(flat(x, edge_index, edge_attr), ref(x, edge_index, edge_attr)) < 1e-5
    with pytest.raises(ValueError, match=rf"\[{num_edges}, 1\] \(or \[{num_edges}\]\), got shape"):
        flat(x, edge_index, torch.randn(num_edges + 1, device=device))


def test_other_aggr_takes_pyg_path():
    edge_index = random_graph(30, 30, 200, seed=11)
    x = torch.randn(30, 8, dtype=torch.float64)
    ours, ref = pair(8, 4, aggr="mean")
    assert "aggr='mean'" in ours._pyg_path_reason(x, edge_index, None, None)
    assert relative_error(ours(x, edge_index), ref(x, edge_index)) < 1e-10


def test_torchscript_compiles_pygs_path():
    """TorchScript compiles PyG's forward code (the fused path is
    @torch.jit.unused) wherever PyG's own GATv2Conv scripts."""
    try:
        torch.jit.script(PygGATv2Conv(8, 4, heads=2))
    except RuntimeError as error:  # torch 2.13 no longer scripts PyG 2.8's forward
        pytest.skip(f"PyG's own GATv2Conv does not script here: {str(error).splitlines()[1]}")
    edge_index = random_graph(30, 30, 120, seed=8)
    x = torch.randn(30, 8, dtype=torch.float64)
    ours, ref = pair(8, 4, heads=2)
    assert relative_error(torch.jit.script(ours)(x, edge_index), ref(x, edge_index)) < 1e-10
