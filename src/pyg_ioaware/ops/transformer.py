"""The attention family's graph-transformer attention (TransformerConv's):
one pass per destination over a CSR, nothing per edge kept for backward.

For destination i, head h and each entry e = (j -> i) of row i::

    s[e,h]   = scale * <q[i,h], k[j,h] (+ edge[e,h])>
    lse[i,h] = log sum_e exp(s[e,h])                     (-inf without entries)
    out[i,h] = sum_e keep(e,h) / (1 - p) * exp(s[e,h] - lse[i,h]) * (v[j,h] (+ edge[e,h]))

keep is the counter-based dropout mask of :mod:`.dropout` (e the CSR
position), all kept for p = 0. Backward, with f = keep / (1 - p) and
alpha = exp(s - lse)::

    Delta[i,h] = <grad_out[i,h], out[i,h]>
    ds[e,h]    = alpha * (f * <grad_out[i,h], v[j,h] (+ edge[e,h])> - Delta[i,h])
    grad_q[i]  = scale * sum_e ds * (k[j] (+ edge[e]))
    grad_k[j]  = scale * sum_e ds * q[i]
    grad_v[j]  = sum_e f * alpha * grad_out[i]
    grad_edge[e] = scale * ds * q[i] + f * alpha * grad_out[i]

Custom ops:

``pyg_ioaware::transformer_attention(rowptr, col, q, k, v, edge, scale, dropout_p, seed,
hub_quantile) -> (out, lse)``: q [N_dst, H, C], k and v [N_src, H, C] (views
of a fused projection are read in place), edge [nnz, H, C] in CSR order or
None; out in q's dtype, lse fp32 (float64 for float64 inputs).

``pyg_ioaware::transformer_attention_backward(rowptr, col, rowptr_t, col_t, perm_t, q, k,
v, edge, out, lse, grad_out, scale, dropout_p, seed, hub_quantile) -> (grad_q, grad_k, grad_v,
grad_edge)``: grad_edge is empty without edge. Rows of the CSR and of the
CSR^T above the hub_quantile degree quantile (:mod:`.hubs`) are split over
all SMs by the kernels, forward and backward.

``pyg_ioaware::transformer_attention_weights(rowptr, col, q, k, edge, lse, scale) ->
alpha`` [nnz, H] in CSR order, before dropout (fp32; float64 for float64).

On CUDA (native library) fp32 / fp16 / bf16 run the kernels of
cuda/attention/; float64, CPU tensors and head sizes the kernels do not
take run :func:`transformer_reference` and
:func:`transformer_backward_reference` (and :func:`graph_transformer`,
recording a gradient there, differentiates the reference by torch's
autograd).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import _native
from ..graph import entry_rows
from . import checks
from .attention_shared import (FEATURE_DTYPES, check_hub_quantile, differentiable_by_torch,
                               dropout_factor, heads_readable, kernels_take,
                               native_autograd_extension, native_structures, segment_lse,
                               slot_gradient, stack_slots)
from .dispatch import accumulator_dtype, eager_or_op
from .hubs import DEFAULT_HUB_QUANTILE, hub_degree

__all__ = ["transformer_attention", "transformer_attention_backward",
           "transformer_attention_weights", "transformer_reference",
           "transformer_backward_reference", "graph_transformer", "graph_transformer_packed",
           "TransformerFunction"]


# --------------------------------------------------------------- reference
def _entries(rowptr, col, q, k, v, edge):
    """(row of each entry, q[row], k[col] (+ edge), v[col] (+ edge)) per
    entry in the accumulator dtype."""
    acc = accumulator_dtype(q.dtype)
    row = entry_rows(rowptr, col.numel())
    index = col.long()
    key, value = k.to(acc).index_select(0, index), v.to(acc).index_select(0, index)
    if edge is not None:
        key, value = key + edge.to(acc), value + edge.to(acc)
    return row, q.to(acc).index_select(0, row), key, value


def transformer_reference(rowptr: Tensor, col: Tensor, q: Tensor, k: Tensor, v: Tensor,
                          edge: Optional[Tensor], scale: float, dropout_p: float = 0.0,
                          seed: int = 0) -> Tuple[Tensor, Tensor]:
    """(out, lse) of the module docstring in plain torch, differentiable
    (the CPU path and the oracle of the kernels); per-edge tensors."""
    num_rows = rowptr.numel() - 1
    row, query, key, value = _entries(rowptr, col, q, k, v, edge)
    scores = (query * key).sum(-1) * scale
    lse = segment_lse(scores, row, num_rows)
    alpha = torch.exp(scores - lse.index_select(0, row))
    factor = dropout_factor(seed, col.numel(), q.size(1), dropout_p, q.device, alpha.dtype)
    if factor is not None:
        alpha = alpha * factor
    out = torch.zeros(num_rows, *q.shape[1:], dtype=value.dtype, device=q.device)
    out = out.index_add(0, row, alpha.unsqueeze(-1) * value)
    return out.to(q.dtype), lse


def transformer_backward_reference(rowptr, col, q, k, v, edge, out, lse, grad_out, scale,
                                   dropout_p, seed):
    """(grad_q, grad_k, grad_v, grad_edge) of the module docstring in plain
    torch from the forward's out and lse (the CPU path)."""
    acc = accumulator_dtype(q.dtype)
    row, query, key, value = _entries(rowptr, col, q, k, v, edge)
    alpha = torch.exp((query * key).sum(-1) * scale - lse.to(acc).index_select(0, row))
    factor = dropout_factor(seed, col.numel(), q.size(1), dropout_p, q.device, acc)
    weight = alpha if factor is None else alpha * factor
    g_row = grad_out.to(acc).index_select(0, row)
    delta = (grad_out.to(acc) * out.to(acc)).sum(-1)
    ds = weight * (g_row * value).sum(-1) - alpha * delta.index_select(0, row)
    d_key = scale * ds.unsqueeze(-1) * query
    d_value = weight.unsqueeze(-1) * g_row
    index = col.long()
    grad_q = torch.zeros(q.shape, dtype=acc, device=q.device).index_add_(
        0, row, scale * ds.unsqueeze(-1) * key)
    grad_k = torch.zeros(k.shape, dtype=acc, device=q.device).index_add_(0, index, d_key)
    grad_v = torch.zeros(v.shape, dtype=acc, device=q.device).index_add_(0, index, d_value)
    grad_edge = (d_key + d_value).to(q.dtype) if edge is not None else q.new_empty(0)
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), grad_edge


