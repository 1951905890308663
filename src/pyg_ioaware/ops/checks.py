"""Entry checks shared by every op: an input the native code cannot take
never reaches it.

Everything here is O(1) (dtypes, devices, strides, sizes) except
:func:`csr_structure_contents`, which reads a CSR structure once (one host
synchronisation) the first time a raw op sees it and remembers it; the
structures a :class:`~pyg_ioaware.Graph` builds are known valid from the
start, so layer calls never pay for it. Failures raise ValueError (wrong
value or shape) or TypeError (wrong type or dtype) naming the function.
Plain comparisons (no ``torch._check``) keep the eager cost low and also
hold for symbolic sizes under torch.compile.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..graph import known_valid_csr, trust_csr

FEATURE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def node_features(x: Any, num_rows: int, device: torch.device, who: str) -> None:
    """x is a floating tensor [num_rows, C] or [num_rows, H, C] on ``device``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{who}: expected node features as a tensor, got {type(x).__name__}")
    if x.dtype not in FEATURE_DTYPES:
        raise TypeError(f"{who}: node features must be one of {FEATURE_DTYPES}, got {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(f"{who}: node features must be 2-D [num_nodes, channels] or 3-D "
                         f"[num_nodes, heads, channels], got shape {list(x.shape)}")
    if x.size(0) != num_rows:
        raise ValueError(f"{who}: node features have {x.size(0)} rows, the graph has "
                         f"{num_rows} source nodes")
    if x.device != device:
        raise ValueError(f"{who}: node features are on {x.device}, the graph on {device}")


def edge_weight(weight: Any, num_edges: int, device: torch.device, who: str) -> None:
    """weight is None or a floating tensor [num_edges] on ``device``."""
    if weight is None:
        return
    if not isinstance(weight, Tensor) or not weight.is_floating_point():
        raise TypeError(f"{who}: edge_weight must be a floating-point tensor")
    if weight.dim() != 1 or weight.size(0) != num_edges:
        raise ValueError(f"{who}: edge_weight must have shape [{num_edges}] (one per edge), "
                         f"got {list(weight.shape)}")
    if weight.device != device:
        raise ValueError(f"{who}: edge_weight is on {weight.device}, the graph on {device}")


def csr_structure(rowptr: Any, col: Any, who: str) -> None:
    """rowptr [R + 1] and col [nnz]: 1-D contiguous int32 or int64 tensors of
    one dtype on one device."""
    for name, t in (("rowptr", rowptr), ("col", col)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{who}: {name} must be a tensor, got {type(t).__name__}")
        if t.dtype not in INDEX_DTYPES:
            raise TypeError(f"{who}: {name} must be int32 or int64, got {t.dtype}")
        if t.dim() != 1 or not t.is_contiguous():
            raise ValueError(f"{who}: {name} must be a contiguous 1-D tensor, got shape "
                             f"{list(t.shape)}")
    if rowptr.dtype != col.dtype:
        raise TypeError(f"{who}: rowptr ({rowptr.dtype}) and col ({col.dtype}) must share "
                        f"one index dtype")
    if rowptr.size(0) < 1:
        raise ValueError(f"{who}: rowptr needs at least one entry")
    if col.device != rowptr.device:
        raise ValueError(f"{who}: rowptr is on {rowptr.device}, col on {col.device}")


def dense(t: Any, name: str, rows: Optional[int], dtype: torch.dtype, device: torch.device,
          who: str, width: Optional[int] = None) -> None:
    """t is a 2-D tensor [rows, width] of ``dtype`` on ``device`` (None:
    any count)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{who}: {name} must be a tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{who}: {name} has dtype {t.dtype}, expected {dtype}")
    if t.dim() != 2:
        raise ValueError(f"{who}: {name} must be 2-D, got shape {list(t.shape)}")
    if (rows is not None and t.size(0) != rows) or (width is not None and t.size(1) != width):
        expected = ["N" if rows is None else rows, "C" if width is None else width]
        raise ValueError(f"{who}: {name} has shape {list(t.shape)}, expected {expected}")
    if t.device != device:
        raise ValueError(f"{who}: {name} is on {t.device}, expected {device}")


def _vector(t: Any, name: str, length: int, what: str, dtype: torch.dtype,
            device: torch.device, who: str) -> None:
    """t is a 1-D tensor [length] of ``dtype`` (x's) on ``device``;
    ``what`` says what one entry is, for the shape message."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{who}: {name} must be a tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{who}: {name} dtype {t.dtype} differs from x dtype {dtype}")
    if t.dim() != 1 or t.size(0) != length:
        raise ValueError(f"{who}: {name} must have shape [{length}] ({what}), got "
                         f"{list(t.shape)}")
    if t.device != device:
        raise ValueError(f"{who}: {name} is on {t.device}, expected {device}")


def entry_values(values: Any, nnz: int, dtype: torch.dtype, device: torch.device,
                 who: str) -> None:
    """values is a 1-D tensor [nnz] of ``dtype`` on ``device``."""
    _vector(values, "values", nnz, "one per entry", dtype, device, who)


def bias(b: Any, width: int, dtype: torch.dtype, device: torch.device, who: str) -> None:
    """b is None or a 1-D tensor [width] of ``dtype`` on ``device``."""
    if b is not None:
        _vector(b, "bias", width, "one per feature", dtype, device, who)


# ------------------------------------------------ structures known valid
def csr_structure_contents(rowptr: Tensor, col: Tensor, num_cols: int, who: str) -> None:
    """rowptr starts at 0, ends at nnz and never decreases; every col entry
    lies in [0, num_cols). Read once (one host synchronisation) per
    structure and remembered while neither tensor changes."""
    if known_valid_csr(rowptr, col, num_cols):
        return
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise ValueError(f"{who}: this CSR structure was never validated, and validating it "
                         f"needs a host synchronisation, which CUDA-graph capture forbids: "
                         f"call the op once before capturing (or use a pyg_ioaware.Graph)")
    nnz = col.numel()
    first_last = rowptr[[0, -1]].long()
    decreasing = (rowptr[1:] < rowptr[:-1]).any().long().unsqueeze(0)
    col_range = (torch.aminmax(col) if nnz > 0 else
                 (rowptr.new_zeros(()), rowptr.new_full((), -1)))
    stats = torch.cat([first_last, decreasing,
                       torch.stack(col_range).long()]).tolist()
    first, last, decreases, col_min, col_max = stats
    if first != 0 or last != nnz or decreases:
        raise ValueError(f"{who}: rowptr must start at 0, end at nnz = {nnz} and never "
                         f"decrease (got first {first}, last {last})")
    if col_min < 0 or col_max >= num_cols:
        raise ValueError(f"{who}: col entries must lie in [0, {num_cols}), got "
                         f"[{col_min}, {col_max}]")
    trust_csr(rowptr, col, col_max + 1)
