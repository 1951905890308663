"""The reduction family's ops: neighbour min and max, and their autograd.

``pyg_ioaware::neighbor_minmax(rowptr, col, x, reduce, hub_quantile, with_arg, arg_bytes) -> (out, arg)``

    out[r, f] = min / max over the entries e of row r of x[col[e], f]   (0 for a row with no entry)

for the CSR structure (rowptr, col) (rows = destinations, col = sources, x
[num_src, C], any floating dtype; out in x's dtype). Values compare as
torch.amin / amax do: NaN propagates, -0.0 equals +0.0. (The CUDA kernels
return a zero result as +0.0 where torch may keep -0.0, and NaN as the
canonical NaN.) ``arg`` ([num_rows, C] codes of ``arg_bytes`` bytes: uint8
or int16 holding an unsigned 16-bit code; an empty tensor without
``with_arg``) tells the backward where each element's gradient goes, with
W = 2^(8 arg_bytes) - 2 (:func:`walk_code`): code < W, to the source of the
row's entry at that position (the one entry equal to the result); W, to
the entries a walk of the row finds equal to the result (a tie, a zero,
NaN or worst-infinity result: +inf for min, -inf for max, or a winner
past position W - 1); W + 1, nowhere (an empty row). Narrow codes cost a
walk on long rows, never a wrong gradient.

``pyg_ioaware::neighbor_minmax_backward(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out, reduce) -> grad_x``

    PyG's gradient (torch.scatter_reduce amin / amax, include_self=False on
    a zero-filled output): grad_out[r, f] split evenly among the entries of
    row r equal to out[r, f], the zero fill counted once more where out[r,
    f] is 0; NaN to every entry of a NaN result. With the CSR^T (rowptr_t,
    col_t) it sums in a fixed order without atomics (deterministic).

The differentiable form's CUDA backward takes the path :func:`backward_path`
chooses (``config.minmax_backward``): a plain winner's gradient added to
its source with one atomicAdd; or the plain winners written grouped by
entry, then gathered per source over the graph's CSR^T (buckets: no
scattered read-modify-write an element where the source gradient is far
larger than L2, for a workspace of 4-6 bytes an output element). Under
torch.use_deterministic_algorithms(True) it gathers every source's
gradient over the CSR^T straight from arg, each entry's winners found by
its position in its row (the CSR^T's permutation), in a fixed order.

On CUDA the kernels of cuda/minmax run: light rows a warp each with 16-byte
loads, rows above the ``hub_quantile`` degree quantile (0.99 by default,
cached beside the structure) split into 256-entry chunks over all SMs and
merged with 64-bit atomicMax; where x is at least 32 L2 caches and rows
average 8 entries or more, the forward runs in column slabs of 512 bytes a
row, one launch each, so that gathered source rows stay in L2. fp64 rows
are never split. Elsewhere the
plain-torch reference runs, which gives the same numbers (it materializes
the [E, C] messages, as PyG does); there the differentiable form
(:func:`graph_minmax`) is PyG's own computation under torch's autograd,
which saves the messages for backward as PyG does. Both ops check every
input first (ops.checks), so no input makes a kernel read out of bounds; an ``arg``
that is not the forward's gives a wrong gradient, never an out-of-bounds
access.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import _native, _native_host, config
from ..graph import INT32_LIMIT, entry_rows
from . import checks
from .dispatch import accumulator_dtype, eager_or_op, native_ready
from .hubs import DEFAULT_HUB_QUANTILE, MIN_HUB_DEGREE, hub_degree  # noqa: F401 (re-exported)
from .hubs import own_degree_bound

REDUCES = ("min", "max")
#: The torch dtype storing arg codes of 1 and 2 bytes (int16 holds the
#: unsigned 16-bit code: torch has no uint16 arithmetic on every device).
ARG_DTYPES = {1: torch.uint8, 2: torch.int16}


def walk_code(arg_bytes: int) -> int:
    """W of ``arg_bytes``-byte arg codes (pyg_ioaware.h): the code of an
    element the backward walks; W + 1 marks an empty row, and positions
    below W are held."""
    return 2 ** (8 * arg_bytes) - 2


def narrowest_arg_bytes(longest_row: int) -> int:
    """The arg code width for a structure whose longest row has
    ``longest_row`` entries (-1: not known): 1 byte where no row holds more
    than ``walk_code(1)`` entries, else 2 (a longer row's winners past
    position W - 1 walk in backward)."""
    return 1 if 0 <= longest_row <= walk_code(1) else 2


def arg_bytes_for(rowptr: Tensor) -> int:
    """:func:`narrowest_arg_bytes` of the structure of ``rowptr`` as far as
    its longest row is known; where it is not known yet, its read starts for
    the next call (ops.hubs.own_degree_bound)."""
    return narrowest_arg_bytes(own_degree_bound(rowptr))


def _codes(arg: Tensor) -> Tensor:
    """arg's unsigned codes as int64."""
    return arg.long() & (2 ** (8 * arg.element_size()) - 1)


