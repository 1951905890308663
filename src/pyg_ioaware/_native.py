"""ctypes loader for the native library (cuda/, C ABI in cuda/include/pyg_ioaware.h).

Argument checks of user input happen above this module; here raw pointers,
sizes, a dtype code, the device index and torch's current CUDA stream go
down, a status comes up and becomes a :class:`NativeError` carrying the
library's message.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import pathlib
import sys
from typing import Optional

import torch

LIBRARY_NAME = "libpyg_ioaware_native.so"
ABI_VERSION = 1
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
    """Mirror of ``pygio_csr``."""

    _fields_ = [
        ("num_rows", ctypes.c_int64),
        ("num_cols", ctypes.c_int64),
        ("nnz", ctypes.c_int64),
        ("rowptr", ctypes.c_void_p),
        ("col", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
        ("index_bits", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
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


_SIGNATURES = {
    "pygio_abi_version": ([], ctypes.c_int),
    "pygio_last_error": ([], ctypes.c_char_p),
    "pygio_cusparse_load": ([ctypes.c_char_p], ctypes.c_int),
    "pygio_spmm_plan_create": (
        [ctypes.POINTER(Csr), ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
         ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int),
    "pygio_spmm_plan_destroy": ([ctypes.c_void_p], None),
    "pygio_spmm_workspace_size": (
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p], ctypes.c_int),
    "pygio_spmm_preprocess": (
        [ctypes.c_void_p] * 6, ctypes.c_int),
    "pygio_spmm_run": ([ctypes.c_void_p] * 6, ctypes.c_int),
    "pygio_sddmm": (
        [ctypes.POINTER(Csr), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
         ctypes.c_int32, ctypes.c_void_p], ctypes.c_int),
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
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
    if lib.pygio_abi_version() != ABI_VERSION:
        raise NativeError(f"{path} has ABI version {lib.pygio_abi_version()}, "
                          f"this package expects {ABI_VERSION}: rebuild the native library")
    return lib


def check(status: int) -> None:
    """Raises NativeError with the library's message for a failed status."""
    if status != 0:
        message = library().pygio_last_error().decode(errors="replace")
        raise NativeError(f"pyg_ioaware native error {status}: {message}")


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
    return None if tensor is None else tensor.data_ptr()


# torch's raw current-stream query (CUDA builds; what Triton and Inductor call)
# skips building a torch.cuda.Stream object on every op call.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(tensor: torch.Tensor) -> int:
    """torch's current CUDA stream on the tensor's device, as a pointer."""
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.device.index)
    return torch.cuda.current_stream(tensor.device).cuda_stream


def csr(rowptr: torch.Tensor, col: torch.Tensor, values: Optional[torch.Tensor],
        num_cols: int, dtype: torch.dtype) -> Csr:
    """A ``pygio_csr`` over torch tensors (rowptr/col int32 or both int64)."""
    return Csr(
        num_rows=rowptr.numel() - 1,
        num_cols=num_cols,
        nnz=col.numel(),
        rowptr=rowptr.data_ptr(),
        col=col.data_ptr(),
        values=pointer(values),
        index_bits=32 if rowptr.dtype == torch.int32 else 64,
        dtype=DTYPE_CODES[dtype],
    )
