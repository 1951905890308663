"""pyg_ioaware::gatv2_attention (+ backward, weights) against a float64
oracle written independently of ops.attention (PyG's softmax over edge
tensors), on CPU and, marked cuda, the kernels against the float64 CPU
result on graphs with a hub, empty rows, duplicate edges and self loops."""
import re

import pytest
import torch
import torch.nn.functional as F
from _helpers import (TOLERANCE, assert_reference_under_autograd, cap_hub_lists,
                      cuda_kernel_names, hubs_graph, many_hubs_graph, random_graph,
                      relative_error)
from torch_geometric.utils import softmax

from pyg_ioaware import Graph
from pyg_ioaware.ops import attention
from pyg_ioaware.ops.attention import GATv2Function, gatv2_reference
from pyg_ioaware.ops.dropout import keep_mask

SLOPE = 0.2


def oracle(edge_index, num_dst, x_l, x_r, att, edge=None, p=0.0, seed=0, csr_position=None):
    """PyG's GATv2 arithmetic in float64 over the input edge order; edge
    and the dropout counter are given per input edge (csr_position: the
    CSR position of each input edge, for the mask)."""
    src, dst = edge_index
    z = x_l.double()[src] + x_r.double()[dst]
    if edge is not None:
        z = z + edge.double()
    scores = (F.leaky_relu(z, SLOPE) * att.double()).sum(-1)
    alpha = softmax(scores, dst, num_nodes=num_dst)
    if p > 0:
        heads = torch.arange(x_l.size(1)).unsqueeze(0)
        alpha = alpha * keep_mask(seed, csr_position.unsqueeze(1), heads, p).double() / (1 - p)
    out = torch.zeros(num_dst, *x_l.shape[1:], dtype=torch.float64)
    return out.index_add_(0, dst, alpha.unsqueeze(-1) * x_l.double()[src]), alpha


def case(num_src, num_dst, num_edges, heads, channels, seed, hub=0, edge=False,
         dtype=torch.float64, device="cpu"):
    edge_index = random_graph(num_src, num_dst, num_edges, seed=seed, hub_degree=hub)
    graph = Graph.from_edge_index(edge_index.to(device), (num_src, num_dst))
    gen = torch.Generator().manual_seed(seed + 1)
    x_l = torch.randn(num_src, heads, channels, generator=gen, dtype=torch.float64)
    x_r = torch.randn(num_dst, heads, channels, generator=gen, dtype=torch.float64)
    att = torch.randn(heads, channels, generator=gen, dtype=torch.float64)
    e = torch.randn(edge_index.size(1), heads, channels, generator=gen, dtype=torch.float64) \
        if edge else None
    grad = torch.randn(num_dst, heads, channels, generator=gen, dtype=torch.float64)
    return edge_index, graph, x_l, x_r, att, e, grad


def csr_order(graph, per_edge):
    """A per-input-edge tensor in the graph's CSR order."""
    perm = graph.edge_perm
    return per_edge if perm is None else per_edge[perm.long().cpu()]


def csr_positions(graph, num_edges):
    """The CSR position of each input edge."""
    perm = graph.edge_perm
    if perm is None:
        return torch.arange(num_edges)
    position = torch.empty(num_edges, dtype=torch.long)
    position[perm.long().cpu()] = torch.arange(num_edges)
    return position


def graph_of_index_dtype(edge_index, num_src, num_dst, index_dtype, device="cuda"):
    """(graph, position): the Graph of ``edge_index`` with rowptr, col and
    row in ``index_dtype`` (int32 or int64, whatever the graph's size), and
    the CSR position of each input edge."""
    rows = edge_index[1].argsort(stable=True)
    sorted_index = edge_index[:, rows]
    rowptr = torch.zeros(num_dst + 1, dtype=torch.long)
    rowptr[1:] = torch.bincount(sorted_index[1], minlength=num_dst).cumsum(0)
    graph = Graph(rowptr=rowptr.to(device, index_dtype),
                  col=sorted_index[0].to(device, index_dtype),
                  row=sorted_index[1].to(device, index_dtype), num_src=num_src, num_dst=num_dst)
    position = torch.empty(edge_index.size(1), dtype=torch.long)
    position[rows] = torch.arange(edge_index.size(1))
    return graph, position