# ------------------------------------------------------------- reference
def _scatter_minmax(x: Tensor, col: Tensor, row: Tensor, num_rows: int,
                    reduce: str) -> Tuple[Tensor, Tensor, Tensor]:
    """PyG's min / max: (messages x[col] [E, C], the index scattering them
    to their rows, out [num_rows, C] = the min / max of each row's messages,
    0 for an empty row: scatter_reduce with include_self=False on zeros)."""
    messages = x.index_select(0, col)
    index = row.unsqueeze(1).expand_as(messages)
    out = messages.new_zeros(num_rows, x.size(1)).scatter_reduce(
        0, index, messages, "a" + reduce, include_self=False)
    return messages, index, out


def _positions(rowptr: Tensor, row: Tensor) -> Tensor:
    """Each entry's position in its row (int64 [nnz])."""
    return torch.arange(row.numel(), device=row.device) - rowptr.long().index_select(0, row)


def minmax_reference(rowptr: Tensor, col: Tensor, x: Tensor, reduce: str,
                     with_arg: bool = True, arg_bytes: int = 2) -> Tuple[Tensor, Tensor]:
    """Plain-torch (out, arg) of neighbor_minmax (oracle and CPU path)."""
    num_rows, width = rowptr.numel() - 1, x.size(1)
    row = entry_rows(rowptr, col.numel())
    messages, index, out = _scatter_minmax(x, col.long(), row, num_rows, reduce)
    if not with_arg:
        return out, x.new_empty(0, dtype=ARG_DTYPES[arg_bytes])
    result = out.index_select(0, row)
    equal = (messages == result) | (messages.isnan() & result.isnan())
    count = torch.zeros(num_rows, width, dtype=torch.long, device=x.device)
    count.scatter_add_(0, index, equal.long())
    walk = walk_code(arg_bytes)
    position = _positions(rowptr, row).unsqueeze(1).expand_as(messages)
    winner = torch.full((num_rows, width), walk, dtype=torch.long, device=x.device)
    winner.scatter_reduce_(0, index, torch.where(equal, position, walk), "amin")
    worst = math.inf if reduce == "min" else -math.inf
    walks = (count > 1) | (out == 0) | out.isnan() | (out == worst) | (winner >= walk)
    arg = winner.masked_fill_(walks, walk).masked_fill_(count == 0, walk + 1)
    return out, arg.to(ARG_DTYPES[arg_bytes])


