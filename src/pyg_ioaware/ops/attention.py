"""The attention family: GATv2 attention over a CSR in one pass per
destination, nothing per edge kept for backward.

For destination i, head h and each entry e = (j -> i) of row i::

    s[e,h]     = att[h] . leaky_relu(x_l[j,h] + x_r[i,h] (+ edge[e,h]), negative_slope)
    lse[i,h]   = log sum_e exp(s[e,h])                  (-inf without entries)
    out[i,h]   = sum_e keep(e,h) / (1 - p) * exp(s[e,h] - lse[i,h]) * x_l[j,h] (+ out_bias[h])

keep is the counter-based dropout mask of :mod:`.dropout` (e the CSR
position), all kept for p = 0. Custom ops:

``pyg_ioaware::gatv2_attention(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p,
seed, hub_quantile, out_bias) -> (out, lse)``: x_l [N_src, H, C], x_r [N_dst, H, C], att
[H, C], edge [nnz, H, C] in CSR order or None, out_bias [H, C] or None (a layer's
bias, added in the output pass); out in x's dtype, lse fp32 (float64 for float64
inputs).

``pyg_ioaware::gatv2_attention_backward(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att,
edge, lse, grad_out, negative_slope, dropout_p, seed, hub_quantile) -> (grad_x_l,
grad_x_r, grad_att, grad_edge)``: the gradients from lse and grad_out (scores
recomputed, G = <grad_out, out> summed from the entries: the forward's out
is not kept); grad_edge is empty without edge.
Rows of the CSR and of the CSR^T above the hub_quantile degree quantile
(:mod:`.hubs`) are split over all SMs by the kernels.

``pyg_ioaware::gatv2_attention_weights(rowptr, col, x_l, x_r, att, edge, lse,
negative_slope) -> alpha`` [nnz, H] in CSR order, before dropout (fp32; float64
for float64 inputs).

On CUDA (native library) fp32 / fp16 / bf16 run the kernels of
cuda/attention/; float64, CPU tensors and head sizes the kernels do not
take run :func:`gatv2_reference` and :func:`gatv2_backward_reference`
(and :func:`graph_gatv2`, recording a gradient there, differentiates the
reference by torch's autograd).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import _native
from ..graph import entry_rows
from . import checks
from .attention_shared import (FEATURE_DTYPES, check_hub_quantile, differentiable_by_torch,
                               dropout_factor, heads_readable, kernels_take,
                               native_autograd_extension, native_structures, segment_lse,
                               slot_gradient, stack_slots)
from .bias_gradient import column_sums
from .dispatch import accumulator_dtype, eager_or_op
from .hubs import DEFAULT_HUB_QUANTILE, hub_degree

__all__ = ["gatv2_attention", "gatv2_attention_backward", "gatv2_attention_weights",
           "gatv2_reference", "gatv2_backward_reference", "graph_gatv2", "graph_gatv2_packed",
           "GATv2Function"]


# --------------------------------------------------------------- reference
def _entries(rowptr, col, x_l, x_r, edge):
    """(row of each entry, x_l[col] and z = x_l[col] + x_r[row] (+ edge)),
    per entry in the accumulator dtype."""
    acc = accumulator_dtype(x_l.dtype)
    row = entry_rows(rowptr, col.numel())
    x_j = x_l.to(acc).index_select(0, col.long())
    z = x_j + x_r.to(acc).index_select(0, row)
    if edge is not None:
        z = z + edge.to(acc)
    return row, x_j, z


def _scores(z: Tensor, att: Tensor, negative_slope: float) -> Tensor:
    """s = att . leaky_relu(z) per entry and head [nnz, H]."""
    return (F.leaky_relu(z, negative_slope) * att.to(z.dtype)).sum(-1)


def gatv2_reference(rowptr: Tensor, col: Tensor, x_l: Tensor, x_r: Tensor, att: Tensor,
                    edge: Optional[Tensor], negative_slope: float, dropout_p: float = 0.0,
                    seed: int = 0, out_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(out, lse) of the module docstring in plain torch, differentiable
    (the CPU path and the oracle of the kernels); per-edge tensors."""
    num_rows = rowptr.numel() - 1
    row, x_j, z = _entries(rowptr, col, x_l, x_r, edge)
    scores = _scores(z, att, negative_slope)
    lse = segment_lse(scores, row, num_rows)
    alpha = torch.exp(scores - lse.index_select(0, row))
    factor = dropout_factor(seed, col.numel(), x_l.size(1), dropout_p, x_l.device, alpha.dtype)
    if factor is not None:
        alpha = alpha * factor
    out = torch.zeros(num_rows, *x_l.shape[1:], dtype=x_j.dtype, device=x_l.device)
    out = out.index_add(0, row, alpha.unsqueeze(-1) * x_j)
    if out_bias is not None:
        out = out + out_bias.to(out.dtype)
    return out.to(x_l.dtype), lse


