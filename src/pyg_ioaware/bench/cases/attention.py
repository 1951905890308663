"""The attention family's cases: GATv2Conv against PyG's layer, the GATv2
attention kernels alone for the bandwidth table, and GATv2Conv in the
mini-batch cases.

Layer cases (docs/benchmark_protocol.md; features [N, H*D] require grad, a layer in the
middle of a network):

- ``gatv2-2x64``, ``gatv2-8x128``: ours is
  ``pyg_ioaware.nn.GATv2Conv(H*D, D, heads=H, add_self_loops=False)``, the
  baseline "pyg" is ``torch_geometric.nn.GATv2Conv`` with the same
  arguments and our state_dict (with its own seeded initialization where
  ours did not build, so PyG's figures still come). Both run on the suite
  graph with exactly one self loop per node (:func:`one_self_loop_per_node`:
  input self loops removed, one appended per node, as PyG's
  remove-then-add does), built once per graph outside every timed region
  (``Workload.derived``) and handed to both layers as the same tensor, so
  our graph cache builds its CSR in the warm-up of the first case and hits
  from then on.
- Bars of ``gatv2-2x64`` in fp32 against "pyg", geometric mean over the
  graphs where PyG runs: forward >= 10x, backward >= 6x faster, fwd+bwd
  peak memory >= 20x smaller; absolute (H200, protocol size): at most 0.85
  / 2.3 ms forward / backward on arxiv-like, 9.5 / 28 on pokec-like, 9.2 /
  25 on web-like. Both cases: bf16 autocast at least 1.6x faster than our
  fp32; the forward kernel alone at least 60% of copy bandwidth on
  pokec-like (fp32 and bf16); ``gatv2-8x128`` runs on every suite graph
  (the CLI's "ours runs on every graph" check; PyG runs out of memory on
  the large ones and is reported as OOM).

Kernels alone (bench.bandwidth), on the cached Graph of the self-looped
graph (the one our layer uses), x_l and x_r [N, H, D] random in the case's
dtype (contiguous, as the layer's lin_l / lin_r give them), att [H, D]
fp32, no edge features, no dropout, through the op layer's eager entries
(``pyg_ioaware.ops.attention.gatv2_trusted``, ``gatv2_weights_trusted``,
``gatv2_backward_trusted``: the native kernels on CUDA, the plain-torch
reference elsewhere; a row reads "unsupported" where an entry is missing):

- ``gatv2 fwd (out, lse)``: :func:`forward_bytes`;
- ``gatv2 attention weights``: alpha [nnz, H] fp32 from the forward's lse,
  :func:`weights_bytes`;
- ``gatv2 bwd``: every gradient from out and lse (scores recomputed, CSR
  and CSR^T passes), :func:`backward_bytes`.

Mini-batch case ``gatv2`` (bench.minibatch's 2-layer model conv(D, D) ->
ReLU -> conv(D, 47)): GATv2Conv with 2 heads and PyG's defaults
(add_self_loops=True: the sampled batches have none). A layer whose output
width divides by the heads concatenates them, ``GATv2Conv(in, out // 2,
heads=2)`` (the hidden layer: D = 64 / 128 / 256 gives head dims 32 / 64 /
128); otherwise it averages them, ``GATv2Conv(in, out, heads=2,
concat=False)`` (the 47-class output layer, as GAT's output layer does).
"""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..bandwidth import Kernel
from ..timing import feature_dtype
from . import (BF16_OVER_FP32, AbsoluteBar, Bar, Case, Impl, KernelBar, LayerBuilder,
               MinibatchCase, Unsupported, Workload, register)

FAMILY = "attention"
# (heads, head dim) of the layer cases.
CONFIGS: Tuple[Tuple[int, int], ...] = ((2, 64), (8, 128))
NEGATIVE_SLOPE = 0.2  # GATv2Conv's default
# lse and alpha are fp32 whatever the features' dtype.
STAT_BYTES = 4
# Heads of GATv2Conv in the mini-batch model.
MINIBATCH_HEADS = 2
# Hub quantile where the op layer does not say (ops.minmax's default).
HUB_QUANTILE = 0.99

