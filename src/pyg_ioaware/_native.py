"""ctypes loader for the native library (cuda/, C ABI in cuda/include/pyg_ioaware.h).

Argument checks of user input happen above this module. Each kernel entry
takes one params struct (mirrored here as a ctypes Structure): raw pointers,
int64 sizes and row strides, dtype and index-width codes, the device index
and torch's current CUDA stream go down, a status comes up and becomes a
:class:`NativeError` carrying the library's message. The wrappers at the end
(``spmm_plan_create``, ``spmm_run``, ``sddmm``, ...) build those structs from
tensors the caller has already checked; they raise TypeError for index
dtypes other than int32 / int64 and ValueError for rows of inner stride
other than 1.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import pathlib
import sys
import threading
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

LIBRARY_NAME = "libpyg_ioaware_native.so"
ABI_VERSION = 9
ENV_LIBRARY_PATH = "PYG_IOAWARE_NATIVE_LIB"

DTYPE_CODES = {
    torch.float32: 0,
    torch.float64: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
}


class NativeError(RuntimeError):
    """A native-library call failed; the message is the library's."""


class Csr(ctypes.Structure):
    """Mirror of ``pygio_csr``: a CSR structure (values travel separately)."""

    _fields_ = [
        ("rowptr", ctypes.c_void_p),
        ("col", ctypes.c_void_p),
        ("num_rows", ctypes.c_int64),
        ("num_cols", ctypes.c_int64),
        ("nnz", ctypes.c_int64),
        ("index_bits", ctypes.c_int32),
    ]