# ------------------------------------------------------------------ checks
def _check_forward(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p,
                   who="pyg_ioaware::gatv2_attention", out_bias=None) -> None:
    checks.csr_structure(rowptr, col, who)
    for name, t in (("x_l", x_l), ("x_r", x_r)):
        if not isinstance(t, Tensor) or t.dim() != 3 or t.dtype not in FEATURE_DTYPES:
            raise TypeError(f"{who}: {name} must be a [nodes, heads, channels] tensor of one "
                            f"of {FEATURE_DTYPES}")
        if t.device != rowptr.device:
            raise ValueError(f"{who}: {name} is on {t.device}, the graph on {rowptr.device}")
    if x_r.dtype != x_l.dtype or x_r.shape[1:] != x_l.shape[1:]:
        raise ValueError(f"{who}: x_l {tuple(x_l.shape)} {x_l.dtype} and x_r "
                         f"{tuple(x_r.shape)} {x_r.dtype} must share dtype, heads and channels")
    if x_r.size(0) != rowptr.numel() - 1:
        raise ValueError(f"{who}: x_r has {x_r.size(0)} rows, the graph {rowptr.numel() - 1} "
                         f"destinations")
    for name, t in (("att", att), ("out_bias", out_bias)):
        if (t is not None or name == "att") and (
                not isinstance(t, Tensor) or t.shape != x_l.shape[1:]
                or not t.is_floating_point() or t.device != rowptr.device):
            raise ValueError(f"{who}: {name} must be a floating [heads, channels] = "
                             f"{tuple(x_l.shape[1:])} tensor on {rowptr.device}")
    if edge is not None and (not isinstance(edge, Tensor) or edge.dtype != x_l.dtype
                             or edge.shape != (col.numel(), *x_l.shape[1:])
                             or edge.device != rowptr.device):
        raise ValueError(f"{who}: edge must be [nnz, heads, channels] = "
                         f"({col.numel()}, {x_l.size(1)}, {x_l.size(2)}) of x's dtype and device")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{who}: dropout_p must lie in [0, 1), got {dropout_p}")
    if x_l.size(1) == 0 or x_l.size(2) == 0:
        raise ValueError(f"{who}: heads and channels must be positive, got "
                         f"{tuple(x_l.shape[1:])}")


def _kernel_inputs(x_l, x_r, edge, att):
    """x_l, x_r (None where a packed projection holds them), edge and att
    laid out as the kernels read them (att fp32)."""
    return (heads_readable(x_l), heads_readable(x_r),
            None if edge is None else edge.contiguous(), att.to(torch.float32).contiguous())


# ----------------------------------------------------------------- kernels
def _gatv2_kernel(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p, seed,
                  hub_quantile, out_bias=None) -> Tuple[Tensor, Tensor]:
    if not kernels_take(x_l):
        return gatv2_reference(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p,
                               seed, out_bias)
    if rowptr.numel() == 1:  # no destination
        return (x_l.new_empty(0, *x_l.shape[1:]),
                torch.empty(0, x_l.size(1), dtype=torch.float32, device=x_l.device))
    x_l, x_r, edge, att32 = _kernel_inputs(x_l, x_r, edge, att)
    bias32 = None if out_bias is None else out_bias.to(torch.float32).contiguous()
    degree, max_hubs = hub_degree(rowptr, col.numel(), hub_quantile)
    return _native.gatv2(rowptr, col, x_l, x_r, edge, att32, float(negative_slope),
                         float(dropout_p), int(seed), degree, max_hubs, bias32)