def minmax_backward_reference(rowptr: Tensor, col: Tensor, x: Tensor, out: Tensor, arg: Tensor,
                              grad_out: Tensor) -> Tensor:
    """Plain-torch neighbor_minmax_backward (oracle and CPU path)."""
    acc = accumulator_dtype(x.dtype)
    row = entry_rows(rowptr, col.numel())
    messages = x.index_select(0, col.long())
    result = out.index_select(0, row)
    code = _codes(arg.index_select(0, row))
    g = grad_out.index_select(0, row).to(acc)
    w = walk_code(arg.element_size())
    walk = code == w
    plain = (code < w) & (code == _positions(rowptr, row).unsqueeze(1))
    nan = result.isnan()
    takes = walk & ((messages == result) | nan)
    count = torch.zeros(out.shape, dtype=acc, device=x.device)
    count.index_add_(0, row, takes.to(acc))
    count += (out == 0).to(acc)
    share = torch.where(nan, float("nan"), g / count.index_select(0, row))
    contribution = torch.where(plain, g, torch.where(takes, share, 0.0))
    grad_x = torch.zeros(x.shape, dtype=acc, device=x.device)
    return grad_x.index_add_(0, col.long(), contribution).to(x.dtype)


# ------------------------------------------------------------------ checks
def _check_forward(rowptr, col, x, reduce, hub_quantile, with_arg, arg_bytes,
                   who: str = "pyg_ioaware::neighbor_minmax") -> None:
    checks.csr_structure(rowptr, col, who)
    if reduce not in REDUCES:
        raise ValueError(f"{who}: reduce must be one of {REDUCES}, got {reduce!r}")
    if arg_bytes not in ARG_DTYPES:
        raise ValueError(f"{who}: arg_bytes must be 1 or 2, got {arg_bytes!r}")
    if not 0.0 <= hub_quantile <= 1.0:
        raise ValueError(f"{who}: hub_quantile must lie in [0, 1], got {hub_quantile}")
    if not isinstance(x, Tensor) or x.dtype not in checks.FEATURE_DTYPES:
        raise TypeError(f"{who}: x must be a tensor of one of {checks.FEATURE_DTYPES}")
    checks.dense(x, "x", None, x.dtype, rowptr.device, who)
    if x.size(0) > INT32_LIMIT:
        raise ValueError(f"{who}: at most {INT32_LIMIT} source nodes (sources are int32), "
                         f"got {x.size(0)}")


def _check_backward(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out, reduce) -> None:
    who = "pyg_ioaware::neighbor_minmax_backward"
    _check_forward(rowptr, col, x, reduce, DEFAULT_HUB_QUANTILE, True, 2, who)
    rows, width, device = rowptr.size(0) - 1, x.size(1), rowptr.device
    checks.dense(out, "out", rows, x.dtype, device, who, width=width)
    checks.dense(grad_out, "grad_out", rows, x.dtype, device, who, width=width)
    if not isinstance(arg, Tensor) or arg.dtype not in ARG_DTYPES.values():
        raise TypeError(f"{who}: arg must be the forward's codes, a tensor of one of "
                        f"{tuple(ARG_DTYPES.values())}")
    checks.dense(arg, "arg", rows, arg.dtype, device, who, width=width)
    if (rowptr_t is None) != (col_t is None):
        raise ValueError(f"{who}: give both rowptr_t and col_t (the CSR^T), or neither")
    if rowptr_t is not None:
        checks.csr_structure(rowptr_t, col_t, who)
        if rowptr_t.dtype != rowptr.dtype or rowptr_t.size(0) != x.size(0) + 1 \
                or col_t.size(0) != col.size(0):
            raise ValueError(f"{who}: rowptr_t / col_t must be the CSR^T of rowptr / col "
                             f"({x.size(0) + 1} and {col.size(0)} entries of {rowptr.dtype})")


# -------------------------------------------------------------- kernels
def rows_readable(t: Tensor) -> Tensor:
    """t, or a contiguous copy where the kernels cannot read it in place
    (inner stride not 1, or rows overlapping: an expanded tensor)."""
    if t.stride(-1) == 1 and (t.size(0) <= 1 or t.stride(0) >= t.size(1)):
        return t
    return t.contiguous()


