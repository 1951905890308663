"""Helpers every op family shares: accumulator dtype, whether the native
library serves a device, and the eager shortcut around custom-op dispatch."""
from __future__ import annotations

import warnings
from typing import Callable

import torch

from .. import _native

_WARNED = {"no_native": False}


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 inputs, else float32 (half types accumulate in fp32)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def native_ready(device: torch.device) -> bool:
    """True where the native library serves ``device`` (a CUDA device and
    the library loaded); warns once when CUDA tensors must fall back."""
    if device.type != "cuda":
        return False
    if _native.library() is not None:
        return True
    if not _WARNED["no_native"]:
        _WARNED["no_native"] = True
        warnings.warn("pyg_ioaware: the native CUDA library is not available; CUDA tensors use "
                      "the plain-torch implementation (slower, more memory)")
    return False


def eager_or_op(eager: Callable, op: Callable) -> Callable:
    """``eager`` in eager mode, the registered custom ``op`` under
    torch.compile. The custom op's Python dispatch costs ~20 us a call,
    a large share of a small graph's step, so eager calls skip it."""
    def call(*args):
        if torch.compiler.is_compiling():
            return op(*args)
        return eager(*args)
    return call