# ------------------------------------------------------------------ checks
def _check_forward(rowptr, col, q, k, v, edge, scale, dropout_p,
                   who="pyg_ioaware::transformer_attention", hub_quantile=0.0) -> None:
    checks.csr_structure(rowptr, col, who)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 3 or t.dtype not in FEATURE_DTYPES:
            raise TypeError(f"{who}: {name} must be a [nodes, heads, channels] tensor of one "
                            f"of {FEATURE_DTYPES}")
        if t.device != rowptr.device:
            raise ValueError(f"{who}: {name} is on {t.device}, the graph on {rowptr.device}")
        if t.dtype != q.dtype or t.shape[1:] != q.shape[1:]:
            raise ValueError(f"{who}: q {tuple(q.shape)} {q.dtype} and {name} "
                             f"{tuple(t.shape)} {t.dtype} must share dtype, heads and channels")
    if k.size(0) != v.size(0):
        raise ValueError(f"{who}: k has {k.size(0)} rows and v {v.size(0)}: one per source")
    if q.size(0) != rowptr.numel() - 1:
        raise ValueError(f"{who}: q has {q.size(0)} rows, the graph {rowptr.numel() - 1} "
                         f"destinations")
    if edge is not None and (not isinstance(edge, Tensor) or edge.dtype != q.dtype
                             or edge.shape != (col.numel(), *q.shape[1:])
                             or edge.device != rowptr.device):
        raise ValueError(f"{who}: edge must be [nnz, heads, channels] = "
                         f"({col.numel()}, {q.size(1)}, {q.size(2)}) of q's dtype and device")
    if not (isinstance(scale, (int, float)) and scale == scale and abs(scale) != float("inf")):
        raise ValueError(f"{who}: scale must be a finite number, got {scale!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{who}: dropout_p must lie in [0, 1), got {dropout_p}")
    if q.size(1) == 0 or q.size(2) == 0:
        raise ValueError(f"{who}: heads and channels must be positive, got {tuple(q.shape[1:])}")
    check_hub_quantile(hub_quantile, who)