def run_ours(graph, x_l, x_r, att, edge_csr, grad, dtype, device, p=0.0, seed=0,
             hub_quantile=0.99):
    # Copies: in float64 on the CPU .to() would hand back the caller's tensors.
    inputs = [t.to(device, dtype, copy=True).requires_grad_() for t in (x_l, x_r)]
    att_dtype = torch.float32 if dtype != torch.float64 else dtype
    att_in = att.to(device, att_dtype, copy=True).requires_grad_()
    edge_in = None if edge_csr is None else edge_csr.to(device, dtype, copy=True).requires_grad_()
    out, lse = GATv2Function.apply(graph, *inputs, att_in, edge_in, SLOPE, p, seed,
                                   hub_quantile)
    out.backward(grad.to(device, dtype))
    grads = [inputs[0].grad, inputs[1].grad, att_in.grad,
             None if edge_in is None else edge_in.grad]
    return out, lse, grads


def reference_grads(edge_index, num_dst, x_l, x_r, att, edge, grad, p=0.0, seed=0,
                    csr_position=None):
    leaves = [t.detach().clone().requires_grad_() for t in (x_l, x_r, att)]
    edge_leaf = None if edge is None else edge.detach().clone().requires_grad_()
    out, alpha = oracle(edge_index, num_dst, *leaves, edge_leaf, p, seed, csr_position)
    out.backward(grad)
    return out, alpha, [leaves[0].grad, leaves[1].grad, leaves[2].grad,
                        None if edge_leaf is None else edge_leaf.grad]


def run_packed(graph, x_l, x_r, att, edge_csr, grad, dtype, device, p=0.0, seed=0, bias=None):
    """run_ours with x_l and x_r the slots of one tensor [N, 2, H, C] (the
    fused projection's layout; the grads of x_l and x_r are the slots of its
    one gradient) and an out_bias [H, C] (fp32 beside 16-bit features, as a
    layer's parameter) whose grad comes last."""
    param_dtype = torch.float32 if dtype != torch.float64 else dtype
    x_lr = torch.stack([x_l, x_r], dim=1).to(device, dtype).requires_grad_()
    att_in = att.to(device, param_dtype, copy=True).requires_grad_()
    edge_in = None if edge_csr is None else edge_csr.to(device, dtype, copy=True).requires_grad_()
    bias_in = None if bias is None else bias.to(device, param_dtype, copy=True).requires_grad_()
    out, lse = attention.graph_gatv2_packed(graph, x_lr, att_in, edge_in, SLOPE, p, seed,
                                            out_bias=bias_in)
    out.backward(grad.to(device, dtype))
    assert x_lr.grad.shape == x_lr.shape
    return out, lse, [*x_lr.grad.unbind(1), att_in.grad,
                      None if edge_in is None else edge_in.grad,
                      None if bias_in is None else bias_in.grad]


# --------------------------------------------------------------------- CPU
@pytest.mark.parametrize("edge", [False, True])
@pytest.mark.parametrize("num_src, num_dst", [(50, 50), (37, 23)])
def test_cpu_matches_oracle(edge, num_src, num_dst):
    edge_index, graph, x_l, x_r, att, e, grad = case(num_src, num_dst, 300, 3, 7, seed=3,
                                                     hub=40, edge=edge)
    out, lse, grads = run_ours(graph, x_l, x_r, att, None if e is None else csr_order(graph, e),
                               grad, torch.float64, "cpu")
    ref, _, ref_grads = reference_grads(edge_index, num_dst, x_l, x_r, att, e, grad)
    assert relative_error(out, ref) < 1e-12
    for got, want in zip(grads[:3], ref_grads[:3]):
        assert relative_error(got, want) < 1e-10
    if edge:
        assert relative_error(grads[3], csr_order(graph, ref_grads[3])) < 1e-10
    empty = graph.in_degree == 0
    assert empty.any() and torch.isneginf(lse[empty]).all() and (out[empty] == 0).all()