def _gatv2_backward_kernel(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att, edge, lse,
                           grad_out, negative_slope, dropout_p, seed,
                           hub_quantile=DEFAULT_HUB_QUANTILE, grad_slots=None):
    """The backward; ``grad_slots``: (grad_x_l, grad_x_r) to write into
    (the slots of a packed gradient, attention_shared.slot_gradient), else
    fresh tensors."""
    if not kernels_take(x_l):
        return gatv2_backward_reference(rowptr, col, x_l, x_r, att, edge, grad_out,
                                        negative_slope, dropout_p, seed)
    x_l, x_r, edge, att32 = _kernel_inputs(x_l, x_r, edge, att)
    hubs = (*hub_degree(rowptr, col.numel(), hub_quantile),
            *hub_degree(rowptr_t, col_t.numel(), hub_quantile))
    grad_x_l, grad_x_r, grad_att, grad_edge = _native.gatv2_backward(
        rowptr, col, (rowptr_t, col_t, perm_t), x_l, x_r, edge, att32, float(negative_slope),
        float(dropout_p), int(seed), hubs, lse.contiguous(), grad_out.contiguous(),
        grad_slots or (None, None))
    return grad_x_l, grad_x_r, grad_att.to(att.dtype), grad_edge


def gatv2_backward_reference(rowptr, col, x_l, x_r, att, edge, grad_out, negative_slope,
                             dropout_p, seed):
    """(grad_x_l, grad_x_r, grad_att, grad_edge) in plain torch (the CPU
    path), the scores recomputed: with G[i] = <grad_out[i], out[i]> = sum_e
    factor * alpha * <grad_out[i], x_l[j]> (summed from the entries, as the
    kernels do: out is not kept), ds = alpha * (factor * <grad_out[i],
    x_l[j]> - G[i]), dz = ds * att * leaky_relu'(z); grad_x_r[i] = sum dz,
    grad_edge = dz, grad_att = sum ds * leaky_relu(z), grad_x_l[j] = sum
    factor * alpha * grad_out[i] + dz."""
    acc = accumulator_dtype(x_l.dtype)
    num_rows = rowptr.numel() - 1
    row, x_j, z = _entries(rowptr, col, x_l, x_r, edge)
    scores = _scores(z, att, negative_slope)
    alpha = torch.exp(scores - segment_lse(scores, row, num_rows).index_select(0, row))
    factor = dropout_factor(seed, col.numel(), x_l.size(1), dropout_p, x_l.device, acc)
    weight = alpha if factor is None else alpha * factor
    g_row = grad_out.to(acc).index_select(0, row)
    dot = (g_row * x_j).sum(-1)
    g = torch.zeros(num_rows, x_l.size(1), dtype=acc, device=x_l.device).index_add_(
        0, row, weight * dot)
    ds = alpha * ((dot if factor is None else factor * dot) - g.index_select(0, row))
    slope = torch.where(z > 0, torch.ones_like(z), torch.full_like(z, negative_slope))
    dz = ds.unsqueeze(-1) * att.to(acc) * slope
    grad_x_r = torch.zeros(x_r.shape, dtype=acc, device=x_r.device).index_add_(0, row, dz)
    grad_x_l = torch.zeros(x_l.shape, dtype=acc, device=x_l.device).index_add_(
        0, col.long(), weight.unsqueeze(-1) * g_row + dz)
    grad_att = (ds.unsqueeze(-1) * F.leaky_relu(z, negative_slope)).sum(0)
    grad_edge = dz.to(x_l.dtype) if edge is not None else x_l.new_empty(0)
    return grad_x_l.to(x_l.dtype), grad_x_r.to(x_r.dtype), grad_att.to(att.dtype), grad_edge


def _gatv2_weights_kernel(rowptr, col, x_l, x_r, att, edge, lse, negative_slope) -> Tensor:
    if not kernels_take(x_l):
        row, _, z = _entries(rowptr, col, x_l, x_r, edge)
        scores = _scores(z, att, negative_slope)
        return torch.exp(scores - lse.to(scores.dtype).index_select(0, row))
    x_l, x_r, edge, att = _kernel_inputs(x_l, x_r, edge, att)
    alpha = torch.empty(col.numel(), x_l.size(1), dtype=torch.float32, device=x_l.device)
    _native.gatv2_alpha(rowptr, col, x_l, x_r, edge, att, float(negative_slope),
                        lse.contiguous(), alpha)
    return alpha