# A params struct's first field, struct_size, is set to ctypes.sizeof of the
# struct; the library checks it against its own size and refuses a mismatch.
class SpmmPlanParams(ctypes.Structure):
    """Mirror of ``pygio_spmm_plan_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("transpose", ctypes.c_int32),
        ("algorithm", ctypes.c_int32),
        ("a", Csr),
        ("width", ctypes.c_int64),
    ]


class SpmmParams(ctypes.Structure):
    """Mirror of ``pygio_spmm_params`` (workspace size, run, preprocess)."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("plan", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
        ("x", ctypes.c_void_p),
        ("x_row_stride", ctypes.c_int64),
        ("y", ctypes.c_void_p),
        ("y_row_stride", ctypes.c_int64),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class SpmmCsrParams(ctypes.Structure):
    """Mirror of ``pygio_spmm_csr_params`` (the SpMM kernels of our own)."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("values_dtype", ctypes.c_int32),
        ("y_dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("transpose", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("a", Csr),
        ("degree_bound", ctypes.c_int64),
        ("width", ctypes.c_int64),
        ("values", ctypes.c_void_p),
        ("x", ctypes.c_void_p),
        ("x_row_stride", ctypes.c_int64),
        ("bias", ctypes.c_void_p),
        ("y", ctypes.c_void_p),
        ("y_row_stride", ctypes.c_int64),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class SddmmParams(ctypes.Structure):
    """Mirror of ``pygio_sddmm_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("width", ctypes.c_int64),
        ("g", ctypes.c_void_p),
        ("g_row_stride", ctypes.c_int64),
        ("x", ctypes.c_void_p),
        ("x_row_stride", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class MinmaxParams(ctypes.Structure):
    """Mirror of ``pygio_minmax_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("reduce", ctypes.c_int32),
        ("a", Csr),
        ("width", ctypes.c_int64),
        ("x", ctypes.c_void_p),
        ("x_row_stride", ctypes.c_int64),
        ("hub_degree", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("out_row_stride", ctypes.c_int64),
        ("arg", ctypes.c_void_p),
        ("arg_bytes", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class MinmaxBackwardParams(ctypes.Structure):
    """Mirror of ``pygio_minmax_backward_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("reduce", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("a", Csr),
        ("a_t", Csr),
        ("width", ctypes.c_int64),
        ("hub_degree", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs", ctypes.c_int64),
        ("x", ctypes.c_void_p),
        ("x_row_stride", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("out_row_stride", ctypes.c_int64),
        ("arg", ctypes.c_void_p),
        ("arg_bytes", ctypes.c_int32),
        ("grad_out", ctypes.c_void_p),
        ("grad_out_row_stride", ctypes.c_int64),
        ("grad_x", ctypes.c_void_p),
        ("grad_x_row_stride", ctypes.c_int64),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("perm_t", ctypes.c_void_p),
    ]


class Gatv2Params(ctypes.Structure):
    """Mirror of ``pygio_gatv2_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("heads", ctypes.c_int64),
        ("channels", ctypes.c_int64),
        ("x_l", ctypes.c_void_p),
        ("x_l_row_stride", ctypes.c_int64),
        ("x_r", ctypes.c_void_p),
        ("x_r_row_stride", ctypes.c_int64),
        ("edge", ctypes.c_void_p),
        ("att", ctypes.POINTER(ctypes.c_float)),
        ("negative_slope", ctypes.c_float),
        ("dropout_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("hub_degree", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs", ctypes.c_int64),
        ("out_bias", ctypes.POINTER(ctypes.c_float)),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.POINTER(ctypes.c_float)),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class Gatv2BackwardParams(ctypes.Structure):
    """Mirror of ``pygio_gatv2_backward_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("a_t", Csr),
        ("perm_t", ctypes.c_void_p),
        ("heads", ctypes.c_int64),
        ("channels", ctypes.c_int64),
        ("x_l", ctypes.c_void_p),
        ("x_l_row_stride", ctypes.c_int64),
        ("x_r", ctypes.c_void_p),
        ("x_r_row_stride", ctypes.c_int64),
        ("edge", ctypes.c_void_p),
        ("att", ctypes.POINTER(ctypes.c_float)),
        ("negative_slope", ctypes.c_float),
        ("dropout_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("hub_degree", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs", ctypes.c_int64),
        ("hub_degree_t", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs_t", ctypes.c_int64),
        ("lse", ctypes.POINTER(ctypes.c_float)),
        ("grad_out", ctypes.c_void_p),
        ("grad_x_l", ctypes.c_void_p),
        ("grad_x_l_row_stride", ctypes.c_int64),
        ("grad_x_r", ctypes.c_void_p),
        ("grad_x_r_row_stride", ctypes.c_int64),
        ("grad_att", ctypes.POINTER(ctypes.c_float)),
        ("grad_edge", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class Gatv2AlphaParams(ctypes.Structure):
    """Mirror of ``pygio_gatv2_alpha_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("heads", ctypes.c_int64),
        ("channels", ctypes.c_int64),
        ("x_l", ctypes.c_void_p),
        ("x_l_row_stride", ctypes.c_int64),
        ("x_r", ctypes.c_void_p),
        ("x_r_row_stride", ctypes.c_int64),
        ("edge", ctypes.c_void_p),
        ("att", ctypes.POINTER(ctypes.c_float)),
        ("negative_slope", ctypes.c_float),
        ("lse", ctypes.POINTER(ctypes.c_float)),
        ("alpha", ctypes.POINTER(ctypes.c_float)),
        ("stream", ctypes.c_void_p),
    ]


class TransformerParams(ctypes.Structure):
    """Mirror of ``pygio_transformer_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("heads", ctypes.c_int64),
        ("channels", ctypes.c_int64),
        ("q", ctypes.c_void_p),
        ("q_row_stride", ctypes.c_int64),
        ("k", ctypes.c_void_p),
        ("k_row_stride", ctypes.c_int64),
        ("v", ctypes.c_void_p),
        ("v_row_stride", ctypes.c_int64),
        ("edge", ctypes.c_void_p),
        ("scale", ctypes.c_float),
        ("dropout_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("hub_degree", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.POINTER(ctypes.c_float)),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class TransformerBackwardParams(ctypes.Structure):
    """Mirror of ``pygio_transformer_backward_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("a_t", Csr),
        ("perm_t", ctypes.c_void_p),
        ("heads", ctypes.c_int64),
        ("channels", ctypes.c_int64),
        ("q", ctypes.c_void_p),
        ("q_row_stride", ctypes.c_int64),
        ("k", ctypes.c_void_p),
        ("k_row_stride", ctypes.c_int64),
        ("v", ctypes.c_void_p),
        ("v_row_stride", ctypes.c_int64),
        ("edge", ctypes.c_void_p),
        ("scale", ctypes.c_float),
        ("dropout_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("hub_degree", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs", ctypes.c_int64),
        ("hub_degree_t", ctypes.POINTER(ctypes.c_int64)),
        ("max_hubs_t", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.POINTER(ctypes.c_float)),
        ("grad_out", ctypes.c_void_p),
        ("grad_q", ctypes.c_void_p),
        ("grad_q_row_stride", ctypes.c_int64),
        ("grad_k", ctypes.c_void_p),
        ("grad_k_row_stride", ctypes.c_int64),
        ("grad_v", ctypes.c_void_p),
        ("grad_v_row_stride", ctypes.c_int64),
        ("grad_edge", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class TransformerAlphaParams(ctypes.Structure):
    """Mirror of ``pygio_transformer_alpha_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("heads", ctypes.c_int64),
        ("channels", ctypes.c_int64),
        ("q", ctypes.c_void_p),
        ("q_row_stride", ctypes.c_int64),
        ("k", ctypes.c_void_p),
        ("k_row_stride", ctypes.c_int64),
        ("edge", ctypes.c_void_p),
        ("scale", ctypes.c_float),
        ("lse", ctypes.POINTER(ctypes.c_float)),
        ("alpha", ctypes.POINTER(ctypes.c_float)),
        ("stream", ctypes.c_void_p),
    ]


def library_path() -> Optional[str]:
    """The native library to load: $PYG_IOAWARE_NATIVE_LIB, else the copy
    installed inside the package, else None."""
    env = os.environ.get(ENV_LIBRARY_PATH)
    if env:
        return env
    packaged = pathlib.Path(__file__).with_name(LIBRARY_NAME)
    return str(packaged) if packaged.exists() else None


def _cusparse_candidates() -> list[str]:
    """libcusparse copies shipped as Python wheels (nvidia-cusparse), used
    only where the process has not loaded cuSPARSE already."""
    found = []
    for entry in sys.path:
        found += glob.glob(os.path.join(entry, "nvidia", "*", "lib", "libcusparse.so.12"))
        found += glob.glob(os.path.join(entry, "nvidia", "cusparse", "lib", "libcusparse.so.12"))
    return found


class SelfLoopsParams(ctypes.Structure):
    """Mirror of ``pygio_self_loops_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("index_bits", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("num_nodes", ctypes.c_int64),
        ("nnz", ctypes.c_int64),
        ("rowptr", ctypes.c_void_p),
        ("col", ctypes.c_void_p),
        ("row", ctypes.c_void_p),
        ("edge_perm", ctypes.c_void_p),
        ("out_rowptr", ctypes.c_void_p),
        ("out_col", ctypes.c_void_p),
        ("out_row", ctypes.c_void_p),
        ("out_origin", ctypes.POINTER(ctypes.c_int64)),
        ("out_gcn_values", ctypes.POINTER(ctypes.c_float)),
        ("stream", ctypes.c_void_p),
    ]


class GcnNormParams(ctypes.Structure):
    """Mirror of ``pygio_gcn_norm_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("row", ctypes.c_void_p),
        ("weight", ctypes.c_void_p),
        ("origin", ctypes.POINTER(ctypes.c_int64)),
        ("deg_inv_sqrt", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class Edges(ctypes.Structure):
    """Mirror of ``pygio_edges``: an edge list (source and destination rows
    of an edge_index, strided)."""

    _fields_ = [
        ("src", ctypes.c_void_p),
        ("dst", ctypes.c_void_p),
        ("src_stride", ctypes.c_int64),
        ("dst_stride", ctypes.c_int64),
        ("num_edges", ctypes.c_int64),
        ("index_bits", ctypes.c_int32),
    ]


class EdgeStatsParams(ctypes.Structure):
    """Mirror of ``pygio_edge_stats_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("edges", Edges),
        ("stats", ctypes.POINTER(ctypes.c_int64)),
        ("num_rows", ctypes.c_int64),
        ("out_index_bits", ctypes.c_int32),
        ("out_rowptr", ctypes.c_void_p),
        ("out_col", ctypes.c_void_p),
        ("out_row", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class CsrFromGroupedParams(ctypes.Structure):
    """Mirror of ``pygio_csr_from_grouped_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("edges", Edges),
        ("num_rows", ctypes.c_int64),
        ("out_index_bits", ctypes.c_int32),
        ("out_rowptr", ctypes.c_void_p),
        ("out_col", ctypes.c_void_p),
        ("out_row", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class MeanNormParams(ctypes.Structure):
    """Mirror of ``pygio_mean_norm_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("row", ctypes.c_void_p),
        ("weight", ctypes.c_void_p),
        ("origin", ctypes.POINTER(ctypes.c_int64)),
        ("values", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class CsrTransposeParams(ctypes.Structure):
    """Mirror of ``pygio_csr_transpose_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("a", Csr),
        ("row", ctypes.c_void_p),
        ("out_rowptr", ctypes.c_void_p),
        ("out_col", ctypes.c_void_p),
        ("out_row", ctypes.c_void_p),
        ("out_perm", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class PygSelfLoopsParams(ctypes.Structure):
    """Mirror of ``pygio_pyg_self_loops_params``."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("edges", Edges),
        ("num_rows", ctypes.c_int64),
        ("num_loops", ctypes.c_int64),
        ("num_kept", ctypes.c_int64),
        ("out_index_bits", ctypes.c_int32),
        ("out_edges", ctypes.c_void_p),
        ("out_kept", ctypes.POINTER(ctypes.c_int64)),
        ("out_rowptr", ctypes.c_void_p),
        ("out_col", ctypes.c_void_p),
        ("out_row", ctypes.c_void_p),
        ("out_perm", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


# Every exported entry: (argument types, return type), as in pyg_ioaware.h
# (tests/test_native_abi.py checks the two against each other).
_SIGNATURES = {
    "pygio_abi_version": ([], ctypes.c_int),
    "pygio_struct_size": ([ctypes.c_int32], ctypes.c_size_t),
    "pygio_last_error": ([], ctypes.c_char_p),
    "pygio_cusparse_load": ([ctypes.c_char_p], ctypes.c_int),
    "pygio_spmm_plan_create": (
        [ctypes.POINTER(SpmmPlanParams), ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int),
    "pygio_spmm_plan_destroy": ([ctypes.c_void_p], None),
    "pygio_spmm_workspace_size": (
        [ctypes.POINTER(SpmmParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_spmm_run": ([ctypes.POINTER(SpmmParams)], ctypes.c_int),
    "pygio_spmm_preprocess": ([ctypes.POINTER(SpmmParams)], ctypes.c_int),
    "pygio_spmm_csr_workspace_size": (
        [ctypes.POINTER(SpmmCsrParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_spmm_csr": ([ctypes.POINTER(SpmmCsrParams)], ctypes.c_int),
    "pygio_sddmm": ([ctypes.POINTER(SddmmParams)], ctypes.c_int),
    "pygio_csr_add_self_loops": ([ctypes.POINTER(SelfLoopsParams)], ctypes.c_int),
    "pygio_gcn_norm": ([ctypes.POINTER(GcnNormParams)], ctypes.c_int),
    "pygio_mean_norm": ([ctypes.POINTER(MeanNormParams)], ctypes.c_int),
    "pygio_edge_index_stats": ([ctypes.POINTER(EdgeStatsParams)], ctypes.c_int),
    "pygio_csr_from_grouped": ([ctypes.POINTER(CsrFromGroupedParams)], ctypes.c_int),
    "pygio_csr_transpose_workspace_size": (
        [ctypes.POINTER(CsrTransposeParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_csr_transpose": ([ctypes.POINTER(CsrTransposeParams)], ctypes.c_int),
    "pygio_csr_pyg_self_loops_workspace_size": (
        [ctypes.POINTER(PygSelfLoopsParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_csr_pyg_self_loops": ([ctypes.POINTER(PygSelfLoopsParams)], ctypes.c_int),
    "pygio_minmax_workspace_size": (
        [ctypes.POINTER(MinmaxParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_minmax": ([ctypes.POINTER(MinmaxParams)], ctypes.c_int),
    "pygio_minmax_backward_workspace_size": (
        [ctypes.POINTER(MinmaxBackwardParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_minmax_backward": ([ctypes.POINTER(MinmaxBackwardParams)], ctypes.c_int),
    "pygio_gatv2_workspace_size": (
        [ctypes.POINTER(Gatv2Params), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_gatv2": ([ctypes.POINTER(Gatv2Params)], ctypes.c_int),
    "pygio_gatv2_backward_workspace_size": (
        [ctypes.POINTER(Gatv2BackwardParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_gatv2_backward": ([ctypes.POINTER(Gatv2BackwardParams)], ctypes.c_int),
    "pygio_gatv2_alpha": ([ctypes.POINTER(Gatv2AlphaParams)], ctypes.c_int),
    "pygio_transformer_workspace_size": (
        [ctypes.POINTER(TransformerParams), ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "pygio_transformer": ([ctypes.POINTER(TransformerParams)], ctypes.c_int),
    "pygio_transformer_backward_workspace_size": (
        [ctypes.POINTER(TransformerBackwardParams), ctypes.POINTER(ctypes.c_size_t)],
        ctypes.c_int),
    "pygio_transformer_backward": ([ctypes.POINTER(TransformerBackwardParams)], ctypes.c_int),
    "pygio_transformer_alpha": ([ctypes.POINTER(TransformerAlphaParams)], ctypes.c_int),
}


@functools.lru_cache(maxsize=None)
def library() -> Optional[ctypes.CDLL]:
    """The loaded native library, or None where it is not built or cannot
    be loaded (then every op runs its torch implementation)."""
    path = library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as error:
        if os.environ.get(ENV_LIBRARY_PATH):
            raise NativeError(f"{ENV_LIBRARY_PATH}={path} could not be loaded: {error}")
        return None
    lib.pygio_abi_version.restype = ctypes.c_int
    if lib.pygio_abi_version() != ABI_VERSION:  # before binding entries it may lack
        raise NativeError(f"{path} has ABI version {lib.pygio_abi_version()}, "
                          f"this package expects {ABI_VERSION}: rebuild the native library")
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


def check(status: int) -> None:
    """Raises NativeError with the library's message for a failed status."""
    if status != 0:
        message = library().pygio_last_error().decode(errors="replace")
        raise NativeError(f"pyg_ioaware native error {status}: {message}")


# How the host extension's check (cuda/host/native_api.cpp) begins the
# message of a failed library call, which torch raises as a RuntimeError.
_HOST_ERROR_MARK = "pyg_ioaware native error"


def _host_call(function: Any, *args: Any) -> Any:
    """function(*args), a launch of the host extension: a failed library
    call raises NativeError, as through ctypes (:func:`check`); any other
    error (out of memory, ...) as it is."""
    try:
        return function(*args)
    except RuntimeError as error:
        if _HOST_ERROR_MARK not in str(error):
            raise
        raise NativeError(str(error)) from None


@functools.lru_cache(maxsize=None)
def load_cusparse() -> None:
    """Resolves cuSPARSE once (torch's loaded copy, else a wheel's copy)."""
    lib = library()
    status = lib.pygio_cusparse_load(None)
    for candidate in _cusparse_candidates() if status != 0 else []:
        status = lib.pygio_cusparse_load(candidate.encode())
        if status == 0:
            break
    check(status)


def pointer(tensor: Optional[torch.Tensor]) -> Optional[int]:
    """The tensor's data pointer, None (NULL) for None."""
    return None if tensor is None else tensor.data_ptr()


# torch's raw current-stream query (CUDA builds; what Triton and Inductor call)
# skips building a torch.cuda.Stream object on every op call.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(tensor: torch.Tensor) -> int:
    """torch's current CUDA stream on the tensor's device, as a pointer."""
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.device.index)
    return torch.cuda.current_stream(tensor.device).cuda_stream


_INDEX_BITS = {torch.int32: 32, torch.int64: 64}


def index_bits(dtype: torch.dtype) -> int:
    """32 or 64 for an int32 / int64 index dtype; TypeError for any other."""
    bits = _INDEX_BITS.get(dtype)
    if bits is None:
        raise TypeError(f"native CSR indices must be torch.int32 or torch.int64, got {dtype}")
    return bits


def _dtype_code(dtype: torch.dtype) -> int:
    """The pygio_dtype code of a floating dtype; TypeError for any other."""
    code = DTYPE_CODES.get(dtype)
    if code is None:
        raise TypeError(f"native kernels take one of {list(DTYPE_CODES)}, got {dtype}")
    return code


def _check_index_dtypes(rowptr: Tensor, col: Tensor) -> None:
    if rowptr.dtype != col.dtype:
        raise TypeError(f"rowptr ({rowptr.dtype}) and col ({col.dtype}) must share one "
                        f"index dtype")


def _csr(rowptr: Tensor, col: Tensor, num_cols: int) -> Csr:
    """A ``pygio_csr`` over rowptr / col (both int32 or both int64)."""
    _check_index_dtypes(rowptr, col)
    return Csr(rowptr=rowptr.data_ptr(), col=col.data_ptr(), num_rows=rowptr.numel() - 1,
               num_cols=num_cols, nnz=col.numel(), index_bits=index_bits(rowptr.dtype))


def _check_launch(rowptr: Tensor, col: Tensor, *rows: Tuple[Tensor, str]) -> None:
    """The checks a ctypes launch makes while it fills its params, made
    before a launch from C++ so that both raise alike: rowptr and col of one
    index dtype (TypeError), each named 2-D tensor of inner stride 1
    (ValueError)."""
    _check_index_dtypes(rowptr, col)
    for t, name in rows:
        _row_stride(t, name)


def _row_stride(t: Tensor, name: str) -> int:
    """Row stride of a 2-D tensor whose rows have inner stride 1. torch
    reports any stride for a dimension of size 1: a single row's stride is
    taken as the width, and a width-1 column's inner stride is ignored."""
    rows, width = t.shape
    row_stride, inner_stride = t.stride()
    if width > 1 and inner_stride != 1:
        raise ValueError(f"{name} must have inner stride 1, got strides {t.stride()}")
    return row_stride if rows > 1 else width


def spmm_plan_create(rowptr: Tensor, col: Tensor, num_cols: int, width: int,
                     dtype: torch.dtype, transpose: bool, algorithm: int) -> int:
    """A cuSPARSE plan for Y = A X (Y = A^T X with ``transpose``) on rowptr's
    device, A = (rowptr, col) with ``num_cols`` columns, X and Y ``width``
    wide in ``dtype``, ``algorithm`` a cusparseSpMMAlg_t. Returns an opaque
    nonzero handle; rowptr and col must outlive it (spmm_plan_destroy)."""
    params = SpmmPlanParams(struct_size=ctypes.sizeof(SpmmPlanParams),
                            dtype=_dtype_code(dtype), device=rowptr.device.index,
                            transpose=int(transpose), algorithm=algorithm,
                            a=_csr(rowptr, col, num_cols), width=width)
    plan = ctypes.c_void_p()
    check(library().pygio_spmm_plan_create(ctypes.byref(params), ctypes.byref(plan)))
    return plan.value


def spmm_plan_destroy(handle: int) -> None:
    """Frees a plan from spmm_plan_create."""
    library().pygio_spmm_plan_destroy(handle)


def _spmm_params(handle: int, values: Tensor, x: Tensor, out: Tensor,
                 workspace: Optional[Tensor]) -> SpmmParams:
    """The ``pygio_spmm_params`` of one call on a plan."""
    return SpmmParams(struct_size=ctypes.sizeof(SpmmParams),
                      dtype=_dtype_code(x.dtype), device=x.device.index, plan=handle,
                      values=values.data_ptr(),
                      x=x.data_ptr(), x_row_stride=_row_stride(x, "x"),
                      y=out.data_ptr(), y_row_stride=_row_stride(out, "out"),
                      workspace=pointer(workspace), stream=stream_of(x))


class SpmmRunner:
    """spmm_run for one plan with its ``pygio_spmm_params`` kept between
    calls: each call only rebinds the buffers and the stream (the hot path of
    every layer call; building the struct anew costs more than the call)."""

    def __init__(self, handle: int, dtype: torch.dtype, device: torch.device):
        self._params = SpmmParams(struct_size=ctypes.sizeof(SpmmParams),
                                  dtype=_dtype_code(dtype), device=device.index, plan=handle)
        self._params_ref = ctypes.byref(self._params)

    def run(self, values: Tensor, x: Tensor, out: Tensor, workspace: Optional[Tensor]) -> None:
        """Enqueues out = op(A) X on torch's current stream, as spmm_run."""
        p = self._params
        p.values = values.data_ptr()
        p.x, p.x_row_stride = x.data_ptr(), _row_stride(x, "x")
        p.y, p.y_row_stride = out.data_ptr(), _row_stride(out, "out")
        p.workspace = pointer(workspace)
        p.stream = stream_of(x)
        check(library().pygio_spmm_run(self._params_ref))


def spmm_workspace_size(handle: int, values: Tensor, x: Tensor, out: Tensor) -> int:
    """Bytes of workspace spmm_run needs for this plan and these row strides."""
    size = ctypes.c_size_t()
    params = _spmm_params(handle, values, x, out, None)
    check(library().pygio_spmm_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    return size.value


def spmm_run(handle: int, values: Tensor, x: Tensor, out: Tensor,
             workspace: Optional[Tensor]) -> None:
    """Enqueues out = op(A) X on torch's current stream; ``workspace`` holds
    spmm_workspace_size bytes (None where that is 0). Plans that run often
    keep a :class:`SpmmRunner` instead."""
    SpmmRunner(handle, x.dtype, x.device).run(values, x, out, workspace)


def spmm_preprocess(handle: int, values: Tensor, x: Tensor, out: Tensor,
                    workspace: Optional[Tensor]) -> None:
    """Diagnostic only (scripts/spmm_probe.py --preprocess): cuSPARSE's
    optional SpMM preprocessing; the package never calls it."""
    params = _spmm_params(handle, values, x, out, workspace)
    check(library().pygio_spmm_preprocess(ctypes.byref(params)))


_REUSED_PARAMS = threading.local()


def _reused_params(cls: type) -> tuple:
    """(params, byref) of this thread's ``cls`` struct, reused call after
    call: filling fields costs a third of building a struct anew, and the
    ops of a small graph are bound by such host costs. Every caller sets
    every field it reads (struct_size is set once)."""
    entry = getattr(_REUSED_PARAMS, cls.__name__, None)
    if entry is None:
        params = cls(struct_size=ctypes.sizeof(cls))
        entry = (params, ctypes.byref(params))
        setattr(_REUSED_PARAMS, cls.__name__, entry)
    return entry


def spmm_csr(rowptr: Tensor, col: Tensor, values: Tensor, x: Tensor, bias: Optional[Tensor],
             out: Tensor, transpose: bool, deterministic: bool, degree_bound: int = -1) -> None:
    """Enqueues out = op(A) x (+ bias) with the SpMM kernels of our own on
    torch's current stream (contract: pygio_spmm_csr in pyg_ioaware.h); A =
    (rowptr, col, values) has ``out``'s rows (``x``'s with ``transpose``),
    none longer than ``degree_bound`` entries where that is >= 0.
    Allocates the workspace the call needs from torch's caching allocator.
    From C++ where the host extension is loaded."""
    if bias is not None and bias.dtype != values.dtype:
        raise TypeError(f"spmm_csr: the bias ({bias.dtype}) must be in the values' dtype "
                        f"({values.dtype}), which the kernels read it in")
    _check_launch(rowptr, col, (x, "x"), (out, "out"))
    host = _native_host.active()
    if host is not None:
        _host_call(host.spmm_csr, rowptr, col, values, x, bias, out, transpose, deterministic,
                   degree_bound)
        return
    lib = library()
    p, ref = _reused_params(SpmmCsrParams)
    p.dtype, p.values_dtype = _dtype_code(x.dtype), _dtype_code(values.dtype)
    p.y_dtype = _dtype_code(out.dtype)
    p.device, p.transpose, p.deterministic = x.device.index, transpose, deterministic
    p.degree_bound = degree_bound
    p.a = Csr(rowptr.data_ptr(), col.data_ptr(), rowptr.numel() - 1,
              out.size(0) if transpose else x.size(0), col.numel(), index_bits(rowptr.dtype))
    p.width, p.values, p.bias = x.size(1), values.data_ptr(), pointer(bias)
    p.x, p.x_row_stride = x.data_ptr(), _row_stride(x, "x")
    p.y, p.y_row_stride = out.data_ptr(), _row_stride(out, "out")
    p.workspace, p.stream = None, stream_of(x)
    size = ctypes.c_size_t()
    check(lib.pygio_spmm_csr_workspace_size(ref, ctypes.byref(size)))
    workspace = None
    if size.value:
        workspace = torch.empty(size.value, dtype=torch.uint8, device=x.device)
        p.workspace = workspace.data_ptr()
    check(lib.pygio_spmm_csr(ref))


def sddmm(rowptr: Tensor, col: Tensor, g: Tensor, x: Tensor, out: Tensor) -> None:
    """Enqueues out[e] = <g[row(e)], x[col[e]]> for every CSR entry e on
    torch's current stream (out contiguous, one entry per col entry)."""
    params = SddmmParams(struct_size=ctypes.sizeof(SddmmParams),
                         dtype=_dtype_code(x.dtype), device=x.device.index,
                         a=_csr(rowptr, col, x.size(0)), width=x.size(1),
                         g=g.data_ptr(), g_row_stride=_row_stride(g, "g"),
                         x=x.data_ptr(), x_row_stride=_row_stride(x, "x"),
                         out=out.data_ptr(), stream=stream_of(x))
    check(library().pygio_sddmm(ctypes.byref(params)))


def _int64_pointer(tensor: Optional[Tensor]):
    return None if tensor is None else ctypes.cast(tensor.data_ptr(),
                                                   ctypes.POINTER(ctypes.c_int64))


REDUCE_CODES = {"min": 0, "max": 1}


def _workspace(size: ctypes.c_size_t, device: torch.device) -> Optional[Tensor]:
    """A workspace of ``size`` bytes from torch's caching allocator (None for 0)."""
    if size.value == 0:
        return None
    return torch.empty(size.value, dtype=torch.uint8, device=device)


def minmax(rowptr: Tensor, col: Tensor, x: Tensor, reduce: str,
           hub_degree: Optional[Tensor], max_hubs: int, out: Tensor,
           arg: Optional[Tensor]) -> None:
    """Enqueues out (and arg) = the neighbour min / max of x over the CSR
    (rowptr, col) on torch's current stream (contract: pygio_minmax in
    pyg_ioaware.h): ``hub_degree`` an int64 device scalar (or None: no
    split) with at most ``max_hubs`` rows above it; arg (uint8 or int16
    codes, contiguous) or None."""
    host = _native_host.active()
    if host is not None:
        _check_launch(rowptr, col, (x, "x"), (out, "out"))
        _host_call(host.minmax, rowptr, col, x, REDUCE_CODES[reduce], hub_degree, max_hubs,
                   out, arg)
        return
    lib = library()
    params = MinmaxParams(struct_size=ctypes.sizeof(MinmaxParams), dtype=_dtype_code(x.dtype),
                          device=x.device.index, reduce=REDUCE_CODES[reduce],
                          a=_csr(rowptr, col, x.size(0)), width=x.size(1),
                          x=x.data_ptr(), x_row_stride=_row_stride(x, "x"),
                          hub_degree=_int64_pointer(hub_degree), max_hubs=max_hubs,
                          out=out.data_ptr(), out_row_stride=_row_stride(out, "out"),
                          arg=pointer(arg), arg_bytes=0 if arg is None else arg.element_size(),
                          stream=stream_of(x))
    size = ctypes.c_size_t()
    check(lib.pygio_minmax_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, x.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_minmax(ctypes.byref(params)))


#: How the min / max backward adds each element's gradient to its sources
#: (pyg_ioaware.h, pygio_minmax_backward; codes in this order for the host
#: extension): one atomicAdd a plain winner; the plain winners bucketed,
#: then gathered per source over the CSR^T; every source's gradient
#: gathered over the CSR^T in a fixed order, without atomics. Each with
#: the CSR^T it reads.
MINMAX_BACKWARD_TRANSPOSES = {"atomics": "no CSR^T",
                              "buckets": "the CSR^T (rowptr_t, col_t, perm_t)",
                              "deterministic": "the CSR^T (rowptr_t, col_t[, perm_t])"}
MINMAX_BACKWARD_PATHS = tuple(MINMAX_BACKWARD_TRANSPOSES)


def minmax_backward(rowptr: Tensor, col: Tensor, transpose: Optional[tuple], x: Tensor,
                    out: Tensor, arg: Tensor, grad_out: Tensor, reduce: str,
                    hub_degree: Optional[Tensor], max_hubs: int, grad_x: Tensor,
                    path: str) -> None:
    """Enqueues grad_x = the gradient of pygio_minmax's out through its arg
    on torch's current stream (contract: pygio_minmax_backward) by ``path``
    (MINMAX_BACKWARD_PATHS), ``transpose`` the CSR^T (rowptr_t, col_t[,
    perm_t], perm_t: CSR^T position -> CSR position) every path but
    "atomics" reads: "buckets" needs perm_t, "deterministic" takes the
    entries by position where it is given (else by value); rows above
    ``hub_degree`` walking in chunks."""
    if path not in MINMAX_BACKWARD_PATHS:
        raise ValueError(f"minmax_backward: path must be one of {MINMAX_BACKWARD_PATHS}, "
                         f"got {path!r}")
    rowptr_t, col_t, perm_t = (tuple(transpose) + (None,) * 3)[:3] if transpose else (None,) * 3
    if (path != "atomics") != (transpose is not None) or (path == "buckets" and perm_t is None):
        raise ValueError(f"minmax_backward: the {path!r} path takes "
                         f"{MINMAX_BACKWARD_TRANSPOSES[path]}")
    if perm_t is not None and (perm_t.dtype != col_t.dtype or perm_t.numel() != col_t.numel()
                               or not perm_t.is_contiguous()):
        raise ValueError("minmax_backward: perm_t must be a contiguous permutation of the "
                         "CSR^T's entries in its index dtype")
    host = _native_host.active()
    if host is not None:
        _check_launch(rowptr, col, (x, "x"), (out, "out"), (grad_out, "grad_out"),
                      (grad_x, "grad_x"))
        if transpose is not None:
            _check_launch(rowptr_t, col_t)
        _host_call(host.minmax_backward, rowptr, col, rowptr_t, col_t, perm_t, x, out, arg,
                   grad_out, REDUCE_CODES[reduce], hub_degree, max_hubs, grad_x,
                   MINMAX_BACKWARD_PATHS.index(path))
        return
    lib = library()
    num_rows = rowptr.numel() - 1
    a_t = Csr(index_bits=index_bits(rowptr.dtype))
    if transpose is not None:
        a_t = _csr(rowptr_t, col_t, num_rows)
    params = MinmaxBackwardParams(
        struct_size=ctypes.sizeof(MinmaxBackwardParams), dtype=_dtype_code(x.dtype),
        device=x.device.index, reduce=REDUCE_CODES[reduce],
        deterministic=int(path == "deterministic"),
        a=_csr(rowptr, col, x.size(0)), a_t=a_t, perm_t=pointer(perm_t),
        width=x.size(1), hub_degree=_int64_pointer(hub_degree), max_hubs=max_hubs,
        x=x.data_ptr(), x_row_stride=_row_stride(x, "x"),
        out=out.data_ptr(), out_row_stride=_row_stride(out, "out"), arg=pointer(arg),
        arg_bytes=arg.element_size(),
        grad_out=grad_out.data_ptr(), grad_out_row_stride=_row_stride(grad_out, "grad_out"),
        grad_x=grad_x.data_ptr(), grad_x_row_stride=_row_stride(grad_x, "grad_x"),
        stream=stream_of(x))
    size = ctypes.c_size_t()
    check(lib.pygio_minmax_backward_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, x.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_minmax_backward(ctypes.byref(params)))


def _float_pointer(tensor: Optional[Tensor]):
    return None if tensor is None else ctypes.cast(tensor.data_ptr(),
                                                   ctypes.POINTER(ctypes.c_float))


def _node_row_stride(t: Tensor, name: str) -> int:
    """Row stride of a [nodes, heads, channels] tensor whose last two
    dimensions are contiguous (a view of a fused [nodes, heads * channels]
    projection is fine); ValueError otherwise."""
    if t.dim() != 3 or t.stride(2) != 1 or (t.size(1) > 1 and t.stride(1) != t.size(2)):
        raise ValueError(f"{name} must be [nodes, heads, channels] with contiguous heads and "
                         f"channels, got shape {tuple(t.shape)} strides {t.stride()}")
    return t.stride(0) if t.size(0) > 1 else t.size(1) * t.size(2)


def _check_attention_launch(rowptr: Tensor, col: Tensor, *nodes: Tuple[Tensor, str]) -> None:
    """The checks an attention launch through ctypes makes while it fills
    its params, made before one from C++ so that both raise alike: rowptr
    and col of one index dtype (TypeError), each named [nodes, heads,
    channels] tensor laid out as :func:`_node_row_stride` requires
    (ValueError)."""
    _check_index_dtypes(rowptr, col)
    for t, name in nodes:
        _node_row_stride(t, name)


def _gatv2_inputs(rowptr: Tensor, col: Tensor, x_l: Tensor, x_r: Tensor,
                  edge: Optional[Tensor], att: Tensor, negative_slope: float) -> dict:
    """The fields pygio_gatv2, pygio_gatv2_backward and pygio_gatv2_alpha share."""
    return dict(dtype=_dtype_code(x_l.dtype), device=x_l.device.index,
                a=_csr(rowptr, col, x_l.size(0)), heads=x_l.size(1), channels=x_l.size(2),
                x_l=x_l.data_ptr(), x_l_row_stride=_node_row_stride(x_l, "x_l"),
                x_r=x_r.data_ptr(), x_r_row_stride=_node_row_stride(x_r, "x_r"),
                edge=pointer(edge), att=_float_pointer(att), negative_slope=negative_slope,
                stream=stream_of(x_l))


def _node_tensor(into: Optional[Tensor], like: Tensor) -> Tensor:
    """``into`` where given, else a fresh contiguous tensor of like's shape
    and dtype."""
    return into if into is not None else torch.empty(like.shape, dtype=like.dtype,
                                                     device=like.device)


def gatv2(rowptr: Tensor, col: Tensor, x_l: Tensor, x_r: Tensor, edge: Optional[Tensor],
          att: Tensor, negative_slope: float, dropout_p: float, seed: int,
          hub_degree: Optional[Tensor], max_hubs: int,
          out_bias: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """Enqueues (out [rows, heads, channels] in x's dtype, lse [rows, heads]
    fp32) = GATv2 attention over the CSR (rowptr, col) with at least one
    row, on torch's current stream (contract: pygio_gatv2 in pyg_ioaware.h);
    ``out_bias``: fp32 [heads, channels] contiguous or None. From C++ where
    the host extension is loaded."""
    host = _native_host.active()
    if host is not None:
        _check_attention_launch(rowptr, col, (x_l, "x_l"), (x_r, "x_r"))
        return tuple(_host_call(host.gatv2, rowptr, col, x_l, x_r, edge, att, negative_slope,
                                dropout_p, seed, hub_degree, max_hubs, out_bias))
    num_rows, heads, channels = rowptr.numel() - 1, x_l.size(1), x_l.size(2)
    out = torch.empty(num_rows, heads, channels, dtype=x_l.dtype, device=x_l.device)
    lse = torch.empty(num_rows, heads, dtype=torch.float32, device=x_l.device)
    lib = library()
    params = Gatv2Params(struct_size=ctypes.sizeof(Gatv2Params),
                         **_gatv2_inputs(rowptr, col, x_l, x_r, edge, att, negative_slope),
                         dropout_p=dropout_p, seed=seed, hub_degree=_int64_pointer(hub_degree),
                         max_hubs=max_hubs, out_bias=_float_pointer(out_bias),
                         out=out.data_ptr(), lse=_float_pointer(lse))
    size = ctypes.c_size_t()
    check(lib.pygio_gatv2_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, x_l.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_gatv2(ctypes.byref(params)))
    return out, lse


def gatv2_backward(rowptr: Tensor, col: Tensor, transpose: tuple, x_l: Tensor, x_r: Tensor,
                   edge: Optional[Tensor], att: Tensor, negative_slope: float,
                   dropout_p: float, seed: int, hubs: tuple, lse: Tensor, grad_out: Tensor,
                   into: Tuple[Optional[Tensor], Optional[Tensor]]) -> Tuple[Tensor, ...]:
    """Enqueues the gradients of :func:`gatv2` on torch's current stream
    (contract: pygio_gatv2_backward): (grad_x_l, grad_x_r, grad_att fp32,
    grad_edge, empty without edge). ``transpose`` = (rowptr_t, col_t,
    perm_t), the CSR^T and its CSR positions; ``hubs`` = (hub_degree,
    max_hubs, hub_degree_t, max_hubs_t); ``into`` = (grad_x_l, grad_x_r) to
    write into (the slots of a packed gradient), each None for a fresh one.
    From C++ where the host extension is loaded."""
    host = _native_host.active()
    if host is not None:
        _check_attention_launch(rowptr, col, (x_l, "x_l"), (x_r, "x_r"),
                                *((t, name) for t, name in zip(into, ("grad_x_l", "grad_x_r"))
                                  if t is not None))
        return tuple(_host_call(host.gatv2_backward, rowptr, col, *transpose, x_l, x_r, edge,
                                att, negative_slope, dropout_p, seed, *hubs, lse, grad_out,
                                *into))
    grad_x_l, grad_x_r = _node_tensor(into[0], x_l), _node_tensor(into[1], x_r)
    grad_att = torch.empty(att.shape, dtype=torch.float32, device=att.device)
    grad_edge = torch.empty_like(edge) if edge is not None else x_l.new_empty(0)
    lib = library()
    rowptr_t, col_t, perm_t = transpose
    hub_degree, max_hubs, hub_degree_t, max_hubs_t = hubs
    params = Gatv2BackwardParams(
        struct_size=ctypes.sizeof(Gatv2BackwardParams),
        **_gatv2_inputs(rowptr, col, x_l, x_r, edge, att, negative_slope),
        a_t=_csr(rowptr_t, col_t, rowptr.numel() - 1), perm_t=perm_t.data_ptr(),
        dropout_p=dropout_p, seed=seed, hub_degree=_int64_pointer(hub_degree),
        max_hubs=max_hubs, hub_degree_t=_int64_pointer(hub_degree_t), max_hubs_t=max_hubs_t,
        lse=_float_pointer(lse), grad_out=grad_out.data_ptr(),
        grad_x_l=grad_x_l.data_ptr(), grad_x_l_row_stride=_node_row_stride(grad_x_l, "grad_x_l"),
        grad_x_r=grad_x_r.data_ptr(), grad_x_r_row_stride=_node_row_stride(grad_x_r, "grad_x_r"),
        grad_att=_float_pointer(grad_att), grad_edge=pointer(grad_edge if edge is not None
                                                               else None))
    size = ctypes.c_size_t()
    check(lib.pygio_gatv2_backward_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, x_l.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_gatv2_backward(ctypes.byref(params)))
    return grad_x_l, grad_x_r, grad_att, grad_edge


def gatv2_alpha(rowptr: Tensor, col: Tensor, x_l: Tensor, x_r: Tensor, edge: Optional[Tensor],
                att: Tensor, negative_slope: float, lse: Tensor, alpha: Tensor) -> None:
    """Enqueues alpha [nnz, heads] (fp32, CSR order, before dropout) from the
    forward's lse (contract: pygio_gatv2_alpha)."""
    params = Gatv2AlphaParams(struct_size=ctypes.sizeof(Gatv2AlphaParams),
                              **_gatv2_inputs(rowptr, col, x_l, x_r, edge, att, negative_slope),
                              lse=_float_pointer(lse), alpha=_float_pointer(alpha))
    check(library().pygio_gatv2_alpha(ctypes.byref(params)))


def _transformer_inputs(rowptr: Tensor, col: Tensor, q: Tensor, k: Tensor,
                        edge: Optional[Tensor], scale: float) -> dict:
    """The fields pygio_transformer, _backward and _alpha share."""
    return dict(dtype=_dtype_code(q.dtype), device=q.device.index,
                a=_csr(rowptr, col, k.size(0)), heads=q.size(1), channels=q.size(2),
                q=q.data_ptr(), q_row_stride=_node_row_stride(q, "q"),
                k=k.data_ptr(), k_row_stride=_node_row_stride(k, "k"),
                edge=pointer(edge), scale=scale, stream=stream_of(q))


def transformer(rowptr: Tensor, col: Tensor, q: Tensor, k: Tensor, v: Tensor,
                edge: Optional[Tensor], scale: float, dropout_p: float, seed: int,
                hub_degree: Optional[Tensor], max_hubs: int) -> Tuple[Tensor, Tensor]:
    """Enqueues (out [rows, heads, channels] in q's dtype, lse [rows, heads]
    fp32) = graph-transformer attention over the CSR (rowptr, col) with at
    least one row (contract: pygio_transformer). From C++ where the host
    extension is loaded."""
    host = _native_host.active()
    if host is not None:
        _check_attention_launch(rowptr, col, (q, "q"), (k, "k"), (v, "v"))
        return tuple(_host_call(host.transformer, rowptr, col, q, k, v, edge, scale, dropout_p,
                                seed, hub_degree, max_hubs))
    num_rows, heads, channels = rowptr.numel() - 1, q.size(1), q.size(2)
    out = torch.empty(num_rows, heads, channels, dtype=q.dtype, device=q.device)
    lse = torch.empty(num_rows, heads, dtype=torch.float32, device=q.device)
    lib = library()
    params = TransformerParams(struct_size=ctypes.sizeof(TransformerParams),
                               **_transformer_inputs(rowptr, col, q, k, edge, scale),
                               v=v.data_ptr(), v_row_stride=_node_row_stride(v, "v"),
                               dropout_p=dropout_p, seed=seed,
                               hub_degree=_int64_pointer(hub_degree), max_hubs=max_hubs,
                               out=out.data_ptr(), lse=_float_pointer(lse))
    size = ctypes.c_size_t()
    check(lib.pygio_transformer_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, q.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_transformer(ctypes.byref(params)))
    return out, lse


def transformer_backward(rowptr: Tensor, col: Tensor, transpose: tuple, q: Tensor, k: Tensor,
                         v: Tensor, edge: Optional[Tensor], scale: float, dropout_p: float,
                         seed: int, hubs: tuple, out: Tensor, lse: Tensor, grad_out: Tensor,
                         into: Tuple[Optional[Tensor], ...]) -> Tuple[Tensor, ...]:
    """Enqueues the gradients of :func:`transformer` (contract:
    pygio_transformer_backward): (grad_q, grad_k, grad_v, grad_edge, empty
    without edge). ``transpose`` = (rowptr_t, col_t, perm_t), ``hubs`` =
    (hub_degree, max_hubs, hub_degree_t, max_hubs_t), ``into`` = (grad_q,
    grad_k, grad_v) to write into (the slots of a packed gradient), each
    None for a fresh one. From C++ where the host extension is loaded."""
    host = _native_host.active()
    if host is not None:
        _check_attention_launch(rowptr, col, (q, "q"), (k, "k"), (v, "v"),
                                *((t, name) for t, name in zip(into, ("grad_q", "grad_k",
                                                                      "grad_v"))
                                  if t is not None))
        return tuple(_host_call(host.transformer_backward, rowptr, col, *transpose, q, k, v,
                                edge, scale, dropout_p, seed, *hubs, out, lse, grad_out, *into))
    grad_q, grad_k, grad_v = (_node_tensor(t, like) for t, like in zip(into, (q, k, v)))
    grad_edge = torch.empty_like(edge) if edge is not None else q.new_empty(0)
    lib = library()
    rowptr_t, col_t, perm_t = transpose
    hub_degree, max_hubs, hub_degree_t, max_hubs_t = hubs
    params = TransformerBackwardParams(
        struct_size=ctypes.sizeof(TransformerBackwardParams),
        **_transformer_inputs(rowptr, col, q, k, edge, scale),
        a_t=_csr(rowptr_t, col_t, rowptr.numel() - 1), perm_t=perm_t.data_ptr(),
        v=v.data_ptr(), v_row_stride=_node_row_stride(v, "v"), dropout_p=dropout_p, seed=seed,
        hub_degree=_int64_pointer(hub_degree), max_hubs=max_hubs,
        hub_degree_t=_int64_pointer(hub_degree_t), max_hubs_t=max_hubs_t, out=out.data_ptr(),
        lse=_float_pointer(lse), grad_out=grad_out.data_ptr(),
        grad_q=grad_q.data_ptr(), grad_q_row_stride=_node_row_stride(grad_q, "grad_q"),
        grad_k=grad_k.data_ptr(), grad_k_row_stride=_node_row_stride(grad_k, "grad_k"),
        grad_v=grad_v.data_ptr(), grad_v_row_stride=_node_row_stride(grad_v, "grad_v"),
        grad_edge=pointer(grad_edge if edge is not None else None))
    size = ctypes.c_size_t()
    check(lib.pygio_transformer_backward_workspace_size(ctypes.byref(params),
                                                        ctypes.byref(size)))
    workspace = _workspace(size, q.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_transformer_backward(ctypes.byref(params)))
    return grad_q, grad_k, grad_v, grad_edge


def transformer_alpha(rowptr: Tensor, col: Tensor, q: Tensor, k: Tensor, edge: Optional[Tensor],
                      scale: float, lse: Tensor, alpha: Tensor) -> None:
    """Enqueues alpha [nnz, heads] (fp32, CSR order, before dropout) from the
    forward's lse (contract: pygio_transformer_alpha)."""
    params = TransformerAlphaParams(struct_size=ctypes.sizeof(TransformerAlphaParams),
                                    **_transformer_inputs(rowptr, col, q, k, edge, scale),
                                    lse=_float_pointer(lse), alpha=_float_pointer(alpha))
    check(library().pygio_transformer_alpha(ctypes.byref(params)))


def csr_add_self_loops(rowptr: Tensor, col: Tensor, row: Tensor, edge_perm: Optional[Tensor],
                       gcn_values: bool = False) -> Tuple[Tensor, ...]:
    """Enqueues PyG's remaining self loops of a square CSR graph: (rowptr,
    col, row, origin), indices in the input's dtype, origin int64, then with
    ``gcn_values`` the result's float32 GCN values without weights (the
    input must hold no self loop), else None (contract:
    pygio_csr_add_self_loops in pyg_ioaware.h)."""
    indices = [rowptr, col, row] + ([] if edge_perm is None else [edge_perm])
    if any(t.dtype != rowptr.dtype for t in indices):
        raise TypeError("csr_add_self_loops: every index tensor must share one dtype")
    host = _native_host.active()
    if host is not None:
        return _self_loop_outputs(_host_call(host.csr_add_self_loops, rowptr, col, row,
                                             edge_perm, gcn_values))
    num_nodes, entries = rowptr.numel() - 1, col.numel() + rowptr.numel() - 1
    out_rowptr = torch.empty(num_nodes + 1, dtype=rowptr.dtype, device=rowptr.device)
    out_col, out_row = (torch.empty(entries, dtype=rowptr.dtype, device=rowptr.device)
                        for _ in range(2))
    out_origin = torch.empty(entries, dtype=torch.int64, device=rowptr.device)
    out_values = (torch.empty(entries, dtype=torch.float32, device=rowptr.device)
                  if gcn_values else None)
    params = SelfLoopsParams(struct_size=ctypes.sizeof(SelfLoopsParams),
                             index_bits=index_bits(rowptr.dtype), device=rowptr.device.index,
                             num_nodes=num_nodes, nnz=col.numel(),
                             rowptr=rowptr.data_ptr(), col=col.data_ptr(), row=row.data_ptr(),
                             edge_perm=pointer(edge_perm), out_rowptr=out_rowptr.data_ptr(),
                             out_col=out_col.data_ptr(), out_row=out_row.data_ptr(),
                             out_origin=_int64_pointer(out_origin),
                             out_gcn_values=_float_pointer(out_values),
                             stream=stream_of(rowptr))
    check(library().pygio_csr_add_self_loops(ctypes.byref(params)))
    return out_rowptr, out_col, out_row, out_origin, out_values


def _self_loop_outputs(out: Sequence[Tensor]) -> Tuple[Tensor, ...]:
    """The host extension's self-loop graph ([rowptr, col, row, origin] and
    the GCN values where it wrote them) as the ctypes path returns it:
    (rowptr, col, row, origin, values or None)."""
    return (*out, None) if len(out) == 4 else tuple(out)


def gcn_norm(rowptr: Tensor, col: Tensor, row: Tensor, weight: Optional[Tensor],
             origin: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    """Enqueues GCN's symmetric normalization of a square CSR graph: its
    values [E] in ``dtype`` (contract: pygio_gcn_norm in pyg_ioaware.h)."""
    host = _native_host.active()
    if host is not None:
        return _host_call(host.gcn_norm, rowptr, col, row, weight, origin, dtype)
    values = torch.empty(col.numel(), dtype=dtype, device=col.device)
    deg_inv_sqrt = torch.empty(rowptr.numel() - 1, device=col.device,
                               dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    p, ref = _norm_params(GcnNormParams, rowptr, col, rowptr.numel() - 1, row, weight, origin,
                          values)
    p.deg_inv_sqrt = deg_inv_sqrt.data_ptr()
    check(library().pygio_gcn_norm(ref))
    return values


def mean_norm(rowptr: Tensor, col: Tensor, row: Tensor, weight: Optional[Tensor],
              origin: Optional[Tensor], num_cols: int, dtype: torch.dtype) -> Tensor:
    """Enqueues mean aggregation's edge values of a CSR graph: [E] in
    ``dtype`` (contract: pygio_mean_norm in pyg_ioaware.h)."""
    host = _native_host.active()
    if host is not None:
        return _host_call(host.mean_norm, rowptr, col, row, weight, origin, num_cols, dtype)
    values = torch.empty(col.numel(), dtype=dtype, device=col.device)
    _, ref = _norm_params(MeanNormParams, rowptr, col, num_cols, row, weight, origin, values)
    check(library().pygio_mean_norm(ref))
    return values


def _norm_params(cls: type, rowptr: Tensor, col: Tensor, num_cols: int, row: Tensor,
                 weight: Optional[Tensor], origin: Optional[Tensor], values: Tensor) -> tuple:
    """(params, byref) of this thread's reused ``cls`` (GcnNormParams or
    MeanNormParams) with the fields both share filled (twin of
    cuda/host/graph_build.cpp's norm_params)."""
    p, ref = _reused_params(cls)
    p.dtype, p.device = _dtype_code(values.dtype), rowptr.device.index
    p.a, p.row = _csr(rowptr, col, num_cols), row.data_ptr()
    p.weight, p.origin = pointer(weight), _int64_pointer(origin)
    p.values, p.stream = values.data_ptr(), stream_of(rowptr)
    return p, ref


def _edges(edge_index: Tensor) -> Edges:
    """A ``pygio_edges`` over edge_index [2, E] (int32 or int64, any strides)."""
    src_stride = edge_index.stride(1)
    return Edges(src=edge_index.data_ptr(),
                 dst=edge_index.data_ptr() + edge_index.stride(0) * edge_index.element_size(),
                 src_stride=src_stride, dst_stride=src_stride, num_edges=edge_index.size(1),
                 index_bits=index_bits(edge_index.dtype))


# PYGIO_EDGE_STATS: the int64 values of a row of pygio_edge_index_stats;
# PYGIO_EDGE_STATS_BLOCKS and _ITEMS_PER_BLOCK: how many rows it writes.
EDGE_STATS = 7
EDGE_STATS_BLOCKS = 1024
EDGE_STATS_ITEMS_PER_BLOCK = 256


def edge_stats_rows(num_edges: int, num_rows: int = -1) -> int:
    """PYGIO_EDGE_STATS_ROWS(PYGIO_EDGE_STATS_ITEMS): the rows
    pygio_edge_index_stats writes for ``num_edges`` edges, with the CSR
    outputs of ``num_rows`` rows where ``num_rows >= 0`` (items: the edges,
    or max(num_edges, num_rows + 1))."""
    items = num_edges if num_rows < 0 else max(num_edges, num_rows + 1)
    return min(EDGE_STATS_BLOCKS, -(-items // EDGE_STATS_ITEMS_PER_BLOCK))


class EdgeIndexStats(NamedTuple):
    """What one pass over an edge_index finds (pygio_edge_index_stats): the
    index range, whether the destinations are non-decreasing (``grouped``),
    the most consecutive edges into one destination (``longest_run``: the
    largest in-degree where grouped) and the edges with src == dst."""
    min_src: int
    min_dst: int
    max_src: int
    max_dst: int
    grouped: bool
    longest_run: int
    self_loops: int


class _EdgeStatsRead:
    """The ctypes twin of the host extension's EdgeStatsRead: pygio_edge_index_stats
    enqueued (its rows in device memory, then copied into pinned memory; with
    ``num_rows >= 0`` the CSR of the same pass in ``index_dtype``), an event
    after the copy; ``read()`` waits for the copy only and gives the raw
    values reduced over the rows, ``csr()`` the CSR tensors."""
    __slots__ = ("host", "copied", "tensors")

    def __init__(self, edge_index: Tensor, num_rows: int = -1,
                 index_dtype: torch.dtype = torch.int32, entries: bool = True):
        device = edge_index.device
        rows = torch.empty(edge_stats_rows(edge_index.size(1), num_rows), EDGE_STATS,
                           dtype=torch.int64, device=device)
        p, ref = _reused_params(EdgeStatsParams)
        p.device, p.edges = device.index, _edges(edge_index)
        p.stats, p.stream = _int64_pointer(rows), stream_of(edge_index)
        self.tensors = []
        p.out_rowptr = p.out_col = p.out_row = None
        if num_rows >= 0:
            sizes = [num_rows + 1] + ([edge_index.size(1)] * 2 if entries else [])
            self.tensors = [torch.empty(size, dtype=index_dtype, device=device) for size in sizes]
            p.num_rows, p.out_index_bits = num_rows, index_bits(index_dtype)
            p.out_rowptr = self.tensors[0].data_ptr()
            if entries:
                p.out_col, p.out_row = self.tensors[1].data_ptr(), self.tensors[2].data_ptr()
        check(library().pygio_edge_index_stats(ref))
        self.host = torch.empty(rows.shape, dtype=torch.int64, pin_memory=True)
        self.host.copy_(rows, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record(torch.cuda.current_stream(device))

    def read(self) -> list:
        self.copied.synchronize()
        return self.host[:, :-1].amin(0).tolist() + [int(self.host[:, -1].sum())]

    def csr(self) -> List[Tensor]:
        return self.tensors


def start_edge_index_stats(edge_index: Tensor, num_rows: int = -1,
                           index_dtype: torch.dtype = torch.int32, entries: bool = True) -> Any:
    """Starts one pass over a CUDA edge_index [2, E] with E > 0 and its way
    to the host, without waiting: an object whose ``read()`` waits for it
    and gives the raw values (:func:`decode_edge_index_stats` decodes them);
    with ``num_rows >= 0`` its ``csr()`` gives the CSR the same launch wrote
    (pygio_edge_index_stats: [rowptr], or with ``entries`` [rowptr, col,
    row], in ``index_dtype``; meaningful only where the values say the
    edges are grouped and in range). From C++ where the host extension is
    loaded."""
    host = _native_host.active()
    if host is None:
        return _EdgeStatsRead(edge_index, num_rows, index_dtype, entries)
    return _host_call(host.EdgeStatsRead, edge_index, num_rows, index_dtype, entries)


def decode_edge_index_stats(stats: list) -> EdgeIndexStats:
    """The raw values of pygio_edge_index_stats, read back to the host."""
    min_src, min_dst, not_max_src, not_max_dst, order, not_longest_run, self_loops = stats
    return EdgeIndexStats(min_src, min_dst, ~not_max_src, ~not_max_dst, order != 0,
                          ~not_longest_run, self_loops)


def edge_index_stats(edge_index: Tensor) -> EdgeIndexStats:
    """One pass over a CUDA edge_index [2, E] with E > 0, read back in one
    host synchronisation (from C++ where the host extension is loaded)."""
    host = _native_host.active()
    if host is not None:
        return decode_edge_index_stats(_host_call(host.edge_index_stats, edge_index))
    return decode_edge_index_stats(_EdgeStatsRead(edge_index).read())


def grouped_in_range(stats: EdgeIndexStats, num_src: int, num_dst: int) -> bool:
    """Whether ``stats`` say the edges are grouped by destination with
    every source in [0, num_src) and destination in [0, num_dst): where the
    CSR the statistics' launch wrote is the graph's (the host extension's
    grouped_graph applies the same rule to the raw values)."""
    return (stats.grouped and stats.min_src >= 0 and stats.min_dst >= 0
            and stats.max_src < num_src and stats.max_dst < num_dst)


def grouped_graph(edge_index: Tensor, num_src: int, num_dst: int, index_dtype: torch.dtype,
                  entries: bool = True, self_loops: bool = False, gcn_values: bool = False
                  ) -> Tuple[EdgeIndexStats, List[Tensor], Optional[Tuple[Tensor, ...]]]:
    """A new graph's native build over a CUDA edge_index [2, E] with E > 0:
    one launch for its statistics, read back (one host synchronisation),
    and the CSR by destination the same pass wrote as if the edges were
    grouped ([rowptr], or with ``entries`` [rowptr, col, row], in
    ``index_dtype``); with ``self_loops`` (a square graph), where
    :func:`grouped_in_range`, the graph with PyG's remaining self loops
    over that CSR too (:func:`csr_add_self_loops`; without ``entries`` its
    col and row are edge_index's rows; with ``gcn_values``, where the
    input holds no self loop, its GCN values, else None), else None. One
    call from C++ where the host extension is loaded."""
    if self_loops and num_src != num_dst:
        raise ValueError("grouped_graph: self loops need a square graph")
    if self_loops and not entries and (edge_index.dtype != index_dtype
                                       or edge_index.stride(1) != 1):
        raise ValueError("grouped_graph: without entries the self-loop graph reads "
                         "edge_index's rows as its col and row, which must then be "
                         "contiguous in index_dtype")
    host = _native_host.active()
    if host is not None:
        raw, csr, looped = _host_call(host.grouped_graph, edge_index, num_src, num_dst,
                                      index_dtype, entries, self_loops, gcn_values)
        return (decode_edge_index_stats(raw), list(csr),
                _self_loop_outputs(looped) if looped else None)
    pending = _EdgeStatsRead(edge_index, num_dst, index_dtype, entries)
    stats, csr = decode_edge_index_stats(pending.read()), list(pending.csr())
    looped = None
    if self_loops and grouped_in_range(stats, num_src, num_dst):
        col, row = (csr[1], csr[2]) if entries else (edge_index[0], edge_index[1])
        looped = csr_add_self_loops(csr[0], col, row, None,
                                    gcn_values and stats.self_loops == 0)
    return stats, csr, looped


def csr_from_grouped(edge_index: Tensor, num_rows: int,
                     index_dtype: torch.dtype) -> Tuple[Tensor, Tensor, Tensor]:
    """Enqueues the CSR of an edge_index grouped by destination, its range
    checked: (rowptr, col, row) in ``index_dtype`` (contract:
    pygio_csr_from_grouped)."""
    host = _native_host.active()
    if host is not None:
        return _host_call(host.csr_from_grouped, edge_index, num_rows, index_dtype)
    rowptr = torch.empty(num_rows + 1, dtype=index_dtype, device=edge_index.device)
    col, row = (torch.empty(edge_index.size(1), dtype=index_dtype, device=edge_index.device)
                for _ in range(2))
    p, ref = _reused_params(CsrFromGroupedParams)
    p.device, p.edges = edge_index.device.index, _edges(edge_index)
    p.num_rows, p.out_index_bits = num_rows, index_bits(index_dtype)
    p.out_rowptr, p.out_col, p.out_row = rowptr.data_ptr(), col.data_ptr(), row.data_ptr()
    p.stream = stream_of(edge_index)
    check(library().pygio_csr_from_grouped(ref))
    return rowptr, col, row


def csr_pyg_self_loops(edge_index: Tensor, num_rows: int, num_loops: int, num_kept: int,
                       index_dtype: torch.dtype) -> Tuple[Tensor, ...]:
    """Enqueues PyG's remove + add self loops of a CUDA edge_index grouped by
    destination, its range checked, ``num_kept`` of its edges no loop:
    (edges [2, num_kept + num_loops] in edge_index's dtype, kept [num_kept]
    int64, rowptr, col, row, perm in ``index_dtype``) (contract:
    pygio_csr_pyg_self_loops). The scan's workspace comes from torch's
    caching allocator. From C++ where the host extension is loaded."""
    host = _native_host.active()
    if host is not None:
        return tuple(_host_call(host.csr_pyg_self_loops, edge_index, num_rows, num_loops,
                                num_kept, index_dtype))
    device, entries = edge_index.device, num_kept + num_loops
    out_edges = torch.empty(2, entries, dtype=edge_index.dtype, device=device)
    out_kept = torch.empty(num_kept, dtype=torch.long, device=device)
    out_rowptr = torch.empty(num_rows + 1, dtype=index_dtype, device=device)
    out_col, out_row, out_perm = (torch.empty(entries, dtype=index_dtype, device=device)
                                  for _ in range(3))
    lib = library()
    params = PygSelfLoopsParams(
        struct_size=ctypes.sizeof(PygSelfLoopsParams), device=device.index,
        edges=_edges(edge_index), num_rows=num_rows, num_loops=num_loops, num_kept=num_kept,
        out_index_bits=index_bits(index_dtype), out_edges=out_edges.data_ptr(),
        out_kept=_int64_pointer(out_kept), out_rowptr=out_rowptr.data_ptr(),
        out_col=out_col.data_ptr(), out_row=out_row.data_ptr(), out_perm=out_perm.data_ptr(),
        stream=stream_of(edge_index))
    size = ctypes.c_size_t()
    check(lib.pygio_csr_pyg_self_loops_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, device)
    params.workspace = pointer(workspace)
    check(lib.pygio_csr_pyg_self_loops(ctypes.byref(params)))
    return out_edges, out_kept, out_rowptr, out_col, out_row, out_perm


def csr_transpose(rowptr: Tensor, col: Tensor, row: Tensor,
                  num_cols: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Enqueues the CSR^T of the CSR matrix (rowptr, col) with ``num_cols``
    columns, ``row`` the row of every entry: (rowptr [num_cols + 1], col,
    row, perm) in the input's index dtype (contract: pygio_csr_transpose in
    pyg_ioaware.h). The sort's workspace comes from torch's caching
    allocator. From C++ where the host extension is loaded."""
    if col.dtype != rowptr.dtype or row.dtype != rowptr.dtype:
        raise TypeError("csr_transpose: every index tensor must share one dtype")
    host = _native_host.active()
    if host is not None:
        return tuple(_host_call(host.csr_transpose, rowptr, col, row, num_cols))
    out_rowptr = torch.empty(num_cols + 1, dtype=rowptr.dtype, device=rowptr.device)
    out_col, out_row, out_perm = (torch.empty_like(col) for _ in range(3))
    lib = library()
    params = CsrTransposeParams(struct_size=ctypes.sizeof(CsrTransposeParams),
                                device=rowptr.device.index, a=_csr(rowptr, col, num_cols),
                                row=row.data_ptr(), out_rowptr=out_rowptr.data_ptr(),
                                out_col=out_col.data_ptr(), out_row=out_row.data_ptr(),
                                out_perm=out_perm.data_ptr(), stream=stream_of(rowptr))
    size = ctypes.c_size_t()
    check(lib.pygio_csr_transpose_workspace_size(ctypes.byref(params), ctypes.byref(size)))
    workspace = _workspace(size, rowptr.device)
    params.workspace = pointer(workspace)
    check(lib.pygio_csr_transpose(ctypes.byref(params)))
    return out_rowptr, out_col, out_row, out_perm


# The host extension calls some of the entries above from C++; it imports
# this module, so it is imported last.
from . import _native_host  # noqa: E402
