"""The SpMM family's custom ops and their autograd.

``pyg_ioaware::spmm(rowptr, col, values, x, num_out, transpose)``

    transpose=False: Y = A X,   Y[r] = sum_{e in row r} values[e] * X[col[e]]
    transpose=True:  Y = A^T X, Y[c] = sum_{e: col[e] = c} values[e] * X[row(e)]

for the CSR matrix A = (rowptr, col, values); Y has ``num_out`` rows; rows
with no entry give zeros. x and values are float32/float64/float16/bfloat16
of one dtype; accumulation in float32 (float64 for float64), output in x's
dtype.

``pyg_ioaware::sddmm(rowptr, col, g, x)``: out[e] = <g[row(e)], x[col[e]]>
for every CSR entry e (the gradient of SpMM's values).

Both ops are forward-only; :class:`SpmmFunction` makes SpMM differentiable
in x and values (double backward included): dX = A^T dY runs as a plain
SpMM over the Graph's materialized CSR^T (or, with config.spmm_backward =
"transpose", as cuSPARSE's transposed SpMM over A), dvalues = sddmm. It is an
autograd.Function rather than ``register_autograd`` because the latter adds
about 50 us of Python per call in torch 2.13 (``fill_defaults`` rebuilds the
schema per argument), a large share of a small graph's step; torch.compile
traces the Function and the ops inside it.

CUDA runs through the native library (cuSPARSE plans cached per structure,
width and dtype; see spmm_plan). CPU, and CUDA without the native library,
run the plain-torch implementation, which is the tests' oracle.
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from .. import _native, config
from .spmm_plan import PLANS


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _row_of_entries(rowptr: Tensor, nnz: int) -> Tensor:
    rows = torch.arange(rowptr.numel() - 1, device=rowptr.device)
    return torch.repeat_interleave(rows, rowptr.diff(), output_size=nnz)


def _spmm_torch(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, num_out: int,
                transpose: bool) -> Tensor:
    acc = _accumulator(x.dtype)
    row = _row_of_entries(rowptr, col.numel())
    src, dst = (row, col.long()) if transpose else (col.long(), row)
    messages = x.index_select(0, src).to(acc) * values.to(acc).unsqueeze(1)
    out = torch.zeros(num_out, x.size(1), dtype=acc, device=x.device)
    return out.index_add_(0, dst, messages).to(x.dtype)


def _sddmm_torch(rowptr: Tensor, col: Tensor, g: Tensor, x: Tensor) -> Tensor:
    acc = _accumulator(x.dtype)
    row = _row_of_entries(rowptr, col.numel())
    dots = (g.index_select(0, row).to(acc) * x.index_select(0, col.long()).to(acc)).sum(-1)
    return dots.to(x.dtype)


_WARNED = {"no_native": False}


def _native_ready(x: Tensor) -> bool:
    """True where the native library serves CUDA tensors; warns once if not."""
    if _native.library() is not None:
        return True
    if not _WARNED["no_native"]:
        _WARNED["no_native"] = True
        warnings.warn("pyg_ioaware: the native CUDA library is not available; CUDA tensors use "
                      "the plain-torch implementation (slower, more memory)")
    return False


def _check_spmm_args(rowptr, col, values, x, num_out, transpose):
    """Plain comparisons (they also hold for symbolic sizes under torch.compile);
    torch._check with lazy messages costs several times more per eager call."""
    if x.dim() != 2:
        raise ValueError(f"spmm: x must be 2-D, got {x.dim()}-D")
    if values.dtype != x.dtype:
        raise ValueError(f"spmm: values dtype {values.dtype} differs from x dtype {x.dtype}")
    if rowptr.dtype != col.dtype:
        raise ValueError("spmm: rowptr and col dtypes differ")
    if col.size(0) != values.size(0):
        raise ValueError("spmm: one value per entry expected")
    rows_of = x.size(0) if transpose else num_out
    if rows_of != rowptr.size(0) - 1:
        raise ValueError(f"spmm: the CSR matrix has {rowptr.size(0) - 1} rows, expected {rows_of}")


def _spmm_cpu(rowptr, col, values, x, num_out, transpose):
    _check_spmm_args(rowptr, col, values, x, num_out, transpose)
    return _spmm_torch(rowptr, col, values, x, num_out, transpose)


@torch.library.custom_op("pyg_ioaware::spmm", mutates_args=())
def spmm(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, num_out: int,
         transpose: bool) -> Tensor:
    return _spmm_cpu(rowptr, col, values, x, num_out, transpose)


@spmm.register_kernel("cuda")
def _spmm_cuda(rowptr, col, values, x, num_out, transpose):
    _check_spmm_args(rowptr, col, values, x, num_out, transpose)
    if not _native_ready(x):
        return _spmm_torch(rowptr, col, values, x, num_out, transpose)
    x = x.contiguous()
    out = torch.empty(num_out, x.size(1), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    if col.numel() == 0 or x.size(0) == 0:
        return out.zero_()
    num_cols = num_out if transpose else x.size(0)
    plan = PLANS.get(rowptr, col, values, x, out, num_cols, transpose)
    plan.run(values.contiguous(), x, out)
    return out


@spmm.register_fake
def _spmm_fake(rowptr, col, values, x, num_out, transpose):
    _check_spmm_args(rowptr, col, values, x, num_out, transpose)
    return x.new_empty(num_out, x.size(1))


_EAGER_KERNELS = {"cpu": _spmm_cpu, "cuda": _spmm_cuda}


def spmm_forward(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, num_out: int,
                 transpose: bool) -> Tensor:
    """``pyg_ioaware::spmm`` without autograd. Eager calls go straight to the
    device kernel: the custom op's Python dispatch costs ~20 us a call.
    Compilation and other devices (meta) use the registered op."""
    kernel = _EAGER_KERNELS.get(x.device.type)
    if kernel is None or torch.compiler.is_compiling():
        kernel = spmm
    return kernel(rowptr, col, values, x, num_out, transpose)


class SpmmFunction(torch.autograd.Function):
    """Differentiable Y = A X (transpose=False) or Y = A^T X (transpose=True)
    for A given as CSR (rowptr, col, values) and as the CSR of its transpose
    (rowptr_t, col_t, values_t), which backward uses."""

    @staticmethod
    def forward(ctx, rowptr, col, values, rowptr_t, col_t, values_t, x, transpose):
        num_out = rowptr_t.size(0) - 1 if transpose else rowptr.size(0) - 1
        ctx.transpose = transpose
        ctx.save_for_backward(rowptr, col, values, rowptr_t, col_t, values_t,
                              x if ctx.needs_input_grad[2] else None)
        return spmm_forward(rowptr, col, values, x, num_out, transpose)

    @staticmethod
    def backward(ctx, grad_out):
        rowptr, col, values, rowptr_t, col_t, values_t, x = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_x = grad_values = None
        a = (rowptr, col, values, rowptr_t, col_t, values_t)
        if ctx.needs_input_grad[6]:
            if ctx.transpose:  # Y = A^T X  =>  dX = A dY
                grad_x = SpmmFunction.apply(*a, grad_out, False)
            elif config.spmm_backward == "transpose":  # dX = A^T dY over A's CSR
                grad_x = SpmmFunction.apply(*a, grad_out, True)
            else:  # dX = A^T dY as a plain SpMM over the materialized CSR^T
                grad_x = SpmmFunction.apply(rowptr_t, col_t, values_t, rowptr, col, values,
                                            grad_out, False)
        if ctx.needs_input_grad[2]:
            g, xx = (x, grad_out) if ctx.transpose else (grad_out, x)
            grad_values = sddmm(rowptr, col, g, xx)
        return None, None, grad_values, None, None, None, grad_x, None


@torch.library.custom_op("pyg_ioaware::sddmm", mutates_args=())
def sddmm(rowptr: Tensor, col: Tensor, g: Tensor, x: Tensor) -> Tensor:
    _check_sddmm_args(rowptr, col, g, x)
    return _sddmm_torch(rowptr, col, g, x)


def _check_sddmm_args(rowptr, col, g, x):
    if g.dim() != 2 or x.dim() != 2:
        raise ValueError("sddmm: g and x must be 2-D")
    if g.size(1) != x.size(1) or g.dtype != x.dtype:
        raise ValueError("sddmm: g and x differ in width or dtype")
    if g.size(0) != rowptr.size(0) - 1:
        raise ValueError("sddmm: g needs one row per CSR row")


@sddmm.register_kernel("cuda")
def _sddmm_cuda(rowptr, col, g, x):
    _check_sddmm_args(rowptr, col, g, x)
    if not _native_ready(x):
        return _sddmm_torch(rowptr, col, g, x)
    g, x = g.contiguous(), x.contiguous()
    out = torch.empty(col.numel(), dtype=x.dtype, device=x.device)
    if out.numel() == 0 or x.size(1) == 0:
        return out.zero_()
    desc = _native.csr(rowptr, col, None, x.size(0), x.dtype)
    _native.check(_native.library().pygio_sddmm(
        desc, g.data_ptr(), x.data_ptr(), x.size(1), out.data_ptr(), x.device.index,
        _native.stream_of(x)))
    return out


@sddmm.register_fake
def _sddmm_fake(rowptr, col, g, x):
    _check_sddmm_args(rowptr, col, g, x)
    return x.new_empty(col.size(0))