FWD_KERNEL, WEIGHTS_KERNEL, BWD_KERNEL = ("gatv2 fwd (out, lse)", "gatv2 attention weights",
                                          "gatv2 bwd")
# Per-graph key of the self-looped edge_index (Workload.derived).
LOOPED = "attention: one self loop per node"

# Useful bytes of the GATv2 kernels (see forward_bytes, weights_bytes,
# backward_bytes); row = H * D * element size, nnz counts the self loops.
BYTES_MODEL = ("gatv2 fwd: (nnz + 2 num_dst) row + num_dst H 4 (lse); weights: "
               "(nnz + num_dst) row + num_dst H 4 + nnz H 4 (alpha); bwd: (3 nnz + 2 num_src + "
               "3 num_dst) row + num_dst H 4, row = H D element size")


# ------------------------------------------------------------ bytes models

def forward_bytes(nnz: int, num_dst: int, heads: int, channels: int,
                  element_size: int) -> int:
    """Minimal bytes of the forward (out, lse): each gathered x_l row read
    once per edge, x_r read once and out written once per destination, lse
    (fp32) written once per destination and head. Index traffic and att
    count as the kernel's overhead."""
    row = heads * channels * element_size
    return (nnz + 2 * num_dst) * row + num_dst * heads * STAT_BYTES


def weights_bytes(nnz: int, num_dst: int, heads: int, channels: int,
                  element_size: int) -> int:
    """Minimal bytes of the attention weights: each gathered x_l row read
    once per edge, x_r and lse read once per destination, alpha (fp32)
    written once per edge and head."""
    row = heads * channels * element_size
    return (nnz + num_dst) * row + num_dst * heads * STAT_BYTES + nnz * heads * STAT_BYTES


def backward_bytes(nnz: int, num_src: int, num_dst: int, heads: int, channels: int,
                   element_size: int) -> int:
    """Minimal bytes of the backward without per-edge state (scores
    recomputed from lse). An edge e = (j -> i) needs x_l[j], x_r[i] and
    grad_out[i] together twice: for the destination side (grad_x_r[i], a sum
    over i's edges) and for the source side (grad_x_l[j], a sum over j's
    edges). Walking the CSR for the one and the CSR^T for the other (no
    atomics), each pass reads its own node's rows once and gathers the
    other end's per edge:

    - destination pass: x_r[i], grad_out[i] and lse[i] read once,
      grad_x_r[i] written once per destination (G = <grad_out[i], out[i]>
      summed from the entries: out is not read); x_l[j] gathered per edge;
    - source pass: x_l[j] read once, grad_x_l[j] written once per source;
      x_r[i] and grad_out[i] gathered per edge.

    So 3 gathered rows per edge (the issue's "four gathered rows per
    edge-head" is 4/3 of this model) plus (2 num_src + 3 num_dst) node rows
    and lse. The per-edge scalars the source pass gathers (lse[i], G[i]),
    index traffic, att and grad_att (H x D) count as overhead. (An
    atomics-based single pass would gather x_l[j] and read-modify-write
    grad_x_l[j] per edge: the same 3 rows per edge.)"""
    row = heads * channels * element_size
    return (3 * nnz + 2 * num_src + 3 * num_dst) * row + num_dst * heads * STAT_BYTES


# ------------------------------------------------------- the looped graph

def one_self_loop_per_node(edge_index: Tensor, num_src: int, num_dst: int) -> Tensor:
    """``edge_index`` with its self loops removed and one self loop appended
    for every node below min(num_src, num_dst) (PyG's remove_self_loops +
    add_self_loops)."""
    src, dst = edge_index
    kept = edge_index[:, src != dst]
    loops = torch.arange(min(num_src, num_dst), dtype=edge_index.dtype,
                         device=edge_index.device)
    return torch.cat([kept, loops.unsqueeze(0).expand(2, -1)], dim=1)