def _check_backward(rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge, out, lse, grad_out,
                    scale, dropout_p, who, hub_quantile) -> None:
    _check_forward(rowptr, col, q, k, v, edge, scale, dropout_p, who, hub_quantile)
    checks.csr_structure(rowptr_t, col_t, who)
    if rowptr_t.dtype != rowptr.dtype or rowptr_t.numel() != k.size(0) + 1 \
            or col_t.numel() != col.numel() or not isinstance(perm_t, Tensor) \
            or perm_t.dtype != rowptr.dtype or perm_t.shape != col.shape \
            or perm_t.device != rowptr.device:
        raise ValueError(f"{who}: rowptr_t / col_t / perm_t must be the CSR^T of rowptr / col "
                         f"({k.size(0) + 1}, {col.numel()} and {col.numel()} entries of "
                         f"{rowptr.dtype})")
    shape = (rowptr.numel() - 1, *q.shape[1:])
    for name, t, dtype in (("out", out, q.dtype), ("grad_out", grad_out, q.dtype),
                           ("lse", lse, accumulator_dtype(q.dtype))):
        want = shape if name != "lse" else shape[:2]
        if not isinstance(t, Tensor) or t.shape != want or t.dtype != dtype \
                or t.device != rowptr.device:
            raise ValueError(f"{who}: {name} must be a {tuple(want)} tensor of {dtype} on "
                             f"{rowptr.device}")


# ----------------------------------------------------------------- kernels
def _edge_readable(edge: Optional[Tensor]) -> Optional[Tensor]:
    return None if edge is None else edge.contiguous()


def _transformer_kernel(rowptr, col, q, k, v, edge, scale, dropout_p, seed,
                        hub_quantile) -> Tuple[Tensor, Tensor]:
    if not kernels_take(q):
        return transformer_reference(rowptr, col, q, k, v, edge, scale, dropout_p, seed)
    if rowptr.numel() == 1:  # no destination
        return (q.new_empty(0, *q.shape[1:]),
                torch.empty(0, q.size(1), dtype=torch.float32, device=q.device))
    q, k, v, edge = heads_readable(q), heads_readable(k), heads_readable(v), _edge_readable(edge)
    degree, max_hubs = hub_degree(rowptr, col.numel(), hub_quantile)
    return _native.transformer(rowptr, col, q, k, v, edge, float(scale), float(dropout_p),
                               int(seed), degree, max_hubs)


def _transformer_backward_kernel(rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge, out, lse,
                                 grad_out, scale, dropout_p, seed,
                                 hub_quantile=DEFAULT_HUB_QUANTILE, grad_slots=None):
    """The backward; ``grad_slots``: (grad_q, grad_k, grad_v) to write into
    (the slots of packed gradients, attention_shared.slot_gradient; None
    for one to be fresh), else fresh tensors."""
    if not kernels_take(q):
        return transformer_backward_reference(rowptr, col, q, k, v, edge, out, lse, grad_out,
                                              scale, dropout_p, seed)
    q, k, v, edge = heads_readable(q), heads_readable(k), heads_readable(v), _edge_readable(edge)
    hubs = (*hub_degree(rowptr, col.numel(), hub_quantile),
            *hub_degree(rowptr_t, col_t.numel(), hub_quantile))
    return _native.transformer_backward(rowptr, col, (rowptr_t, col_t, perm_t), q, k, v, edge,
                                        float(scale), float(dropout_p), int(seed), hubs,
                                        out.contiguous(), lse.contiguous(),
                                        grad_out.contiguous(), grad_slots or (None, None, None))