def test_cpu_dropout_masks_and_weights():
    edge_index, graph, x_l, x_r, att, _, grad = case(40, 40, 400, 2, 5, seed=4)
    position = csr_positions(graph, edge_index.size(1))
    out, lse, grads = run_ours(graph, x_l, x_r, att, None, grad, torch.float64, "cpu", p=0.4,
                               seed=99)
    ref, alpha, ref_grads = reference_grads(edge_index, 40, x_l, x_r, att, None, grad, p=0.4,
                                            seed=99, csr_position=position)
    assert relative_error(out, ref) < 1e-12
    for got, want in zip(grads[:3], ref_grads[:3]):
        assert relative_error(got, want) < 1e-10
    weights = attention.gatv2_attention_weights(graph.rowptr, graph.col, x_l, x_r, att, None,
                                                lse, SLOPE)
    _, plain_alpha = oracle(edge_index, 40, x_l, x_r, att)
    assert relative_error(weights.double(), csr_order(graph, plain_alpha)) < 1e-6


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_cpu_graph_op_is_the_reference_under_autograd(p):
    # Recording a gradient on the CPU, graph_gatv2 is gatv2_reference
    # differentiated by torch's autograd: the same out and lse as
    # GATv2Function and the gradients of its reference backward.
    _, graph, x_l, x_r, att, e, grad = case(37, 23, 300, 3, 7, seed=8, hub=40, edge=True)
    e = csr_order(graph, e)
    out, lse, grads = run_ours(graph, x_l, x_r, att, e, grad, torch.float64, "cpu", p=p,
                               seed=11)
    assert_reference_under_autograd(
        lambda *leaves: attention.graph_gatv2(graph, *leaves, SLOPE, p, 11),
        (x_l, x_r, att, e), grad, out, lse, grads, "GATv2Function")


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_cpu_packed_projection_is_the_separate_op(p):
    _, graph, x_l, x_r, att, e, grad = case(40, 40, 300, 3, 7, seed=9, hub=40, edge=True)
    e = csr_order(graph, e)
    want = run_ours(graph, x_l, x_r, att, e, grad, torch.float64, "cpu", p=p, seed=3)
    for run_graph_op in (True, False):  # PyTorch's autograd, and GATv2Function itself
        with torch.set_grad_enabled(True):
            if run_graph_op:
                got = run_packed(graph, x_l, x_r, att, e, grad, torch.float64, "cpu", p=p, seed=3)
            else:
                x_lr = torch.stack([x_l, x_r], dim=1).requires_grad_()
                att_in, e_in = att.clone().requires_grad_(), e.clone().requires_grad_()
                out, lse = GATv2Function.apply(graph, None, None, att_in, e_in, SLOPE, p, 3,
                                               0.99, x_lr)
                out.backward(grad)
                got = out, lse, [*x_lr.grad.unbind(1), att_in.grad, e_in.grad]
        assert relative_error(got[0], want[0]) < 1e-12 and torch.equal(got[1], want[1])
        for name, a, b in zip(("x_l", "x_r", "att", "edge"), got[2], want[2]):
            assert relative_error(a, b) < 1e-10, name


def test_cpu_out_bias_is_added_to_every_row():
    _, graph, x_l, x_r, att, _, grad = case(40, 40, 300, 3, 7, seed=10, hub=40)
    bias = torch.randn(3, 7, dtype=torch.float64)
    want_out, want_lse, want = run_ours(graph, x_l, x_r, att, None, grad, torch.float64, "cpu")
    got_out, got_lse, got = run_packed(graph, x_l, x_r, att, None, grad, torch.float64, "cpu",
                                       bias=bias)
    empty = graph.in_degree == 0
    assert empty.any() and torch.equal(got_out[empty], bias.expand(int(empty.sum()), 3, 7))
    assert relative_error(got_out, want_out + bias) < 1e-12 and torch.equal(got_lse, want_lse)
    for name, a, b in zip(("x_l", "x_r", "att"), got[:3], want[:3]):
        assert relative_error(a, b) < 1e-10, name
    assert relative_error(got[4], grad.sum(0)) < 1e-12
    out, _ = attention.gatv2_attention(graph.rowptr, graph.col, x_l, x_r, att, None, SLOPE, 0.0,
                                       0, 0.99, bias)
    assert relative_error(out, want_out + bias) < 1e-12
    with pytest.raises(ValueError, match="out_bias must be"):
        attention.gatv2_attention(graph.rowptr, graph.col, x_l, x_r, att, None, SLOPE, 0.0, 0,
                                  0.99, bias[:, :3])