def looped_edge_index(work: Workload) -> Tensor:
    """The workload graph with one self loop per node, built once per graph."""
    return work.derived(LOOPED, lambda: one_self_loop_per_node(work.edge_index, *work.size))


def nn_class(name: str):
    """``pyg_ioaware.nn.<name>``, or Unsupported if that layer does not exist."""
    import pyg_ioaware.nn

    try:
        return getattr(pyg_ioaware.nn, name)
    except AttributeError:
        raise Unsupported(f"pyg_ioaware.nn.{name} is not available") from None


# ------------------------------------------------------------ layer cases

def attention_ours(layer: str, heads: int, channels: int,
                   **kwargs) -> Callable[[Workload], Impl]:
    """Builder of our ``layer(H*D, D, heads=H, **kwargs)`` on the workload
    graph with one self loop per node (the attention families' layer cases)."""
    def make(work: Workload) -> Impl:
        edge_index = looped_edge_index(work)
        conv = nn_class(layer)(heads * channels, channels, heads=heads,
                                **kwargs).to(work.device)
        return Impl(conv, lambda x: conv(x, edge_index))

    return make


def attention_pyg(layer: str, heads: int, channels: int,
                  **kwargs) -> Callable[[Workload, Optional[Impl]], Impl]:
    """Builder of PyG's ``layer`` with the same arguments as
    :func:`attention_ours` and our state_dict (its own seeded initialization
    where ours did not build)."""
    def make(work: Workload, ours: Optional[Impl]) -> Impl:
        import torch_geometric.nn

        edge_index = looped_edge_index(work)
        conv = getattr(torch_geometric.nn, layer)(heads * channels, channels, heads=heads,
                                                  **kwargs).to(work.device)
        if ours is not None:
            conv.load_state_dict(ours.module.state_dict())
        return Impl(conv, lambda x: conv(x, edge_index))

    return make


# ----------------------------------------------------------- kernels alone

def _attention_op(name: str) -> Callable:
    """``pyg_ioaware.ops.attention.<name>``, or a stand-in raising
    NotImplementedError (bench.bandwidth reports its row "unsupported")."""
    try:
        from pyg_ioaware.ops import attention as ops_attention
        return getattr(ops_attention, name)
    except (ImportError, AttributeError):
        def missing(*args, **kwargs):
            raise NotImplementedError(f"pyg_ioaware.ops.attention.{name} is not available")
        return missing


def _hub_quantile() -> float:
    try:
        from pyg_ioaware.ops.hubs import DEFAULT_HUB_QUANTILE
        return DEFAULT_HUB_QUANTILE
    except ImportError:
        return HUB_QUANTILE


def _hub_split(graph, quantile: float) -> dict:
    """How the forward splits this graph's destination rows: above
    max(the degree quantile, 256) a row is a hub (the min/max kernels' rule,
    reduce.hub_split); {} where it cannot be computed."""
    try:
        from .reduce import hub_split
        return hub_split(graph, quantile)
    except (ImportError, AttributeError):
        return {}


