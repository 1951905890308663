"""pyg_ioaware::transformer_attention (+ backward, weights) against a
float64 oracle written independently of ops.transformer (PyG's softmax
over edge tensors), on CPU and, marked cuda, the kernels against the
float64 CPU result on graphs with hubs, empty rows, duplicate edges and
self loops."""
import math
import re

import pytest
import torch
from _helpers import (TOLERANCE, assert_reference_under_autograd, cap_hub_lists,
                      cuda_kernel_names, hubs_graph, many_hubs_graph, random_graph,
                      relative_error)
from torch_geometric.utils import softmax

from pyg_ioaware import Graph
from pyg_ioaware.ops import transformer
from pyg_ioaware.ops.dropout import keep_mask
from pyg_ioaware.ops.transformer import TransformerFunction, transformer_reference


def oracle(edge_index, num_dst, q, k, v, edge=None, p=0.0, seed=0, csr_position=None):
    """PyG's TransformerConv message arithmetic in float64 over the input
    edge order; edge and the dropout counter are given per input edge."""
    src, dst = edge_index
    key, value = k.double()[src], v.double()[src]
    if edge is not None:
        key, value = key + edge.double(), value + edge.double()
    scores = (q.double()[dst] * key).sum(-1) / math.sqrt(q.size(-1))
    alpha = softmax(scores, dst, num_nodes=num_dst)
    if p > 0:
        heads = torch.arange(q.size(1)).unsqueeze(0)
        alpha = alpha * keep_mask(seed, csr_position.unsqueeze(1), heads, p).double() / (1 - p)
    out = torch.zeros(num_dst, *q.shape[1:], dtype=torch.float64)
    return out.index_add_(0, dst, alpha.unsqueeze(-1) * value), alpha


def case(num_src, num_dst, num_edges, heads, channels, seed, hub=0, edge=False, device="cpu",
         edge_index=None):
    if edge_index is None:
        edge_index = random_graph(num_src, num_dst, num_edges, seed=seed, hub_degree=hub)
    graph = Graph.from_edge_index(edge_index.to(device), (num_src, num_dst))
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(num_dst, heads, channels, generator=gen, dtype=torch.float64)
    k = torch.randn(num_src, heads, channels, generator=gen, dtype=torch.float64)
    v = torch.randn(num_src, heads, channels, generator=gen, dtype=torch.float64)
    e = torch.randn(edge_index.size(1), heads, channels, generator=gen, dtype=torch.float64) \
        if edge else None
    grad = torch.randn(num_dst, heads, channels, generator=gen, dtype=torch.float64)
    return edge_index, graph, (q, k, v), e, grad


def csr_order(graph, per_edge):
    perm = graph.edge_perm
    return per_edge if perm is None else per_edge[perm.long().cpu()]


def csr_positions(graph, num_edges):
    perm = graph.edge_perm
    if perm is None:
        return torch.arange(num_edges)
    position = torch.empty(num_edges, dtype=torch.long)
    position[perm.long().cpu()] = torch.arange(num_edges)
    return position


def run_ours(graph, qkv, edge_csr, grad, dtype, device, p=0.0, seed=0, hub_quantile=0.99):
    inputs = [t.to(device, dtype, copy=True).requires_grad_() for t in qkv]
    edge_in = None if edge_csr is None else edge_csr.to(device, dtype, copy=True).requires_grad_()
    scale = qkv[0].size(-1) ** -0.5
    out, lse = TransformerFunction.apply(graph, *inputs, edge_in, scale, p, seed, hub_quantile)
    out.backward(grad.to(device, dtype))
    return out, lse, [t.grad for t in inputs] + [None if edge_in is None else edge_in.grad]


def reference_grads(edge_index, num_dst, qkv, edge, grad, p=0.0, seed=0, csr_position=None):
    leaves = [t.detach().clone().requires_grad_() for t in qkv]
    edge_leaf = None if edge is None else edge.detach().clone().requires_grad_()
    out, alpha = oracle(edge_index, num_dst, *leaves, edge_leaf, p, seed, csr_position)
    out.backward(grad)
    return out, alpha, [t.grad for t in leaves] + [None if edge_leaf is None else edge_leaf.grad]