def test_reference_is_the_custom_op_on_cpu():
    _, graph, x_l, x_r, att, e, _ = case(30, 30, 200, 2, 4, seed=5, edge=True)
    e = csr_order(graph, e)
    out, lse = attention.gatv2_attention(graph.rowptr, graph.col, x_l, x_r, att, e, SLOPE, 0.0,
                                         0)
    ref_out, ref_lse = gatv2_reference(graph.rowptr, graph.col, x_l, x_r, att, e, SLOPE)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_opcheck_cpu():
    _, graph, x_l, x_r, att, e, grad = case(20, 20, 80, 2, 3, seed=6, edge=True)
    e = csr_order(graph, e)
    torch.library.opcheck(torch.ops.pyg_ioaware.gatv2_attention,
                          (graph.rowptr, graph.col, x_l, x_r, att, e, SLOPE, 0.3, 7, 0.99))
    torch.library.opcheck(torch.ops.pyg_ioaware.gatv2_attention,
                          (graph.rowptr, graph.col, x_l, x_r, att, e, SLOPE, 0.0, 0, 0.99,
                           torch.randn(2, 3, dtype=torch.float64)))
    _, lse = attention.gatv2_attention(graph.rowptr, graph.col, x_l, x_r, att, e, SLOPE, 0.3, 7)
    t = graph.transpose
    torch.library.opcheck(torch.ops.pyg_ioaware.gatv2_attention_backward,
                          (graph.rowptr, graph.col, t.rowptr, t.col, t.perm, x_l, x_r, att, e,
                           lse, grad, SLOPE, 0.3, 7))


def test_bad_inputs_raise_before_any_kernel():
    _, graph, x_l, x_r, att, _, _ = case(20, 20, 80, 2, 3, seed=7)
    op = attention.gatv2_attention
    with pytest.raises(ValueError, match="x_r has"):
        op(graph.rowptr, graph.col, x_l, x_r[:-1], att, None, SLOPE, 0.0, 0)
    with pytest.raises(ValueError, match="share dtype"):
        op(graph.rowptr, graph.col, x_l, x_r.float(), att, None, SLOPE, 0.0, 0)
    with pytest.raises(ValueError, match="att must be"):
        op(graph.rowptr, graph.col, x_l, x_r, att[:1], None, SLOPE, 0.0, 0)
    with pytest.raises(ValueError, match="edge must be"):
        op(graph.rowptr, graph.col, x_l, x_r, att, x_l, SLOPE, 0.0, 0)
    with pytest.raises(ValueError, match="dropout_p"):
        op(graph.rowptr, graph.col, x_l, x_r, att, None, SLOPE, 1.0, 0)
    with pytest.raises(TypeError, match="heads, channels"):
        op(graph.rowptr, graph.col, x_l[:, 0], x_r, att, None, SLOPE, 0.0, 0)
    bad_col = graph.col.clone()
    bad_col[0] = 10**6
    with pytest.raises(ValueError):
        op(graph.rowptr, bad_col, x_l, x_r, att, None, SLOPE, 0.0, 0)


# -------------------------------------------------------------------- CUDA
CUDA_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("heads, channels", [(1, 64), (2, 64), (4, 64), (3, 7), (2, 33), (2, 47),
                                             (8, 5), (1, 128), (2, 256), (1, 100)])
