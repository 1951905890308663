"""Backends of the SpMM family: the kernels of our own, cuSPARSE's CSR
algorithms and plain torch.

Each backend runs one :class:`SpmmCall`, Y = A X (+ bias) (``transpose=False``)
or Y = A^T X (+ bias) (``transpose=True``) for the CSR matrix A = (rowptr,
col, values). The default heuristic (:func:`preference`) was measured on an H200
(docs/results.md, issue 6), kernel alone, forward A X, against
cuSPARSE's CSR_ALG2: the kernels of our own need no plan, so a new graph
costs them nothing, and they win every 16-bit forward (web-like bf16 D=64
0.75 against 1.55 ms, D=512 4.4 against 7.4 ms), every float32 forward up
to width 64 (web-like 1.01 against 1.58 ms, arxiv-like 0.12 against 0.14)
and, on graphs of 2^22 entries and more, win or tie the wider float32
ones (D=128 / 256 / 512: pokec-like 1.15 / 1.01 / 1.02x, web-like 1.07 /
1.15 / 1.03x, products-like 1.16 / 0.97 / 1.03x cuSPARSE's time), as
on graphs of 32 entries a row and more (tolokers-like, 2^20 entries, 89 a
row, D=128 / 256 / 512: 0.061 / 0.116 / 0.241 against 0.080 / 0.140 /
0.267 ms). The other wider float32 forwards on graphs of 2^20 to 2^22
entries stay with CSR_ALG2 (arxiv-like, 8 a row, D=256 / 512: 0.29 / 0.57
against 0.41 / 0.65 ms), as do float64 ones below
average degree 8 on large graphs (not measured since) and the transposed
SpMM of large graphs (our scatter is bound by fp32 atomics). CSR_ALG3 and
CSR_ALG1 remain for the autotune; plain torch is the fallback everywhere
(and the only backend on CPU).

The backend choice is made once per shape class (ops.tuning). A cuSPARSE
plan (descriptors, workspace size) depends only on the structure, width,
dtype, direction and algorithm: it is made once and kept beside the
structure (:class:`StructureState`), keyed weakly by its rowptr tensor, so
it is released with the structure (its Graph, or a raw op's tensors). The
kernels of our own keep nothing. No timing runs per graph. Workspaces are
allocated per call (see :class:`CusparsePlan`).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import List, Optional

import torch
from torch import Tensor

from .. import _native
from ..graph import StructureState, entry_rows, structure_state
from . import tuning
from .dispatch import accumulator_dtype, native_ready
from .hubs import own_degree_bound

FAMILY = "spmm"


@dataclass
class SpmmCall:
    """One SpMM, Y = op(A) X (+ bias): ``x`` is [rows of op(A)'s columns,
    width] with inner stride 1; the output has ``num_out`` rows, in
    ``out_dtype`` (None: x's dtype; else a mixed call, see
    :func:`pyg_ioaware.ops.spmm.spmm_values_dtype`, whose values and bias
    are float32); ``bias`` is None or [width] in the values' dtype.
    ``state`` is what is kept beside the structure (plans), looked up by
    the backends that keep any."""
    rowptr: Tensor
    col: Tensor
    values: Tensor
    x: Tensor
    num_out: int
    transpose: bool
    bias: Optional[Tensor] = None
    state: Optional[StructureState] = None
    out_dtype: Optional[torch.dtype] = None

    @property
    def num_cols(self) -> int:
        """Columns of A (not of op(A))."""
        return self.num_out if self.transpose else self.x.size(0)

    @property
    def y_dtype(self) -> torch.dtype:
        """The output's dtype."""
        return self.x.dtype if self.out_dtype is None else self.out_dtype

    @property
    def mixed(self) -> bool:
        """Whether the output's dtype is not x's."""
        return self.y_dtype != self.x.dtype