# -------------------------------------------------------------- custom ops
@torch.library.custom_op("pyg_ioaware::gatv2_attention", mutates_args=())
def gatv2_attention(rowptr: Tensor, col: Tensor, x_l: Tensor, x_r: Tensor, att: Tensor,
                    edge: Optional[Tensor], negative_slope: float, dropout_p: float, seed: int,
                    hub_quantile: float = DEFAULT_HUB_QUANTILE,
                    out_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    who = "pyg_ioaware::gatv2_attention"
    _check_forward(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p, who, out_bias)
    check_hub_quantile(hub_quantile, who)
    checks.csr_structure_contents(rowptr, col, x_l.size(0), who)
    return _gatv2_kernel(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p, seed,
                         hub_quantile, out_bias)


@gatv2_attention.register_fake
def _gatv2_attention_fake(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p, seed,
                          hub_quantile=DEFAULT_HUB_QUANTILE, out_bias=None):
    _check_forward(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p,
                   "pyg_ioaware::gatv2_attention", out_bias)
    rows = rowptr.size(0) - 1
    return (x_l.new_empty(rows, x_l.size(1), x_l.size(2)),
            x_l.new_empty(rows, x_l.size(1), dtype=accumulator_dtype(x_l.dtype)))


@torch.library.custom_op("pyg_ioaware::gatv2_attention_backward", mutates_args=())
def gatv2_attention_backward(rowptr: Tensor, col: Tensor, rowptr_t: Tensor, col_t: Tensor,
                             perm_t: Tensor, x_l: Tensor, x_r: Tensor, att: Tensor,
                             edge: Optional[Tensor], lse: Tensor, grad_out: Tensor,
                             negative_slope: float, dropout_p: float, seed: int,
                             hub_quantile: float = DEFAULT_HUB_QUANTILE
                             ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    who = "pyg_ioaware::gatv2_attention_backward"
    _check_backward(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att, edge, lse, grad_out,
                    negative_slope, dropout_p, who, hub_quantile)
    checks.csr_structure_contents(rowptr, col, x_l.size(0), who)
    checks.csr_structure_contents(rowptr_t, col_t, x_r.size(0), who)
    return _gatv2_backward_kernel(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att, edge,
                                  lse, grad_out, negative_slope, dropout_p, seed, hub_quantile)


def _check_backward(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att, edge, lse, grad_out,
                    negative_slope, dropout_p, who, hub_quantile) -> None:
    _check_forward(rowptr, col, x_l, x_r, att, edge, negative_slope, dropout_p, who)
    check_hub_quantile(hub_quantile, who)
    checks.csr_structure(rowptr_t, col_t, who)
    if rowptr_t.dtype != rowptr.dtype or rowptr_t.numel() != x_l.size(0) + 1 \
            or col_t.numel() != col.numel() or not isinstance(perm_t, Tensor) \
            or perm_t.dtype != rowptr.dtype or perm_t.shape != col.shape \
            or perm_t.device != rowptr.device:
        raise ValueError(f"{who}: rowptr_t / col_t / perm_t must be the CSR^T of rowptr / col "
                         f"({x_l.size(0) + 1}, {col.numel()} and {col.numel()} entries of "
                         f"{rowptr.dtype})")
    shape = (rowptr.numel() - 1, *x_l.shape[1:])
    for name, t, dtype in (("grad_out", grad_out, x_l.dtype),
                           ("lse", lse, accumulator_dtype(x_l.dtype))):
        want = shape if name != "lse" else shape[:2]
        if not isinstance(t, Tensor) or t.shape != want or t.dtype != dtype \
                or t.device != rowptr.device:
            raise ValueError(f"{who}: {name} must be a {tuple(want)} tensor of {dtype} on "
                             f"{rowptr.device}")


@gatv2_attention_backward.register_fake
def _gatv2_attention_backward_fake(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att, edge,
                                   lse, grad_out, negative_slope, dropout_p, seed,
                                   hub_quantile=DEFAULT_HUB_QUANTILE):
    _check_backward(rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, att, edge, lse, grad_out,
                    negative_slope, dropout_p, "pyg_ioaware::gatv2_attention_backward",
                    hub_quantile)
    grad_edge = torch.empty_like(edge) if edge is not None else x_l.new_empty(0)
    return torch.empty_like(x_l), torch.empty_like(x_r), torch.empty_like(att), grad_edge


@torch.library.custom_op("pyg_ioaware::gatv2_attention_weights", mutates_args=())
def gatv2_attention_weights(rowptr: Tensor, col: Tensor, x_l: Tensor, x_r: Tensor, att: Tensor,
                            edge: Optional[Tensor], lse: Tensor,
                            negative_slope: float) -> Tensor:
    who = "pyg_ioaware::gatv2_attention_weights"
    _check_forward(rowptr, col, x_l, x_r, att, edge, negative_slope, 0.0, who)
    if not isinstance(lse, Tensor) or lse.shape != (rowptr.numel() - 1, x_l.size(1)) \
            or lse.dtype != accumulator_dtype(x_l.dtype):
        raise ValueError(f"{who}: lse must be the forward's [num_dst, heads] "
                         f"{accumulator_dtype(x_l.dtype)} tensor")
    checks.csr_structure_contents(rowptr, col, x_l.size(0), who)
    return _gatv2_weights_kernel(rowptr, col, x_l, x_r, att, edge, lse, negative_slope)


@gatv2_attention_weights.register_fake
def _gatv2_attention_weights_fake(rowptr, col, x_l, x_r, att, edge, lse, negative_slope):
    return x_l.new_empty(col.numel(), x_l.size(1), dtype=accumulator_dtype(x_l.dtype))


# Eager calls on structures known valid (a Graph's) go straight to the kernels.
gatv2_trusted = eager_or_op(_gatv2_kernel, gatv2_attention)
gatv2_backward_trusted = eager_or_op(_gatv2_backward_kernel, gatv2_attention_backward)
gatv2_weights_trusted = eager_or_op(_gatv2_weights_kernel, gatv2_attention_weights)


class GATv2Function(torch.autograd.Function):
    """Differentiable out = GATv2 attention over ``graph`` in x_l, x_r, att
    and edge: forward saves x_l, x_r, att, edge and lse (O(N H C), no
    per-edge tensor, not out); backward recomputes the scores over the graph
    and its CSR^T. Not twice differentiable.

    ``x_lr`` (optional): x_l and x_r as slots 0 and 1 of one tensor [N, 2,
    heads, channels] (one fused projection's output; x_l and x_r are then
    None): its gradient is one tensor the kernels write both slots of.
    ``out_bias`` (optional, [heads, channels]): added to every row of out
    in the kernels' output pass; its gradient is grad_out summed over rows
    (in fp32, then the bias's dtype).
    """

    @staticmethod
    def forward(ctx, graph, x_l, x_r, att, edge, negative_slope, dropout_p, seed, hub_quantile,
                x_lr=None, out_bias=None):
        if x_lr is not None:
            x_l, x_r = x_lr.unbind(1)
        out, lse = gatv2_trusted(graph.rowptr, graph.col, x_l, x_r, att, edge, negative_slope,
                                 dropout_p, seed, hub_quantile, out_bias)
        ctx.graph, ctx.params = graph, (negative_slope, dropout_p, seed, hub_quantile)
        ctx.has_edge = edge is not None
        ctx.bias_dtype = None if out_bias is None else out_bias.dtype
        ctx.mark_non_differentiable(lse)
        if x_lr is not None:
            x_l = x_r = None
        ctx.save_for_backward(x_lr, x_l, x_r, att, edge, lse)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_lse):
        x_lr, x_l, x_r, att, edge, lse = ctx.saved_tensors
        if x_lr is not None:
            x_l, x_r = x_lr.unbind(1)
        graph, t = ctx.graph, ctx.graph.transpose
        args = (graph.rowptr, graph.col, t.rowptr, t.col, t.perm, x_l, x_r, att, edge, lse,
                grad_out, *ctx.params)
        grad_x_lr = slot_gradient(x_lr)
        if grad_x_lr is None:
            grad_x_l, grad_x_r, grad_att, grad_edge = gatv2_backward_trusted(*args)
        else:
            grad_x_l, grad_x_r, grad_att, grad_edge = _gatv2_backward_kernel(
                *args, grad_slots=grad_x_lr.unbind(1))
        grad_edge = grad_edge if ctx.has_edge else None
        grad_bias = None
        if ctx.bias_dtype is not None and ctx.needs_input_grad[10]:
            # Summed in fp32, rounded once to the bias's dtype.
            grad_bias = column_sums(grad_out.reshape(grad_out.size(0), -1),
                                    ctx.bias_dtype).view(att.shape)
        if x_lr is not None:
            return (None, None, None, grad_att, grad_edge, None, None, None, None,
                    stack_slots(grad_x_lr, (grad_x_l, grad_x_r)), grad_bias)
        return (None, grad_x_l, grad_x_r, grad_att, grad_edge, None, None, None, None, None,
                grad_bias)


def _native_autograd(graph, x_l: Optional[Tensor], x_r: Optional[Tensor],
                     x_lr: Optional[Tensor], att: Tensor, edge: Optional[Tensor],
                     negative_slope: float, dropout_p: float, seed: int, hub_quantile: float,
                     out_bias: Optional[Tensor]) -> Optional[Tuple[Tensor, Tensor]]:
    """What ``GATv2Function.apply`` gives, as one autograd node in C++
    (cuda/host/attention_autograd.cpp) where that applies
    (attention_shared.native_autograd_extension), else None. att and
    out_bias go in as fp32 (differentiable casts, no-ops for fp32
    parameters)."""
    extension = native_autograd_extension(graph, x_l if x_lr is None else x_lr, x_lr)
    if extension is None:
        return None
    x_l, x_r, edge, att32 = _kernel_inputs(x_l, x_r, edge, att)
    bias32 = None if out_bias is None else out_bias.to(torch.float32).contiguous()
    structure, transposed = native_structures(graph, hub_quantile,
                                              (x_l, x_r, x_lr, att32, edge, bias32))
    out, lse = _native._host_call(extension.gatv2_attention, x_l, x_r, x_lr, att32, edge,
                                  bias32, structure, transposed, float(negative_slope),
                                  float(dropout_p), int(seed))
    return out, lse


def graph_gatv2(graph, x_l: Tensor, x_r: Tensor, att: Tensor, edge: Optional[Tensor] = None,
                negative_slope: float = 0.2, dropout_p: float = 0.0, seed: int = 0,
                hub_quantile: float = DEFAULT_HUB_QUANTILE,
                out_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(out, lse) of GATv2 attention over ``graph`` (rows = destinations),
    inputs already checked by the caller, ``out_bias`` [heads, channels]
    (optional) added to every row of out; differentiable in x_l, x_r, att,
    edge and out_bias (lse is not): through ``GATv2Function`` (its C++ twin
    where the host extension serves the call) where the kernels run, else
    through ``gatv2_reference`` under torch's autograd."""
    native = _native_autograd(graph, x_l, x_r, None, att, edge, negative_slope, dropout_p, seed,
                              hub_quantile, out_bias)
    if native is not None:
        return native
    if differentiable_by_torch(x_l, (x_l, x_r, att, edge, out_bias)):
        out, lse = gatv2_reference(graph.rowptr, graph.col, x_l, x_r, att, edge, negative_slope,
                                   dropout_p, seed, out_bias)
        return out, lse.detach()
    return GATv2Function.apply(graph, x_l, x_r, att, edge, negative_slope, dropout_p, seed,
                               hub_quantile, None, out_bias)


def graph_gatv2_packed(graph, x_lr: Tensor, att: Tensor, edge: Optional[Tensor] = None,
                       negative_slope: float = 0.2, dropout_p: float = 0.0, seed: int = 0,
                       hub_quantile: float = DEFAULT_HUB_QUANTILE,
                       out_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`~pyg_ioaware.ops.attention.graph_gatv2` with x_l and x_r the
    slots of one tensor ``x_lr`` [N, 2, heads, channels] (a square graph's
    fused lin_l / lin_r output): read in place, and its gradient written by
    the kernels as one tensor (one matrix product backward instead of two
    and their sum)."""
    native = _native_autograd(graph, None, None, x_lr, att, edge, negative_slope, dropout_p, seed,
                              hub_quantile, out_bias)
    if native is not None:
        return native
    if differentiable_by_torch(x_lr[:, 0], (x_lr, att, edge, out_bias)):
        return graph_gatv2(graph, *x_lr.unbind(1), att, edge, negative_slope, dropout_p, seed,
                           hub_quantile, out_bias)
    return GATv2Function.apply(graph, None, None, att, edge, negative_slope, dropout_p, seed,
                               hub_quantile, x_lr, out_bias)