def _transformer_weights_kernel(rowptr, col, q, k, edge, lse, scale) -> Tensor:
    if not kernels_take(q):
        acc = accumulator_dtype(q.dtype)
        row = entry_rows(rowptr, col.numel())
        key = k.to(acc).index_select(0, col.long())
        if edge is not None:
            key = key + edge.to(acc)
        scores = (q.to(acc).index_select(0, row) * key).sum(-1) * scale
        return torch.exp(scores - lse.to(acc).index_select(0, row))
    q, k, edge = heads_readable(q), heads_readable(k), _edge_readable(edge)
    alpha = torch.empty(col.numel(), q.size(1), dtype=torch.float32, device=q.device)
    _native.transformer_alpha(rowptr, col, q, k, edge, float(scale), lse.contiguous(), alpha)
    return alpha


# -------------------------------------------------------------- custom ops
@torch.library.custom_op("pyg_ioaware::transformer_attention", mutates_args=())
def transformer_attention(rowptr: Tensor, col: Tensor, q: Tensor, k: Tensor, v: Tensor,
                          edge: Optional[Tensor], scale: float, dropout_p: float, seed: int,
                          hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Tuple[Tensor, Tensor]:
    who = "pyg_ioaware::transformer_attention"
    _check_forward(rowptr, col, q, k, v, edge, scale, dropout_p, who, hub_quantile)
    checks.csr_structure_contents(rowptr, col, k.size(0), who)
    return _transformer_kernel(rowptr, col, q, k, v, edge, scale, dropout_p, seed,
                               hub_quantile)


@transformer_attention.register_fake
def _transformer_attention_fake(rowptr, col, q, k, v, edge, scale, dropout_p, seed,
                                hub_quantile=DEFAULT_HUB_QUANTILE):
    _check_forward(rowptr, col, q, k, v, edge, scale, dropout_p,
                   "pyg_ioaware::transformer_attention", hub_quantile)
    rows = rowptr.size(0) - 1
    return (q.new_empty(rows, q.size(1), q.size(2)),
            q.new_empty(rows, q.size(1), dtype=accumulator_dtype(q.dtype)))


@torch.library.custom_op("pyg_ioaware::transformer_attention_backward", mutates_args=())
def transformer_attention_backward(rowptr: Tensor, col: Tensor, rowptr_t: Tensor, col_t: Tensor,
                                   perm_t: Tensor, q: Tensor, k: Tensor, v: Tensor,
                                   edge: Optional[Tensor], out: Tensor, lse: Tensor,
                                   grad_out: Tensor, scale: float, dropout_p: float, seed: int,
                                   hub_quantile: float = DEFAULT_HUB_QUANTILE
                                   ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    who = "pyg_ioaware::transformer_attention_backward"
    _check_backward(rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge, out, lse, grad_out,
                    scale, dropout_p, who, hub_quantile)
    checks.csr_structure_contents(rowptr, col, k.size(0), who)
    checks.csr_structure_contents(rowptr_t, col_t, q.size(0), who)
    return _transformer_backward_kernel(rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge,
                                        out, lse, grad_out, scale, dropout_p, seed,
                                        hub_quantile)


@transformer_attention_backward.register_fake
def _transformer_attention_backward_fake(rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge,
                                         out, lse, grad_out, scale, dropout_p, seed,
                                         hub_quantile=DEFAULT_HUB_QUANTILE):
    _check_backward(rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge, out, lse, grad_out,
                    scale, dropout_p, "pyg_ioaware::transformer_attention_backward",
                    hub_quantile)
    grad_edge = torch.empty_like(edge) if edge is not None else q.new_empty(0)
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format), grad_edge)


