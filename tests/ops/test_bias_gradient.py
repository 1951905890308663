"""ops.bias_gradient: column sums, and linear maps and bias adds whose bias
gradient is a GEMV: against torch's ops in float64 (gradcheck), where they
take over and where not (the Python nodes, and the C++ node of the host
extension on CUDA), and the attention layers through them against PyG's
layers with the same weights."""
import pytest
import torch
import torch_geometric
from _helpers import (TOLERANCE, assert_runs_match, host_extension_calls, random_graph,
                      relative_error)
from _helpers import run_attention as run

from pyg_ioaware import config
from pyg_ioaware.nn import GATv2Conv, SAGEConv, TransformerConv
from pyg_ioaware.ops import bias_gradient

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture
def forced(monkeypatch):
    """The GEMV column sums and the autograd nodes taken on any tensor."""
    monkeypatch.setattr(bias_gradient, "_gemv_wins", lambda t, min_elements: True)
    monkeypatch.setattr(bias_gradient, "_through_node",
                        lambda out_elements, x: torch.is_grad_enabled())


def node_name(t):
    return type(t.grad_fn).__name__


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gemv", [False, True], ids=["torch-sum", "gemv"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_column_sums(device, gemv, dtype, monkeypatch):
    if gemv:
        if dtype == torch.bfloat16:
            pytest.skip("16-bit sums never take the GEMV")
        monkeypatch.setattr(bias_gradient, "_gemv_wins", lambda t, min_elements: True)
    gen = torch.Generator().manual_seed(0)
    for shape in ((37, 5), (3, 11, 7), (1, 1)):
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
        got = bias_gradient.column_sums(t.to(device=device, dtype=dtype))
        want = t.to(dtype).double().reshape(-1, shape[-1]).sum(0)
        assert got.dtype == dtype and got.shape == (shape[-1],)
        assert relative_error(got.double().cpu(), want) < TOLERANCE[dtype] * 10
        # In another dtype: summed as above, rounded once to that dtype.
        wide = bias_gradient.column_sums(t.to(device=device, dtype=dtype), torch.float64)
        assert wide.dtype == torch.float64 and relative_error(wide.cpu(), want) < 1e-6


def test_linear_and_add_bias_gradients(forced):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    shift = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    assert node_name(bias_gradient.linear(x, weight, bias)) == "_LinearBackward"
    assert node_name(bias_gradient.add_bias(x, shift)) == "_AddBiasBackward"
    assert torch.autograd.gradcheck(bias_gradient.linear, (x, weight, bias))
    assert torch.autograd.gradcheck(bias_gradient.add_bias, (x, shift))
    assert torch.autograd.gradgradcheck(bias_gradient.linear, (x, weight, bias))
    # without a bias (nothing to gain), and without gradients: torch's ops
    assert node_name(bias_gradient.linear(x, weight)) != "_LinearBackward"
    with torch.no_grad():
        assert bias_gradient.linear(x, weight, bias).grad_fn is None


def test_apply_linear_calls_the_module_where_it_must(forced):
    lin = torch_geometric.nn.Linear(-1, 4)  # lazy: initialized by its first call
    x = torch.randn(7, 3, requires_grad=True)
    out = bias_gradient.apply_linear(lin, x)
    assert lin.weight.shape == (4, 3) and node_name(out) != "_LinearBackward"
    assert node_name(bias_gradient.apply_linear(lin, x)) == "_LinearBackward"
    seen = []
    lin.register_forward_hook(lambda module, inputs, output: seen.append(output))
    out = bias_gradient.apply_linear(lin, x)
    assert len(seen) == 1 and seen[0] is out
    assert torch.allclose(out, torch.nn.functional.linear(x, lin.weight, lin.bias))


@pytest.mark.parametrize("device", DEVICES)
def test_add_product_accumulates_into_a_linear(device):
    """add_product(F.linear(x, W, b), a, V) = x W^T + b + a V^T: in place
    where the dtypes agree (one addmm node, no add), through torch.addmm
    where autocast must cast."""
    gen = torch.Generator().manual_seed(3)
    args = [torch.randn(shape, generator=gen, dtype=torch.float64).to(device).requires_grad_()
            for shape in ((9, 5), (4, 5), (4,), (9, 7), (4, 7))]

    def two_products(x, weight, bias, a, weight_a):
        return bias_gradient.add_product(torch.nn.functional.linear(x, weight, bias), a,
                                         weight_a)

    want = torch.nn.functional.linear(*args[:3]) + torch.nn.functional.linear(*args[3:])
    out = two_products(*args)
    assert node_name(out) == "AddmmBackward0"
    assert relative_error(out, want) < TOLERANCE[torch.float64]
    assert torch.autograd.gradcheck(two_products, args)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = two_products(*(t.float() for t in args))
    assert out.dtype == torch.bfloat16
    assert relative_error(out.double(), want) < TOLERANCE[torch.bfloat16] * 10