def _arg_readable(arg: Tensor) -> Tensor:
    """arg, or a contiguous 16-byte-aligned copy (what the kernels load)."""
    if arg.is_contiguous() and arg.data_ptr() % 16 == 0:
        return arg
    return arg.clone(memory_format=torch.contiguous_format)


def _minmax_kernel(rowptr, col, x, reduce, hub_quantile, with_arg,
                   arg_bytes) -> Tuple[Tensor, Tensor]:
    if not native_ready(x.device):
        return minmax_reference(rowptr, col, x, reduce, with_arg, arg_bytes)
    x = rows_readable(x)
    num_rows = rowptr.numel() - 1
    out = torch.empty(num_rows, x.size(1), dtype=x.dtype, device=x.device)
    arg = x.new_empty((num_rows, x.size(1)) if with_arg else (0,), dtype=ARG_DTYPES[arg_bytes])
    if num_rows == 0 or x.size(1) == 0:
        return out, arg
    degree, max_hubs = hub_degree(rowptr, col.numel(), hub_quantile)
    _native.minmax(rowptr, col, x, reduce, degree, max_hubs, out, arg if with_arg else None)
    return out, arg


def _minmax_backward_kernel(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out,
                            reduce, perm_t: Optional[Tensor] = None,
                            path: Optional[str] = None) -> Tensor:
    """The backward's kernels (or the reference off CUDA) by ``path``
    (_native.MINMAX_BACKWARD_PATHS; None: "deterministic" with the CSR^T
    (rowptr_t, col_t), "buckets" with its perm_t too (CSR^T position -> CSR
    position), else "atomics": the raw op's rule, for
    :data:`minmax_backward_trusted`, which calls this eagerly with the op's
    arguments)."""
    if not native_ready(x.device):
        return minmax_backward_reference(rowptr, col, x, out, arg, grad_out)
    if path is None:
        path = ("atomics" if rowptr_t is None else
                "deterministic" if perm_t is None else "buckets")
    x, out, grad_out = rows_readable(x), rows_readable(out), rows_readable(grad_out)
    grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    transpose = None
    if path != "atomics":
        transpose = (rowptr_t, col_t) if perm_t is None else (rowptr_t, col_t, perm_t)
    degree, max_hubs = hub_degree(rowptr, col.numel(), DEFAULT_HUB_QUANTILE)
    _native.minmax_backward(rowptr, col, transpose, x, out, _arg_readable(arg), grad_out, reduce,
                            degree, max_hubs, grad_x, path)
    return grad_x


# ------------------------------------------------------------ custom ops
@torch.library.custom_op("pyg_ioaware::neighbor_minmax", mutates_args=())
def neighbor_minmax(rowptr: Tensor, col: Tensor, x: Tensor, reduce: str,
                    hub_quantile: float = DEFAULT_HUB_QUANTILE,
                    with_arg: bool = True, arg_bytes: int = 2) -> Tuple[Tensor, Tensor]:
    """``torch.ops.pyg_ioaware.neighbor_minmax``: out[d, f] = min (or max)
    over the CSR row d of x[col[e], f]; 0 for an empty row (forward only;
    :func:`aggregate` with ``reduce="min"`` is the differentiable form).

    Args:
        rowptr (Tensor): [R + 1] CSR row pointers (rows = destinations).
        col (Tensor): [nnz] sources.
        x (Tensor): [num_src, F], float32, float64, float16 or bfloat16.
        reduce (str): ``"min"`` or ``"max"``.
        hub_quantile (float): rows whose length is above this quantile of
            the row lengths (and above 256) are split into chunks over all
            SMs (CUDA). (default: 0.99)
        with_arg (bool): also return ``arg``, what the backward needs.
        arg_bytes (int): bytes of one arg code, 1 (uint8) or 2 (int16): one
            byte holds positions up to 253, two up to 65533; a winner
            further along its row is found again by a walk in backward.
            (default: 2)

    Returns:
        (Tensor, Tensor): ``out`` [R, F] in ``x``'s dtype, and ``arg`` [R,
        F] (the winner's position in its row; W = 2^(8 arg_bytes) - 2 where
        the backward walks the row: a tie, a zero, NaN or worst-infinity
        result (+inf for min, -inf for max), a position past W - 1; W + 1
        for an empty row), or an empty tensor without ``with_arg``.
    """
    _check_forward(rowptr, col, x, reduce, hub_quantile, with_arg, arg_bytes)
    checks.csr_structure_contents(rowptr, col, x.size(0), "pyg_ioaware::neighbor_minmax")
    return _minmax_kernel(rowptr, col, x, reduce, hub_quantile, with_arg, arg_bytes)