@torch.library.custom_op("pyg_ioaware::transformer_attention_weights", mutates_args=())
def transformer_attention_weights(rowptr: Tensor, col: Tensor, q: Tensor, k: Tensor,
                                  edge: Optional[Tensor], lse: Tensor, scale: float) -> Tensor:
    who = "pyg_ioaware::transformer_attention_weights"
    _check_forward(rowptr, col, q, k, k, edge, scale, 0.0, who)
    if not isinstance(lse, Tensor) or lse.shape != (rowptr.numel() - 1, q.size(1)) \
            or lse.dtype != accumulator_dtype(q.dtype):
        raise ValueError(f"{who}: lse must be the forward's [num_dst, heads] "
                         f"{accumulator_dtype(q.dtype)} tensor")
    checks.csr_structure_contents(rowptr, col, k.size(0), who)
    return _transformer_weights_kernel(rowptr, col, q, k, edge, lse, scale)


@transformer_attention_weights.register_fake
def _transformer_attention_weights_fake(rowptr, col, q, k, edge, lse, scale):
    return q.new_empty(col.numel(), q.size(1), dtype=accumulator_dtype(q.dtype))


# Eager calls on structures known valid (a Graph's) go straight to the kernels.
transformer_trusted = eager_or_op(_transformer_kernel, transformer_attention)
transformer_backward_trusted = eager_or_op(_transformer_backward_kernel,
                                           transformer_attention_backward)
transformer_weights_trusted = eager_or_op(_transformer_weights_kernel,
                                          transformer_attention_weights)


def _unpack(q: Optional[Tensor], k: Optional[Tensor], v: Optional[Tensor],
            packed: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """(q, k, v), the packed ones read from the slots of ``packed`` (v last,
    k before it, q first where it has three slots)."""
    if packed is None:
        return q, k, v
    slots = packed.unbind(1)
    return (slots[0] if len(slots) == 3 else q), slots[-2], slots[-1]


class TransformerFunction(torch.autograd.Function):
    """Differentiable out = graph-transformer attention over ``graph`` in q,
    k, v and edge: forward saves q, k, v, edge, out and lse (O(N H C), no
    per-edge tensor); backward recomputes the scores over the graph and its
    CSR^T. Not twice differentiable.

    ``packed`` (optional, last): k and v (and q where it has three slots) as
    the slots of one tensor [N, 2 or 3, heads, channels] (one fused
    projection's output; the packed ones are then None): its gradient is one
    tensor the kernels write every slot of.
    """

    @staticmethod
    def forward(ctx, graph, q, k, v, edge, scale, dropout_p, seed, hub_quantile, packed=None):
        q_in = q
        q, k, v = _unpack(q, k, v, packed)
        out, lse = transformer_trusted(graph.rowptr, graph.col, q, k, v, edge, scale, dropout_p,
                                       seed, hub_quantile)
        ctx.graph, ctx.params = graph, (scale, dropout_p, seed, hub_quantile)
        ctx.has_edge = edge is not None
        ctx.mark_non_differentiable(lse)
        if packed is not None:
            q, k, v = q_in, None, None
        ctx.save_for_backward(packed, q, k, v, edge, out, lse)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_lse):
        packed, q, k, v, edge, out, lse = ctx.saved_tensors
        q, k, v = _unpack(q, k, v, packed)
        graph, t = ctx.graph, ctx.graph.transpose
        args = (graph.rowptr, graph.col, t.rowptr, t.col, t.perm, q, k, v, edge, out, lse,
                grad_out, *ctx.params)
        grad_packed = slot_gradient(packed)
        if grad_packed is None:
            grads = transformer_backward_trusted(*args)
        else:
            slots = grad_packed.unbind(1)
            into = slots if len(slots) == 3 else (None, *slots)  # q's: a fresh one
            grads = _transformer_backward_kernel(*args, grad_slots=into)
        grad_q, grad_k, grad_v, grad_edge = grads
        grad_edge = grad_edge if ctx.has_edge else None
        if packed is None:
            return (None, grad_q, grad_k, grad_v, grad_edge, None, None, None, None, None)
        slot_grads = (grad_q, grad_k, grad_v) if packed.size(1) == 3 else (grad_k, grad_v)
        grad_packed = stack_slots(grad_packed, slot_grads)
        return (None, None if packed.size(1) == 3 else grad_q, None, None, grad_edge,
                None, None, None, None, grad_packed)