@pytest.mark.parametrize("edge", [False, True])
def test_cuda_matches_float64(dtype, heads, channels, edge):
    # A hub of 3000 entries (split over all SMs), empty rows, duplicates, loops.
    edge_index, graph, x_l, x_r, att, e, grad = case(600, 600, 5000, heads, channels, seed=11,
                                                     hub=3000, edge=edge, device="cuda")
    # The oracle sees the inputs the kernels see: rounded to dtype.
    x_l, x_r = x_l.to(dtype).double(), x_r.to(dtype).double()
    e = None if e is None else e.to(dtype).double()
    e_csr = None if e is None else csr_order(graph, e)
    out, lse, grads = run_ours(graph, x_l, x_r, att, e_csr, grad, dtype, "cuda")
    ref, _, ref_grads = reference_grads(edge_index, 600, x_l, x_r, att, e, grad)
    tol = 4 * TOLERANCE[dtype]
    assert out.dtype == dtype
    assert relative_error(out.double().cpu(), ref) < tol
    _, ref_lse = gatv2_reference(graph.rowptr.cpu(), graph.col.cpu(), x_l, x_r, att, e_csr, SLOPE)
    empty = (graph.in_degree == 0).cpu()
    assert torch.isneginf(lse.cpu()[empty]).all() and (out.cpu()[empty] == 0).all()
    assert relative_error(lse.cpu()[~empty].double(), ref_lse[~empty].double()) < tol
    for name, got, want in zip(("x_l", "x_r", "att"), grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 8 * TOLERANCE[dtype], name
    if edge:
        assert relative_error(grads[3].double().cpu(), csr_order(graph, ref_grads[3])) < \
            8 * TOLERANCE[dtype]


@pytest.mark.cuda
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_cuda_index_widths_bipartite_and_dropout(index_dtype):
    edge_index, _, x_l, x_r, att, _, grad = case(700, 300, 4000, 2, 16, seed=12, hub=2500)
    graph, position = graph_of_index_dtype(edge_index, 700, 300, index_dtype)
    out, lse, grads = run_ours(graph, x_l, x_r, att, None, grad, torch.float32, "cuda", p=0.3,
                               seed=1234)
    ref, _, ref_grads = reference_grads(edge_index, 300, x_l, x_r, att, None, grad, p=0.3,
                                        seed=1234, csr_position=position)
    assert relative_error(out.double().cpu(), ref) < 4e-5
    for got, want in zip(grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 1e-4


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_hubs_of_destinations_and_sources(dtype):
    """Several destination hubs (rows of the CSR split in forward and in the
    destination pass of backward) and source hubs (rows of the CSR^T split in
    the source pass), edge features and dropout. Row 12's last forward chunk
    holds 2 entries: most warps of its block get none."""
    hubs_of_both_sides(dtype, heads=2, channels=64)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_full_hub_lists_and_passes_of_heads(monkeypatch, dtype):
    """Hub lists of one slot: the row kernels do the hub rows a full list
    refuses themselves, in several passes of heads (4 heads of 128
    channels: four passes in fp32, two in bf16)."""
    cut = cap_hub_lists(monkeypatch, attention, 1)
    hubs_of_both_sides(dtype, heads=4, channels=128)
    assert any(asked > given for asked, given in cut)  # a list was cut


def hubs_of_both_sides(dtype, heads, channels):
    """The kernels against float64 on a graph with four destination hubs
    and two source hubs, edge features and dropout."""
    gen = torch.Generator().manual_seed(21)
    edge_index = hubs_graph(800, 800, 3000, 21, ((3, 3000), (5, 700), (8, 300), (12, 258)),
                            ((4, 2600), (9, 400)), gen)
    graph = Graph.from_edge_index(edge_index.cuda(), (800, 800))
    x_l, x_r, grad = (torch.randn(800, heads, channels, generator=gen, dtype=torch.float64)
                      for _ in range(3))
    att = torch.randn(heads, channels, generator=gen, dtype=torch.float64)
    e = torch.randn(edge_index.size(1), heads, channels, generator=gen,
                    dtype=torch.float64).to(dtype)
    x_l, x_r, e = x_l.to(dtype).double(), x_r.to(dtype).double(), e.double()
    position = csr_positions(graph, edge_index.size(1))
    out, _, grads = run_ours(graph, x_l, x_r, att, csr_order(graph, e), grad, dtype, "cuda",
                             p=0.25, seed=77, hub_quantile=0.9)
    ref, _, ref_grads = reference_grads(edge_index, 800, x_l, x_r, att, e, grad, p=0.25,
                                        seed=77, csr_position=position)
    tol = 8 * TOLERANCE[dtype]
    assert relative_error(out.double().cpu(), ref) < tol / 2
    for name, got, want in zip(("x_l", "x_r", "att"), grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < tol, name
    assert relative_error(grads[3].double().cpu(), csr_order(graph, ref_grads[3])) < tol


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("heads, channels", [(2, 64), (4, 32), (4, 64), (1, 128)])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_cuda_streamed_rows(monkeypatch, dtype, heads, channels, index_dtype):
    """Shapes whose forward rows are streamed where the warp's lanes cover
    every head of an entry with one 16-byte piece each, once ((2, 64), (4,
    32) and (1, 128) in fp32, (4, 64) in 16-bit) or twice, two entry slots
    ((2, 64) and (1, 128) in 16-bit; rows of odd lengths leave the second
    slot's last step empty; gatv2_streamed_rows.cuh), and so are both
    backward passes (gatv2_streamed_backward.cuh: the destination rows give
    the x_r gradient, the source rows the x_l and att gradients), with
    dropout, out_bias and both index widths; a hub list of one slot, so one
    hub row is registered and the others are streamed with the rest; rows
    of many lengths across the kernels' items of 8 rows, empty ones
    included."""
    cut = cap_hub_lists(monkeypatch, attention, 1)
    gen = torch.Generator().manual_seed(41)
    edge_index = hubs_graph(900, 900, 6000, 41, ((3, 3000), (200, 700), (611, 300)),
                            ((5, 400),), gen)
    graph, position = graph_of_index_dtype(edge_index, 900, 900, index_dtype)
    assert (graph.rowptr.diff() == 0).any()
    x_l, x_r, grad = (torch.randn(900, heads, channels, generator=gen, dtype=torch.float64)
                      for _ in range(3))
    att = torch.randn(heads, channels, generator=gen, dtype=torch.float64)
    bias = torch.randn(heads, channels, generator=gen, dtype=torch.float64)
    x_l, x_r = x_l.to(dtype).double(), x_r.to(dtype).double()
    x_l_in, x_r_in = (t.to("cuda", dtype).requires_grad_() for t in (x_l, x_r))
    att_in, bias_in = (t.to("cuda", torch.float32).requires_grad_() for t in (att, bias))
    # The Python Function (the hub list's size comes from attention.hub_degree).
    out, _ = GATv2Function.apply(graph, x_l_in, x_r_in, att_in, None, SLOPE, 0.25, 9, 0.99,
                                 None, bias_in)
    out.backward(grad.to("cuda", dtype))
    ref, _, ref_grads = reference_grads(edge_index, 900, x_l, x_r, att, None, grad, p=0.25,
                                        seed=9, csr_position=position)
    assert any(asked > given for asked, given in cut)  # hub rows were refused
    assert relative_error(out.double().cpu(), ref + bias.float().double()) < 4 * TOLERANCE[dtype]
    assert relative_error(bias_in.grad.double().cpu(), grad.to(dtype).double().sum(0)) < 1e-5
    for name, got, want in zip(("x_l", "x_r", "att"), (x_l_in.grad, x_r_in.grad, att_in.grad),
                               ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 8 * TOLERANCE[dtype], name


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, heads, channels, streamed", [
    (torch.float32, 2, 64, True), (torch.bfloat16, 4, 64, True), (torch.float32, 4, 32, True),
    (torch.bfloat16, 2, 64, True), (torch.float16, 1, 128, True), (torch.float32, 2, 32, False),
    (torch.float32, 4, 64, False), (torch.bfloat16, 4, 32, False), (torch.bfloat16, 1, 64, False),
    (torch.float32, 3, 7, False)])
def test_cuda_rows_kernel_choice(dtype, heads, channels, streamed):
    """Which rows kernels a forward and its backward's two passes launch:
    the streamed ones where the warp's 32 lanes cover every head of an entry
    with one 16-byte piece each, once ((2, 64) and (4, 32) fp32, (4, 64)
    bf16) or, in 16-bit, twice ((2, 64) bf16, (1, 128) fp16), else
    attention_rows_kernel, gatv2_backward_rows_kernel and
    gatv2_backward_sources_kernel (two entry slots in fp32, two passes of
    heads, four lanes a head, four entry slots, odd heads)."""
    _, graph, x_l, x_r, att, _, _ = case(300, 300, 2000, heads, channels, seed=16,
                                         device="cuda")
    x_l, x_r = (t.to("cuda", dtype).requires_grad_() for t in (x_l, x_r))
    att = att.float().cuda().requires_grad_()
    def forward_backward():
        out, _ = GATv2Function.apply(graph, x_l, x_r, att, None, SLOPE, 0.0, 0, 0.99, None, None)
        out.sum().backward()

    names, _ = cuda_kernel_names(forward_backward)
    assert any("gatv2_streamed_rows_kernel" in n for n in names) == streamed
    assert any("attention_rows_kernel" in n for n in names) != streamed
    assert any("gatv2_streamed_backward_rows_kernel" in n for n in names) == streamed
    assert any("gatv2_backward_rows_kernel" in n for n in names) != streamed
    assert any("gatv2_streamed_backward_sources_kernel" in n for n in names) == streamed
    assert any("gatv2_backward_sources_kernel" in n for n in names) != streamed


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, heads, channels", [
    (torch.float32, 3, 7), (torch.bfloat16, 2, 47), (torch.float32, 1, 256),
    (torch.float16, 2, 64)])