@pytest.mark.cuda
def test_takes_over_only_large_fp32_outputs_outside_autocast(monkeypatch):
    monkeypatch.setattr(config, "native_host", False)  # the rule without the C++ node
    x = torch.randn(16, 8, device="cuda", requires_grad=True)
    lin = torch.nn.Linear(8, 4).cuda()
    assert node_name(bias_gradient.apply_linear(lin, x)) != "_LinearBackward"  # small
    monkeypatch.setattr(bias_gradient, "MIN_GEMV_ELEMENTS", 64)
    assert node_name(bias_gradient.apply_linear(lin, x)) == "_LinearBackward"
    assert node_name(bias_gradient.add_bias(x, lin.weight[0])) == "_AddBiasBackward"
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = bias_gradient.apply_linear(lin, x)
    assert out.dtype == torch.bfloat16 and node_name(out) != "_LinearBackward"


@pytest.fixture
def host_calls(monkeypatch):
    """Calls of the C++ node (skips where the host extension is not built)."""
    monkeypatch.setattr(config, "native_host", True)
    return host_extension_calls(monkeypatch, ["fused_linear"])


def maps(count, bias, dtype, gen):
    lins = [torch.nn.Linear(5, 4, bias=bias).to(device="cuda", dtype=dtype) for _ in range(count)]
    for lin in lins:  # reproducible values
        with torch.no_grad():
            for param in lin.parameters():
                param.copy_(torch.randn(param.shape, generator=gen, dtype=dtype))
    return lins


@pytest.mark.cuda
@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_host_node_matches_torch(host_calls, count, bias, dtype):
    """fused_linear as one C++ node: output and every gradient against
    torch's cat + F.linear; gradcheck and gradgradcheck in float64."""
    gen = torch.Generator().manual_seed(count)
    lins = maps(count, bias, dtype, gen)
    x = torch.randn(37, 5, generator=gen, dtype=dtype).cuda().requires_grad_()
    out = bias_gradient.fused_linear(x, lins).flatten(1)
    node = out.grad_fn
    while node.name().startswith("ViewBackward"):  # fused_linear's [N, maps, out] view
        node = node.next_functions[0][0]
    assert host_calls["fused_linear"] == 1 and "FusedLinear" in node.name()
    want = torch.nn.functional.linear(
        x, torch.cat([lin.weight for lin in lins]),
        torch.cat([lin.bias for lin in lins]) if bias else None)
    grad = torch.randn(out.shape, generator=gen, dtype=dtype).cuda()
    params = [p for lin in lins for p in lin.parameters()]
    got_grads = torch.autograd.grad(out, [x, *params], grad)
    want_grads = torch.autograd.grad(want, [x, *params], grad)
    for got, expected in zip([out, *got_grads], [want, *want_grads]):
        assert got.shape == expected.shape
        assert relative_error(got, expected) < TOLERANCE[dtype] * 10
    if dtype == torch.float64:
        def fused(x, *params):
            weights = params[::2] if bias else params
            biases = list(params[1::2]) if bias else []
            return bias_gradient._native_host.active().fused_linear(x, list(weights), biases)
        assert torch.autograd.gradcheck(fused, (x, *params))
        assert torch.autograd.gradgradcheck(fused, (x, *params))


@pytest.mark.cuda
def test_host_node_computes_only_the_gradients_asked(host_calls):
    gen = torch.Generator().manual_seed(5)
    lins = maps(2, True, torch.float32, gen)
    x = torch.randn(9, 5, generator=gen).cuda()
    lins[1].bias.requires_grad_(False)
    out = bias_gradient.fused_linear(x, lins)  # x needs no gradient
    out.sum().backward()
    assert lins[1].bias.grad is None and lins[0].bias.grad is not None
    assert torch.equal(lins[0].weight.grad, lins[1].weight.grad)  # both dY^T X, dY all ones
    for lin in lins:
        lin.requires_grad_(False)
    x.requires_grad_()
    out = bias_gradient.fused_linear(x, lins)
    (grad_x,) = torch.autograd.grad(out.sum(), x)
    weight = torch.cat([lin.weight for lin in lins])
    assert relative_error(grad_x, weight.sum(0).expand_as(x)) < TOLERANCE[torch.float32] * 10