def _native_autograd(graph, q: Optional[Tensor], k: Optional[Tensor], v: Optional[Tensor],
                     packed: Optional[Tensor], edge: Optional[Tensor], scale: float,
                     dropout_p: float, seed: int,
                     hub_quantile: float) -> Optional[Tuple[Tensor, Tensor]]:
    """What ``TransformerFunction.apply`` gives, as one autograd node in C++
    (cuda/host/attention_autograd.cpp) where that applies
    (attention_shared.native_autograd_extension), else None."""
    extension = native_autograd_extension(graph, q if q is not None else packed, packed)
    if extension is None:
        return None
    q, k, v, edge = heads_readable(q), heads_readable(k), heads_readable(v), _edge_readable(edge)
    structure, transposed = native_structures(graph, hub_quantile, (q, k, v, packed, edge))
    out, lse = _native._host_call(extension.transformer_attention, q, k, v, packed, edge,
                                  structure, transposed, float(scale), float(dropout_p),
                                  int(seed))
    return out, lse


def graph_transformer(graph, q: Tensor, k: Tensor, v: Tensor, edge: Optional[Tensor] = None,
                      scale: Optional[float] = None, dropout_p: float = 0.0, seed: int = 0,
                      hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Tuple[Tensor, Tensor]:
    """(out, lse) of graph-transformer attention over ``graph`` (rows =
    destinations; scale defaults to 1 / sqrt(channels)), inputs already
    checked by the caller; differentiable in q, k, v and edge (lse is not):
    through ``TransformerFunction`` (its C++ twin where the host extension
    serves the call) where the kernels run, else through
    ``transformer_reference`` under torch's autograd."""
    if scale is None:
        scale = q.size(2) ** -0.5
    native = _native_autograd(graph, q, k, v, None, edge, scale, dropout_p, seed, hub_quantile)
    if native is not None:
        return native
    if differentiable_by_torch(q, (q, k, v, edge)):
        out, lse = transformer_reference(graph.rowptr, graph.col, q, k, v, edge, scale,
                                         dropout_p, seed)
        return out, lse.detach()
    return TransformerFunction.apply(graph, q, k, v, edge, scale, dropout_p, seed, hub_quantile)


def graph_transformer_packed(graph, packed: Tensor, q: Optional[Tensor] = None,
                             edge: Optional[Tensor] = None, scale: Optional[float] = None,
                             dropout_p: float = 0.0, seed: int = 0,
                             hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Tuple[Tensor, Tensor]:
    """:func:`~pyg_ioaware.ops.transformer.graph_transformer` with k and v
    the last two slots of one tensor ``packed`` [N, slots, heads, channels]
    (a fused projection's output), and q its first slot where there are
    three (a square graph; else ``q`` is given, a bipartite graph's
    destinations): read in place, and the packed gradient written by the
    kernels as one tensor (no stack of separate gradients)."""
    if packed.dim() != 4 or packed.size(1) != (2 if q is not None else 3):
        raise ValueError(f"graph_transformer_packed: expected packed [N, 3, heads, channels] "
                         f"(q, k, v) or [N, 2, heads, channels] (k, v) with q given, got "
                         f"{tuple(packed.shape)} with q {'given' if q is not None else 'None'}")
    if scale is None:
        scale = packed.size(3) ** -0.5
    native = _native_autograd(graph, q, None, None, packed, edge, scale, dropout_p, seed,
                              hub_quantile)
    if native is not None:
        return native
    q, k, v = _unpack(q, None, None, packed)
    if differentiable_by_torch(q, (q, packed, edge)):
        return graph_transformer(graph, q, k, v, edge, scale, dropout_p, seed, hub_quantile)
    return TransformerFunction.apply(graph, None if packed.size(1) == 3 else q, None, None, edge,
                                     scale, dropout_p, seed, hub_quantile, packed)