def spmm_reference(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, num_out: int,
                   transpose: bool, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """Plain-torch Y = op(A) X in ``out_dtype`` (default: x's), accumulated
    in float32 (float64 for float64 inputs) (the tests' oracle and the CPU
    path)."""
    out_dtype = x.dtype if out_dtype is None else out_dtype
    acc = torch.promote_types(accumulator_dtype(x.dtype), accumulator_dtype(out_dtype))
    row = entry_rows(rowptr, col.numel())
    src, dst = (row, col) if transpose else (col, row)
    messages = x.index_select(0, src).to(acc) * values.to(acc).unsqueeze(1)
    out = torch.zeros(num_out, x.size(1), dtype=acc, device=x.device)
    return out.index_add_(0, dst, messages).to(out_dtype)


def _add_bias(out: Tensor, bias: Optional[Tensor]) -> Tensor:
    """out + bias in place, for the backends that cannot add it inside."""
    return out if bias is None else out.add_(bias)


# CPU dtypes torch.sparse.mm multiplies a CSR matrix with (MKL where built).
_SPARSE_MM_CPU_DTYPES = (torch.float32, torch.float64)
_SPARSE_CSR_NOTE = {"silenced": False}


def _csr_view(call: SpmmCall) -> Tensor:
    """A as a torch CSR tensor over the call's arrays (no copy). The
    structure was validated (ops.checks): torch need not check it again."""
    return torch.sparse_csr_tensor(call.rowptr, call.col, call.values.detach(),
                                   (call.rowptr.numel() - 1, call.num_cols),
                                   check_invariants=False)


def sparse_mm_cpu(call: SpmmCall) -> Tensor:
    """Y = A X by torch.sparse.mm on the CPU, in X's dtype (CPU autocast
    would cast it to a 16-bit mm that torch.sparse lacks). Forward-only:
    autograd is SpmmFunction's."""
    if _SPARSE_CSR_NOTE["silenced"]:
        a = _csr_view(call)
    else:  # torch warns once per process that sparse CSR is in beta: not the user's concern
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta",
                                    category=UserWarning)
            a = _csr_view(call)
        _SPARSE_CSR_NOTE["silenced"] = True
    with torch.autocast("cpu", enabled=False):
        return torch.sparse.mm(a, call.x.detach())


class TorchBackend:
    """Plain torch (any device): torch.sparse.mm for A X in fp32 / fp64 on
    the CPU (6x the gather-and-scatter reference on arxiv-like at D=512),
    else index_select, multiply, index_add. A^T X stays on the reference:
    torch.sparse.mm over the CSC form of A^T gave different sums from run to
    run, and the CPU path must repeat its numbers."""
    name = "torch"

    def supports(self, shape: tuning.ShapeClass) -> bool:
        return True

    def run(self, call: SpmmCall) -> Tensor:
        if (call.x.device.type == "cpu" and call.x.dtype in _SPARSE_MM_CPU_DTYPES
                and not call.transpose and not call.mixed):
            out = sparse_mm_cpu(call)
        else:
            out = spmm_reference(call.rowptr, call.col, call.values, call.x, call.num_out,
                                 call.transpose, call.y_dtype)
        return _add_bias(out, call.bias)


class OwnCsrBackend:
    """The SpMM kernels of our own (cuda/spmm/spmm_kernel.cuh): no plan and
    nothing kept per structure, so a new graph costs nothing here. Forward
    rows above the hub degree are split over the SMs and merged with fp32
    atomics, except under torch.use_deterministic_algorithms or where the
    structure's Graph bounds every row below the hub degree (no hub
    launches then); the transposed form scatters with atomics."""
    name = "pygio-csr"

    def supports(self, shape: tuning.ShapeClass) -> bool:
        return shape.device != "cpu" and _native.library() is not None

    def run(self, call: SpmmCall) -> Tensor:
        x = call.x
        out = torch.empty(call.num_out, x.size(1), dtype=call.y_dtype, device=x.device)
        if call.transpose:  # the transposed kernel takes no bias
            _native.spmm_csr(call.rowptr, call.col, call.values, x, None, out, True, False)
            return _add_bias(out, call.bias)
        _native.spmm_csr(call.rowptr, call.col, call.values, x, call.bias, out, False,
                         torch.are_deterministic_algorithms_enabled(),
                         own_degree_bound(call.rowptr, call.state))
        return out


class CusparsePlan:
    """A native cuSPARSE SpMM plan and its workspace size. Holds ``col`` so
    its address cannot be reused while the plan lives; the structure's
    rowptr is the key this plan is stored under, so it outlives the plan.

    The workspace (CSR_ALG2 wants a few KB to MB) is allocated per call on
    the current stream: torch's caching allocator makes that cheap, orders
    it with the call on any stream and takes it from the graph's pool under
    CUDA-graph capture and torch.compile's CUDA-graph trees (a workspace
    kept on the plan would outlive the pool it came from)."""
    nbytes = 0  # descriptors live in host memory; workspaces are per call

    def __init__(self, call: SpmmCall, algorithm: int):
        self.col = call.col
        self.handle = None
        self.handle = _native.spmm_plan_create(call.rowptr, call.col, call.num_cols,
                                               call.x.size(1), call.x.dtype, call.transpose,
                                               algorithm)
        self.runner = _native.SpmmRunner(self.handle, call.x.dtype, call.x.device)
        self.workspace_bytes: Optional[int] = None

    def run(self, call: SpmmCall) -> Tensor:
        out = torch.empty(call.num_out, call.x.size(1), dtype=call.x.dtype, device=call.x.device)
        if self.workspace_bytes is None:
            self.workspace_bytes = _native.spmm_workspace_size(self.handle, call.values,
                                                               call.x, out)
        workspace = (torch.empty(self.workspace_bytes, dtype=torch.uint8, device=out.device)
                     if self.workspace_bytes > 0 else None)
        self.runner.run(call.values, call.x, out, workspace)
        return _add_bias(out, call.bias)

    def __del__(self):
        if self.handle is not None and _native is not None:
            _native.spmm_plan_destroy(self.handle)
            self.handle = None


