"""What the attention family's ops share (GATv2 in :mod:`.attention`,
graph-transformer attention in :mod:`.transformer`): the per-row
log-sum-exp of the plain-torch references (their per-entry rows come from
``graph.entry_rows``), the dropout factor, and when and how the CUDA
kernels take a tensor (and when torch's autograd differentiates the
references instead)."""
from __future__ import annotations

from types import ModuleType
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import _native_host
from .dispatch import native_ready
from .dropout import keep_mask
from .hubs import hub_degree

FEATURE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# The kernels hold at most 32 channels of a head per lane: up to 1024
# channels where rows are 16-byte aligned, else up to 256.
MAX_ALIGNED_CHANNELS = 1024
MAX_CHANNELS = 256


def segment_lse(scores: Tensor, row: Tensor, num_rows: int) -> Tensor:
    """lse[i, h] = log sum_{e in row i} exp(scores[e, h]) (-inf for an empty row)."""
    heads = scores.size(1)
    index = row.unsqueeze(1).expand(-1, heads)
    m = torch.full((num_rows, heads), float("-inf"), dtype=scores.dtype, device=scores.device)
    m = m.scatter_reduce(0, index, scores.detach(), "amax")  # softmax is shift-invariant
    total = torch.zeros_like(m).index_add_(0, row, torch.exp(scores - m.index_select(0, row)))
    return m + torch.log(total)


def dropout_factor(seed: int, nnz: int, heads: int, p: float, device,
                   dtype: torch.dtype) -> Optional[Tensor]:
    """keep(e, h) / (1 - p) as [nnz, heads] in ``dtype`` (None for p = 0)."""
    if p == 0.0:
        return None
    keep = keep_mask(seed, torch.arange(nnz, device=device).unsqueeze(1),
                     torch.arange(heads, device=device).unsqueeze(0), p)
    return keep.to(dtype) / (1.0 - p)


def kernels_take(x: Tensor) -> bool:
    """Whether the CUDA kernels serve features x [nodes, heads, channels]
    (or a fused projection's [nodes, slots, heads, channels]; else the
    plain-torch reference does)."""
    if not native_ready(x.device) or x.dtype == torch.float64:
        return False
    channels = x.size(-1)
    wide = 16 // x.element_size()
    return channels <= MAX_CHANNELS or (channels % wide == 0 and
                                        channels <= MAX_ALIGNED_CHANNELS)


def differentiable_by_torch(features: Tensor, inputs: Sequence[Optional[Tensor]]) -> bool:
    """Whether an attention call over ``features`` [nodes, heads, channels]
    records a gradient for one of ``inputs`` where the kernels do not serve
    it (the CPU, float64, head sizes they do not take): then the plain-torch
    reference runs under torch's autograd, which keeps its per-edge tensors
    for backward as PyG does, rather than a forward through the reference
    and a backward that computes the scores again (2-3x PyG's backward time
    on a CPU, docs/results.md)."""
    return (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
            and not kernels_take(features))


def heads_readable(t: Optional[Tensor]) -> Optional[Tensor]:
    """t [nodes, heads, channels] itself where the kernels can read it in
    place (channels contiguous, heads adjacent, any node row stride: views
    of a fused projection), else a contiguous copy; also copied where the
    channel rows are not 16-byte aligned (what the kernels need for heads
    above 256 channels). None stays None (an input a packed projection
    holds)."""
    if t is None:
        return None
    if t.stride(2) == 1 and (t.size(1) == 1 or t.stride(1) == t.size(2)) \
            and (t.size(2) <= MAX_CHANNELS or t.data_ptr() % 16 == 0):
        return t
    return t.contiguous()


def slots_readable(packed: Tensor) -> bool:
    """Whether the kernels read every slot of ``packed`` [nodes, slots,
    heads, channels] in place (:func:`heads_readable` of each): a
    contiguous tensor, 16-byte aligned where heads exceed 256 channels
    (the slots' offsets then are multiples of 16 bytes: see kernels_take)."""
    return packed.is_contiguous() and (packed.size(3) <= MAX_CHANNELS
                                       or packed.data_ptr() % 16 == 0)


def slot_gradient(packed: Optional[Tensor]) -> Optional[Tensor]:
    """Where the backward kernels write the gradient of ``packed`` (a fused
    projection [nodes, slots, heads, channels] whose slots are the op's
    node inputs): a fresh tensor of its shape, each slot's gradient written
    into its own slot in place (no stack of separate gradients, no copy).
    None where nothing is packed, where the kernels do not take its head
    size (the reference returns separate gradients) and under torch.compile
    (the custom ops do): :func:`stack_slots` joins those."""
    if packed is None or torch.compiler.is_compiling() or not kernels_take(packed):
        return None
    return torch.empty(packed.shape, dtype=packed.dtype, device=packed.device)


def stack_slots(gradient: Optional[Tensor], slot_grads: Sequence[Tensor]) -> Tensor:
    """The gradient of a packed input: ``gradient`` where the kernels wrote
    the slots in place (:func:`slot_gradient`), else the slots' separate
    gradients stacked."""
    return gradient if gradient is not None else torch.stack(list(slot_grads), dim=1)


def check_hub_quantile(hub_quantile: float, who: str) -> None:
    if not 0.0 <= hub_quantile <= 1.0:
        raise ValueError(f"{who}: hub_quantile must lie in [0, 1], got {hub_quantile}")


def native_autograd_extension(graph, features: Tensor,
                              packed: Optional[Tensor]) -> Optional[ModuleType]:
    """The host extension where an attention call over ``graph`` runs as
    one C++ autograd node (cuda/host/attention_autograd.cpp), else None:
    eager mode on CUDA with the extension loaded, at least one
    destination, ``features`` (a node tensor or the fused projection
    ``packed``) of a head size the kernels take, and ``packed`` (where
    given) readable in place (:func:`slots_readable`)."""
    if torch.compiler.is_compiling() or not features.is_cuda or graph.num_dst == 0 \
            or not kernels_take(features):
        return None
    extension = _native_host.active()
    if extension is None or (packed is not None and not slots_readable(packed)):
        return None
    return extension


def native_structures(graph, hub_quantile: float,
                      inputs: Sequence[Optional[Tensor]]) -> Tuple[tuple, Optional[tuple]]:
    """What a C++ attention node runs over: (rowptr, col, hub degree, max
    hubs) of the graph's CSR, and, where a gradient of one of ``inputs``
    may be recorded, the same of its CSR^T with its permutation (rowptr_t,
    col_t, perm_t, hub degree, max hubs; else None), taken here so that
    the node's backward needs no Python."""
    rowptr, col = graph.rowptr, graph.col
    structure = (rowptr, col, *hub_degree(rowptr, col.numel(), hub_quantile))
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)):
        return structure, None
    t = graph.transpose
    return structure, (t.rowptr, t.col, t.perm, *hub_degree(t.rowptr, col.numel(), hub_quantile))