@neighbor_minmax.register_fake
def _neighbor_minmax_fake(rowptr, col, x, reduce, hub_quantile=DEFAULT_HUB_QUANTILE,
                          with_arg=True, arg_bytes=2):
    _check_forward(rowptr, col, x, reduce, hub_quantile, with_arg, arg_bytes)
    rows = rowptr.size(0) - 1
    arg_shape = (rows, x.size(1)) if with_arg else (0,)
    return x.new_empty(rows, x.size(1)), x.new_empty(arg_shape, dtype=ARG_DTYPES[arg_bytes])


@torch.library.custom_op("pyg_ioaware::neighbor_minmax_backward", mutates_args=())
def neighbor_minmax_backward(rowptr: Tensor, col: Tensor, rowptr_t: Optional[Tensor],
                             col_t: Optional[Tensor], x: Tensor, out: Tensor, arg: Tensor,
                             grad_out: Tensor, reduce: str) -> Tensor:
    """``torch.ops.pyg_ioaware.neighbor_minmax_backward``: grad_x of
    :func:`neighbor_minmax`, PyG's rule (``scatter_reduce``'s): an output's
    gradient is split evenly among the sources equal to it, the zero fill
    counts as one more candidate where the result is 0, and a NaN result
    sends NaN to all its sources.

    Args:
        rowptr, col (Tensor): the forward's CSR.
        rowptr_t, col_t (Tensor or None): its CSR^T (by source), needed
            only by the deterministic variant
            (``torch.use_deterministic_algorithms(True)``).
        x, out, arg (Tensor): the forward's input and outputs.
        grad_out (Tensor): [R, F] gradient of ``out``.
        reduce (str): ``"min"`` or ``"max"``, as in the forward.

    Returns:
        Tensor: grad_x [num_src, F] in ``x``'s dtype.
    """
    _check_backward(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out, reduce)
    who = "pyg_ioaware::neighbor_minmax_backward"
    checks.csr_structure_contents(rowptr, col, x.size(0), who)
    if rowptr_t is not None:
        checks.csr_structure_contents(rowptr_t, col_t, rowptr.size(0) - 1, who)
    return _minmax_backward_kernel(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out, reduce)


@neighbor_minmax_backward.register_fake
def _neighbor_minmax_backward_fake(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out, reduce):
    _check_backward(rowptr, col, rowptr_t, col_t, x, out, arg, grad_out, reduce)
    return torch.empty_like(x)


# Eager calls on structures known valid (a Graph's) go straight to the kernels.
minmax_trusted = eager_or_op(_minmax_kernel, neighbor_minmax)
minmax_backward_trusted = eager_or_op(_minmax_backward_kernel, neighbor_minmax_backward)


#: The bucketed backward takes at most this many features (pyg_ioaware.h:
#: PYGIO_MINMAX_BUCKET_MAX_WIDTH; a warp's sums live in shared memory).
BUCKET_MAX_WIDTH = 512
#: "auto" buckets float32 features (16-bit ones gained only 5-10%, on the
#: two graphs measured, for the same extra memory) where destinations
#: average at least this many entries (fewer: one row's winners share few
#: sources, and its atomics fall on few 32-byte sectors) ...
BUCKET_MIN_DEGREE = 4
#: ... and the source gradient (float32) is at least this many times the
#: GPU's L2 cache. Timed on an H200 (60 MiB of L2; docs/results.md): faster
#: at 3.3 and 5.9 GB (pokec-like and web-like, D=512), slower at 0.35-1.5
#: GB (arxiv-like D=512, pokec-like and web-like D=128) and below.
BUCKET_MIN_L2_MULTIPLE = 32