@pytest.mark.parametrize("edges", [False, True])
def test_cuda_edge_path_only_with_edge_attributes(dtype, heads, channels, edges):
    """Every GATv2 kernel of a forward and its backward is built without an
    edge path (GatTraits' last argument false) when no edge attributes are
    given, in every layout (one channel a load, two 16-byte pieces a lane,
    one piece), and with it when they are (test_cuda_matches_float64 checks
    both paths' values)."""
    _, graph, x_l, x_r, att, e, grad = case(300, 300, 2000, heads, channels, seed=17,
                                            edge=edges, device="cuda")
    e_csr = None if e is None else csr_order(graph, e)
    names, (out, _, _) = cuda_kernel_names(
        lambda: run_ours(graph, x_l, x_r, att, e_csr, grad, dtype, "cuda"))
    traits = [re.search(r"GatTraits<[^<>]*, (true|false)>", name)
              for name in names if "GatTraits<" in name]
    assert traits and all(t is not None and t.group(1) == str(edges).lower() for t in traits)
    assert torch.isfinite(out).all()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_streamed_destinations_beside_long_source_rows(dtype):
    """A bipartite graph of short destination rows (about 6 entries: the
    destination pass streams) and few long sources (200 entries on average:
    the source pass keeps gatv2_backward_sources_kernel): both passes in one
    backward, with dropout, give the float64 reference's gradients."""
    edge_index = random_graph(20, 700, 4000, seed=51)
    graph = Graph.from_edge_index(edge_index.cuda(), (20, 700))
    gen = torch.Generator().manual_seed(52)
    x_l, x_r, grad = (torch.randn(n, 2, 64, generator=gen, dtype=torch.float64)
                      for n in (20, 700, 700))
    att = torch.randn(2, 64, generator=gen, dtype=torch.float64)
    x_l, x_r = x_l.to(dtype).double(), x_r.to(dtype).double()
    names, (out, _, grads) = cuda_kernel_names(
        lambda: run_ours(graph, x_l, x_r, att, None, grad, dtype, "cuda", p=0.25, seed=5))
    assert any("gatv2_streamed_backward_rows_kernel" in n for n in names)
    assert any("gatv2_backward_sources_kernel" in n for n in names)
    assert not any("gatv2_streamed_backward_sources_kernel" in n for n in names)
    position = csr_positions(graph, edge_index.size(1))
    ref, _, ref_grads = reference_grads(edge_index, 700, x_l, x_r, att, None, grad, p=0.25,
                                        seed=5, csr_position=position)
    assert relative_error(out.double().cpu(), ref) < 4 * TOLERANCE[dtype]
    for name, got, want in zip(("x_l", "x_r", "att"), grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 8 * TOLERANCE[dtype], name


@pytest.mark.cuda
def test_cuda_many_hubs_each_chunk_to_a_warp():
    """Hub chunks on both sides many enough that each goes to a warp (the
    other hub tests take the block form)."""
    edge_index, nodes = many_hubs_graph(seed=31)
    graph = Graph.from_edge_index(edge_index.cuda(), (nodes, nodes))
    gen = torch.Generator().manual_seed(32)
    x_l, x_r, grad = (torch.randn(nodes, 1, 4, generator=gen, dtype=torch.float64)
                      for _ in range(3))
    att = torch.randn(1, 4, generator=gen, dtype=torch.float64)
    out, _, grads = run_ours(graph, x_l, x_r, att, None, grad, torch.float32, "cuda")
    ref, _, ref_grads = reference_grads(edge_index, nodes, x_l, x_r, att, None, grad)
    assert relative_error(out.double().cpu(), ref) < 4e-5
    for name, got, want in zip(("x_l", "x_r", "att"), grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 1e-4, name


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("heads, channels", [(2, 64), (3, 7)])
def test_cuda_packed_projection_gradient_in_place(dtype, heads, channels):
    """x_l and x_r as the slots of one [N, 2, H, C] tensor: the kernels read
    them in place and write both gradients into the slots of one tensor
    (strided rows, the hub accumulators' rows included); out_bias added in
    the output pass (rows and hubs)."""
    edge_index, graph, x_l, x_r, att, e, grad = case(600, 600, 5000, heads, channels, seed=15,
                                                     hub=3000, edge=True, device="cuda")
    x_l, x_r, e = x_l.to(dtype).double(), x_r.to(dtype).double(), e.to(dtype).double()
    bias = torch.randn(heads, channels, dtype=torch.float64)  # out_bias, hub rows included
    out, _, grads = run_packed(graph, x_l, x_r, att, csr_order(graph, e), grad, dtype, "cuda",
                               p=0.2, seed=8, bias=bias)
    position = csr_positions(graph, edge_index.size(1))
    ref, _, ref_grads = reference_grads(edge_index, 600, x_l, x_r, att, e, grad, p=0.2, seed=8,
                                        csr_position=position)
    assert relative_error(out.double().cpu(), ref + bias.float().double()) < 4 * TOLERANCE[dtype]
    assert relative_error(grads[4].double().cpu(), grad.to(dtype).double().sum(0)) < 1e-5
    for name, got, want in zip(("x_l", "x_r", "att"), grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 8 * TOLERANCE[dtype], name
    assert relative_error(grads[3].double().cpu(), csr_order(graph, ref_grads[3])) < \
        8 * TOLERANCE[dtype]


@pytest.mark.cuda
def test_cuda_attention_weights_and_strided_inputs():
    edge_index, graph, x_l, x_r, att, _, _ = case(500, 500, 4000, 2, 32, seed=13, hub=1000,
                                                  device="cuda")
    fused = torch.cat([x_l, x_r], dim=-1).reshape(500, -1).float().cuda()  # [N, 2 * H * C]
    both = fused.view(500, 2, 64)
    x_l_view, x_r_view = both[:, :, :32], both[:, :, 32:]
    out, lse = attention.gatv2_attention(graph.rowptr, graph.col, x_l_view, x_r_view,
                                         att.float().cuda(), None, SLOPE, 0.0, 0)
    ref, alpha = oracle(edge_index, 500, x_l, x_r, att)
    assert relative_error(out.double().cpu(), ref) < 4e-5
    weights = attention.gatv2_attention_weights(graph.rowptr, graph.col, x_l_view, x_r_view,
                                                att.float().cuda(), None, lse, SLOPE)
    assert relative_error(weights.double().cpu(), csr_order(graph, alpha)) < 4e-5
    assert x_l_view.stride(0) == 128  # the kernels read the strided views in place


@pytest.mark.cuda
def test_cuda_sanitizer_small():
    """A small case for compute-sanitizer: every kernel, a hub, edge, dropout."""
    edge_index, graph, x_l, x_r, att, e, grad = case(300, 300, 1500, 2, 12, seed=14, hub=600,
                                                     edge=True, device="cuda")
    e_csr = csr_order(graph, e)
    out, lse, grads = run_ours(graph, x_l, x_r, att, e_csr, grad, torch.bfloat16, "cuda",
                               p=0.2, seed=5)
    torch.cuda.synchronize()
    assert torch.isfinite(out.float()).all() and all(torch.isfinite(g.float()).all()
                                                     for g in grads)
    weights = attention.gatv2_attention_weights(
        graph.rowptr, graph.col, x_l.cuda().bfloat16(), x_r.cuda().bfloat16(), att.cuda().float(),
        e_csr.cuda().bfloat16(), lse, SLOPE)
    assert torch.isfinite(weights).all()