def run_packed(graph, qkv, edge_csr, grad, dtype, device, p=0.0, seed=0):
    """run_ours with the packed op: q, k, v the slots of one [N, 3, H, C]
    tensor on a square graph, else q alone and k, v the slots of one
    [N_src, 2, H, C]; the grads of the packed ones are the slots of its one
    gradient."""
    q, k, v = (t.to(device, dtype) for t in qkv)
    square = q.size(0) == k.size(0)
    packed = torch.stack([q, k, v] if square else [k, v], dim=1).requires_grad_()
    q_in = None if square else q.clone().requires_grad_()
    edge_in = None if edge_csr is None else edge_csr.to(device, dtype, copy=True).requires_grad_()
    out, lse = transformer.graph_transformer_packed(graph, packed, q_in, edge_in, None, p, seed)
    out.backward(grad.to(device, dtype))
    slot_grads = list(packed.grad.unbind(1))
    grads = slot_grads if square else [q_in.grad, *slot_grads]
    return out, lse, grads + [None if edge_in is None else edge_in.grad]


# --------------------------------------------------------------------- CPU
@pytest.mark.parametrize("edge", [False, True])
@pytest.mark.parametrize("num_src, num_dst", [(50, 50), (37, 23)])
def test_cpu_matches_oracle(edge, num_src, num_dst):
    edge_index, graph, qkv, e, grad = case(num_src, num_dst, 300, 3, 7, seed=3, hub=40,
                                           edge=edge)
    out, lse, grads = run_ours(graph, qkv, None if e is None else csr_order(graph, e), grad,
                               torch.float64, "cpu")
    ref, _, ref_grads = reference_grads(edge_index, num_dst, qkv, e, grad)
    assert relative_error(out, ref) < 1e-12
    for name, got, want in zip("qkv", grads[:3], ref_grads[:3]):
        assert relative_error(got, want) < 1e-10, name
    if edge:
        assert relative_error(grads[3], csr_order(graph, ref_grads[3])) < 1e-10
    empty = graph.in_degree == 0
    assert empty.any() and torch.isneginf(lse[empty]).all() and (out[empty] == 0).all()


def test_cpu_dropout_and_weights():
    edge_index, graph, qkv, e, grad = case(40, 40, 400, 2, 5, seed=4, edge=True)
    position = csr_positions(graph, edge_index.size(1))
    out, lse, grads = run_ours(graph, qkv, csr_order(graph, e), grad, torch.float64, "cpu",
                               p=0.4, seed=99)
    ref, _, ref_grads = reference_grads(edge_index, 40, qkv, e, grad, p=0.4, seed=99,
                                        csr_position=position)
    assert relative_error(out, ref) < 1e-12
    for got, want in zip(grads[:3], ref_grads[:3]):
        assert relative_error(got, want) < 1e-10
    assert relative_error(grads[3], csr_order(graph, ref_grads[3])) < 1e-10
    q, k, _ = qkv
    weights = transformer.transformer_attention_weights(graph.rowptr, graph.col, q, k,
                                                        csr_order(graph, e), lse, 5 ** -0.5)
    _, plain_alpha = oracle(edge_index, 40, *qkv, e)
    assert relative_error(weights, csr_order(graph, plain_alpha)) < 1e-10


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_cpu_graph_op_is_the_reference_under_autograd(p):
    # Recording a gradient on the CPU, graph_transformer is
    # transformer_reference differentiated by torch's autograd: the same out
    # and lse as TransformerFunction and the gradients of its reference
    # backward.
    _, graph, qkv, e, grad = case(37, 23, 300, 3, 7, seed=8, hub=40, edge=True)
    e = csr_order(graph, e)
    out, lse, grads = run_ours(graph, qkv, e, grad, torch.float64, "cpu", p=p, seed=11)
    assert_reference_under_autograd(
        lambda *leaves: transformer.graph_transformer(graph, *leaves, None, p, 11),
        (*qkv, e), grad, out, lse, grads, "TransformerFunction")


@pytest.mark.parametrize("num_src, num_dst", [(40, 40), (37, 23)])
def test_cpu_packed_projection_is_the_separate_op(num_src, num_dst):
    _, graph, qkv, e, grad = case(num_src, num_dst, 300, 3, 7, seed=9, hub=30, edge=True)
    e = csr_order(graph, e)
    want = run_ours(graph, qkv, e, grad, torch.float64, "cpu", p=0.3, seed=3)
    got = run_packed(graph, qkv, e, grad, torch.float64, "cpu", p=0.3, seed=3)
    assert relative_error(got[0], want[0]) < 1e-12 and torch.equal(got[1], want[1])
    for name, a, b in zip(("q", "k", "v", "edge"), got[2], want[2]):
        assert relative_error(a, b) < 1e-10, name
    with pytest.raises(ValueError, match="packed"):
        transformer.graph_transformer_packed(graph, torch.stack(qkv[1:], dim=1))