@pytest.mark.cuda
def test_large_linear_takes_the_host_node_and_an_accumulated_product(host_calls, monkeypatch):
    """linear on a large fp32 output (every output here) is the C++ node,
    and SAGEConv's root term, its output with a second product added in
    place (add_product), keeps both products' gradients."""
    monkeypatch.setattr(bias_gradient, "MIN_GEMV_ELEMENTS", 1)
    gen = torch.Generator().manual_seed(6)
    args = [torch.randn(shape, generator=gen).cuda().requires_grad_()
            for shape in ((9, 5), (4, 5), (4,), (9, 7), (4, 7))]
    out = bias_gradient.add_product(bias_gradient.linear(*args[:3]), *args[3:])
    assert host_calls["fused_linear"] == 1
    want = torch.nn.functional.linear(*args[:3]) + torch.nn.functional.linear(*args[3:])
    grad = torch.randn(out.shape, generator=gen).cuda()
    got_grads = torch.autograd.grad(out, args, grad)
    want_grads = torch.autograd.grad(want, args, grad)
    for got, expected in zip([out, *got_grads], [want, *want_grads]):
        assert relative_error(got, expected) < TOLERANCE[torch.float32] * 10


@pytest.mark.cuda
def test_host_node_not_taken_for_other_inputs(host_calls, monkeypatch):
    monkeypatch.setattr(bias_gradient, "MIN_GEMV_ELEMENTS", 1)
    lin = torch.nn.Linear(8, 4).cuda()
    out = bias_gradient.apply_linear(lin, torch.randn(2, 6, 8, device="cuda"))  # 3-D
    assert node_name(out) == "_LinearBackward"  # the Python node
    with torch.no_grad():
        bias_gradient.apply_linear(lin, torch.randn(6, 8, device="cuda"))
    with torch.autocast("cuda", dtype=torch.bfloat16):  # float64: autocast casts nothing
        out = bias_gradient.apply_linear(lin.double(), torch.randn(6, 8, device="cuda",
                                                                   dtype=torch.float64))
    assert out.dtype == torch.float64
    assert host_calls["fused_linear"] == 0
    bias_gradient.apply_linear(lin.float(), torch.randn(6, 8, device="cuda"))
    assert host_calls["fused_linear"] == 1  # the 2-D float32 call with a gradient only