def bucket_kernels_take(x: Tensor) -> bool:
    """Whether the bucketed backward's kernels take features ``x``
    (pyg_ioaware.h): 2-D CUDA float32 / 16-bit, 1 to BUCKET_MAX_WIDTH
    columns."""
    return (x.is_cuda and x.dtype != torch.float64 and x.dim() == 2
            and 0 < x.size(1) <= BUCKET_MAX_WIDTH)


def backward_path(graph, x: Tensor) -> str:
    """How the min / max backward of ``x`` over ``graph`` adds the
    gradients (``config.minmax_backward``): "buckets" (the plain winners
    bucketed, then gathered per source over the CSR^T) only where
    :func:`bucket_kernels_take` ``x`` and not traced (the CSR^T and its
    permutation are eager state); "auto": for float32 features where the
    average in-degree is at least BUCKET_MIN_DEGREE and the source gradient
    at least BUCKET_MIN_L2_MULTIPLE times the L2 cache; else "atomics".
    torch's deterministic algorithms override it at the backward."""
    mode = config.minmax_backward
    if mode == "atomics" or not bucket_kernels_take(x) or torch.compiler.is_compiling():
        return "atomics"
    if mode == "buckets":
        return "buckets"
    if x.dtype != torch.float32 or graph.num_edges < BUCKET_MIN_DEGREE * graph.num_dst:
        return "atomics"
    gradient_bytes = graph.num_src * x.size(1) * 4
    return ("buckets" if gradient_bytes >= BUCKET_MIN_L2_MULTIPLE * _l2_bytes(x.device)
            else "atomics")


