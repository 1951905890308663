"""GCNConv's resolved forward (nn.gcn_conv._ResolvedForward): a call like the
layer's last one over the same edge_index replays X W and the C++ SpMM call
that one resolved. Every replay gives PyG's result, and anything that
changes the fused path's choices resolves again."""
import copy
import gc
import io

import pytest
import torch
import torch_geometric
from _helpers import host_extension_calls, random_graph, relative_error

from pyg_ioaware.nn import GCNConv, gcn_conv
from pyg_ioaware.ops import spmm_functional

pytestmark = pytest.mark.cuda


@pytest.fixture
def resolutions(monkeypatch):
    """How many times the fused path resolved a C++ SpMM call (skips where
    the host extension is not built)."""
    host_extension_calls(monkeypatch, ("spmm",))
    count = [0]
    resolve = spmm_functional.native_spmm_call

    def counted(*args):
        count[0] += 1
        return resolve(*args)

    monkeypatch.setattr(spmm_functional, "native_spmm_call", counted)
    return count


def pair():
    ours = GCNConv(24, 40).cuda()
    torch.nn.init.uniform_(ours.bias)
    ref = torch_geometric.nn.GCNConv(24, 40).cuda()
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def step(conv, x, edge_index, grad):
    """out, dX, dW, db of one call, then a synchronisation: the degree bound
    a first call over a graph starts reading is known to the next (a call
    resolved without it is not kept), however slow the GPU."""
    x = x.detach().clone().requires_grad_()
    out = conv(x, edge_index)
    grads = torch.autograd.grad(out, (x, conv.lin.weight, conv.bias), grad)
    torch.cuda.synchronize()
    return (out, *grads)


def assert_matches(ours, ref, tolerance=1e-5):
    for a, b in zip(ours, ref):
        assert relative_error(a, b) < tolerance


def test_repeated_calls_replay_and_match_pyg(resolutions):
    torch.manual_seed(0)
    edge_index = random_graph(500, 500, 4000, seed=2, hub_degree=1500).cuda()
    ours, ref = pair()
    x = torch.randn(500, 24, device="cuda")
    grad = torch.randn(500, 40, device="cuda")
    expected = step(ref, x, edge_index, grad)
    for _ in range(6):
        assert_matches(step(ours, x, edge_index, grad), expected)
    assert ours in gcn_conv._RESOLVED_FORWARDS
    assert resolutions[0] < 6  # replayed once the degree bounds and the CSR^T were known


def test_changes_resolve_again(resolutions):
    torch.manual_seed(1)
    edge_index = random_graph(400, 400, 3000, seed=4).cuda()
    ours, ref = pair()
    x = torch.randn(400, 24, device="cuda")
    grad = torch.randn(400, 40, device="cuda")
    for _ in range(4):
        step(ours, x, edge_index, grad)

    def resolves_and_matches(run_ours, run_ref, tolerance=1e-5):
        before = resolutions[0]
        assert_matches(run_ours(), run_ref(), tolerance)
        assert resolutions[0] > before

    # Settings the replay depends on.
    expected = step(ref, x, edge_index, grad)
    torch.use_deterministic_algorithms(True)
    try:
        resolves_and_matches(lambda: step(ours, x, edge_index, grad), lambda: expected)
    finally:
        torch.use_deterministic_algorithms(False)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        resolves_and_matches(lambda: step(ours, x, edge_index, grad),
                             lambda: step(ref, x, edge_index, grad), 1e-2)
    # Inputs: features that need no gradient (aggregated first, no node recorded),
    # fewer nodes (another edge_index), a changed edge_index, an equal new one.
    assert_matches((ours(x, edge_index),), (ref(x, edge_index),))
    kept = edge_index[:, (edge_index < 300).all(0)]
    resolves_and_matches(lambda: step(ours, x[:300], kept, grad[:300]),
                         lambda: step(ref, x[:300], kept, grad[:300]))
    edge_index[0, :10] = edge_index[1, :10]  # in place: a new version
    resolves_and_matches(lambda: step(ours, x, edge_index, grad),
                         lambda: step(ref, x, edge_index, grad))
    resolves_and_matches(lambda: step(ours, x, edge_index.clone(), grad),
                         lambda: step(ref, x, edge_index, grad))
    # The layer: a hook on lin runs (no replay skips it); parameters changed
    # in place or replaced are read at every call.
    step(ours, x, edge_index, grad)
    seen = []
    handle = ours.lin.register_forward_hook(lambda *args: seen.append(1))
    assert_matches(step(ours, x, edge_index, grad), step(ref, x, edge_index, grad))
    assert seen == [1]
    handle.remove()
    with torch.no_grad():
        ours.bias.mul_(2), ref.bias.mul_(2)
    assert_matches(step(ours, x, edge_index, grad), step(ref, x, edge_index, grad))
    ours.lin.weight = torch.nn.Parameter(ours.lin.weight.detach() * 3)
    with torch.no_grad():
        ref.lin.weight.mul_(3)
    assert_matches(step(ours, x, edge_index, grad), step(ref, x, edge_index, grad))


def test_entry_goes_with_the_graph_and_the_layer_stays_picklable(resolutions):
    edge_index = random_graph(300, 300, 2000, seed=6).cuda()
    ours, _ = pair()
    x = torch.randn(300, 24, device="cuda", requires_grad=True)
    for _ in range(4):
        ours(x, edge_index).sum().backward()
        torch.cuda.synchronize()  # as in step()
    assert ours in gcn_conv._RESOLVED_FORWARDS
    torch.save(ours, io.BytesIO())
    copy.deepcopy(ours)
    del edge_index
    gc.collect()
    assert ours not in gcn_conv._RESOLVED_FORWARDS
