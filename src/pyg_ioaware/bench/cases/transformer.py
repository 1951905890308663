"""The attention family's TransformerConv cases: the layer against PyG's,
the graph-transformer attention kernels alone for the bandwidth table, and
TransformerConv in the mini-batch cases.

Layer cases (docs/benchmark_protocol.md; features [N, H*D] require grad):

- ``transformer-4x128``, ``transformer-2x128``: ours is
  ``pyg_ioaware.nn.TransformerConv(H*D, D, heads=H, root_weight=False)``,
  the baseline "pyg" ``torch_geometric.nn.TransformerConv`` with the same
  arguments and our state_dict, both on the suite graph with one self loop
  per node (the GATv2 cases' graph, ``attention.looped_edge_index``: built
  once per graph outside every timed region, the same tensor for both).
- Bars of ``transformer-4x128`` in fp32 against "pyg", geometric mean over
  the graphs where PyG runs: forward and backward >= 4x faster, fwd+bwd
  peak memory >= 12x smaller; the attention kernels alone (H200, protocol
  size) at most 1.75 / 3.45 ms forward / backward on arxiv-like and 27.6 /
  79 on pokec-like. Both cases: bf16 autocast at least 1.6x faster than our
  fp32; the forward kernel alone at least 60% of copy bandwidth on
  pokec-like (fp32 and bf16).

Kernels alone (bench.bandwidth), on the cached Graph of the self-looped
graph, q, k and v the [N, H, D] views of one random [N, 3, H, D] tensor in
the case's dtype (as the layer's fused projection gives them: rows strided
by 3 H D), scale 1 / sqrt(D), no edge features, no dropout, through the op
layer's eager entries (``pyg_ioaware.ops.transformer.transformer_trusted``,
``transformer_weights_trusted``, ``transformer_backward_trusted``: the
native kernels on CUDA, the plain-torch reference elsewhere):

- ``transformer fwd (out, lse)``: :func:`forward_bytes`;
- ``transformer attention weights``: alpha [nnz, H] fp32 from the forward's
  lse, :func:`weights_bytes`;
- ``transformer bwd``: every gradient from out and lse (scores recomputed,
  CSR and CSR^T passes), :func:`backward_bytes`.

Mini-batch case ``transformer``: bench.minibatch's 2-layer model with
TransformerConv, 2 heads and PyG's defaults (root_weight=True, no self
loops), heads concatenated in the hidden layer and averaged in the
47-class output layer (``attention.heads_layer``).
"""
from __future__ import annotations

from typing import Callable, List, Tuple

import torch
from torch import Tensor

from ..bandwidth import Kernel
from ..timing import feature_dtype
from . import (BF16_OVER_FP32, AbsoluteBar, Bar, Case, KernelBar, MinibatchCase, Workload,
               register)
from .attention import (FAMILY, FORWARD_SHARE, STAT_BYTES, attention_ours, attention_pyg,
                        heads_layer, looped_edge_index)

# (heads, head dim) of the layer cases.
CONFIGS: Tuple[Tuple[int, int], ...] = ((4, 128), (2, 128))
LAYER = "TransformerConv"
LAYER_KWARGS = {"root_weight": False}

FWD_KERNEL, WEIGHTS_KERNEL, BWD_KERNEL = ("transformer fwd (out, lse)",
                                          "transformer attention weights", "transformer bwd")

# Useful bytes of the graph-transformer kernels (see forward_bytes,
# weights_bytes, backward_bytes); row = H * D * element size, nnz counts the
# self loops.
BYTES_MODEL = ("transformer fwd: (2 nnz + 2 num_dst) row + num_dst H 4 (lse); weights: "
               "(nnz + num_dst) row + num_dst H 4 + nnz H 4 (alpha); bwd: (4 nnz + 4 num_src + "
               "4 num_dst) row + num_dst H 4, row = H D element size")


# ------------------------------------------------------------ bytes models

def forward_bytes(nnz: int, num_dst: int, heads: int, channels: int,
                  element_size: int) -> int:
    """Minimal bytes of the forward (out, lse): each gathered k and v row
    read once per edge, q read once and out written once per destination,
    lse (fp32) written once per destination and head. Index traffic counts
    as the kernel's overhead."""
    row = heads * channels * element_size
    return (2 * nnz + 2 * num_dst) * row + num_dst * heads * STAT_BYTES


def weights_bytes(nnz: int, num_dst: int, heads: int, channels: int,
                  element_size: int) -> int:
    """Minimal bytes of the attention weights: each gathered k row read once
    per edge, q and lse read once per destination, alpha (fp32) written once
    per edge and head."""
    row = heads * channels * element_size
    return (nnz + num_dst) * row + num_dst * heads * STAT_BYTES + nnz * heads * STAT_BYTES