def graph_nodes(out):
    """The names of the autograd nodes ``out`` was computed through."""
    seen, stack = [], [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None:
            seen.append(node.name())
            stack.extend(next_node for next_node, _ in node.next_functions)
    return seen


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("x_dtype", ["fp32", "autocast"])
def test_host_node_under_autocast(host_calls, dtype, count, bias, x_dtype):
    """Under autocast, fused_linear is the C++ node: autocast's output
    bitwise (the same casts and product), no cast node in its graph, and
    every gradient in its input's dtype, as exact as the 16-bit product's
    own (float64 over the cast inputs and the 16-bit output gradient)."""
    gen = torch.Generator().manual_seed(count)
    lins = maps(count, bias, torch.float32, gen)
    x = torch.randn(37, 5, generator=gen).cuda()
    x = (x if x_dtype == "fp32" else x.to(dtype)).requires_grad_()
    weight = torch.cat([lin.weight for lin in lins])
    bias_all = torch.cat([lin.bias for lin in lins]) if bias else None
    with torch.autocast("cuda", dtype=dtype):
        out = bias_gradient.fused_linear(x, lins).flatten(1)
        want = torch.nn.functional.linear(x, weight, bias_all)
    assert host_calls["fused_linear"] == 1
    assert out.dtype == dtype and torch.equal(out, want)
    assert not any("ToCopy" in name for name in graph_nodes(out))
    grad = torch.randn(out.shape, generator=gen).cuda().to(dtype)
    params = [p for lin in lins for p in lin.parameters()]
    got = torch.autograd.grad(out, [x, *params], grad)
    inputs64 = [t.detach().to(dtype).double().requires_grad_()
                for t in (x, weight, *([bias_all] if bias else []))]
    ref = torch.nn.functional.linear(*inputs64)
    ref_grads = torch.autograd.grad(ref, inputs64, grad.double())
    # in params' order: each map's weight, then its bias
    per_map = zip(*[g.chunk(count) for g in ref_grads[1:]])
    want_grads = [ref_grads[0], *[g for grads in per_map for g in grads]]
    assert len(want_grads) == len(got)
    for source, grad_got, want_grad in zip([x, *params], got, want_grads):
        assert grad_got.dtype == source.dtype
        assert relative_error(grad_got, want_grad) < (
            TOLERANCE[dtype] if grad_got.dtype == dtype else 1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_product_under_autocast_accumulates_in_place(host_calls, dtype):
    """SAGEConv's two products under autocast: linear then add_product, two
    calls of the C++ node, the second adding into the first's output in
    place; autocast's values, float32 gradients for the parameters."""
    gen = torch.Generator().manual_seed(7)
    x, a = (torch.randn(9, n, generator=gen).cuda().to(dtype).requires_grad_() for n in (5, 7))
    weight, bias, weight_a = (torch.randn(shape, generator=gen).cuda().requires_grad_()
                              for shape in ((4, 5), (4,), (4, 7)))
    with torch.autocast("cuda", dtype=dtype):
        y = bias_gradient.linear(x, weight, bias)
        out = bias_gradient.add_product(y, a, weight_a)
        want = torch.addmm(torch.nn.functional.linear(x, weight, bias), a, weight_a.t())
    assert host_calls["fused_linear"] == 2 and out is y
    assert out.dtype == dtype and relative_error(out, want) < TOLERANCE[dtype]
    grad = torch.randn(out.shape, generator=gen).cuda().to(dtype)
    got = torch.autograd.grad(out, [x, weight, bias, a, weight_a], grad)
    expected = torch.autograd.grad(want, [x, weight, bias, a, weight_a], grad)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and relative_error(g, e) < TOLERANCE[dtype]


@pytest.mark.cuda
def test_host_node_under_autocast_differentiates_twice(host_calls):
    """A backward that records a graph reaches x and the weights through
    the node's casts: d/dx of a weight gradient as autocast's F.linear's."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(6, 5, generator=gen).cuda().requires_grad_()
    weight = torch.randn(4, 5, generator=gen).cuda().requires_grad_()
    grads = []
    for run in (lambda: bias_gradient.linear(x, weight),
                lambda: torch.nn.functional.linear(x, weight)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = run()
        (grad_weight,) = torch.autograd.grad(out.float().square().sum(), weight,
                                             create_graph=True)
        grads.append(torch.autograd.grad(grad_weight.sum(), x))
    assert host_calls["fused_linear"] == 1
    assert relative_error(grads[0][0], grads[1][0]) < TOLERANCE[torch.bfloat16]


def layer_pair(cls, pyg_cls, dtype, device, **kwargs):
    torch.manual_seed(0)
    ours = cls(12, 5, heads=2, **kwargs).to(device=device, dtype=dtype)
    ref = pyg_cls(12, 5, heads=2, **kwargs).to(device=device, dtype=dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layer", ["gatv2", "transformer"])
def test_attention_layers_through_gemv_bias_gradients_match_pyg(forced, device, layer):
    dtype = torch.float64 if device == "cpu" else torch.float32
    classes = {"gatv2": (GATv2Conv, torch_geometric.nn.GATv2Conv),
               "transformer": (TransformerConv, torch_geometric.nn.TransformerConv)}
    ours, ref = layer_pair(*classes[layer], dtype, device)
    edge_index = random_graph(60, 60, 500, seed=1, hub_degree=80).to(device)
    x = torch.randn(60, 12, dtype=dtype, device=device)
    # the softmax cancels the key bias: its gradient is exactly 0
    zero_grads = ("lin_key.bias",) if layer == "transformer" else ()
    assert_runs_match(run(ours, x, edge_index), run(ref, x, edge_index),
                      TOLERANCE[dtype] * 100, zero_grads)


@pytest.mark.parametrize("device", DEVICES)
def test_sage_conv_through_gemv_bias_gradient_matches_pyg(forced, device, monkeypatch):
    monkeypatch.setattr(config, "native_host", False)  # the Python node (C++: tests above)
    sums = []
    column_sums = bias_gradient.column_sums
    monkeypatch.setattr(bias_gradient, "column_sums", lambda t: sums.append(t) or column_sums(t))
    dtype = torch.float64 if device == "cpu" else torch.float32
    torch.manual_seed(0)
    ours = SAGEConv(12, 5, aggr="max").to(device=device, dtype=dtype)
    ref = torch_geometric.nn.SAGEConv(12, 5, aggr="max").to(device=device, dtype=dtype)
    ref.load_state_dict(ours.state_dict())
    edge_index = random_graph(60, 60, 500, seed=2, hub_degree=80).to(device)
    x = torch.randn(60, 12, dtype=dtype, device=device)
    grads = []
    for conv in (ours, ref):
        leaf = x.clone().requires_grad_()
        out = conv(leaf, edge_index)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=dtype, device=device).view_as(out))
        grads.append([out, leaf.grad] + [p.grad for p in conv.parameters()])
    assert len(sums) == 1  # lin_l's bias, through the GEMV node (PyG's layer: torch's sum)
    for got, want in zip(*grads):
        assert relative_error(got, want) < TOLERANCE[dtype] * 100