def test_reference_is_the_custom_op_on_cpu():
    _, graph, (q, k, v), e, _ = case(30, 30, 200, 2, 4, seed=5, edge=True)
    e = csr_order(graph, e)
    out, lse = transformer.transformer_attention(graph.rowptr, graph.col, q, k, v, e, 0.5,
                                                 0.0, 0)
    ref_out, ref_lse = transformer_reference(graph.rowptr, graph.col, q, k, v, e, 0.5)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_opcheck_cpu():
    _, graph, (q, k, v), e, grad = case(20, 20, 80, 2, 3, seed=6, edge=True)
    e = csr_order(graph, e)
    torch.library.opcheck(torch.ops.pyg_ioaware.transformer_attention,
                          (graph.rowptr, graph.col, q, k, v, e, 0.5, 0.3, 7, 0.99))
    out, lse = transformer.transformer_attention(graph.rowptr, graph.col, q, k, v, e, 0.5, 0.3,
                                                 7)
    t = graph.transpose
    torch.library.opcheck(torch.ops.pyg_ioaware.transformer_attention_backward,
                          (graph.rowptr, graph.col, t.rowptr, t.col, t.perm, q, k, v, e, out,
                           lse, grad, 0.5, 0.3, 7, 0.99))
    torch.library.opcheck(torch.ops.pyg_ioaware.transformer_attention_weights,
                          (graph.rowptr, graph.col, q, k, e, lse, 0.5))


def test_bad_inputs_raise_before_any_kernel():
    _, graph, (q, k, v), _, _ = case(20, 20, 80, 2, 3, seed=7)
    op = transformer.transformer_attention
    with pytest.raises(ValueError, match="q has"):
        op(graph.rowptr, graph.col, q[:-1], k, v, None, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="share dtype"):
        op(graph.rowptr, graph.col, q, k.float(), v, None, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="one per source"):
        op(graph.rowptr, graph.col, q, k, v[:-1], None, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="edge must be"):
        op(graph.rowptr, graph.col, q, k, v, q, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="scale"):
        op(graph.rowptr, graph.col, q, k, v, None, float("nan"), 0.0, 0)
    with pytest.raises(ValueError, match="dropout_p"):
        op(graph.rowptr, graph.col, q, k, v, None, 0.5, 1.0, 0)
    with pytest.raises(ValueError, match="hub_quantile"):
        op(graph.rowptr, graph.col, q, k, v, None, 0.5, 0.0, 0, 1.5)
    with pytest.raises(TypeError, match="heads, channels"):
        op(graph.rowptr, graph.col, q[:, 0], k, v, None, 0.5, 0.0, 0)
    bad_col = graph.col.clone()
    bad_col[0] = 10**6
    with pytest.raises(ValueError):
        op(graph.rowptr, bad_col, q, k, v, None, 0.5, 0.0, 0)


# -------------------------------------------------------------------- CUDA
CUDA_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("heads, channels", [(1, 64), (4, 128), (3, 7), (2, 33), (2, 47),
                                             (8, 5), (2, 256), (1, 100), (2, 32)])
@pytest.mark.parametrize("edge", [False, True])
def test_cuda_matches_float64(dtype, heads, channels, edge):
    # A hub of 3000 entries (split over all SMs), empty rows, duplicates, loops.
    edge_index, graph, qkv, e, grad = case(600, 600, 5000, heads, channels, seed=11, hub=3000,
                                           edge=edge, device="cuda")
    qkv = [t.to(dtype).double() for t in qkv]  # the oracle sees what the kernels see
    e = None if e is None else e.to(dtype).double()
    e_csr = None if e is None else csr_order(graph, e)
    out, lse, grads = run_ours(graph, qkv, e_csr, grad, dtype, "cuda")
    ref, _, ref_grads = reference_grads(edge_index, 600, qkv, e, grad)
    tol = 4 * TOLERANCE[dtype]
    assert out.dtype == dtype
    assert relative_error(out.double().cpu(), ref) < tol
    _, ref_lse = transformer_reference(graph.rowptr.cpu(), graph.col.cpu(), *qkv, e_csr,
                                       channels ** -0.5)
    empty = (graph.in_degree == 0).cpu()
    assert torch.isneginf(lse.cpu()[empty]).all() and (out.cpu()[empty] == 0).all()
    assert relative_error(lse.cpu()[~empty].double(), ref_lse[~empty]) < tol
    for name, got, want in zip("qkv", grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 8 * TOLERANCE[dtype], name
    if edge:
        assert relative_error(grads[3].double().cpu(), csr_order(graph, ref_grads[3])) < \
            8 * TOLERANCE[dtype]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, heads, channels", [
    (torch.float32, 3, 7), (torch.bfloat16, 2, 47), (torch.float32, 4, 128),
    (torch.bfloat16, 4, 128), (torch.float16, 1, 64)])
