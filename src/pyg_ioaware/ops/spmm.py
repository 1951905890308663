"""The SpMM family's custom ops and their autograd.

``pyg_ioaware::spmm(rowptr, col, values, x, num_out, transpose, bias=None, out_dtype=None)``

    transpose=False: Y = A X + b,  Y[r] = sum_{e in row r} values[e] * X[col[e]] + b
    transpose=True:  Y = A^T X + b, Y[c] = sum_{e: col[e] = c} values[e] * X[row(e)] + b

for the CSR matrix A = (rowptr, col, values); Y has ``num_out`` rows; rows
with no entry give b (zeros without a bias). x is 2-D with rows of inner
stride 1, values and the optional bias 1-D, all float32/float64/float16/
bfloat16 of one dtype; accumulation in float32 (float64 for float64),
output in x's dtype. A mixed call (``out_dtype`` float32 for 16-bit x, or
16-bit for float32 x) takes float32 values and bias and writes Y in
``out_dtype``: PyG's float32 edge weights times 16-bit messages under
autocast (GCNConv), and that product's gradient. The kernels of our own
add the bias inside the aggregation (no extra pass over Y).

``pyg_ioaware::sddmm(rowptr, col, g, x)``: out[e] = <g[row(e)], x[col[e]]>
for every CSR entry e (the gradient of SpMM's values).

Both ops check every input (ops.checks) before any kernel runs, the CSR
contents included the first time a structure is seen, so no input can make
a kernel read out of bounds. Both are forward-only; :class:`SpmmFunction`
makes SpMM differentiable in x and values (double backward included): dX =
A^T dY runs as a plain SpMM over the Graph's CSR^T or as a transposed
SpMM over A (ours or cuSPARSE's) (config.spmm_backward, :class:`LazyTranspose`),
dvalues = sddmm. It is an autograd.Function rather than
``register_autograd`` because the latter adds about 50 us of Python per
call in torch 2.13, a large share of a small graph's step; torch.compile
traces the Function and the ops inside it.

The kernel is chosen per shape class by ops.tuning among the backends of
ops.spmm_backends (kernels of our own, cuSPARSE algorithms, plain torch).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import _native, _native_host
from ..graph import entry_rows
from . import checks, tuning
from .bias_gradient import column_sums
from .dispatch import accumulator_dtype, eager_or_op, native_ready
from .hubs import own_degree_bound
from .spmm_backends import FAMILY, OwnCsrBackend, SpmmCall, run_spmm


HALF_DTYPES = (torch.float16, torch.bfloat16)


def mixed_call(x_dtype: torch.dtype, out_dtype: torch.dtype) -> bool:
    """Whether an SpMM of x in ``x_dtype`` writing ``out_dtype`` is one the
    kernels make in the mixed form: float32 Y of 16-bit x, or 16-bit Y of
    float32 x (float32 values and bias)."""
    return ((x_dtype in HALF_DTYPES and out_dtype == torch.float32)
            or (x_dtype == torch.float32 and out_dtype in HALF_DTYPES))


#: A backward dX = A^T dY of a mixed call (float32 dY, 16-bit x) casts dY
#: to x's dtype first and runs a 16-bit SpMM where A has at least this many
#: entries per row of dY, else it gathers float32 rows of dY (the kernels'
#: mixed form, one launch fewer). Every entry gathers a row of dY: the cast
#: (6 bytes an element of dY, once) costs less than gathering rows twice as
#: wide from about three entries a row. H200, GCNConv bf16 autocast D=512
#: backward: pokec-like 19.9 ms gathering float32 against 12.8 cast first,
#: products-like 38.2 against 23.3; the one loss measured, web-like D=64
#: (5.5 entries a row, mostly self loops), 1.47 against 1.58.
CAST_GRAD_FIRST_DEGREE = 4


def cast_grad_first(x_dtype: torch.dtype, nnz: int, grad_rows: int) -> bool:
    """Whether dX = A^T dY in 16-bit ``x_dtype`` from a float32 dY of
    ``grad_rows`` rows, A with ``nnz`` entries, casts dY and A's values to
    ``x_dtype`` first (a 16-bit SpMM) rather than gathering float32 dY (the
    kernels' mixed form); see CAST_GRAD_FIRST_DEGREE."""
    return x_dtype in HALF_DTYPES and nnz >= CAST_GRAD_FIRST_DEGREE * grad_rows


def spmm_values_dtype(x_dtype: torch.dtype, out_dtype: Optional[torch.dtype],
                      who: str = "pyg_ioaware::spmm") -> torch.dtype:
    """The dtype an SpMM's values and bias must have: x's, or float32 for a
    :func:`mixed_call`; any other ``out_dtype`` than x's is a TypeError."""
    if out_dtype is None or out_dtype == x_dtype:
        return x_dtype
    if mixed_call(x_dtype, out_dtype):
        return torch.float32
    raise TypeError(f"{who}: out_dtype must be x's dtype ({x_dtype}), float32 for 16-bit x or "
                    f"16-bit for float32 x, got {out_dtype}")


def _check_spmm(rowptr, col, values, x, num_out: int, transpose: bool, bias=None,
                out_dtype=None) -> None:
    who = "pyg_ioaware::spmm"
    checks.csr_structure(rowptr, col, who)
    if not isinstance(x, Tensor) or x.dtype not in checks.FEATURE_DTYPES:
        raise TypeError(f"{who}: x must be a tensor of one of {checks.FEATURE_DTYPES}")
    values_dtype = spmm_values_dtype(x.dtype, out_dtype, who)
    if num_out < 0:
        raise ValueError(f"{who}: num_out must be non-negative, got {num_out}")
    rows_of_a = rowptr.size(0) - 1
    x_rows = rows_of_a if transpose else x.size(0)
    checks.dense(x, "x", x_rows, x.dtype, rowptr.device, who)
    if transpose is False and num_out != rows_of_a:
        raise ValueError(f"{who}: the CSR matrix has {rows_of_a} rows, num_out is {num_out}")
    checks.entry_values(values, col.size(0), values_dtype, rowptr.device, who)
    checks.bias(bias, x.size(1), values_dtype, rowptr.device, who)


def _spmm_kernel(rowptr, col, values, x, num_out, transpose, bias=None,
                 out_dtype=None) -> Tensor:
    return run_spmm(SpmmCall(rowptr, col, values.contiguous(), x.contiguous(), num_out,
                             transpose, None if bias is None else bias.contiguous(),
                             out_dtype=out_dtype))


@torch.library.custom_op("pyg_ioaware::spmm", mutates_args=())
def spmm_csr(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, num_out: int,
             transpose: bool, bias: Optional[Tensor] = None,
             out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """``torch.ops.pyg_ioaware.spmm``: Y = A X + b, or Y = A^T X + b with
    ``transpose``, for a CSR matrix A (forward only; see
    :func:`gcn_adjacency` for a differentiable propagation).

    Args:
        rowptr (Tensor): [R + 1] CSR row pointers, int32 or int64.
        col (Tensor): [nnz] column indices, the same dtype as ``rowptr``.
        values (Tensor): [nnz] entries of A, in ``x``'s dtype (float32 for a
            mixed call).
        x (Tensor): [num_cols, F] dense input (float32, float64, float16 or
            bfloat16); [R, F] with ``transpose``.
        num_out (int): rows of Y: R, or the column count with ``transpose``.
        transpose (bool): multiply by A^T instead of A.
        bias (Tensor, optional): [F] added to every row of Y, in the values'
            dtype.
        out_dtype (torch.dtype, optional): Y's dtype: x's (default), float32
            for 16-bit x or 16-bit for float32 x (a mixed call).

    Returns:
        Tensor: Y [num_out, F] in ``out_dtype`` (16-bit inputs accumulate in
        float32). Every input is checked before any kernel runs (a CSR
        structure's contents once, the first time the op sees it).
    """
    _check_spmm(rowptr, col, values, x, num_out, transpose, bias, out_dtype)
    num_cols = num_out if transpose else x.size(0)
    checks.csr_structure_contents(rowptr, col, num_cols, "pyg_ioaware::spmm")
    return _spmm_kernel(rowptr, col, values, x, num_out, transpose, bias, out_dtype)


@spmm_csr.register_fake
def _spmm_fake(rowptr, col, values, x, num_out, transpose, bias=None, out_dtype=None):
    _check_spmm(rowptr, col, values, x, num_out, transpose, bias, out_dtype)
    return x.new_empty(num_out, x.size(1), dtype=x.dtype if out_dtype is None else out_dtype)


# Eager calls on a structure known valid (a Graph's) go straight to the kernel.
spmm_trusted = eager_or_op(_spmm_kernel, spmm_csr)


class SpmmFunction(torch.autograd.Function):
    """Differentiable Y = A X + b (transpose=False) or Y = A^T X + b
    (transpose=True), Y with ``num_out`` rows in ``out_dtype`` (None: x's;
    else a mixed call, float32 values), for A given as CSR (rowptr, col,
    values) and an optional bias b in the values' dtype (db = column sums
    of dY). Its backward needs A^T: as a CSR (rowptr_t, col_t, values_t),
    or, where those are None, from ``lazy`` (a :class:`LazyTranspose`,
    which may give a CSR or None), else as a transposed SpMM over A; dX
    comes out of it in x's dtype (a mixed call the other way). Both
    structures must be known valid (a Graph's)."""

    @staticmethod
    def forward(ctx, rowptr, col, values, rowptr_t, col_t, values_t, x, transpose, num_out,
                lazy=None, bias=None, out_dtype=None):
        ctx.transpose = transpose
        ctx.num_x = x.size(0)
        ctx.lazy = lazy
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(rowptr, col, values, rowptr_t, col_t, values_t,
                              x if ctx.needs_input_grad[2] else None)
        return spmm_trusted(rowptr, col, values, x, num_out, transpose, bias, out_dtype)

    @staticmethod
    def backward(ctx, grad_out):
        rowptr, col, values, rowptr_t, col_t, values_t, x = ctx.saved_tensors
        if rowptr_t is None and ctx.lazy is not None:
            rowptr_t, col_t, values_t = ctx.lazy.for_backward(grad_out.size(1))
        grad_out = grad_out.contiguous()
        grad_x = grad_values = grad_bias = None
        if ctx.needs_input_grad[6]:
            grad_x = _grad_x(ctx, grad_out, (rowptr, col, values), (rowptr_t, col_t, values_t))
        if ctx.needs_input_grad[2]:
            g, xx = (x, grad_out) if ctx.transpose else (grad_out, x)
            if g.dtype != values.dtype or xx.dtype != values.dtype:  # mixed: in the values' float32
                g, xx = g.to(values.dtype), xx.to(values.dtype)
            grad_values = sddmm_trusted(rowptr, col, g.contiguous(), xx.contiguous())
        if len(ctx.needs_input_grad) > 10 and ctx.needs_input_grad[10]:
            grad_bias = column_sums(grad_out)
        return (None, None, grad_values, None, None, None, grad_x, None, None, None,
                grad_bias, None)


def _grad_x(ctx, grad_out: Tensor, a: tuple, a_t: tuple) -> Tensor:
    """SpmmFunction's dX, in x's dtype: A dY for Y = A^T X; for Y = A X,
    A^T dY as a plain SpMM over the CSR^T ``a_t`` where there is one, else
    as a transposed SpMM over ``a``. Where Y's dtype differs from x's, a
    mixed call again (the other way), or, in a backward that records no
    graph, dY and the values cast to x's dtype first (cast_grad_first).
    Differentiable again where a double backward records a graph."""
    if ctx.transpose or a_t[0] is None:
        used, other, transpose = a, a_t, not ctx.transpose
    else:
        used, other, transpose = a_t, a, False
    dtype = None if grad_out.dtype == ctx.x_dtype else ctx.x_dtype
    if torch.is_grad_enabled():
        return SpmmFunction.apply(*used, *other, grad_out, transpose, ctx.num_x, None, None,
                                  dtype)
    if dtype is not None and cast_grad_first(dtype, a[1].numel(), grad_out.size(0)):
        grad_out, used, dtype = grad_out.to(dtype), (*used[:2], used[2].to(dtype)), None
    return spmm_trusted(*used, grad_out, ctx.num_x, transpose, None, dtype)


class LazyTranspose:
    """Decides, in backward, whether a Graph's A^T is worth a CSR^T
    (config.spmm_backward = "auto"). The Graph's first backward pass runs
    the transposed SpMM over A where it is small (a one-step mini-batch
    graph pays for no sort); a backward pass of a later autograd run over
    the same Graph (the graph is reused), or a transposed SpMM of at least
    MATERIALIZE_WORK entries x width, builds the CSR^T once and runs a
    plain SpMM over it from then on. ``edge_values``
    (ops.normalize.EdgeValues) carry the values to CSR^T order."""

    # A transposed SpMM scatters with atomics, two to three times slower than
    # a plain SpMM over the CSR^T (docs/results.md, kernels alone); from about
    # this much work one sort (~0.1 ms for 1.4M entries on an H200) costs
    # less than the difference. The 2-layer large mini-batch (1.4M entries,
    # widths 256 and 47) measured 8.4 ms a step with the CSR^T against 9.0 ms
    # with transposed SpMMs; the medium one (210k entries, widths 128 and 47)
    # is bound by host time, where the transposed SpMM's two launches win.
    MATERIALIZE_WORK = 1 << 25

    def __init__(self, graph, edge_values):
        self.graph = graph
        self.edge_values = edge_values

    def for_backward(self, width: int) -> tuple:
        """(rowptr_t, col_t, values_t) for a backward SpMM of ``width``
        columns, or (None, None, None) for the transposed SpMM."""
        state = self.graph.state
        if state.transpose is None and not torch.are_deterministic_algorithms_enabled():
            task = torch._C._current_graph_task_id()
            if state.first_backward_task is None:
                state.first_backward_task = task
            if (state.first_backward_task == task
                    and self.graph.num_edges * width < self.MATERIALIZE_WORK):
                return None, None, None
        t = self.graph.transpose
        return t.rowptr, t.col, self.edge_values.values_t


# ------------------------------------------------------- autograd in C++
class NativeAutogradFallback:
    """What the C++ SpMM autograd (cuda/host/spmm_autograd.cpp) asks
    Python for: the graph's CSR^T where its lazy rule (LazyTranspose's)
    wants one, and, for a backward that records a graph (create_graph=True),
    SpmmFunction's differentiable dX = A^T dY (in ``x_dtype``) and db =
    column sums of dY."""

    def __init__(self, graph, edge_values, x_dtype: torch.dtype):
        self.graph = graph
        self.edge_values = edge_values
        self.x_dtype = x_dtype

    def transpose(self) -> tuple:
        """(rowptr_t, col_t, values_t, degree bound) of the CSR^T."""
        return _transpose_args(self.graph, self.edge_values)

    def differentiable_backward(self, grad_out: Tensor) -> tuple:
        """(dX, db) recorded for a double backward, over the CSR^T."""
        graph, t = self.graph, self.graph.transpose
        mixed = None if grad_out.dtype == self.x_dtype else self.x_dtype
        grad_x = SpmmFunction.apply(t.rowptr, t.col, self.edge_values.values_t, graph.rowptr,
                                    graph.col, self.edge_values.values, grad_out, False,
                                    graph.num_src, None, None, mixed)
        return grad_x, column_sums(grad_out)


def _transpose_args(graph, edge_values) -> tuple:
    """(rowptr_t, col_t, values_t, degree bound) of the graph's CSR^T, as the
    C++ SpMM autograd takes them."""
    t = graph.transpose
    return t.rowptr, t.col, edge_values.values_t, own_degree_bound(t.rowptr)


#: Feature dtypes the C++ autograd takes (float64 stays on the Python path).
NATIVE_AUTOGRAD_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class NativeSpmmCall:
    """A resolved call of the C++ SpMM autograd (:func:`native_spmm_call`):
    the structure and values, the CSR^T where the call has one, and the
    flags, so that a later call of the same kind over the same graph runs
    it again without resolving it (nn.GCNConv's resolved forward). Holds no
    Graph: each call makes the NativeAutogradFallback the autograd node
    keeps."""

    __slots__ = ("extension", "a", "transpose", "num_src", "deterministic", "edge_values",
                 "x_dtype")

    def __init__(self, extension, a: tuple, transpose: Optional[tuple], num_src: int,
                 deterministic: bool, edge_values, x_dtype: torch.dtype):
        self.extension = extension
        self.a = a
        self.transpose = transpose
        self.num_src = num_src
        self.deterministic = deterministic
        self.edge_values = edge_values
        self.x_dtype = x_dtype

    @property
    def replayable(self) -> bool:
        """Whether a later call may run this one again: the degree bounds of
        the structures are known (an unknown one, -1, is read for the next
        call and must be picked up then)."""
        return self.a[3] >= 0 and (self.transpose is None or self.transpose[3] >= 0)

    def __call__(self, graph, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        x = x if x.stride(1) == 1 else x.contiguous()
        return self.extension.spmm(x, None if bias is None else bias.contiguous(),
                                   *self.operand(graph))

    def operand(self, graph) -> tuple:
        """A as the C++ nodes take it: (a, a_t, num_cols, materialize_work,
        cast_grad_first_degree, deterministic, fallback)."""
        fallback = NativeAutogradFallback(graph, self.edge_values, self.x_dtype)
        return (self.a, self.transpose, self.num_src, LazyTranspose.MATERIALIZE_WORK,
                CAST_GRAD_FIRST_DEGREE, self.deterministic, fallback)


def native_spmm_call(graph, edge_values, x: Tensor, backward: str) -> Optional[NativeSpmmCall]:
    """The C++ autograd call (pyg_ioaware._native_host) that stands in for
    ``SpmmFunction`` over ``graph`` for features like ``x``, where it
    applies, else None. Run on x and a bias, it gives Y = A X + b (the
    values needing no gradient; Y in float32 where x is 16-bit and the
    values float32 (a mixed call), else in x's dtype; a bias of another
    dtype than Y's added after the aggregation, promoting as torch does).

    It applies in eager mode on CUDA with config.native_host on and the
    extension loaded, for 16/32-bit features, a non-empty problem,
    config.spmm_backward ``"auto"`` (the same lazy CSR^T rule) or
    ``"materialized"``, where the tuner gives the kernels of our own every
    SpMM the call and its backward may run (the transposed SpMM over A
    only where LazyTranspose's rule may pick it). The deterministic flag is
    read here."""
    if not (x.is_cuda and backward in ("auto", "materialized")
            and x.dtype in NATIVE_AUTOGRAD_DTYPES and not edge_values.values.requires_grad
            and not torch.compiler.is_compiling()):
        return None
    extension = _native_host.active()
    nnz, width = graph.num_edges, x.size(1)
    if extension is None or nnz == 0 or width == 0 or graph.num_src == 0:
        return None
    has_transpose = backward == "materialized" or graph.state.transpose is not None
    deterministic = torch.are_deterministic_algorithms_enabled()
    # A call resolved before over the graph's cached values, for these
    # features and flags, is run again as it is (GraphState.native_spmm_calls).
    key = (id(edge_values), x.dtype, width, backward, deterministic, has_transpose)
    known = graph.state.native_spmm_calls.get(key)
    if known is not None and known.edge_values is edge_values and known.extension is extension:
        return known
    # Whether the backward may run the transposed SpMM over A (LazyTranspose's
    # rule, which the C++ autograd applies): else only the two forward classes
    # need be ours (a large graph's transposed class is cuSPARSE's).
    scatter = not (has_transpose or deterministic) and (
        nnz * width < LazyTranspose.MATERIALIZE_WORK)
    mixed = edge_values.values.dtype != x.dtype  # float32 Y of 16-bit x: our kernels, untuned
    if not mixed and not edge_values.own_kernels.get((width, scatter), False):
        calls = (("forward", graph.num_dst), ("forward", graph.num_src))
        if scatter:
            calls += (("transposed", graph.num_dst),)
        names = tuning.untimed_choices(FAMILY, width, x.dtype, x.device, nnz, calls)
        if names is None or any(name != OwnCsrBackend.name for name in names):
            return None
        edge_values.own_kernels[(width, scatter)] = True  # decided classes stay decided
    a = (graph.rowptr, graph.col, edge_values.values, own_degree_bound(graph.rowptr))
    call = NativeSpmmCall(extension, a,
                          _transpose_args(graph, edge_values) if has_transpose else None,
                          graph.num_src, deterministic, edge_values, x.dtype)
    if edge_values.cached and call.replayable:
        graph.state.native_spmm_calls[key] = call
    return call


# ------------------------------------------------------------------ SDDMM
def sddmm_reference(rowptr: Tensor, col: Tensor, g: Tensor, x: Tensor) -> Tensor:
    """Plain-torch out[e] = <g[row(e)], x[col[e]]> (oracle and CPU path)."""
    acc = accumulator_dtype(x.dtype)
    row = entry_rows(rowptr, col.numel())
    dots = (g.index_select(0, row).to(acc) * x.index_select(0, col).to(acc)).sum(-1)
    return dots.to(x.dtype)


def _check_sddmm(rowptr, col, g, x) -> None:
    who = "pyg_ioaware::sddmm"
    checks.csr_structure(rowptr, col, who)
    if not isinstance(x, Tensor) or x.dtype not in checks.FEATURE_DTYPES:
        raise TypeError(f"{who}: x must be a tensor of one of {checks.FEATURE_DTYPES}")
    checks.dense(x, "x", None, x.dtype, rowptr.device, who)
    checks.dense(g, "g", rowptr.size(0) - 1, x.dtype, rowptr.device, who, width=x.size(1))


def _sddmm_kernel(rowptr, col, g, x) -> Tensor:
    if not native_ready(x.device):
        return sddmm_reference(rowptr, col, g, x)
    g, x = g.contiguous(), x.contiguous()
    out = torch.empty(col.numel(), dtype=x.dtype, device=x.device)
    if out.numel() == 0 or x.size(1) == 0:
        return out.zero_()
    _native.sddmm(rowptr, col, g, x, out)
    return out


@torch.library.custom_op("pyg_ioaware::sddmm", mutates_args=())
def sddmm_csr(rowptr: Tensor, col: Tensor, g: Tensor, x: Tensor) -> Tensor:
    """``torch.ops.pyg_ioaware.sddmm``: out[e] = <g[row(e)], x[col[e]]> for
    every CSR entry e (the gradient of SpMM with respect to its values).

    Args:
        rowptr (Tensor): [R + 1] CSR row pointers, int32 or int64.
        col (Tensor): [nnz] column indices.
        g (Tensor): [R, F] (the output gradient).
        x (Tensor): [num_cols, F], the same dtype as ``g``.

    Returns:
        Tensor: [nnz] in CSR order, ``g``'s dtype.
    """
    _check_sddmm(rowptr, col, g, x)
    checks.csr_structure_contents(rowptr, col, x.size(0), "pyg_ioaware::sddmm")
    return _sddmm_kernel(rowptr, col, g, x)


@sddmm_csr.register_fake
def _sddmm_fake(rowptr, col, g, x):
    _check_sddmm(rowptr, col, g, x)
    return x.new_empty(col.size(0))


sddmm_trusted = eager_or_op(_sddmm_kernel, sddmm_csr)
