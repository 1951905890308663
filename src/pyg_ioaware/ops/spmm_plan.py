"""cuSPARSE SpMM plans: everything graph-specific, built once and reused.

A plan belongs to one sparse structure (rowptr / col tensors), one dense
width, one dtype and one direction (A or A^T). It owns the cuSPARSE
descriptors, a workspace allocated through torch, and the algorithm picked
by timing the candidates once. cuSPARSE's optional preprocessing
(cusparseSpMM_preprocess) is not used: on cuSPARSE 12 / H200 it made an
out-of-bounds atomic write (compute-sanitizer, in do_nnz_count_ker) that
corrupted the CUDA context; scripts/spmm_probe.py --preprocess re-checks it.
Plans hold their rowptr / col tensors, so the pointers they
were built for stay valid; the values pointer is bound on every call, so
edge weights may change freely. Plans are released with the Graph that owns
the structure (graph.register_release_hook) or, for raw tensors, by LRU
eviction.
"""
from __future__ import annotations

import collections
import ctypes
import os
from typing import Optional

import torch
from torch import Tensor

from .. import _native
from ..graph import register_release_hook

# cusparseSpMMAlg_t values of the CSR algorithms.
CSR_ALG1, CSR_ALG2, CSR_ALG3 = 4, 6, 12
ALGORITHM_NAMES = {CSR_ALG1: "CSR_ALG1", CSR_ALG2: "CSR_ALG2", CSR_ALG3: "CSR_ALG3"}
# Candidates in order of preference when timing is impossible (CUDA-graph
# capture): ALG2 is cuSPARSE's row-major algorithm. ALG3 has no transposed
# form (cuSPARSE says so on stderr when asked).
CANDIDATES = {False: (CSR_ALG2, CSR_ALG1, CSR_ALG3), True: (CSR_ALG2, CSR_ALG1)}
ENV_ALGORITHM = "PYG_IOAWARE_SPMM_ALG"  # pin an algorithm by name, e.g. CSR_ALG2
TIMED_RUNS = 3
MAX_PLANS = 64


class SpmmPlan:
    """One native plan with its workspace and algorithm."""

    def __init__(self, rowptr: Tensor, col: Tensor, num_cols: int, width: int,
                 dtype: torch.dtype, transpose: bool, algorithm: int):
        self.rowptr, self.col = rowptr, col  # keep the structure alive
        self.algorithm = algorithm
        self.workspace: Optional[Tensor] = None
        self._lib = _native.library()
        self._handle = ctypes.c_void_p()
        desc = _native.csr(rowptr, col, None, num_cols, dtype)
        _native.check(self._lib.pygio_spmm_plan_create(
            ctypes.byref(desc), width, algorithm, int(transpose), rowptr.device.index,
            ctypes.byref(self._handle)))

    def allocate_workspace(self, values: Tensor, x: Tensor, out: Tensor) -> None:
        """Asks cuSPARSE for the workspace size and allocates it through torch."""
        nbytes = ctypes.c_size_t()
        _native.check(self._lib.pygio_spmm_workspace_size(
            self._handle, values.data_ptr(), x.data_ptr(), out.data_ptr(), ctypes.byref(nbytes),
            _native.stream_of(x)))
        # No allocation where none is needed (the common case): a plan built while
        # torch.compile records a CUDA graph then holds nothing from its pool.
        self.workspace = (torch.empty(nbytes.value, dtype=torch.uint8, device=x.device)
                          if nbytes.value > 0 else None)

    def run(self, values: Tensor, x: Tensor, out: Tensor) -> None:
        _native.check(self._lib.pygio_spmm_run(
            self._handle, values.data_ptr(), x.data_ptr(), out.data_ptr(),
            _native.pointer(self.workspace), _native.stream_of(x)))

    def __del__(self):
        if getattr(self, "_handle", None) and self._handle.value:
            self._lib.pygio_spmm_plan_destroy(self._handle)
            self._handle = ctypes.c_void_p()


def _pinned_algorithm() -> Optional[int]:
    name = os.environ.get(ENV_ALGORITHM)
    if not name:
        return None
    by_name = {v: k for k, v in ALGORITHM_NAMES.items()}
    if name not in by_name:
        raise ValueError(f"{ENV_ALGORITHM}={name!r}: expected one of {sorted(by_name)}")
    return by_name[name]


def _time_ms(plan: SpmmPlan, values: Tensor, x: Tensor, out: Tensor) -> float:
    plan.run(values, x, out)  # warm-up
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(TIMED_RUNS):
        plan.run(values, x, out)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / TIMED_RUNS


def _build_plan(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, out: Tensor,
                num_cols: int, transpose: bool) -> SpmmPlan:
    """The fastest supported candidate (timed once), or, during CUDA-graph
    capture where nothing can be timed, the first supported one."""
    width, dtype = x.size(1), x.dtype
    capturing = torch.cuda.is_current_stream_capturing()
    pinned = _pinned_algorithm()
    candidates = (pinned,) if pinned is not None else CANDIDATES[transpose]
    best, best_ms, errors = None, float("inf"), []
    for algorithm in candidates:
        try:
            plan = SpmmPlan(rowptr, col, num_cols, width, dtype, transpose, algorithm)
            plan.allocate_workspace(values, x, out)
            if capturing or len(candidates) == 1:
                return plan
            ms = _time_ms(plan, values, x, out)
        except _native.NativeError as error:  # e.g. not supported for this dtype/layout
            errors.append(f"{ALGORITHM_NAMES[algorithm]}: {error}")
            continue
        if ms < best_ms:
            best, best_ms = plan, ms
    if best is None:
        raise _native.NativeError("no cuSPARSE SpMM algorithm accepted this problem: " +
                                  "; ".join(errors))
    return best


class SpmmPlanCache:
    """Plans keyed by (structure pointers, sizes, width, dtype, direction)."""

    def __init__(self, max_plans: int = MAX_PLANS):
        self.max_plans = max_plans
        self._plans: collections.OrderedDict = collections.OrderedDict()

    def get(self, rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, out: Tensor,
            num_cols: int, transpose: bool) -> SpmmPlan:
        key = (rowptr.data_ptr(), col.data_ptr(), rowptr.numel(), col.numel(), num_cols,
               x.size(1), x.dtype, transpose, x.device)
        plan = self._plans.get(key)
        if plan is None:
            _native.load_cusparse()
            plan = _build_plan(rowptr, col, values, x, out, num_cols, transpose)
            self._plans[key] = plan
            while len(self._plans) > self.max_plans:
                self._plans.popitem(last=False)
        self._plans.move_to_end(key)
        return plan

    def release(self, rowptr_ptr: int) -> None:
        """Drops every plan built on the structure starting at rowptr_ptr."""
        for key in [k for k in self._plans if k[0] == rowptr_ptr]:
            del self._plans[key]

    def algorithms(self) -> dict:
        """{(num_rows, nnz, width, dtype, transpose): algorithm name} of the
        live plans, for reports."""
        return {(k[2] - 1, k[3], k[5], str(k[6]), k[7]): ALGORITHM_NAMES[p.algorithm]
                for k, p in self._plans.items()}

    def clear(self) -> None:
        self._plans.clear()


PLANS = SpmmPlanCache()
register_release_hook(PLANS.release)