@pytest.mark.parametrize("edge", [False, True])
def test_cuda_edge_path_only_where_timed_faster(dtype, heads, channels, edge):
    """Which transformer kernels are built with an edge path (GatTraits'
    last argument): every one where edge attributes are given; without
    them, none where a load takes one channel (odd head sizes), and where
    lanes take 16-byte pieces the backward's none and the forward's every
    one (transformer_launch.cu: the forward without it lost in bf16)."""
    _, graph, qkv, e, grad = case(600, 600, 5000, heads, channels, seed=12, hub=3000,
                                  edge=edge, device="cuda")
    e_csr = None if e is None else csr_order(graph, e)
    names, (out, _, _) = cuda_kernel_names(
        lambda: run_ours(graph, qkv, e_csr, grad, dtype, "cuda"))
    traits = {name: re.search(r"GatTraits<[^<>]*, (true|false)>", name)
              for name in names if "GatTraits<" in name}
    assert traits and all(t is not None for t in traits.values())
    for name, t in traits.items():
        with_path = edge or (channels % (16 // dtype.itemsize) == 0 and "backward" not in name)
        assert t.group(1) == str(with_path).lower(), name
    assert torch.isfinite(out).all()


@pytest.mark.cuda
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_hubs_both_sides_index_widths_bipartite_dropout(index_dtype, dtype):
    """Destination hubs (forward and destination pass split), source hubs
    (CSR^T rows), a bipartite graph, both index widths, edge features and
    dropout."""
    hubs_of_both_sides(index_dtype, dtype, heads=2, channels=64)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_full_hub_lists_and_passes_of_heads(monkeypatch, dtype):
    """Hub lists of one slot: the row kernels do the hub rows a full list
    refuses themselves, in several passes of heads (4 heads of 128
    channels: four passes in fp32, two in bf16)."""
    cut = cap_hub_lists(monkeypatch, transformer, 1)
    hubs_of_both_sides(torch.int32, dtype, heads=4, channels=128)
    assert any(asked > given for asked, given in cut)  # a list was cut


def hubs_of_both_sides(index_dtype, dtype, heads, channels):
    """The kernels against float64 on a bipartite graph (700 sources, 300
    destinations) with three destination hubs and two source hubs, edge
    features and dropout."""
    gen = torch.Generator().manual_seed(21)
    edge_index = hubs_graph(700, 300, 3000, 21, ((3, 3000), (5, 700), (8, 300)),
                            ((4, 2600), (9, 400)), gen)
    rows = edge_index[1].argsort(stable=True)
    sorted_index = edge_index[:, rows]
    rowptr = torch.zeros(301, dtype=torch.long)
    rowptr[1:] = torch.bincount(sorted_index[1], minlength=300).cumsum(0)
    graph = Graph(rowptr=rowptr.to("cuda", index_dtype),
                  col=sorted_index[0].to("cuda", index_dtype),
                  row=sorted_index[1].to("cuda", index_dtype), num_src=700, num_dst=300)
    position = torch.empty(edge_index.size(1), dtype=torch.long)
    position[rows] = torch.arange(edge_index.size(1))
    _, _, qkv, e, grad = case(700, 300, 0, heads, channels, seed=22, edge=True,
                              edge_index=edge_index)
    qkv = [t.to(dtype).double() for t in qkv]
    e = e.to(dtype).double()
    out, _, grads = run_ours(graph, qkv, e[rows], grad, dtype, "cuda", p=0.25, seed=77,
                             hub_quantile=0.9)
    ref, _, ref_grads = reference_grads(edge_index, 300, qkv, e, grad, p=0.25, seed=77,
                                        csr_position=position)
    tol = 8 * TOLERANCE[dtype]
    assert relative_error(out.double().cpu(), ref) < tol / 2
    for name, got, want in zip("qkv", grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < tol, name
    assert relative_error(grads[3].double().cpu(), ref_grads[3][rows]) < tol


@pytest.mark.cuda
def test_cuda_many_hubs_each_chunk_to_a_warp():
    """Hub chunks on both sides many enough that each goes to a warp (the
    other hub tests take the block form)."""
    edge_index, nodes = many_hubs_graph(seed=33)
    _, graph, qkv, _, grad = case(nodes, nodes, 0, 1, 4, seed=34, device="cuda",
                                  edge_index=edge_index)
    out, _, grads = run_ours(graph, qkv, None, grad, torch.float32, "cuda")
    ref, _, ref_grads = reference_grads(edge_index, nodes, qkv, None, grad)
    assert relative_error(out.double().cpu(), ref) < 4e-5
    for name, got, want in zip("qkv", grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 1e-4, name


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("num_src, heads, channels", [(600, 4, 32), (600, 2, 47), (900, 2, 64)])
def test_cuda_packed_projection_gradient_in_place(dtype, num_src, heads, channels):
    """q, k, v (square) or k, v (bipartite: 900 sources) as the slots of one
    tensor: read in place, their gradients written into its slots (strided
    rows, the hub accumulators' rows included; hubs on both sides)."""
    edge_index = random_graph(num_src, 600, 5000, seed=16, hub_degree=3000)
    src_hub = torch.stack([torch.full((2500,), 7), torch.randint(0, 600, (2500,))])
    edge_index = torch.cat([edge_index, src_hub], dim=1)
    _, graph, qkv, e, grad = case(num_src, 600, 0, heads, channels, seed=16, edge=True,
                                  device="cuda", edge_index=edge_index)
    qkv = tuple(t.to(dtype).double() for t in qkv)
    e = e.to(dtype).double()
    out, _, grads = run_packed(graph, qkv, csr_order(graph, e), grad, dtype, "cuda", p=0.2,
                               seed=8)
    ref, _, ref_grads = reference_grads(edge_index, 600, qkv, e, grad, p=0.2, seed=8,
                                        csr_position=csr_positions(graph, edge_index.size(1)))
    assert relative_error(out.double().cpu(), ref) < 4 * TOLERANCE[dtype]
    for name, got, want in zip("qkv", grads[:3], ref_grads[:3]):
        assert relative_error(got.double().cpu(), want) < 8 * TOLERANCE[dtype], name
    assert relative_error(grads[3].double().cpu(), csr_order(graph, ref_grads[3])) < \
        8 * TOLERANCE[dtype]


@pytest.mark.cuda
def test_cuda_fused_projection_views_and_weights():
    """q, k, v as column views of one [N, 3 H C] projection are read in
    place; the attention weights match the oracle's."""
    edge_index, graph, qkv, _, _ = case(500, 500, 4000, 2, 32, seed=13, hub=1000,
                                        device="cuda")
    fused = torch.cat([t.reshape(500, -1) for t in qkv], dim=1).float().cuda()  # [N, 3 H C]
    q, k, v = (fused[:, i * 64:(i + 1) * 64].view(500, 2, 32) for i in range(3))
    assert q.stride(0) == 192
    out, lse = transformer.transformer_attention(graph.rowptr, graph.col, q, k, v, None,
                                                 32 ** -0.5, 0.0, 0)
    ref, alpha = oracle(edge_index, 500, *qkv)
    assert relative_error(out.double().cpu(), ref) < 4e-5
    weights = transformer.transformer_attention_weights(graph.rowptr, graph.col, q, k, None,
                                                        lse, 32 ** -0.5)
    assert relative_error(weights.double().cpu(), csr_order(graph, alpha)) < 4e-5


@pytest.mark.cuda
def test_cuda_transformer_sanitizer_small():
    """A small case for compute-sanitizer: every kernel, a hub, edge, dropout."""
    _, graph, qkv, e, grad = case(300, 300, 1500, 2, 12, seed=14, hub=600, edge=True,
                                  device="cuda")
    e_csr = csr_order(graph, e)
    out, lse, grads = run_ours(graph, qkv, e_csr, grad, torch.bfloat16, "cuda", p=0.2, seed=5)
    torch.cuda.synchronize()
    assert torch.isfinite(out.float()).all() and all(torch.isfinite(g.float()).all()
                                                     for g in grads)
    weights = transformer.transformer_attention_weights(
        graph.rowptr, graph.col, qkv[0].cuda().bfloat16(), qkv[1].cuda().bfloat16(),
        e_csr.cuda().bfloat16(), lse, 12 ** -0.5)
    assert torch.isfinite(weights).all()
