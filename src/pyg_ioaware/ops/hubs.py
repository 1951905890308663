"""What the kernels may assume about a structure's row lengths: the longest
row, where it is known (own_degree_bound), and the hub threshold every
family that splits long rows shares: rows above the ``quantile`` quantile
of a structure's row degrees (and above MIN_HUB_DEGREE) are split into
chunks over all SMs by the kernels; in a structure of at most
SMALL_STRUCTURE_ENTRIES entries, every row above MIN_HUB_DEGREE."""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ..graph import StructureState, known_structure_state, structure_state

DEFAULT_HUB_QUANTILE = 0.99
#: Rows of at most this many entries are never split (PYGIO_MINMAX_MIN_HUB_DEGREE
#: and PYGIO_ATTENTION_MIN_HUB_DEGREE in pyg_ioaware.h).
MIN_HUB_DEGREE = 256
#: Up to this many rows the quantile is a kthvalue (one thread block), above
#: it a device-wide sort.
KTHVALUE_MAX_ROWS = 1 << 15
#: Structures of at most this many entries split every row above
#: MIN_HUB_DEGREE, without computing the quantile: no more than nnz / 257
#: rows (at most 4k) can be that long, and the quantile's three launches
#: (diff, kthvalue, cast: ~90 us of a new mini-batch graph's CSR^T under
#: cProfile on an H200 host) cost a host-bound step more than any split.
SMALL_STRUCTURE_ENTRIES = 1 << 20
# The threshold of small structures, an int64 zero on each device (the
# kernels split above max(threshold, MIN_HUB_DEGREE)).
_ZERO_DEGREE: Dict[torch.device, Tensor] = {}


def own_degree_bound(rowptr: Tensor, state: Optional[StructureState] = None) -> int:
    """The longest row the kernels of our own may assume for the structure
    of ``rowptr`` (-1: not known yet). Where its state has none, a read of
    it is started for the next call (StructureState.request_degree_bound)."""
    state = state if state is not None else known_structure_state(rowptr)
    bound = None if state is None else state.known_degree_bound()
    if bound is None and state is not None:
        state.request_degree_bound(rowptr)
    return -1 if bound is None else bound


def hub_degree(rowptr: Tensor, nnz: int, quantile: float) -> Tuple[Optional[Tensor], int]:
    """(the ``quantile`` quantile of the row degrees of a structure with
    ``nnz`` entries, as an int64 device scalar; the most rows that can lie
    above it and above MIN_HUB_DEGREE), or (None, 0) where no row can be a
    hub, as where the structure's Graph knows that no row is longer than
    MIN_HUB_DEGREE (its degree bound). The quantile is computed once per
    structure and quantile, without
    a host synchronisation, and kept beside the structure (StructureState);
    the bound needs no device read: at most num_rows - k rows exceed the
    k-th smallest degree. A structure of at most SMALL_STRUCTURE_ENTRIES
    entries takes a zero in place of the quantile (every row above
    MIN_HUB_DEGREE is split, at most nnz / 257 rows; quantile 1 still
    splits none). The k-th smallest comes from torch's kthvalue up
    to KTHVALUE_MAX_ROWS rows (one launch: what a small mini-batch's host
    time wants) and from a device-wide sort above (torch's CUDA kthvalue
    selects within one thread block, radix passes over every row on one SM:
    milliseconds for a mini-batch of 500k rows)."""
    num_rows = rowptr.numel() - 1
    k = min(max(math.ceil(quantile * num_rows), 1), num_rows) if num_rows > 0 else 0
    max_hubs = min(num_rows - k, nnz // (MIN_HUB_DEGREE + 1))
    if max_hubs <= 0:
        return None, 0
    known = known_structure_state(rowptr)
    bound = None if known is None else known.known_degree_bound()
    if bound is not None and bound <= MIN_HUB_DEGREE:  # no row can be a hub: nothing to select
        return None, 0
    if nnz <= SMALL_STRUCTURE_ENTRIES:  # rows above MIN_HUB_DEGREE: at most nnz / 257
        return _zero_degree(rowptr.device), min(num_rows, nnz // (MIN_HUB_DEGREE + 1))
    state = structure_state(rowptr)
    degree = state.hub_degrees.get(quantile)
    if degree is None:
        degrees = rowptr.diff()
        if num_rows <= KTHVALUE_MAX_ROWS:
            degree = torch.kthvalue(degrees, k).values.long()
        else:
            degree = torch.sort(degrees).values[k - 1].long()
        state.hub_degrees[quantile] = degree
    return degree, max_hubs


def _zero_degree(device: torch.device) -> Tensor:
    """The int64 device scalar 0 of ``device`` (made once per device)."""
    zero = _ZERO_DEGREE.get(device)
    if zero is None:
        zero = _ZERO_DEGREE[device] = torch.zeros((), dtype=torch.int64, device=device)
    return zero