def backward_bytes(nnz: int, num_src: int, num_dst: int, heads: int, channels: int,
                   element_size: int) -> int:
    """Minimal bytes of the backward without per-edge state (scores
    recomputed from lse). An edge e = (j -> i) needs q[i], grad_out[i],
    k[j] and v[j] together, once for the destination side (grad_q[i], a sum
    over i's edges) and once for the source side (grad_k[j], grad_v[j], sums
    over j's edges). Walking the CSR for the one and the CSR^T for the
    other (no atomics), each pass reads its own node's rows once and gathers
    the other end's per edge:

    - destination pass: q[i], grad_out[i], out[i] (for Delta = <grad_out,
      out>) and lse[i] read once, grad_q[i] written once per destination;
      k[j] and v[j] gathered per edge;
    - source pass: k[j] and v[j] read once, grad_k[j] and grad_v[j] written
      once per source; q[i] and grad_out[i] gathered per edge.

    So 4 gathered rows per edge plus (4 num_src + 4 num_dst) node rows and
    lse. The per-edge scalars the source pass gathers (lse[i], Delta[i]) and
    index traffic count as overhead."""
    row = heads * channels * element_size
    return (4 * nnz + 4 * num_src + 4 * num_dst) * row + num_dst * heads * STAT_BYTES


# ----------------------------------------------------------- kernels alone

def _transformer_kernels(heads: int, channels: int) -> Callable[[Workload], List[Kernel]]:
    """The graph-transformer kernels alone on the cached Graph of the
    self-looped graph: the forward (out, lse), the attention weights from
    its lse, the backward from its out and lse (each reported with the
    forward's hub split, key "hub_split")."""
    def make(work: Workload) -> List[Kernel]:
        from pyg_ioaware import Graph
        from pyg_ioaware.ops.hubs import DEFAULT_HUB_QUANTILE
        from pyg_ioaware.ops.transformer import (transformer_backward_trusted,
                                                 transformer_trusted,
                                                 transformer_weights_trusted)

        from .reduce import hub_split

        dtype = feature_dtype(work.precision)
        num_src, num_dst = work.size
        graph = Graph.from_input(looped_edge_index(work), num_nodes=work.size)
        rowptr, col, nnz = graph.rowptr, graph.col, graph.num_edges
        device = work.device
        # One projection's output, read as the layer reads it.
        qkv = torch.randn(max(num_src, num_dst), 3, heads, channels, device=device,
                          dtype=dtype)
        q, k, v = qkv[:num_dst, 0], qkv[:num_src, 1], qkv[:num_src, 2]
        grad_out = torch.randn(num_dst, heads, channels, device=device, dtype=dtype)
        scale, quantile = channels ** -0.5, DEFAULT_HUB_QUANTILE

        def run_forward():
            return transformer_trusted(rowptr, col, q, k, v, None, scale, 0.0, 0, quantile)

        saved = {}

        def forward_outputs() -> Tuple[Tensor, Tensor]:
            """(out, lse) of one forward, computed on first use (outside the
            timed calls)."""
            if not saved:
                saved["out"], saved["lse"] = run_forward()
            return saved["out"], saved["lse"]

        def run_weights():
            return transformer_weights_trusted(rowptr, col, q, k, None, forward_outputs()[1],
                                               scale)

        def run_backward():
            out, lse = forward_outputs()
            t = graph.transpose
            return transformer_backward_trusted(rowptr, col, t.rowptr, t.col, t.perm, q, k, v,
                                                None, out, lse, grad_out, scale, 0.0, 0,
                                                quantile)

        size = qkv.element_size()
        split = {"hub_split": hub_split(graph, quantile)}
        return [
            Kernel(FWD_KERNEL, run_forward,
                   forward_bytes(nnz, num_dst, heads, channels, size), split),
            Kernel(WEIGHTS_KERNEL, run_weights,
                   weights_bytes(nnz, num_dst, heads, channels, size), split),
            Kernel(BWD_KERNEL, run_backward,
                   backward_bytes(nnz, num_src, num_dst, heads, channels, size), split),
        ]

    return make


# The absolute bars of docs/benchmark_protocol.md for the (4, 128) attention kernels
# alone (H200, fp32).
ABSOLUTE_4X128 = tuple(AbsoluteBar(graph, fwd, bwd, kernels=(FWD_KERNEL, BWD_KERNEL))
                       for graph, fwd, bwd in (("arxiv-like", 1.75, 3.45),
                                               ("pokec-like", 27.6, 79.0)))

for _heads, _d in CONFIGS:
    _main = (_heads, _d) == (4, 128)
    register(Case(
        key=f"transformer-{_heads}x{_d}", name=f"TransformerConv ({_heads}, {_d})",
        family=FAMILY, config={"heads": _heads, "D": _d}, in_channels=_heads * _d,
        make_ours=attention_ours(LAYER, _heads, _d, **LAYER_KWARGS),
        baselines={"pyg": attention_pyg(LAYER, _heads, _d, **LAYER_KWARGS)},
        bar=Bar(fwd=4.0, bwd=4.0, mem=12.0) if _main else None,
        bf16_over_fp32=BF16_OVER_FP32,
        make_kernels=_transformer_kernels(_heads, _d), bytes_model=BYTES_MODEL,
        absolute_bars=ABSOLUTE_4X128 if _main else (),
        kernel_bars=tuple(KernelBar(FWD_KERNEL, "pokec-like", FORWARD_SHARE, p)
                          for p in ("fp32", "bf16"))))
del _heads, _d, _main


# ------------------------------------------------------- mini-batch case

register(MinibatchCase(key="transformer", name=LAYER, family=FAMILY,
                       make_ours=heads_layer(LAYER, False), make_pyg=heads_layer(LAYER, True)))