def _l2_bytes(device: torch.device) -> int:
    """The L2 cache size of a CUDA device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _device_l2_bytes(index)


@functools.lru_cache(maxsize=None)
def _device_l2_bytes(index: int) -> int:
    return torch.cuda.get_device_properties(index).L2_cache_size


class MinMaxFunction(torch.autograd.Function):
    """Differentiable out = neighbor_minmax(graph, x): forward saves x, out
    and arg (O(N x C) codes of one byte where the graph's rows are known to
    be short enough (:func:`arg_bytes_for`), else two; no edge tensor);
    backward adds the gradients by the path :func:`backward_path` chose
    (atomics, or buckets gathered over the graph's CSR^T), or, where
    torch.are_deterministic_algorithms_enabled(), gathers over the graph's
    CSR^T in a fixed order. Not twice differentiable."""

    @staticmethod
    def forward(ctx, graph, x, reduce, hub_quantile):
        out, arg = minmax_trusted(graph.rowptr, graph.col, x, reduce, hub_quantile, True,
                                  arg_bytes_for(graph.rowptr))
        ctx.graph, ctx.reduce = graph, reduce
        ctx.path = backward_path(graph, x)
        ctx.save_for_backward(x, out, arg)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, out, arg = ctx.saved_tensors
        graph, path = ctx.graph, ctx.path
        if torch.are_deterministic_algorithms_enabled() and x.is_cuda:
            path = "deterministic"
        if path == "atomics" or torch.compiler.is_compiling():
            # The op's own paths: atomics, or by value over the CSR^T in a fixed order.
            rowptr_t = col_t = None
            if path == "deterministic":
                rowptr_t, col_t = graph.transpose.rowptr, graph.transpose.col
            grad_x = minmax_backward_trusted(graph.rowptr, graph.col, rowptr_t, col_t, x, out,
                                             arg, grad_out, ctx.reduce)
        else:
            t = graph.transpose
            grad_x = _minmax_backward_kernel(graph.rowptr, graph.col, t.rowptr, t.col, x, out,
                                             arg, grad_out, ctx.reduce, t.perm, path)
        return None, grad_x, None, None


def _minmax_by_torch(graph, x: Tensor, reduce: str) -> Tensor:
    """PyG's min / max in plain torch (:func:`_scatter_minmax`),
    differentiated by torch's autograd, 16-bit inputs in float32 so that
    the gradient's shares and sums accumulate there, as the kernels' do.
    Its gradient follows PyG's rule by construction. Where the native
    kernels do not run (the CPU) it replaces the reference's forward with
    arg, whose int64 [E, C] temporaries made a CPU forward 10-25x slower
    than PyG's in a process that had run other layers (docs/results.md)."""
    acc = accumulator_dtype(x.dtype)
    out = _scatter_minmax(x.to(acc), graph.col, graph.row.long(), graph.num_dst, reduce)[2]
    return out.to(x.dtype)


def native_minmax_operand(graph, x: Tensor, reduce: str,
                          hub_quantile: float) -> Optional[Tuple[object, tuple]]:
    """(the host extension, the operand's arguments: rowptr, col, the
    reduce code, the forward's and the backward's hub splits, the arg
    width, the graph, the backward path's code (:func:`backward_path`))
    where the C++ min / max autograd takes ``x`` over
    ``graph``: eagerly on CUDA with config.native_host on and the extension
    loaded; else None."""
    extension = _native_host.active()
    if extension is None or not x.is_cuda or torch.compiler.is_compiling():
        return None
    rowptr, col = graph.rowptr, graph.col
    degree, max_hubs = hub_degree(rowptr, col.numel(), hub_quantile)
    backward_split = ((degree, max_hubs) if hub_quantile == DEFAULT_HUB_QUANTILE
                      else hub_degree(rowptr, col.numel(), DEFAULT_HUB_QUANTILE))
    return extension, (rowptr, col, _native.REDUCE_CODES[reduce], degree, max_hubs,
                       *backward_split, arg_bytes_for(rowptr), graph,
                       _native.MINMAX_BACKWARD_PATHS.index(backward_path(graph, x)))


def native_autograd_minmax(graph, x: Tensor, reduce: str,
                           hub_quantile: float) -> Optional[Tensor]:
    """:class:`MinMaxFunction` over ``graph`` with its autograd in C++
    (pyg_ioaware._native_host: the same kernels, outputs and gradients
    without the Function's Python), where :func:`native_minmax_operand`
    applies; else None. The deterministic flag is read at the backward, as
    the Function reads it."""
    taken = native_minmax_operand(graph, x, reduce, hub_quantile)
    if taken is None:
        return None
    extension, operand = taken
    return extension.minmax_aggregate(rows_readable(x), *operand)


def graph_minmax(graph, x: Tensor, reduce: str,
                 hub_quantile: float = DEFAULT_HUB_QUANTILE) -> Tensor:
    """out[d, f] = min / max over the edges (s -> d) of ``graph`` of x[s, f]
    (0 where d has none), for 2-D x [graph.num_src, C] already checked;
    differentiable in x: through :class:`MinMaxFunction` (its autograd in
    C++ where :func:`native_autograd_minmax` applies) where the native
    kernels run, else through ``_minmax_by_torch``. Without a gradient to
    record no arg is kept."""
    if torch.is_grad_enabled() and x.requires_grad:
        if not native_ready(x.device):
            return _minmax_by_torch(graph, x, reduce)
        native = native_autograd_minmax(graph, x, reduce, hub_quantile)
        if native is not None:
            return native
        return MinMaxFunction.apply(graph, x, reduce, hub_quantile)
    return minmax_trusted(graph.rowptr, graph.col, x, reduce, hub_quantile, False, 2)[0]
