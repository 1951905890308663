"""The hub threshold every family that splits long rows shares: rows above
the ``quantile`` quantile of a structure's row degrees (and above
MIN_HUB_DEGREE) are split into chunks over all SMs by the kernels."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..graph import known_structure_state, structure_state

DEFAULT_HUB_QUANTILE = 0.99
#: Rows of at most this many entries are never split (PYGIO_MINMAX_MIN_HUB_DEGREE
#: and PYGIO_ATTENTION_MIN_HUB_DEGREE in pyg_ioaware.h).
MIN_HUB_DEGREE = 256
#: Up to this many rows the quantile is a kthvalue (one thread block), above
#: it a device-wide sort.
KTHVALUE_MAX_ROWS = 1 << 15


def hub_degree(rowptr: Tensor, nnz: int, quantile: float) -> Tuple[Optional[Tensor], int]:
    """(the ``quantile`` quantile of the row degrees of a structure with
    ``nnz`` entries, as an int64 device scalar; the most rows that can lie
    above it and above MIN_HUB_DEGREE), or (None, 0) where no row can be a
    hub, as where the structure's Graph knows that no row is longer than
    MIN_HUB_DEGREE (its degree bound). The quantile is computed once per
    structure and quantile, without
    a host synchronisation, and kept beside the structure (StructureState);
    the bound needs no device read: at most num_rows - k rows exceed the
    k-th smallest degree. The k-th smallest comes from torch's kthvalue up
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