def _gatv2_kernels(heads: int, channels: int) -> Callable[[Workload], List[Kernel]]:
    """The GATv2 kernels alone on the cached Graph of the self-looped graph:
    the forward (out, lse), the attention weights from its lse, the backward
    from its out and lse (each reported with the forward's hub split, key
    "hub_split")."""
    def make(work: Workload) -> List[Kernel]:
        from pyg_ioaware import Graph

        dtype = feature_dtype(work.precision)
        num_src, num_dst = work.size
        graph = Graph.from_input(looped_edge_index(work), num_nodes=work.size)
        rowptr, col, nnz = graph.rowptr, graph.col, graph.num_edges
        device = work.device
        x_l = torch.randn(num_src, heads, channels, device=device, dtype=dtype)
        x_r = torch.randn(num_dst, heads, channels, device=device, dtype=dtype)
        att = torch.randn(heads, channels, device=device) / math.sqrt(channels)
        grad_out = torch.randn(num_dst, heads, channels, device=device, dtype=dtype)
        forward = _attention_op("gatv2_trusted")
        weights = _attention_op("gatv2_weights_trusted")
        backward = _attention_op("gatv2_backward_trusted")
        quantile = _hub_quantile()

        def run_forward():
            return forward(rowptr, col, x_l, x_r, att, None, NEGATIVE_SLOPE, 0.0, 0, quantile)

        saved = {}

        def forward_outputs() -> Tuple[Tensor, Tensor]:
            """(out, lse) of one forward, computed on first use (outside the
            timed calls; a missing forward makes the rows needing it
            "unsupported")."""
            if not saved:
                saved["out"], saved["lse"] = run_forward()
            return saved["out"], saved["lse"]

        def run_weights():
            return weights(rowptr, col, x_l, x_r, att, None, forward_outputs()[1],
                           NEGATIVE_SLOPE)

        def run_backward():
            t = graph.transpose
            return backward(rowptr, col, t.rowptr, t.col, t.perm, x_l, x_r, att, None,
                            forward_outputs()[1], grad_out, NEGATIVE_SLOPE, 0.0, 0)

        size = x_l.element_size()
        split = {"hub_split": _hub_split(graph, quantile)}
        return [
            Kernel(FWD_KERNEL, run_forward,
                   forward_bytes(nnz, num_dst, heads, channels, size), split),
            Kernel(WEIGHTS_KERNEL, run_weights,
                   weights_bytes(nnz, num_dst, heads, channels, size), split),
            Kernel(BWD_KERNEL, run_backward,
                   backward_bytes(nnz, num_src, num_dst, heads, channels, size), split),
        ]

    return make


# the absolute bars of docs/benchmark_protocol.md of the (2, 64) layer (H200, fp32).
ABSOLUTE_2X64 = (AbsoluteBar("arxiv-like", 0.85, 2.3), AbsoluteBar("pokec-like", 9.5, 28.0),
                 AbsoluteBar("web-like", 9.2, 25.0))
# The attention forward kernels: at least 60% of copy bandwidth on pokec-like.
FORWARD_SHARE = 0.6

for _heads, _d in CONFIGS:
    register(Case(
        key=f"gatv2-{_heads}x{_d}", name=f"GATv2Conv ({_heads}, {_d})", family=FAMILY,
        config={"heads": _heads, "D": _d}, in_channels=_heads * _d,
        make_ours=attention_ours("GATv2Conv", _heads, _d, add_self_loops=False),
        baselines={"pyg": attention_pyg("GATv2Conv", _heads, _d, add_self_loops=False)},
        bar=Bar(fwd=10.0, bwd=6.0, mem=20.0) if (_heads, _d) == (2, 64) else None,
        bf16_over_fp32=BF16_OVER_FP32,
        make_kernels=_gatv2_kernels(_heads, _d), bytes_model=BYTES_MODEL,
        absolute_bars=ABSOLUTE_2X64 if (_heads, _d) == (2, 64) else (),
        kernel_bars=tuple(KernelBar(FWD_KERNEL, "pokec-like", FORWARD_SHARE, p)
                          for p in ("fp32", "bf16"))))
del _heads, _d


# ------------------------------------------------------- mini-batch cases

def heads_layer(layer: str, pyg: bool, heads: int = MINIBATCH_HEADS) -> LayerBuilder:
    """Builder of our attention ``layer`` or PyG's (the same parameters and
    state_dict keys): heads concatenated where ``out_channels`` divides by
    ``heads``, else averaged (``concat=False``), so the layer outputs
    exactly ``out_channels``."""
    def make(in_channels: int, out_channels: int) -> nn.Module:
        if pyg:
            import torch_geometric.nn
            conv = getattr(torch_geometric.nn, layer)
        else:
            conv = nn_class(layer)
        if out_channels % heads == 0:
            return conv(in_channels, out_channels // heads, heads=heads)
        return conv(in_channels, out_channels, heads=heads, concat=False)

    return make


register(MinibatchCase(key="gatv2", name="GATv2Conv", family=FAMILY,
                       make_ours=heads_layer("GATv2Conv", False),
                       make_pyg=heads_layer("GATv2Conv", True)))