class CusparseBackend:
    """One cuSPARSE CSR SpMM algorithm (a cusparseSpMMAlg_t value)."""

    def __init__(self, name: str, algorithm: int, transposable: bool):
        self.name = name
        self.algorithm = algorithm
        self.transposable = transposable

    def supports(self, shape: tuning.ShapeClass) -> bool:
        return (shape.device != "cpu" and _native.library() is not None
                and (shape.direction == "forward" or self.transposable))

    def run(self, call: SpmmCall) -> Tensor:
        if call.col.numel() > (call.rowptr.numel() - 1) * call.num_cols:
            # More entries than a dense matrix has (duplicates only): cuSPARSE refuses it.
            return _add_bias(spmm_reference(call.rowptr, call.col, call.values, call.x,
                                            call.num_out, call.transpose), call.bias)
        if call.state is None:
            call.state = structure_state(call.rowptr)
        plans = call.state.plans
        key = (self.algorithm, call.transpose, call.num_cols, call.x.size(1), call.x.dtype)
        plan = plans.get(key)
        if plan is None or plan.col is not call.col:
            _native.load_cusparse()
            plan = plans[key] = CusparsePlan(call, self.algorithm)
        return plan.run(call)


_OWN_CSR, _TORCH = OwnCsrBackend(), TorchBackend()  # also run_spmm's for mixed calls
# Registration order: the preference where :func:`preference` says nothing.
for _backend in (_OWN_CSR,
                 CusparseBackend("cusparse-alg2", 6, transposable=True),
                 CusparseBackend("cusparse-alg3", 12, transposable=False),
                 CusparseBackend("cusparse-alg1", 4, transposable=True),
                 _TORCH):
    tuning.register_backend(FAMILY, _backend)
del _backend


# Entry-count buckets (floor(log2(entries))): graphs of 2^20 entries and
# more are large; wide float32 forwards take our kernels from 2^22 on.
LARGE_SIZE_BUCKET = 20
WIDE_FLOAT32_SIZE_BUCKET = 22
# Average-degree bucket (floor(log2(average degree))) from which wide
# float32 forwards take our kernels at any size: rows of 32 entries and
# more keep a warp's gathers in flight (tolokers-like, 89 a row).
LONG_ROWS_DEGREE_BUCKET = 5


def preference(shape: tuning.ShapeClass) -> List[str]:
    """The default heuristic (see the module docstring)."""
    if shape.size_bucket < LARGE_SIZE_BUCKET:
        ours_first = True
    elif shape.direction != "forward":
        ours_first = False
    elif shape.dtype in ("float16", "bfloat16"):
        ours_first = True
    elif shape.dtype == "float32":
        ours_first = (shape.width_bucket <= 64
                      or shape.size_bucket >= WIDE_FLOAT32_SIZE_BUCKET
                      or shape.degree_bucket >= LONG_ROWS_DEGREE_BUCKET)
    else:  # float64
        ours_first = shape.width_bucket < 128 and shape.degree_bucket >= 3
    return ["pygio-csr", "cusparse-alg2"] if ours_first else ["cusparse-alg2", "pygio-csr"]


tuning.register_preference(FAMILY, preference)


def run_with_backend(name: str, rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor,
                     num_out: int, transpose: bool) -> Tensor:
    """Y = op(A) X by the backend called ``name``, whatever the tuner would
    pick (the benchmark's per-backend kernel table)."""
    backend = next(b for b in tuning.backends(FAMILY) if b.name == name)
    return backend.run(SpmmCall(rowptr, col, values, x, num_out, transpose,
                                state=structure_state(rowptr)))


def run_spmm(call: SpmmCall) -> Tensor:
    """Y = op(A) X on a structure known valid, by the backend the tuner
    picks for the call's shape class; a mixed call (Y not in X's dtype),
    which cuSPARSE cannot make, by the kernels of our own where they run
    and by plain torch elsewhere, untuned. Empty problems give zeros."""
    x = call.x
    if call.num_out == 0 or x.size(1) == 0 or call.col.numel() == 0 or x.size(0) == 0:
        return _add_bias(torch.zeros(call.num_out, x.size(1), dtype=call.y_dtype,
                                     device=x.device), call.bias)
    device = x.device
    # native_ready warns once where CUDA runs plain torch.
    own_kernels = device.type == "cuda" and native_ready(device)
    if call.mixed:
        return (_OWN_CSR if own_kernels else _TORCH).run(call)
    backend = tuning.choose_for_call(
        FAMILY, "transposed" if call.transpose else "forward", x.size(1), x.dtype, device,
        call.col.numel(), call.rowptr.numel() - 1,
        lambda b: tuning.time_cuda_ms(lambda: b.run(call), device))
    return backend.run(call)
