"""Loader of the host extension: the native library's host side in C++ (cuda/host).

A small graph's training step is bound by host time, and Python costs it
more than the kernels take: on the small mini-batch (23k edges) the two SpMM
layers' ``autograd.Function`` took about 0.35 ms of a 1.3 ms step on an
H200 host, and each ctypes launch of a new graph's build 20-60 us. The
extension module ``pyg_ioaware._native_host_ext`` holds the SpMM, min / max
and attention Functions in C++ (``spmm``, ``aggregate_linear``,
``minmax_aggregate``, ``gatv2_attention``, ``transformer_attention``) and
calls the native launches of a new graph (``EdgeStatsRead``,
``edge_index_stats``, ``grouped_graph``, ``csr_from_grouped``,
``csr_add_self_loops``, ``csr_pyg_self_loops``, ``csr_transpose``,
``gcn_norm``, ``mean_norm``) and of the SpMM, min / max and attention
kernels (``spmm_csr``, ``minmax``, ``minmax_backward``, ``gatv2``,
``gatv2_backward``, ``transformer``, ``transformer_backward``) without
ctypes.
It is a torch C++ extension, so it is built against one torch (the one it
runs with) and one Python; it is optional:

- ``$PYG_IOAWARE_HOST_LIB`` names a built module file (then failing to
  load it is an error), else the copy installed inside the package is
  used where there is one;
- it is used only where the native library is loaded, the module was built
  for this torch and this native ABI, and ``config.native_host`` is on;
  everything else runs the Python Function and the ctypes launches (the
  same results, bitwise).
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.machinery
import importlib.util
import os
from types import ModuleType
from typing import Optional

import torch

from . import _native, config

ENV_MODULE_PATH = "PYG_IOAWARE_HOST_LIB"
MODULE_NAME = "pyg_ioaware._native_host_ext"
#: The module's interface (cuda/host/module.cpp: HOST_API_VERSION) this
#: loader's callers are written for.
HOST_API_VERSION = 16
#: The native library's functions the extension calls (cuda/host/native_api.h:
#: set_native takes each; an entry point with a workspace comes with its
#: ``_workspace_size``).
_LAUNCHES_WITH_WORKSPACE = ("pygio_spmm_csr", "pygio_minmax", "pygio_minmax_backward",
                            "pygio_csr_pyg_self_loops", "pygio_csr_transpose", "pygio_gatv2",
                            "pygio_gatv2_backward", "pygio_transformer",
                            "pygio_transformer_backward")
ENTRY_POINTS = (_LAUNCHES_WITH_WORKSPACE
                + tuple(f"{name}_workspace_size" for name in _LAUNCHES_WITH_WORKSPACE)
                + ("pygio_edge_index_stats", "pygio_csr_from_grouped",
                   "pygio_csr_add_self_loops", "pygio_gcn_norm", "pygio_mean_norm",
                   "pygio_last_error"))


def _address(function: ctypes._CFuncPtr) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


def _import(path: Optional[str]) -> ModuleType:
    if not path:
        return importlib.import_module(MODULE_NAME)
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME.rsplit(".", 1)[1], path)
    spec = importlib.util.spec_from_file_location(loader.name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def extension() -> Optional[ModuleType]:
    """The loaded extension module with the native library's entry points
    set, or None where it is not built, was built for another torch or
    native ABI, or the native library is not loaded."""
    library = _native.library()
    if library is None:
        return None
    path = os.environ.get(ENV_MODULE_PATH)
    try:
        module = _import(path)
    except (ImportError, OSError) as error:
        if path:
            raise _native.NativeError(f"{ENV_MODULE_PATH}={path} could not be loaded: "
                                      f"{error}") from error
        return None
    torch_version = torch.__version__.split("+")[0]
    mismatch = None
    if module.TORCH_VERSION != torch_version:
        mismatch = f"built for torch {module.TORCH_VERSION}, running {torch_version}"
    elif getattr(module, "HOST_API_VERSION", 1) != HOST_API_VERSION:
        mismatch = (f"built for host interface {getattr(module, 'HOST_API_VERSION', 1)}, "
                    f"this package needs {HOST_API_VERSION}")
    elif module.ABI_VERSION != library.pygio_abi_version():
        mismatch = (f"built for native ABI {module.ABI_VERSION}, the library has "
                    f"{library.pygio_abi_version()}")
    if mismatch is not None:
        if path:
            raise _native.NativeError(f"{ENV_MODULE_PATH}={path}: {mismatch}")
        return None
    from .ops.bias_gradient import MIN_GEMV_SUM_ELEMENTS
    entries = {name: _address(getattr(library, name)) for name in ENTRY_POINTS}
    module.set_native({**entries, "gemv_min_elements": MIN_GEMV_SUM_ELEMENTS})
    return module


def active() -> Optional[ModuleType]:
    """:func:`extension` where ``config.native_host`` is on, else None."""
    return extension() if config.native_host else None
